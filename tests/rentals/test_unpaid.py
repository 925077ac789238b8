"""What one account may hold unpaid: a fresh account cannot reserve a region's
whole stock of a card with orders it never pays (UNPAID_ORDERS_MAX,
UNPAID_GPUS_MAX; higher once it has paid), and a closed or deactivated
account lets its reservations go at once."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client

from accounts.models import SshKey
from accounts.services import account_deactivate, account_delete, ssh_key_add
from billing.models import Invoice
from catalog.models import Slot, SlotStatus
from rentals.models import Order, OrderStatus
from tests.rentals.helpers import committed, new_key_line

pytestmark = pytest.mark.django_db


@pytest.fixture
def caps(settings):
    settings.UNPAID_ORDERS_MAX = 2
    settings.UNPAID_GPUS_MAX = 8
    settings.UNPAID_ORDERS_MAX_PAID = 10
    settings.UNPAID_GPUS_MAX_PAID = 64
    return settings


@pytest.fixture
def ssh_key(customer) -> SshKey:
    return ssh_key_add(account=customer, public_key=new_key_line(), name="laptop")


def body(ssh_key, **overrides):
    return {
        "region": "PDX-1",
        "gpu": "b200",
        "gpu_count": 8,
        "term": "weekly",
        "terms": 1,
        "template": "ubuntu-24.04",
        "addons": [],
        "ssh_keys": [ssh_key.pk],
        "pay_currency": "USDC",
    } | overrides


def reserved_by(account) -> int:
    holders = [f"order:{pk}" for pk in Order.objects.filter(account=account).values_list("pk", flat=True)]
    return Slot.objects.filter(holder__in=holders, status=SlotStatus.RESERVED).count()


def test_a_new_account_cannot_hoard_a_regions_stock(chains, catalog, caps, customer, customer_api, ssh_key):
    """The attack: 8 x B200 and then H200s in PDX-1, never paid."""
    assert customer_api.post("/api/v1/orders", body(ssh_key), format="json").status_code == 201
    resp = customer_api.post("/api/v1/orders", body(ssh_key, gpu="h200-sxm", gpu_count=4), format="json")
    assert resp.status_code == 409
    error = resp.json()["error"]
    assert error["code"] == "unpaid_limit"
    assert error["details"] == {
        "unpaid_orders": 1,
        "unpaid_gpus": 8,
        "max_unpaid_orders": 2,
        "max_unpaid_gpus": 8,
        "paid_history": False,
        "requested_gpus": 4,
    }
    assert "8 unpaid GPUs" in error["message"]
    assert reserved_by(customer) == 8


def test_the_count_of_unpaid_orders_is_capped_too(chains, catalog, caps, customer_api, ssh_key):
    one = body(ssh_key, region="DFW-1", gpu="rtx-4090", gpu_count=1)
    for _ in range(2):
        assert customer_api.post("/api/v1/orders", one, format="json").status_code == 201
    resp = customer_api.post("/api/v1/orders", one, format="json")
    assert resp.status_code == 409
    assert resp.json()["error"]["code"] == "unpaid_limit"
    assert resp.json()["error"]["details"]["unpaid_orders"] == 2
    assert "2 unpaid orders" in resp.json()["error"]["message"]


def test_cancelling_an_order_frees_room(chains, catalog, caps, customer_api, ssh_key):
    first = customer_api.post("/api/v1/orders", body(ssh_key), format="json").json()
    assert customer_api.post("/api/v1/orders", body(ssh_key, gpu_count=2), format="json").status_code == 409
    assert customer_api.post(f"/api/v1/orders/{first['id']}/cancel").status_code == 200
    assert customer_api.post("/api/v1/orders", body(ssh_key, gpu_count=2), format="json").status_code == 201


def test_an_account_that_has_paid_may_hold_more(chains, catalog, caps, customer, customer_api, ssh_key):
    paid = customer_api.post(
        "/api/v1/orders", body(ssh_key, region="DFW-1", gpu="rtx-4090", gpu_count=1), format="json"
    )
    Order.objects.filter(pk=paid.json()["id"]).update(status=OrderStatus.PAID)
    # The counts alone here: the share of a card's stock (tests/rentals/test_unpaid_address.py) is off.
    caps.UNPAID_HOLD_SHARE_PCT = 100
    # Beyond a new account's 2 orders and 8 GPUs: DFW-1 has two free 8-GPU B200 hosts and two H100 SXM ones.
    for _ in range(2):
        assert customer_api.post("/api/v1/orders", body(ssh_key, region="DFW-1"), format="json").status_code == 201
    h100 = body(ssh_key, region="DFW-1", gpu="h100-sxm")
    resp = customer_api.post("/api/v1/orders", h100, format="json")
    assert resp.status_code == 201, resp.json()
    caps.UNPAID_GPUS_MAX_PAID = 24
    resp = customer_api.post("/api/v1/orders", h100, format="json")
    assert resp.status_code == 409
    assert resp.json()["error"]["details"]["paid_history"] is True
    assert resp.json()["error"]["details"]["max_unpaid_gpus"] == 24


def test_only_unpaid_orders_count_and_any_paid_one_raises_the_cap(
    chains, catalog, caps, customer, customer_api, ssh_key
):
    """Orders in every other status count for nothing; a paid or an unfulfilled
    one (paid, then not delivered) is a history of paying."""
    from rentals.services.unpaid import unpaid_limits

    placed = [
        customer_api.post(
            "/api/v1/orders", body(ssh_key, region="DFW-1", gpu="rtx-4090", gpu_count=1), format="json"
        ).json()["id"]
        for _ in range(2)
    ]
    Order.objects.filter(pk=placed[0]).update(status=OrderStatus.EXPIRED)
    assert unpaid_limits(account=customer) == {
        "unpaid_orders": 1,
        "unpaid_gpus": 1,
        "max_unpaid_orders": 2,
        "max_unpaid_gpus": 8,
        "paid_history": False,
    }
    assert unpaid_limits(account=customer, besides=placed[1])["unpaid_orders"] == 0
    for status, paid in (
        (OrderStatus.CANCELLED, False),
        (OrderStatus.UNFULFILLED, True),
        (OrderStatus.PAID, True),
    ):
        Order.objects.filter(pk=placed[0]).update(status=status)
        limits = unpaid_limits(account=customer)
        assert (limits["unpaid_orders"], limits["paid_history"], limits["max_unpaid_orders"]) == (
            1,
            paid,
            10 if paid else 2,
        ), status


def test_closing_the_account_releases_its_reservations_at_once(chains, catalog, caps, customer, customer_api, ssh_key):
    order = customer_api.post("/api/v1/orders", body(ssh_key), format="json").json()
    assert reserved_by(customer) == 8
    account_delete(account=customer, password="correct horse battery staple", client_address="198.51.100.1")
    assert reserved_by(customer) == 0
    closed = Order.objects.get(pk=order["id"])
    assert closed.status == OrderStatus.CANCELLED and closed.close_reason == "account closed"
    assert Invoice.objects.get(pk=order["invoice"]["id"]).status != "new"


def test_deactivation_by_staff_releases_them_too(chains, catalog, caps, customer, customer_api, ssh_key, staff):
    order = customer_api.post("/api/v1/orders", body(ssh_key), format="json").json()
    account_deactivate(account=customer, actor=staff, reason="abuse")
    assert reserved_by(customer) == 0
    assert Order.objects.get(pk=order["id"]).status == OrderStatus.CANCELLED


def test_a_requote_cannot_take_an_account_over_the_cap(
    chains, catalog, caps, customer_api, ssh_key, django_capture_on_commit_callbacks
):
    """Letting orders expire and re-quoting them later is no way round the cap."""
    import time_machine

    from billing import services as billing

    with time_machine.travel("2026-11-30 12:00:00+00:00", tick=False) as clock:
        first = customer_api.post("/api/v1/orders", body(ssh_key, region="DFW-1"), format="json").json()
        clock.shift(timedelta(minutes=31))
        with django_capture_on_commit_callbacks(execute=True):
            billing.invoices_advance_due()
        assert Order.objects.get(pk=first["id"]).status == OrderStatus.EXPIRED
        second = customer_api.post("/api/v1/orders", body(ssh_key, region="DFW-1"), format="json")
        assert second.status_code == 201
        resp = customer_api.post(f"/api/v1/invoices/{first['invoice']['id']}/requote", {}, format="json")
    assert resp.status_code == 409
    assert resp.json()["error"]["code"] == "unpaid_limit"
    assert Order.objects.get(pk=first["id"]).status == OrderStatus.EXPIRED


@pytest.mark.django_db(transaction=True)
def test_concurrent_orders_of_one_account_cannot_pass_the_cap_together(chains, catalog, caps, customer, ssh_key):
    """Twelve orders at once, each on its own connection: the account's lock makes
    them count one after the other, and each counts what the one before committed."""
    import threading

    from django.db import connection
    from rest_framework.test import APIClient

    barrier = threading.Barrier(12)
    results, lock = [], threading.Lock()

    def order() -> None:
        client = APIClient()
        client.force_authenticate(customer)
        try:
            barrier.wait()
            resp = client.post("/api/v1/orders", body(ssh_key, region="DFW-1", gpu="l4", gpu_count=1), format="json")
            outcome = (resp.status_code, resp.json().get("error", {}).get("code"))
        finally:
            connection.close()
        with lock:
            results.append(outcome)

    threads = [threading.Thread(target=order) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)

    assert sorted(results) == [(201, None)] * 2 + [(409, "unpaid_limit")] * 10
    assert Order.objects.filter(account=customer, status=OrderStatus.AWAITING_PAYMENT).count() == 2


def test_a_deactivated_accounts_lapsed_order_is_not_requoted(chains, catalog, caps, customer, ssh_key, staff):
    """Its unpaid orders were cancelled when staff deactivated it; one that had
    lapsed before is not reserved again through its checkout link."""
    order = _lapsed_order(customer, ssh_key, region="DFW-1")
    account_deactivate(account=customer, actor=staff, reason="abuse")
    token = Invoice.objects.get(pk=order.invoice_id).checkout_token
    resp = Client().post(f"/pay/{token}/requote", follow=True)
    assert resp.status_code == 200
    assert "This account is closed or deactivated: it can hold no order." in resp.content.decode()
    assert Order.objects.get(pk=order.pk).status == OrderStatus.EXPIRED
    assert reserved_by(customer) == 0


@pytest.mark.django_db(transaction=True)
def test_an_order_waiting_on_a_deactivation_is_refused(chains, catalog, caps, customer, ssh_key, staff):
    """Staff deactivate the account while one of its orders is being placed: the
    deactivation lists the unpaid orders to cancel before the order commits, so
    the order, which waits on the account's lock, finds the account closed when
    it gets the lock and is refused, with nothing reserved."""
    from django.db import transaction
    from rest_framework.test import APIClient

    from tests.waiting import wait_until

    def place() -> tuple[int, str | None]:
        client = APIClient()
        client.force_authenticate(customer)
        resp = client.post("/api/v1/orders", body(ssh_key, region="DFW-1", gpu="l4", gpu_count=1), format="json")
        return resp.status_code, resp.json().get("error", {}).get("code")

    pid: list[int] = []
    outcome: dict = {}
    with transaction.atomic():
        account_deactivate(account=customer, actor=staff, reason="abuse")
        placer = _in_thread(place, pid, outcome)
        wait_until(lambda: bool(pid), what="the order to start")
        wait_until(lambda: _waits_on_a_lock(pid), what="the order to wait on the account's lock")
    placer.join(60)
    assert outcome["result"] == (409, "account_inactive")
    assert not Order.objects.filter(account=customer).exists()
    assert reserved_by(customer) == 0


def _lapsed_order(customer, ssh_key, **overrides) -> Order:
    """An order placed and left to expire (its invoice expired, its GPUs back in stock)."""
    import time_machine
    from rest_framework.test import APIClient

    from billing import services as billing

    client = APIClient()
    client.force_authenticate(customer)
    with time_machine.travel("2026-11-30 12:00:00+00:00", tick=False) as clock:
        placed = client.post("/api/v1/orders", body(ssh_key, **overrides), format="json")
        assert placed.status_code == 201, placed.json()
        clock.shift(timedelta(minutes=31))
        with committed():  # the expiry reaches the order after the commit
            billing.invoices_advance_due()
    order = Order.objects.get(pk=placed.json()["id"])
    assert order.status == OrderStatus.EXPIRED
    return order


def _waits_on_a_lock(pid: list[int]) -> bool:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", pid)
        row = cursor.fetchone()
    return row is not None and row[0] == "Lock"


def _in_thread(work, pid: list[int], outcome: dict):
    import threading

    from django.db import connection

    def run() -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                pid.append(cursor.fetchone()[0])
            outcome["result"] = work()
        except Exception as exc:  # what the test looks at
            outcome["result"] = exc
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


@pytest.mark.django_db(transaction=True)
def test_a_cancel_takes_the_invoice_before_the_order_as_a_requote_does(chains, catalog, caps, customer, ssh_key):
    """A re-quote locks the invoice, then the order (order_requote_check); a cancel
    sent at the same moment took them the other way round, and PostgreSQL broke
    the deadlock with an error (a 503). While the cancel waits on the invoice, it
    holds no lock on the order."""
    from django.db import transaction

    from billing.models import Invoice
    from rentals.services.orders import order_cancel
    from tests.waiting import wait_until

    order = _lapsed_order(customer, ssh_key, gpu="l4", gpu_count=1, region="DFW-1")
    pid: list[int] = []
    outcome: dict = {}
    with transaction.atomic():
        Invoice.objects.select_for_update().get(pk=order.invoice_id)  # a re-quote in progress
        thread = _in_thread(
            lambda: order_cancel(order_id=order.pk, account=customer, reason="changed my mind"), pid, outcome
        )
        wait_until(lambda: bool(pid), what="the cancel to start")
        wait_until(lambda: _waits_on_a_lock(pid), what="the cancel to wait on the invoice")
        # The re-quote's next lock: free, not held by the waiting cancel.
        Order.objects.select_for_update(nowait=True).get(pk=order.pk)
    thread.join(60)
    assert isinstance(outcome["result"], Order), outcome
    assert Order.objects.get(pk=order.pk).status == OrderStatus.CANCELLED


@pytest.mark.django_db(transaction=True)
def test_a_requote_takes_its_host_before_the_accounts_lock_as_an_order_does(chains, catalog, caps, customer, ssh_key):
    """order_create reserves a host, then takes the account's and the address's
    locks; a re-quote took them the other way round, so a re-quote and a new
    order from one address could each hold what the other waited for. While the
    re-quote waits on the account, it holds its host already."""
    from django.db import DatabaseError, transaction

    from accounts.models import Account
    from billing import services as billing
    from catalog.models import Host
    from tests.waiting import wait_until

    order = _lapsed_order(customer, ssh_key, gpu="l4", gpu_count=1, region="DFW-1")
    pid: list[int] = []
    outcome: dict = {}
    hosts = Host.objects.filter(region=order.region, gpu=order.gpu)
    with transaction.atomic():
        Account.objects.select_for_update().get(pk=customer.pk)  # an order of the account's in progress
        thread = _in_thread(
            lambda: billing.invoice_requote(invoice_id=order.invoice_id, account=customer), pid, outcome
        )
        wait_until(lambda: bool(pid), what="the re-quote to start")
        wait_until(lambda: _waits_on_a_lock(pid), what="the re-quote to wait on the account")
        with pytest.raises(DatabaseError), transaction.atomic():
            # One of the region's L4 hosts is locked by the waiting re-quote.
            for host in hosts:
                Host.objects.select_for_update(nowait=True).get(pk=host.pk)
    thread.join(60)
    assert not isinstance(outcome["result"], Exception), outcome
    assert Order.objects.get(pk=order.pk).status == OrderStatus.AWAITING_PAYMENT
    assert reserved_by(customer) == 1


@pytest.mark.django_db(transaction=True)
def test_an_order_becoming_a_rental_takes_the_invoice_before_the_order(chains, catalog, caps, customer, ssh_key):
    """rental_from_order credits a sold-out order's invoice, which locks it: it
    takes the invoice first, as a cancel does, so the two never deadlock."""
    from django.db import transaction

    from billing.models import Invoice
    from rentals.services.lifecycle import rental_from_order
    from tests.waiting import wait_until

    order = _lapsed_order(customer, ssh_key, gpu="l4", gpu_count=1, region="DFW-1")
    pid: list[int] = []
    outcome: dict = {}
    with transaction.atomic():
        Invoice.objects.select_for_update().get(pk=order.invoice_id)  # a cancel in progress
        thread = _in_thread(lambda: rental_from_order(order_id=order.pk), pid, outcome)
        wait_until(lambda: bool(pid), what="the delivery to start")
        wait_until(lambda: _waits_on_a_lock(pid), what="the delivery to wait on the invoice")
        Order.objects.select_for_update(nowait=True).get(pk=order.pk)  # not held by the waiting delivery
    thread.join(60)
    assert outcome["result"] is None  # its invoice is not settled: nothing to deliver
