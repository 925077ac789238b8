"""The `id` path converter every app's routes use (registered on import)."""

from django.urls import register_converter


class IdConverter:
    """A database id: at most 18 digits, so it always fits a bigint column
    (a longer number would be a database error, not a 404)."""

    regex = "[0-9]{1,18}"

    def to_python(self, value: str) -> int:
        return int(value)

    def to_url(self, value: int) -> str:
        return str(value)


register_converter(IdConverter, "id")
