"""Database helpers shared by the apps' services."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any, TypeVar

from django.db import DEFAULT_DB_ALIAS, DatabaseError, connection, connections, models

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


def insert(objs: Sequence[M]) -> list[M]:
    """Write new instances of one model in one INSERT ... RETURNING and give
    them their keys, as `bulk_create` does (and `save()` for one, without its
    model signals; none are connected to the models written this way). On
    PostgreSQL the statement is put together from parts kept per model (its
    columns, one row's placeholders), so an insert costs the conversion of its
    values and the round trip; compiling it anew, as the ORM does for every
    insert, cost more than both on the order path. Elsewhere, or for a model this plain form does not cover
    (database defaults, generated columns, inherited tables, a key already
    set), it is `bulk_create`."""
    objs = list(objs)
    if not objs:
        return objs
    model, db = type(objs[0]), _db()
    plan = _insert_plan(model, db.vendor)
    if plan is None or any(obj.pk is not None for obj in objs):
        return model._default_manager.bulk_create(objs)
    fields, columns, row = plan
    params = _insert_values(db, fields, objs)
    sql = f"{columns}VALUES {', '.join([row] * len(objs))} RETURNING {db.ops.quote_name(model._meta.pk.column)}"
    with db.cursor() as cursor:
        cursor.execute(sql, params)
        keys = cursor.fetchall()
    for obj, (key,) in zip(objs, keys, strict=True):
        obj.pk = key
        obj._state.adding = False
        obj._state.db = db.alias
    return objs


def insert_with_children(parent: M, children: Sequence[models.Model]) -> list[models.Model]:
    """Write a new `parent` and its new `children` (rows of one model whose
    foreign key was given `parent`) in one statement, and give all of them
    their keys; the children come back. On PostgreSQL the parent is inserted
    by a WITH whose key the children's VALUES read, one round trip for what
    would be two; elsewhere, or where insert() would leave the work to
    bulk_create, it is two insert() calls."""
    children, db = list(children), _db()
    plan = _insert_plan(type(parent), db.vendor)
    child_plan = _insert_plan(type(children[0]), db.vendor) if children else None
    link = _link(type(children[0]), type(parent)) if children else None
    if (
        plan is None
        or child_plan is None
        or link is None
        or parent.pk is not None
        or any(child.pk is not None for child in children)
    ):
        insert([parent])
        return insert(children)  # each child's key to the parent is read from it, now saved
    quote = db.ops.quote_name
    fields, head, row = plan
    params = _insert_values(db, fields, [parent])
    for child in children:
        if link.get_cached_value(child, None) is not parent:
            raise ValueError(f"{type(child).__name__}.{link.name} is not the parent being inserted")
    child_fields = tuple(f for f in child_plan[0] if f is not link)  # the link is the parent's new key
    params += _insert_values(db, child_fields, children)
    child_row = f"((SELECT id FROM parent), {', '.join(['%s'] * len(child_fields))})"
    child_meta = type(children[0])._meta
    sql = (
        f"WITH parent AS ({head}VALUES {row} RETURNING {quote(parent._meta.pk.column)} AS id) "
        f"INSERT INTO {quote(child_meta.db_table)} ({quote(link.column)}, "
        f"{', '.join(quote(f.column) for f in child_fields)}) VALUES {', '.join([child_row] * len(children))} "
        f"RETURNING {quote(link.column)}, {quote(child_meta.pk.column)}"
    )
    with db.cursor() as cursor:
        cursor.execute(sql, params)
        keys = cursor.fetchall()
    parent.pk = keys[0][0]
    parent._state.adding, parent._state.db = False, db.alias
    for child, (parent_key, key) in zip(children, keys, strict=True):
        setattr(child, link.attname, parent_key)  # which forgets the parent object: given back below
        link.set_cached_value(child, parent)
        child.pk = key
        child._state.adding, child._state.db = False, db.alias
    return children


@lru_cache(maxsize=64)
def _link(child: type[models.Model], parent: type[models.Model]) -> Any:
    """The child model's one foreign key to the parent's key, or None."""
    found = [
        f
        for f in child._meta.local_concrete_fields
        if f.many_to_one and f.related_model is parent and f.target_field is parent._meta.pk
    ]
    return found[0] if len(found) == 1 else None


def insert_statement(model: type[M], objs: Sequence[M]) -> tuple[tuple[Any, ...], str, list[Any]]:
    """For a written-out statement that inserts new `objs` some other way
    (INSERT ... SELECT, in a WITH): the fields written, in order, the head
    `INSERT INTO table (columns) ` and the values, converted as insert()
    converts them. PostgreSQL only, for the models insert() covers."""
    db = _db()
    plan = _insert_plan(model, db.vendor)
    if plan is None:
        raise ValueError(f"{model.__name__} is not written by a plain insert on {db.vendor}")
    return plan[0], plan[1], _insert_values(db, plan[0], objs)


def _insert_values(db: Any, fields: Sequence[Any], objs: Sequence[models.Model]) -> list[Any]:
    """The values of `fields` of each of `objs`, converted as save() converts them, after the check save()
    makes of their related objects (none unsaved; a key read from one saved since it was assigned)."""
    params: list[Any] = []
    for obj in objs:
        obj._prepare_related_fields_for_save(operation_name="insert", fields=fields)
        params.extend(f.get_db_prep_save(f.pre_save(obj, True), db) for f in fields)
    return params


def _db() -> Any:
    """This thread's connection itself: `connection` is a proxy that looks it up
    again on every use, and a row's values are converted with it one by one."""
    return connections[DEFAULT_DB_ALIAS]


@lru_cache(maxsize=64)
def _insert_plan(model: type[models.Model], vendor: str) -> tuple[tuple[Any, ...], str, str] | None:
    """The fields an insert writes, the statement's head and one row's
    placeholders; None where insert() leaves the work to bulk_create."""
    meta = model._meta
    if vendor != "postgresql" or meta.parents or meta.auto_field is None or meta.pk is not meta.auto_field:
        return None
    fields = tuple(f for f in meta.local_concrete_fields if f is not meta.auto_field)  # kept: never changed
    if any(f.db_default is not models.NOT_PROVIDED or f.generated for f in fields):
        return None
    quote = connection.ops.quote_name
    head = f"INSERT INTO {quote(meta.db_table)} ({', '.join(quote(f.column) for f in fields)}) "
    return fields, head, f"({', '.join(['%s'] * len(fields))})"


def update_columns(obj: models.Model, *names: str) -> None:
    """Write fields `names` of a saved instance in one UPDATE by its key, as
    `save(update_fields=names)` does, with the statement's text built once per
    model and fields (on PostgreSQL; elsewhere it is that save)."""
    db = _db()
    plan = _update_plan(type(obj), names, db.vendor)
    if plan is None:
        obj.save(update_fields=names)
        return
    fields, sql = plan
    params = [f.get_db_prep_save(f.pre_save(obj, False), db) for f in fields]
    with db.cursor() as cursor:
        cursor.execute(sql, [*params, obj.pk])
        if cursor.rowcount != 1:
            raise DatabaseError("Save with update_fields did not affect any rows.")


@lru_cache(maxsize=64)
def _update_plan(model: type[models.Model], names: tuple[str, ...], vendor: str) -> tuple[list[Any], str] | None:
    if vendor != "postgresql":
        return None
    meta = model._meta
    fields = [meta.get_field(name) for name in names]
    quote = connection.ops.quote_name
    sets = ", ".join(f"{quote(f.column)} = %s" for f in fields)
    return fields, f"UPDATE {quote(meta.db_table)} SET {sets} WHERE {quote(meta.pk.column)} = %s"
