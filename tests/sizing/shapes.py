"""Compare a JSON answer with the shape its output serializer documents."""

from rest_framework import serializers as drf

NULLABLE = "__nullable__"


def shape(serializer) -> dict:
    """Field names, nested, of an output serializer."""
    out = {}
    for name, f in serializer.fields.items():
        if isinstance(f, drf.ListSerializer):
            out[name] = [shape(f.child)]
        elif isinstance(f, drf.Serializer):
            out[name] = {**shape(f), NULLABLE: f.allow_null}
        else:
            out[name] = None
    return out


def assert_shape(value, documented, path="body"):
    if isinstance(documented, dict):
        if value is None and documented.get(NULLABLE):
            return
        expected = {k for k in documented if k != NULLABLE}
        assert set(value) == expected, (path, set(value) ^ expected)
        for key in expected:
            assert_shape(value[key], documented[key], f"{path}.{key}")
    elif isinstance(documented, list):
        for i, item in enumerate(value):
            assert_shape(item, documented[0], f"{path}[{i}]")
