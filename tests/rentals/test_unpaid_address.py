"""What one client address and one holder may keep unpaid: the unpaid caps hold
per address (an IPv4 address, an IPv6 /64) across accounts, and no account or
address holds more than UNPAID_HOLD_SHARE_PCT of a card's stock in a region
(at least one host's worth). The address is the one the trusted proxies vouch
for (TRUSTED_PROXY_COUNT), never what the client writes in X-Forwarded-For."""

from __future__ import annotations

import threading

import pytest
from django.db import connection
from rest_framework.test import APIClient

from accounts.services import ssh_key_add
from billing.models import Invoice
from catalog.models import Host, Slot, SlotStatus
from rentals.models import Order, OrderStatus
from rentals.services.unpaid import client_network, hold_share_max
from tests.rentals.helpers import new_key_line

pytestmark = pytest.mark.django_db

ATTACKER = "198.51.100.7"


@pytest.fixture
def caps(settings):
    settings.UNPAID_ORDERS_MAX = 2
    settings.UNPAID_GPUS_MAX = 8
    settings.UNPAID_ORDERS_MAX_PAID = 10
    settings.UNPAID_GPUS_MAX_PAID = 64
    settings.UNPAID_HOLD_SHARE_PCT = 25
    settings.TRUSTED_PROXY_COUNT = 0
    return settings


class Customer:
    """A new account with an SSH key and its API client."""

    def __init__(self, django_user_model, name: str):
        self.account = django_user_model.objects.create_user(name, "correct horse battery staple")
        self.key = ssh_key_add(account=self.account, public_key=new_key_line(), name="k")
        self.api = APIClient()
        self.api.force_authenticate(self.account)

    def order(self, address: str, forwarded_for: str | None = None, **overrides):
        body = {
            "region": "DFW-1",
            "gpu": "h100-sxm",
            "gpu_count": 8,
            "term": "weekly",
            "terms": 1,
            "template": "ubuntu-24.04",
            "addons": [],
            "ssh_keys": [self.key.pk],
            "pay_currency": "USDC",
        } | overrides
        headers = {} if forwarded_for is None else {"HTTP_X_FORWARDED_FOR": forwarded_for}
        return self.api.post("/api/v1/orders", body, format="json", REMOTE_ADDR=address, **headers)

    def has_paid(self) -> None:
        """Give the account a history of paying (the higher caps)."""
        resp = self.order("192.0.2.200", region="IAD-1", gpu="l4", gpu_count=1)
        assert resp.status_code == 201, resp.json()
        Order.objects.filter(pk=resp.json()["id"]).update(status=OrderStatus.PAID)


@pytest.fixture
def make_customer(django_user_model):
    made = []

    def make() -> Customer:
        made.append(Customer(django_user_model, f"user{len(made)}"))
        return made[-1]

    return make


def free(gpu: str, region: str) -> int:
    return Slot.objects.filter(host__gpu__slug=gpu, host__region__code=region, status=SlotStatus.FREE).count()


def held_from(network: str) -> int:
    holders = [f"order:{pk}" for pk in Order.objects.filter(client_network=network).values_list("pk", flat=True)]
    return Slot.objects.filter(holder__in=holders, status=SlotStatus.RESERVED).count()


def test_client_networks():
    assert client_network("203.0.113.5") == "203.0.113.5"
    assert client_network("::ffff:203.0.113.5") == "203.0.113.5"
    assert client_network("2001:db8:1:2::1") == "2001:db8:1:2::/64"
    assert client_network("2001:db8:1:2:ffff:ffff:ffff:fffe") == "2001:db8:1:2::/64"
    assert client_network("[2001:db8:1:3::9]") == "2001:db8:1:3::/64"
    assert client_network("") == client_network(None) == client_network("not an address") == ""


def test_six_accounts_from_one_address_cannot_hold_a_regions_h100s_or_b200s(chains, catalog, caps, make_customer):
    """The attack as it was run: six new accounts from one address try to hold
    every H100 SXM in DFW-1 (26 free) and every B200 in PDX-1 (8), in the
    largest instances each host still has. Together they hold what one new
    account may (8 GPUs); every other try is refused; others still order."""
    assert (free("h100-sxm", "DFW-1"), free("b200", "PDX-1")) == (26, 8)
    attackers = [make_customer() for _ in range(6)]
    tries = [("DFW-1", "h100-sxm", n) for n in (8, 8, 4, 2, 1)] + [("PDX-1", "b200", 8)]
    outcomes = []
    for customer in attackers:
        for region, gpu, count in tries:
            resp = customer.order(ATTACKER, region=region, gpu=gpu, gpu_count=count)
            outcomes.append((resp.status_code, resp.json().get("error", {}).get("code")))
    first, others = outcomes[: len(tries)], outcomes[len(tries) :]
    # The first account holds one 8-GPU instance and then meets its own cap; the
    # five others meet the address's.
    assert first == [(201, None)] + [(409, "unpaid_limit")] * (len(tries) - 1)
    assert others == [(409, "unpaid_limit_address")] * len(others)
    assert held_from(ATTACKER) == 8
    assert (free("h100-sxm", "DFW-1"), free("b200", "PDX-1")) == (18, 8)

    refused = attackers[1].order(ATTACKER, gpu_count=1).json()["error"]
    assert refused["details"] == {
        "client_network": ATTACKER,
        "unpaid_orders": 1,
        "unpaid_gpus": 8,
        "max_unpaid_orders": 2,
        "max_unpaid_gpus": 8,
        "paid_history": False,
        "requested_gpus": 1,
    }
    assert "8 unpaid GPUs" in refused["message"]

    # Customers elsewhere still get the cards.
    assert make_customer().order("203.0.113.20").status_code == 201
    assert make_customer().order("203.0.113.21", region="PDX-1", gpu="b200").status_code == 201
    assert (free("h100-sxm", "DFW-1"), free("b200", "PDX-1")) == (10, 0)


def test_an_ipv6_64_counts_as_one_address(chains, catalog, caps, make_customer):
    first = make_customer().order("2001:db8:1:2::1", gpu="l4")
    assert first.status_code == 201
    assert Order.objects.get(pk=first.json()["id"]).client_network == "2001:db8:1:2::/64"
    # Another address of the same /64, another account: the /64 holds its 8 GPUs already.
    resp = make_customer().order("2001:db8:1:2:ffff:ffff:ffff:1", gpu="l4", gpu_count=1)
    assert resp.status_code == 409
    assert resp.json()["error"]["code"] == "unpaid_limit_address"
    assert resp.json()["error"]["details"]["client_network"] == "2001:db8:1:2::/64"
    # The neighbouring /64 is someone else.
    assert make_customer().order("2001:db8:1:3::1", gpu="l4", gpu_count=1).status_code == 201


def test_the_address_is_the_one_the_trusted_proxy_saw(chains, catalog, caps, make_customer):
    """Behind deploy/'s nginx (TRUSTED_PROXY_COUNT=1) the client is the entry
    nginx appended to X-Forwarded-For; what the client wrote before it is
    ignored, so changing it is no way round the cap."""
    caps.TRUSTED_PROXY_COUNT = 1
    first = make_customer().order("127.0.0.1", forwarded_for=f"10.0.0.1, {ATTACKER}", gpu="l4")
    assert first.status_code == 201, first.json()
    assert Order.objects.get(pk=first.json()["id"]).client_network == ATTACKER
    spoofed = make_customer().order("127.0.0.1", forwarded_for=f"10.9.9.9, {ATTACKER}", gpu="l4", gpu_count=1)
    assert spoofed.json()["error"]["code"] == "unpaid_limit_address"

    # With no proxy trusted (the default) the header is the client's own words: ignored.
    caps.TRUSTED_PROXY_COUNT = 0
    direct = make_customer().order("203.0.113.30", forwarded_for="192.0.2.1", gpu="l4", gpu_count=1)
    assert Order.objects.get(pk=direct.json()["id"]).client_network == "203.0.113.30"


def test_no_account_holds_more_than_its_share_of_a_cards_stock(chains, catalog, caps, make_customer):
    """An account that has paid before may hold 64 GPUs unpaid, but of one card
    in one region only its share: 25 % of the 26 H100 SXM in DFW-1 is 6, so
    one host's worth, 8."""
    customer = make_customer()
    customer.has_paid()
    assert hold_share_max(stock=26, gpus_per_host=8) == 8
    assert customer.order("203.0.113.40").status_code == 201
    resp = customer.order("203.0.113.41", gpu_count=1)  # another address: the account's share
    assert resp.status_code == 409
    assert resp.json()["error"]["code"] == "hold_share_exceeded"
    assert resp.json()["error"]["details"] == {
        "holder": "account",
        "region": "DFW-1",
        "gpu": "h100-sxm",
        "held_gpus": 8,
        "requested_gpus": 1,
        "max_held_gpus": 8,
        "stock_gpus": 26,
        "share_pct": 25,
    }
    # Other cards and regions are other shares.
    assert customer.order("203.0.113.41", region="IAD-1").status_code == 201

    # Half of the stock: 13.
    caps.UNPAID_HOLD_SHARE_PCT = 50
    assert customer.order("203.0.113.41", gpu_count=4).status_code == 201
    resp = customer.order("203.0.113.41", gpu_count=2)
    assert resp.json()["error"]["details"]["max_held_gpus"] == 13
    caps.UNPAID_HOLD_SHARE_PCT = 100  # off: only the stock and the counts limit it
    assert customer.order("203.0.113.41", gpu_count=2).status_code == 201


def test_no_address_holds_more_than_its_share_either(chains, catalog, caps, make_customer):
    first, second = make_customer(), make_customer()
    first.has_paid()
    second.has_paid()
    assert first.order(ATTACKER).status_code == 201
    resp = second.order(ATTACKER, gpu_count=2)
    assert resp.status_code == 409
    error = resp.json()["error"]
    assert (error["code"], error["details"]["holder"], error["details"]["held_gpus"]) == (
        "hold_share_exceeded",
        "address",
        8,
    )
    assert second.order("203.0.113.50", gpu_count=2).status_code == 201


def test_a_whole_host_can_always_be_held(chains, catalog, caps, make_customer):
    """PDX-1 has one free B200 host: 25 % of it is 2, below the card's minimum
    instance; the share is one host's worth, so the 8-GPU node can be ordered."""
    assert hold_share_max(stock=8, gpus_per_host=8) == 8
    assert make_customer().order(ATTACKER, region="PDX-1", gpu="b200").status_code == 201


def test_the_share_follows_the_stock_that_is_not_rented(chains, catalog, caps, django_user_model):
    """Free and held-unpaid slots are the stock; rented and out-of-service ones are not."""
    from rentals.services.unpaid import _held

    hosts = Host.objects.filter(region__code="DFW-1", gpu__slug="h100-sxm")
    slot = Slot.objects.filter(host__in=hosts, status=SlotStatus.FREE).first()
    account = django_user_model.objects.create_user("someone", "correct horse battery staple")
    region, gpu = hosts[0].region, hosts[0].gpu

    def stock() -> int:
        return _held(account=account, lock=False, region_id=region.pk, gpu_id=gpu.pk).stock

    assert stock() == 26
    Slot.objects.filter(pk=slot.pk).update(status=SlotStatus.RESERVED, holder="order:0")
    assert stock() == 26
    Slot.objects.filter(pk=slot.pk).update(status=SlotStatus.RENTED)
    assert stock() == 25
    Slot.objects.filter(pk=slot.pk).update(status=SlotStatus.OUT_OF_SERVICE)
    assert stock() == 25


@pytest.mark.django_db(transaction=True)
def test_concurrent_orders_from_one_address_cannot_pass_the_cap_together(chains, catalog, caps, make_customer):
    """Twelve new accounts order at once from one address, each on its own
    connection: the address's lock makes them count one after the other."""
    customers = [make_customer() for _ in range(12)]
    barrier = threading.Barrier(len(customers))
    results, lock = [], threading.Lock()

    def order(customer: Customer) -> None:
        try:
            barrier.wait()
            resp = customer.order(ATTACKER, gpu="l4", gpu_count=1)
            outcome = (resp.status_code, resp.json().get("error", {}).get("code"))
        finally:
            connection.close()
        with lock:
            results.append(outcome)

    threads = [threading.Thread(target=order, args=(c,)) for c in customers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)

    assert sorted(results) == [(201, None)] * 2 + [(409, "unpaid_limit_address")] * 10
    assert Order.objects.filter(client_network=ATTACKER, status=OrderStatus.AWAITING_PAYMENT).count() == 2


def _close_unpaid(order_id: int, when) -> None:
    """The order expired unpaid at `when` (its GPUs back in stock), as the expiry job leaves it."""
    from rentals.services.orders import order_cancel

    order = Order.objects.get(pk=order_id)
    order_cancel(order_id=order_id, actor=order.account, reason="test")
    Order.objects.filter(pk=order_id).update(status=OrderStatus.EXPIRED, closed_at=when)


def test_the_one_host_allowance_is_withheld_after_holds_that_lapsed(chains, catalog, caps, make_customer):
    """The B200 attack again: PDX-1's only B200 host is above the 25 % share and
    held through the one-host allowance. A customer whose order lapsed orders
    it again; after UNPAID_HOLD_FLOOR_MISSES (2) such orders closed unpaid,
    neither the account nor a new account from its address may hold the host
    within UNPAID_HOLD_FLOOR_COOLDOWN_HOURS; another address may."""
    import datetime as dt

    from django.utils import timezone

    caps.UNPAID_HOLD_FLOOR_COOLDOWN_HOURS = 24
    caps.UNPAID_HOLD_FLOOR_MISSES = 2
    first = make_customer()
    resp = first.order(ATTACKER, region="PDX-1", gpu="b200")
    assert resp.status_code == 201, resp.json()
    earlier = timezone.now() - dt.timedelta(hours=1)
    _close_unpaid(resp.json()["id"], earlier)
    again = first.order(ATTACKER, region="PDX-1", gpu="b200")  # the lapsed order, placed again
    assert again.status_code == 201, again.json()
    now = timezone.now()
    _close_unpaid(again.json()["id"], now)
    assert free("b200", "PDX-1") == 8

    for customer in (first, make_customer()):  # the same account, then a fresh one from the address
        refused = customer.order(ATTACKER, region="PDX-1", gpu="b200")
        assert refused.status_code == 409
        error = refused.json()["error"]
        assert error["code"] == "hold_share_exceeded"
        holder = "account" if customer is first else "address"
        assert error["details"]["holder"] == holder
        # Back when the older of the two closes leaves the 24 hours.
        available = dt.datetime.fromisoformat(error["details"]["floor_available_at"].replace("Z", "+00:00"))
        assert abs((available - earlier) - dt.timedelta(hours=24)) < dt.timedelta(seconds=1)
        assert "2 such orders closed unpaid within 24 hours" in error["message"]
    # A share within the percentage is never affected: 2 of the 8 B200 (25 %) are not a host's
    # worth and cannot be ordered alone, but the H100s of DFW-1 (26: share 6) can, below it.
    assert first.order(ATTACKER, gpu_count=4).status_code == 201
    # Another address still orders the host.
    assert make_customer().order("203.0.113.60", region="PDX-1", gpu="b200").status_code == 201


def test_the_one_host_allowance_returns_after_the_cooldown(chains, catalog, caps, make_customer):
    import datetime as dt

    from django.utils import timezone

    caps.UNPAID_HOLD_FLOOR_COOLDOWN_HOURS = 24
    caps.UNPAID_HOLD_FLOOR_MISSES = 1
    first = make_customer()
    resp = first.order(ATTACKER, region="PDX-1", gpu="b200")
    assert resp.status_code == 201
    _close_unpaid(resp.json()["id"], timezone.now() - dt.timedelta(hours=24, minutes=1))
    again = make_customer().order(ATTACKER, region="PDX-1", gpu="b200")
    assert again.status_code == 201

    _close_unpaid(again.json()["id"], timezone.now())
    assert make_customer().order(ATTACKER, region="PDX-1", gpu="b200").status_code == 409
    caps.UNPAID_HOLD_FLOOR_COOLDOWN_HOURS = 0  # off: the allowance is always there
    assert make_customer().order(ATTACKER, region="PDX-1", gpu="b200").status_code == 201


def test_a_customer_who_has_paid_for_the_card_keeps_the_one_host_allowance(chains, catalog, caps, make_customer):
    import datetime as dt

    from django.utils import timezone

    caps.UNPAID_HOLD_FLOOR_COOLDOWN_HOURS = 24
    caps.UNPAID_HOLD_FLOOR_MISSES = 1
    regular = make_customer()
    first = regular.order("203.0.113.70", region="DFW-1", gpu="b200")  # a B200 paid for, elsewhere
    assert first.status_code == 201, first.json()
    Order.objects.filter(pk=first.json()["id"]).update(status=OrderStatus.PAID)
    for _ in range(2):
        resp = regular.order("203.0.113.70", region="PDX-1", gpu="b200")
        assert resp.status_code == 201, resp.json()
        _close_unpaid(resp.json()["id"], timezone.now() - dt.timedelta(minutes=5))
    assert regular.order("203.0.113.70", region="PDX-1", gpu="b200").status_code == 201


def test_a_paid_order_of_another_card_or_an_order_cancelled_at_once_changes_nothing(
    chains, catalog, caps, make_customer
):
    import datetime as dt

    from django.utils import timezone

    caps.UNPAID_HOLD_FLOOR_COOLDOWN_HOURS = 24
    caps.UNPAID_HOLD_FLOOR_MISSES = 1
    customer = make_customer()
    customer.has_paid()  # an L4 in IAD-1: no B200
    resp = customer.order("203.0.113.80", region="PDX-1", gpu="b200")
    assert resp.status_code == 201
    # Cancelled two minutes after it was placed: no lapsed hold.
    order = Order.objects.get(pk=resp.json()["id"])
    _close_unpaid(order.pk, order.created_at + dt.timedelta(minutes=2))
    Order.objects.filter(pk=order.pk).update(status=OrderStatus.CANCELLED)
    again = customer.order("203.0.113.80", region="PDX-1", gpu="b200")
    assert again.status_code == 201, again.json()
    _close_unpaid(again.json()["id"], timezone.now())  # this one lapsed
    refused = customer.order("203.0.113.80", region="PDX-1", gpu="b200")
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "hold_share_exceeded"


def test_orders_closed_unpaid_are_limited_per_account_and_per_address(chains, catalog, caps, make_customer):
    """Each order leaves a deposit address watched for a month: an account, or an
    address, whose UNPAID_LAPSES_MAX orders closed unpaid (cancelled or expired)
    within the window has its next order refused, 429 with Retry-After, until the
    oldest of them leaves the window; its other limits are untouched."""
    from datetime import UTC, datetime, timedelta

    import time_machine

    caps.UNPAID_LAPSES_MAX = 2
    caps.UNPAID_LAPSE_WINDOW_HOURS = 1
    start = datetime.now(UTC)
    one, two = make_customer(), make_customer()
    with time_machine.travel(start, tick=False):
        first = one.order(ATTACKER, gpu_count=1)
        assert one.api.post(f"/api/v1/orders/{first.json()['id']}/cancel").status_code == 200
    with time_machine.travel(start + timedelta(minutes=20), tick=False):
        second = one.order(ATTACKER, gpu_count=1)
        Order.objects.filter(pk=second.json()["id"]).update(
            status=OrderStatus.EXPIRED, closed_at=start + timedelta(minutes=20)
        )
        refused = one.order("192.0.2.50", gpu_count=1)  # the account's, from any address
        assert refused.status_code == 429, refused.json()
        error = refused.json()["error"]
        assert error["code"] == "throttled" and "closed unpaid" in error["message"]
        assert refused["Retry-After"] == str(error["details"]["retry_after_seconds"]) == str(40 * 60)
        # The address's: another account from it is refused too; from elsewhere it orders.
        assert two.order(ATTACKER, gpu_count=1).status_code == 429
        elsewhere = two.order("192.0.2.51", gpu_count=1)
        assert elsewhere.status_code == 201, elsewhere.json()
    # Once the oldest lapse leaves the window, one more order may be placed.
    with time_machine.travel(start + timedelta(minutes=61), tick=False):
        assert one.order("192.0.2.50", gpu_count=1).status_code == 201
    caps.UNPAID_LAPSES_MAX = 0
    with time_machine.travel(start + timedelta(minutes=62), tick=False):
        assert two.order(ATTACKER, gpu_count=1).status_code == 201


def test_a_requote_of_a_lapsed_hold_is_not_counted_against_itself(chains, catalog, caps, make_customer):
    """UNPAID_HOLD_FLOOR_MISSES (2) lapsed holds withhold the one-host allowance;
    re-quoting the second of them counts one lapse (the other order), not two:
    the order being re-quoted is the hold being taken up again."""
    import datetime as dt

    from django.utils import timezone

    caps.UNPAID_HOLD_FLOOR_COOLDOWN_HOURS = 24
    caps.UNPAID_HOLD_FLOOR_MISSES = 2
    customer = make_customer()
    first = customer.order(ATTACKER, region="PDX-1", gpu="b200")
    assert first.status_code == 201, first.json()
    _close_unpaid(first.json()["id"], timezone.now() - dt.timedelta(hours=1))
    second = customer.order(ATTACKER, region="PDX-1", gpu="b200")
    assert second.status_code == 201, second.json()
    _close_unpaid(second.json()["id"], timezone.now())
    Invoice.objects.filter(pk=second.json()["invoice"]["id"]).update(status="expired")  # as the expiry job leaves it
    resp = customer.api.post(f"/api/v1/invoices/{second.json()['invoice']['id']}/requote", {}, format="json")
    assert resp.status_code == 200, resp.json()
    assert Order.objects.get(pk=second.json()["id"]).status == OrderStatus.AWAITING_PAYMENT
