"""Database helpers shared by the apps' services."""

from __future__ import annotations

from typing import Any, TypeVar

from django.db import models

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
