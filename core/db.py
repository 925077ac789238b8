"""Database helpers shared by the apps' services."""

from __future__ import annotations

from functools import lru_cache
from typing import Any, TypeVar

from django.core.exceptions import ObjectDoesNotExist
from django.db import DEFAULT_DB_ALIAS, connections, models

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


@lru_cache(maxsize=64)
def columns(model: type[models.Model], alias: str = "", using: str = DEFAULT_DB_ALIAS) -> str:
    """The model's concrete columns, quoted for the database `using`, in field
    order (each `alias.`-qualified when given): the select list of a
    written-out read through `Manager.raw()`, which turns the rows into
    instances as the ORM does. Kept per process: a model's columns change
    only with a release."""
    quote = connections[using].ops.quote_name
    prefix = f"{quote(alias)}." if alias else ""
    return ", ".join(prefix + quote(str(f.column)) for f in model._meta.concrete_fields)


def written_keep(obj: models.Model, **related: Any) -> None:
    """Keep on `obj`, a row its caller has just written, the related rows written
    with it: a list per reverse foreign key, the object or None per reverse
    one-to-one. Rendering it then reads them from here (related_all,
    related_one) instead of asking the database for what the transaction just
    wrote. A plain attribute of the instance (`written_rows`), read by nothing
    else in Django: a relation not kept here is read as usual (prefetched, or
    queried)."""
    setattr(obj, "written_rows", {**getattr(obj, "written_rows", {}), **related})  # noqa: B010 - not a model field


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
