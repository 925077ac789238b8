"""Every list endpoint answers the same page: `{"next", "previous", "results"}`,
cut by an opaque cursor (DRF's CursorPagination, as its documentation
describes it: rest_framework/pagination.py, CursorPagination). A cursor keeps
its place when rows are added in front of it, which offset pages do not, and
costs one indexed range query however deep the page.

`?page_size=` asks for 1 to API_PAGE_SIZE_MAX rows (default API_PAGE_SIZE);
`?cursor=` is the value of a `next` or `previous` link, never built by hand.
A cursor that was not made here is refused with `invalid_cursor`, a query
parameter the list does not know with `invalid`."""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import QuerySet
from rest_framework import serializers
from rest_framework.exceptions import NotFound as DrfNotFound
from rest_framework.pagination import CursorPagination
from rest_framework.response import Response

from core.errors import DomainError

CURSOR_MAX_LENGTH = 512


def _invalid_cursor() -> DomainError:
    return DomainError(
        "invalid_cursor",
        "This cursor was not made by this list: follow the `next` or `previous` link as given.",
    )


class PageQuery(serializers.Serializer):
    cursor = serializers.CharField(
        required=False,
        max_length=CURSOR_MAX_LENGTH,
        trim_whitespace=False,  # a cursor is read as given: one of whitespace is no cursor, not a blank one
        help_text=(
            "The `next` or `previous` link's cursor, as given (any other value is refused with "
            "`invalid_cursor`). Leave it out for the first page."
        ),
    )
    page_size = serializers.IntegerField(
        required=False,
        min_value=1,
        max_value=settings.API_PAGE_SIZE_MAX,
        help_text=f"Rows a page (default {settings.API_PAGE_SIZE}, at most {settings.API_PAGE_SIZE_MAX}).",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        # A misspelt parameter (`pagesize`, `limit`) is refused, not ignored: a client
        # would otherwise read a default page as the answer to what it asked.
        # An empty value (`?cursor=`) is refused too, not read as left out.
        given = set(self.initial_data)
        errors = {name: ["Unknown query parameter."] for name in sorted(given - set(self.fields))}
        errors |= {
            name: ["May not be empty."] for name in sorted(given & set(self.fields)) if not self.initial_data[name]
        }
        if errors:
            raise serializers.ValidationError(errors)
        return attrs


_CURSOR_SHAPE = re.compile(r"[A-Za-z0-9+/=_-]+")


class _CursorPage(CursorPagination):
    cursor_query_param = "cursor"

    def __init__(self, *, ordering: tuple[str, ...], page_size: int, queryset: QuerySet) -> None:
        self.ordering = ordering
        self.page_size = page_size
        self._field = queryset.model._meta.get_field(ordering[0].lstrip("-"))

    def get_page_size(self, request) -> int:
        return self.page_size  # validated by PageQuery before the page is cut

    def decode_cursor(self, request):
        given = request.query_params.get(self.cursor_query_param)
        if given is not None and not _CURSOR_SHAPE.fullmatch(given):
            raise _invalid_cursor()  # a cursor made here is URL-safe base64, and never empty
        try:
            cursor = super().decode_cursor(request)
        except DrfNotFound:
            raise _invalid_cursor() from None
        if cursor is not None and (cursor.offset, cursor.reverse, cursor.position) == (0, False, None):
            raise _invalid_cursor()  # decodes to nothing: a link to the first page carries no cursor
        if cursor is not None and cursor.position is not None:
            try:
                self._field.to_python(cursor.position)
            except DjangoValidationError:
                raise _invalid_cursor() from None
        return cursor


def paginate(
    request,
    queryset: QuerySet,
    serializer_class: type[serializers.Serializer],
    *,
    ordering: tuple[str, ...],
    context: dict[str, Any] | None = None,
    query: dict[str, Any] | None = None,
    rows: Callable[[list[Any]], list[Any]] | None = None,
) -> Response:
    """One page of `queryset` in `ordering` (its first field nearly unique, the
    last one unique), each row through `serializer_class`. `query` is the
    already validated PageQuery (or subclass) data when the view checked more
    parameters than the page's own. `rows` turns the page's objects into what
    the serializer reads, when that is not the objects themselves."""
    if query is None:
        checked = PageQuery(data=request.query_params)
        checked.is_valid(raise_exception=True)
        query = checked.validated_data
    paginator = _CursorPage(
        ordering=ordering, page_size=query.get("page_size") or settings.API_PAGE_SIZE, queryset=queryset
    )
    page = paginator.paginate_queryset(queryset, request)
    if rows is not None:
        page = rows(page)
    return paginator.get_paginated_response(serializer_class(page, many=True, context=context or {}).data)


@cache
def page_of(serializer_class: type[serializers.Serializer]) -> type[serializers.Serializer]:
    """The schema of a page of `serializer_class` rows (its component is named
    after the row's: OrderOutput -> OrderOutputPage)."""
    name = serializer_class.__name__.removesuffix("Serializer")
    return type(
        f"{name}Page",
        (serializers.Serializer,),
        {
            "__doc__": "One page of a list, newest first unless the operation says otherwise.",
            "__module__": __name__,
            "next": serializers.URLField(allow_null=True, help_text="The next page, or null on the last one."),
            "previous": serializers.URLField(
                allow_null=True, help_text="The page before this one, or null on the first."
            ),
            "results": serializer_class(many=True),
        },
    )
