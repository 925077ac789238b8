"""Database helpers shared by the apps' services."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any, TypeVar

from django.core.exceptions import ObjectDoesNotExist
from django.db import DEFAULT_DB_ALIAS, connection, connections, models

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
    db = _db()
    names, converters = _row_plan(model, db)
    converted = []
    for value, (col, convert_all) in zip(values, converters, strict=True):
        for convert in convert_all:
            value = convert(value, col, db)
        converted.append(value)
    return model.from_db(db.alias, names, converted)


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


def _db() -> Any:
    """This thread's connection itself: `connection` is a proxy that looks it up
    again on every use, and a row's values are converted with it one by one."""
    return connections[DEFAULT_DB_ALIAS]


def written_keep(obj: models.Model, **related: Any) -> None:
    """Keep on `obj`, a row its caller has just written, the related rows written
    with it: a list per reverse foreign key, the object or None per reverse
    one-to-one. Rendering it then reads them from here (related_all,
    related_one) instead of asking the database for what the transaction just
    wrote. A plain attribute of the instance (`written_rows`), read by nothing
    else in Django: a relation not kept here is read as usual (prefetched, or
    queried)."""
    obj.written_rows = {**getattr(obj, "written_rows", {}), **related}


def related_all(obj: models.Model, name: str) -> Any:
    """The rows of `obj`'s relation `name`: those written_keep kept, else
    `getattr(obj, name).all()` (what prefetch_related attached, or a query)."""
    kept = getattr(obj, "written_rows", None)
    if kept is not None and name in kept:
        return kept[name]
    return getattr(obj, name).all()


def related_one(obj: models.Model, name: str) -> Any:
    """`obj`'s reverse one-to-one `name`, or None where there is none: as
    written_keep kept it, else read (select_related's, or a query)."""
    kept = getattr(obj, "written_rows", None)
    if kept is not None and name in kept:
        return kept[name]
    try:
        return getattr(obj, name)
    except ObjectDoesNotExist:
        return None
