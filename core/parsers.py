"""The API's JSON parser: DRF's, refusing bodies nested deeper than
API_JSON_MAX_DEPTH (400 `nesting_too_deep`) instead of running out of stack
somewhere later (a RecursionError is a 500)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import IO, Any

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser


class NestingTooDeep(ParseError):
    error_code = "nesting_too_deep"  # the API error's code (core.api.exception_handler)


def _depth_exceeds(value: Any, limit: int) -> bool:
    """Whether `value` nests objects and arrays more than `limit` deep (iterative:
    no recursion on a hostile body)."""
    stack = [(value, 1)]
    children: Iterable[Any]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def _too_deep() -> NestingTooDeep:
    limit = settings.API_JSON_MAX_DEPTH
    return NestingTooDeep(f"JSON nested deeper than {limit} levels is refused.")


class DepthLimitedJSONParser(JSONParser):
    def parse(
        self, stream: IO[Any], media_type: str | None = None, parser_context: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise _too_deep() from None
        if _depth_exceeds(data, settings.API_JSON_MAX_DEPTH):
            raise _too_deep()
        return data
