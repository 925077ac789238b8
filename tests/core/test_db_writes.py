"""core.db.insert and core.db.update_columns: the order path's writes with
their statements built once, against what save() and bulk_create write."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.db import DatabaseError, connection
from django.forms.models import model_to_dict
from django.test.utils import CaptureQueriesContext

from core.db import insert, insert_with_children, update_columns
from core.models import AuditEntry, Lease

pytestmark = pytest.mark.django_db

COMPARED = ("actor", "actor_name", "action", "object_id", "object_repr", "changes", "reason")


def entry(customer, n: int = 0, **extra) -> AuditEntry:
    values = {
        "actor": customer,
        "actor_name": customer.username,
        "action": f"test.{n}",
        "object_id": str(n),
        "object_repr": "ünïcode ✓",
        "changes": {"n": n, "nested": [1, "two", {"three": None}]},
        "reason": "a reason",
    }
    return AuditEntry(**(values | extra))


def test_insert_writes_what_save_writes_in_one_statement(customer):
    saved = entry(customer)
    saved.save()
    with CaptureQueriesContext(connection) as queries:
        (made,) = insert([entry(customer)])
    assert len(queries) == 1 and queries[0]["sql"].startswith("INSERT INTO") and "RETURNING" in queries[0]["sql"]
    assert made.pk is not None and made.pk != saved.pk
    assert made._state.adding is False and made._state.db == "default"
    read = AuditEntry.objects.get(pk=made.pk)
    assert model_to_dict(read, fields=COMPARED) == model_to_dict(AuditEntry.objects.get(pk=saved.pk), fields=COMPARED)
    assert read.created_at is not None and read.created_at == made.created_at  # auto_now_add set, as save() sets it


def test_insert_many_rows_gives_each_its_own_key_in_order(customer):
    objs = [entry(customer, n) for n in range(5)]
    with CaptureQueriesContext(connection) as queries:
        made = insert(objs)
    assert len(queries) == 1
    assert made == objs and len({o.pk for o in made}) == 5
    for obj in made:
        read = AuditEntry.objects.get(pk=obj.pk)
        assert (read.action, read.changes["n"]) == (obj.action, obj.changes["n"])


def test_insert_of_nothing_writes_nothing():
    with CaptureQueriesContext(connection) as queries:
        assert insert([]) == []
    assert len(queries) == 0


def test_insert_refuses_an_unsaved_related_object(customer, django_user_model):
    unsaved = django_user_model(username="not-saved")
    with pytest.raises(ValueError, match="unsaved related object"):
        insert([entry(customer, actor=unsaved)])
    assert not AuditEntry.objects.exists()


def test_insert_leaves_what_it_does_not_cover_to_bulk_create():
    """A key that is not a database sequence (Lease's name) is bulk_create's work."""
    made = insert([Lease(name="a", owner="me"), Lease(name="b", owner="you")])
    assert [lease.pk for lease in made] == ["a", "b"]
    assert set(Lease.objects.values_list("name", "owner")) == {("a", "me"), ("b", "you")}


def test_update_columns_writes_the_named_fields_only(customer):
    (obj,) = insert([entry(customer)])
    obj.reason = "changed"
    obj.object_repr = "changed too, but not written"
    obj.created_at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    with CaptureQueriesContext(connection) as queries:
        update_columns(obj, "reason", "created_at")
    assert len(queries) == 1 and queries[0]["sql"].startswith("UPDATE")
    read = AuditEntry.objects.get(pk=obj.pk)
    assert (read.reason, read.created_at) == ("changed", datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))
    assert read.object_repr == "ünïcode ✓"


def test_update_columns_of_a_row_that_is_gone_is_an_error(customer):
    (obj,) = insert([entry(customer)])
    AuditEntry.objects.filter(pk=obj.pk).delete()
    obj.reason = "changed"
    with pytest.raises(DatabaseError, match="did not affect any rows"):
        update_columns(obj, "reason")


def test_insert_with_children_writes_parent_and_children_in_one_statement(django_user_model):
    parent = django_user_model(username="parent-account", password="!")
    children = [
        AuditEntry(actor=parent, action=f"child.{n}", changes={"n": n}, content_type=None, object_id=str(n))
        for n in range(3)
    ]
    with CaptureQueriesContext(connection) as queries:
        made = insert_with_children(parent, children)
    assert len(queries) == 1 and queries[0]["sql"].startswith("WITH parent AS (INSERT INTO")
    assert made == children and parent.pk is not None and parent._state.adding is False
    assert django_user_model.objects.get(pk=parent.pk).username == "parent-account"
    for child in made:
        assert child.actor_id == parent.pk and child.actor is parent and child._state.adding is False
        read = AuditEntry.objects.get(pk=child.pk)
        assert (read.actor_id, read.action, read.changes, read.content_type_id) == (
            parent.pk,
            child.action,
            child.changes,
            None,  # NULL in every row of a typed column: the VALUES take the column's type
        )
        assert read.created_at == child.created_at is not None


def test_insert_with_children_of_none_writes_the_parent(django_user_model):
    parent = django_user_model(username="no-children", password="!")
    assert insert_with_children(parent, []) == []
    assert django_user_model.objects.filter(pk=parent.pk, username="no-children").exists()


def test_insert_with_children_refuses_a_child_of_another_parent(customer, django_user_model):
    parent = django_user_model(username="parent-2", password="!")
    with pytest.raises(ValueError, match="not the parent"):
        insert_with_children(parent, [entry(customer)])
    assert not django_user_model.objects.filter(username="parent-2").exists()


def test_insert_with_children_refuses_a_child_with_an_unsaved_related_object(django_user_model):
    from django.contrib.contenttypes.models import ContentType

    parent = django_user_model(username="parent-3", password="!")
    unsaved = ContentType(app_label="nowhere", model="nothing")
    child = AuditEntry(actor=parent, action="child", object_id="1", content_type=unsaved)
    with pytest.raises(ValueError, match="unsaved related object 'content_type'"):
        insert_with_children(parent, [child])
    assert not django_user_model.objects.filter(username="parent-3").exists()


def _order(account, **extra):
    from catalog.models import GpuModel, Region, Template
    from rentals.models import Order

    values = {
        "account": account,
        "region": Region.objects.order_by("pk").first(),
        "gpu": GpuModel.objects.order_by("pk").first(),
        "template": Template.objects.order_by("pk").first(),
        "gpu_count": 1,
        "term": "monthly",
        "terms": 1,
        "region_code": "DFW-1",
        "gpu_slug": "x",
        "gpu_name": "X",
        "template_slug": "x",
        "addons": ["ipv4"],
        "ssh_keys": [],
        "workload": None,  # SQL NULL, not JSON null
        "sizing": {"k": None, "é": [1.5, "two"]},
        "pay_currency": "BTC",
        # more places than the columns keep, an exponent, a string and a float: rounded as save() rounds
        "subtotal_usd": Decimal("1.005"),
        "multi_gpu_discount_pct": Decimal("0.125"),
        "term_discount_pct": 1.1,
        "discount_usd": Decimal("-0.005"),
        "total_usd": Decimal("12.345"),
        "per_gpu_hour_usd": "3.14159",
        "per_hour_usd": Decimal("1E+1"),
        "created_at": datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC),
    }
    return Order(**(values | extra))


def _row(table, pk):
    with connection.cursor() as cursor:
        cursor.execute(f'SELECT row_to_json(t)::text FROM "{table}" t WHERE id = %s', [pk])
        row = json.loads(cursor.fetchone()[0])
    row.pop("id")
    return row


def test_an_order_is_stored_alike_by_save_insert_and_insert_with_children(customer, catalog):
    from rentals.models import OrderLine

    saved = _order(customer)
    saved.save()
    (inserted,) = insert([_order(customer)])
    parent = _order(customer)
    line = {"position": 1, "code": "x", "description": "d", "quantity": 1, "unit_usd": Decimal("1.005"), "terms": 1}
    line |= {"subtotal_usd": 1, "discount_pct": 0, "discount_usd": 0, "amount_usd": 1}
    (child,) = insert_with_children(parent, [OrderLine(order=parent, **line)])
    stored = _row("rentals_order", saved.pk)
    assert stored["workload"] is None and stored["sizing"] == {"k": None, "é": [1.5, "two"]}
    assert stored["created_at"].startswith("2026-01-01T12:00:00")
    assert _row("rentals_order", inserted.pk) == stored
    assert _row("rentals_order", parent.pk) == stored
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM rentals_order WHERE workload IS NULL AND id IN (%s, %s, %s)",
            [saved.pk, inserted.pk, parent.pk],
        )
        assert cursor.fetchone()[0] == 3
    saved_line = OrderLine(order=saved, **line)
    saved_line.save()
    assert _row("rentals_orderline", child.pk) | {"order_id": None} == _row("rentals_orderline", saved_line.pk) | {
        "order_id": None
    }


def test_insert_with_children_keeps_a_key_given_to_a_child(django_user_model):
    parent = django_user_model(username="keyed-children", password="!")
    given = AuditEntry(actor=parent, action="keyed", object_id="1", pk=987654)
    made = insert_with_children(parent, [given, AuditEntry(actor=parent, action="unkeyed", object_id="2")])
    assert made[0].pk == 987654 and AuditEntry.objects.get(pk=987654).actor_id == parent.pk
    assert made[1].pk is not None and AuditEntry.objects.get(pk=made[1].pk).action == "unkeyed"
