"""Production code uses Django and Django REST framework through their public,
documented APIs only: no attribute of their internals (a model instance's
`_state`, the prefetch and result caches, a field's descriptor cache, the
ORM's insert machinery, a serializer's cached fields). Such an attribute can
change in any release without notice, and code that leans on one takes other
paths than the ORM's own (SQLite and PostgreSQL alike).

`Model._meta` and its documented methods (get_field, concrete_fields, db_table)
and `_default_manager` are Django's documented Model _meta API: allowed."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("accounts", "billing", "catalog", "config", "core", "rentals", "sizing", "webhooks", "observability")

# Attributes of Django's and DRF's internals (none is in their documentation).
PRIVATE = frozenset(
    {
        # Django: a model instance's lifecycle state and its relation caches
        "_state",
        "_prefetched_objects_cache",
        "_prepare_related_fields_for_save",
        "set_cached_value",
        "get_cached_value",
        "delete_cached_value",
        "is_cached",
        # Django: a queryset's internals
        "_result_cache",
        "_prefetch_done",
        "_prefetch_related_lookups",
        "_known_related_objects",
        "_fields",
        "_batched_insert",
        "_insert",
        # Django: the model's save machinery
        "_do_insert",
        "_do_update",
        "_save_table",
        "_save_parents",
        # DRF: a serializer's fields and state
        "_declared_fields",
        "_writable_fields",
        "_readable_fields",
        "_validated_data",
        "_args",
        "_kwargs",
        # writing an object's attributes behind its descriptors (DRF's cached `fields`)
        "__dict__",
    }
)

# (file, attribute): why it is not Django's or DRF's. Each entry must be used.
ALLOWED = {
    ("catalog/feed.py", "_state"): "ChangeFeed's own attribute (its FeedState), not Model._state",
}


def private_uses(source: str, path: str = "<source>") -> list[tuple[str, int, str]]:
    """(path, line, attribute) of every access of a PRIVATE attribute in `source`,
    and every call of getattr/setattr/hasattr/delattr that names one."""
    found = []
    for node in ast.walk(ast.parse(source, filename=path)):
        if isinstance(node, ast.Attribute) and node.attr in PRIVATE:
            found.append((path, node.lineno, node.attr))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in {"getattr", "setattr", "hasattr", "delattr"}
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in PRIVATE
        ):
            found.append((path, node.lineno, node.args[1].value))
    return found


def production_files() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def test_production_code_reads_no_private_attribute_of_django_or_drf():
    found = []
    used = set()
    for file in production_files():
        path = file.relative_to(ROOT).as_posix()
        for use in private_uses(file.read_text(encoding="utf-8"), path):
            if (use[0], use[2]) in ALLOWED:
                used.add((use[0], use[2]))
            else:
                found.append(use)
    assert not found, "private Django/DRF attributes:\n" + "\n".join(f"{p}:{n}: .{a}" for p, n, a in found)
    assert used == set(ALLOWED), f"allow-list entries no longer needed: {set(ALLOWED) - used}"


def test_the_walk_covers_the_production_packages():
    files = {f.relative_to(ROOT).as_posix() for f in production_files()}
    assert {"core/db.py", "core/api.py", "billing/services/invoices.py", "rentals/services/orders.py"} <= files


@pytest.mark.parametrize(
    "source",
    [
        "obj._state.adding = False",
        "order._prefetched_objects_cache = {}",
        "queryset._result_cache = list(rows)",
        "queryset._prefetch_done = True",
        "Order.rental.related.set_cached_value(order, None)",
        "obj._prepare_related_fields_for_save(operation_name='insert')",
        "serializer.__dict__['fields'] = fields",
        "cached = getattr(self, '_prefetched_objects_cache', {})",
        "setattr(obj, '_state', state)",
    ],
)
def test_each_kind_of_private_use_is_found(source):
    assert private_uses(source) != []


def test_public_apis_are_not_flagged():
    source = (
        "Order._meta.get_field('total_usd')\n"
        "Order._default_manager.all()\n"
        "OrderLine.objects.bulk_create(lines)\n"
        "Order.objects.filter(pk=1).update(host=host)\n"
        "order.save(update_fields=['host'])\n"
    )
    assert private_uses(source) == []
