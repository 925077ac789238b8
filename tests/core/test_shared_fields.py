"""core.api.with_shared_fields: one set of fields per input serializer class,
a new instance (data, errors, validated values) per call, from any thread."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from rest_framework import serializers

from core.api import with_shared_fields


class Body(serializers.Serializer):
    name = serializers.CharField(max_length=8)
    count = serializers.IntegerField(min_value=1, max_value=10)
    tags = serializers.ListField(child=serializers.CharField(max_length=4), default=list, max_length=3)
    kind = serializers.ChoiceField(choices=["a", "b"])

    def validate_name(self, value: str) -> str:
        self.seen = value  # state on the instance, never on the shared fields
        return value.upper()


def test_fields_are_built_once_and_instances_are_new():
    first = with_shared_fields(Body, {"name": "x", "count": 1, "kind": "a"})
    second = with_shared_fields(Body, {"name": "y", "count": 2, "kind": "b", "tags": ["t"]})
    assert first is not second and first.fields is second.fields
    assert first.is_valid() and second.is_valid()
    assert first.validated_data == {"name": "X", "count": 1, "kind": "a", "tags": []}
    assert second.validated_data == {"name": "Y", "count": 2, "kind": "b", "tags": ["t"]}
    assert (first.seen, second.seen) == ("x", "y")


def test_errors_are_the_instances_own():
    bad = with_shared_fields(Body, {"name": "far too long", "count": 0, "kind": "c", "tags": ["t"] * 4})
    good = with_shared_fields(Body, {"name": "ok", "count": 3, "kind": "a"})
    assert not bad.is_valid()
    assert set(bad.errors) == {"name", "count", "kind", "tags"}
    assert good.is_valid() and good.errors == {}
    plain = Body(data={"name": "far too long", "count": 0, "kind": "c", "tags": ["t"] * 4})
    assert not plain.is_valid() and bad.errors == plain.errors  # what a serializer of its own says


def test_threads_validating_at_once_each_get_their_own_answer():
    def check(n: int) -> tuple[int, object]:
        body = {"name": f"n{n}", "count": n % 10 + 1, "kind": "ab"[n % 2], "tags": [str(n % 100)]}
        if n % 3 == 0:
            body["count"] = 99  # every third one is refused
        s = with_shared_fields(Body, body)
        return n, s.validated_data if s.is_valid() else dict(s.errors)

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(check, range(400)))
    for n, answer in results:
        if n % 3 == 0:
            assert list(answer) == ["count"], (n, answer)
        else:
            assert answer == {"name": f"N{n}", "count": n % 10 + 1, "kind": "ab"[n % 2], "tags": [str(n % 100)]}


class WithHidden(serializers.Serializer):
    name = serializers.CharField()
    owner = serializers.HiddenField(default=serializers.CurrentUserDefault())


class WithContextDefault(serializers.Serializer):
    name = serializers.CharField(default=serializers.CreateOnlyDefault(serializers.CurrentUserDefault()))


class Nested(serializers.Serializer):
    item = WithHidden()


class NestedMany(serializers.Serializer):
    items = WithHidden(many=True)


class OwnInit(serializers.Serializer):
    name = serializers.CharField()

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["name"].required = False


class InheritsOwnInit(OwnInit):
    pass


def test_a_serializer_whose_fields_read_the_request_is_refused():
    for cls, where in [
        (WithHidden, "WithHidden.owner"),
        (WithContextDefault, "WithContextDefault.name"),
        (Nested, "WithHidden.owner"),
        (NestedMany, "WithHidden.owner"),
        (OwnInit, "OwnInit sets up its own fields"),
        (InheritsOwnInit, "InheritsOwnInit sets up its own fields"),
    ]:
        with pytest.raises(TypeError, match=where):
            with_shared_fields(cls, {"name": "x"})
    assert with_shared_fields(Body, {"name": "x", "count": 1, "kind": "a"}).is_valid()
