"""Database helpers shared by the apps' services."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any, TypeVar

from django.db import connection, connections, models

from core.errors import NotFound

M = TypeVar("M", bound=models.Model)


def locked_or_404(
    queryset: models.QuerySet[M] | type[M],
    *,
    message: str = "Not found.",
    code: str = "not_found",
    no_key: bool = False,
    **lookup: Any,
) -> M:
    """The one row of `queryset` matching `lookup`, locked until the caller's
    transaction ends (SELECT ... FOR UPDATE, or FOR NO KEY UPDATE with
    `no_key`, which does not hold up inserts of rows that reference it), or
    NotFound (404, `code`). Scope the queryset to the caller's account for
    customer requests, so another account's row is a 404 too."""
    if isinstance(queryset, type):
        queryset = queryset._default_manager.all()
    obj = queryset.select_for_update(no_key=no_key).filter(**lookup).first()
    if obj is None:
        raise NotFound(message, code=code)
    return obj


def prefetched(manager: Any, objects: list) -> models.QuerySet:
    """A related manager's queryset holding `objects` as its results, as
    prefetch_related would leave it: for putting what a transaction just wrote
    into `_prefetched_objects_cache`, so rendering it reads nothing again."""
    queryset = manager.all()
    queryset._result_cache = list(objects)
    queryset._prefetch_done = True
    return queryset


def select_columns(model: type[M], alias: str | None = None) -> str:
    """The model's concrete columns, in field order (qualified by `alias`), for
    a written-out SELECT or RETURNING whose rows from_row() turns back into
    instances."""
    quote = connection.ops.quote_name
    prefix = f"{alias}." if alias else ""
    return ", ".join(f"{prefix}{quote(f.column)}" for f in model._meta.concrete_fields)


def from_row(model: type[M], values: Sequence[Any]) -> M:
    """An instance of `model` from a row of select_columns(model), each value
    converted as the ORM converts it (SQLite's text timestamps, JSON, ...): for
    the few hot reads written out because building them costs the ORM more than
    the database spends answering."""
    names, converters = _row_plan(model, connections[connection.alias])
    converted = []
    for value, (col, convert_all) in zip(values, converters, strict=True):
        for convert in convert_all:
            value = convert(value, col, connection)
        converted.append(value)
    return model.from_db(connection.alias, names, converted)


@lru_cache(maxsize=256)
def _row_plan(model: type[models.Model], conn: Any) -> tuple[list[str], list[tuple[Any, tuple]]]:
    """The attribute names and each column's converters, per model and connection
    (a connection belongs to one thread)."""
    fields = model._meta.concrete_fields
    plan = []
    for field in fields:
        col = field.get_col(model._meta.db_table)
        plan.append((col, tuple(conn.ops.get_db_converters(col) + col.get_db_converters(conn))))
    return [f.attname for f in fields], plan
