"""core.db.locked_or_404 and queueing Celery tasks by name."""

from __future__ import annotations

import pytest
from celery import shared_task
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from core.db import locked_or_404
from core.errors import NotFound
from core.models import Lease
from core.tasks import task_queue, task_queue_on_commit

pytestmark = pytest.mark.django_db

RAN: list[tuple[str, int]] = []


@shared_task(name="tests.core.record")
def record(word: str, number: int) -> None:
    RAN.append((word, number))


def test_locked_or_404_returns_the_row_locked():
    Lease.objects.create(name="a", owner="me")
    with transaction.atomic(), CaptureQueriesContext(connection) as queries:
        lease = locked_or_404(Lease.objects.filter(owner="me"), pk="a")
    assert lease.name == "a"
    assert "FOR UPDATE" in queries[-1]["sql"] and "FOR NO KEY UPDATE" not in queries[-1]["sql"]
    with transaction.atomic(), CaptureQueriesContext(connection) as queries:
        locked_or_404(Lease, no_key=True, pk="a")
    assert "FOR NO KEY UPDATE" in queries[-1]["sql"]


def test_locked_or_404_is_a_404_outside_the_queryset():
    Lease.objects.create(name="a", owner="me")
    with transaction.atomic():
        with pytest.raises(NotFound) as refused:
            locked_or_404(Lease.objects.filter(owner="someone else"), pk="a", message="No such lease.", code="x_nf")
    assert (refused.value.status, refused.value.code, refused.value.message) == (404, "x_nf", "No such lease.")
    with transaction.atomic(), pytest.raises(NotFound) as default:
        locked_or_404(Lease, pk="missing")
    assert (default.value.code, default.value.message) == ("not_found", "Not found.")


def test_a_task_is_queued_by_name(django_capture_on_commit_callbacks):
    RAN.clear()
    task_queue("tests.core.record", "now", 1)
    assert RAN == [("now", 1)]  # eager in tests: the registered task ran
    with django_capture_on_commit_callbacks(execute=True):
        with transaction.atomic():
            task_queue_on_commit("tests.core.record", "after", 2)
            assert RAN == [("now", 1)]  # not before the commit
    assert RAN == [("now", 1), ("after", 2)]


def test_a_rolled_back_transaction_queues_nothing(django_capture_on_commit_callbacks):
    RAN.clear()

    class Undo(Exception):
        pass

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        with pytest.raises(Undo), transaction.atomic():
            task_queue_on_commit("tests.core.record", "never", 3)
            raise Undo
    assert callbacks == [] and RAN == []
