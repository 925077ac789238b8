"""core.db.insert and core.db.update_columns: the order path's writes with
their statements built once, against what save() and bulk_create write."""

from __future__ import annotations

from datetime import UTC, datetime

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
