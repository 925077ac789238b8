"""Staff actions on orders and rentals: each needs a reason, is audited, and
calls the same services as the API and the jobs; the dashboard renders."""

from datetime import timedelta

import pytest
import time_machine
from django.test import Client

from core.models import AuditEntry
from rentals.models import Order, Rental
from tests.rentals.helpers import T0, pay

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(staff):
    client = Client()
    client.force_login(staff)
    return client


def act(client, model: str, action: str, pk: int, **form):
    url = f"/admin/rentals/{model}/"
    first = client.post(url, {"action": action, "_selected_action": [pk]})
    assert first.status_code == 200 and b"Confirm" in first.content  # the reason page
    return client.post(url, {"action": action, "_selected_action": [pk], "apply": "1", **form})


def test_an_action_without_a_reason_does_nothing(admin_client, active_rental):
    resp = act(admin_client, "rental", "suspend", active_rental.pk, reason="")
    assert resp.status_code == 200 and b"This field is required" in resp.content
    assert Rental.objects.get(pk=active_rental.pk).status == "active"


def test_suspend_unsuspend_extend_terminate_are_audited(admin_client, active_rental):
    for action, form, status in [
        ("suspend", {"reason": "abuse report 1187"}, "suspended"),
        ("unsuspend", {"reason": "resolved with the customer"}, "active"),
        ("extend", {"reason": "compensation for the 12-02 outage", "days": "2"}, "active"),
        ("terminate", {"reason": "customer asked by ticket 55"}, "terminated"),
    ]:
        resp = act(admin_client, "rental", action, active_rental.pk, **form)
        assert resp.status_code == 302, resp.content[:500]
        assert Rental.objects.get(pk=active_rental.pk).status == status, action
    rental = Rental.objects.get(pk=active_rental.pk)
    assert rental.paid_until == active_rental.paid_until + timedelta(days=2)
    entries = list(
        AuditEntry.objects.filter(object_id=str(rental.pk), action__startswith="rental.")
        .order_by("id")
        .values_list("action", "actor_name", "reason")
    )
    assert entries[-4:] == [
        ("rental.suspend", "opsperson", "abuse report 1187"),
        ("rental.unsuspend", "opsperson", "resolved with the customer"),
        ("rental.extend", "opsperson", "compensation for the 12-02 outage"),
        ("rental.terminate", "opsperson", "customer asked by ticket 55"),
    ]
    assert not rental.host.slots.filter(holder=rental.holder).exists()


def test_mark_provisioned_with_addresses(admin_client, ordered):
    pay(ordered["invoice"]["number"], 277_777_778)
    rental = Rental.objects.get(order_id=ordered["id"])
    resp = act(
        admin_client,
        "rental",
        "mark_provisioned",
        rental.pk,
        reason="racked and imaged",
        ipv4="198.51.100.7",
        ipv6_prefix="2001:db8:7::/64",
    )
    assert resp.status_code == 302
    rental.refresh_from_db()
    assert (rental.status, rental.ipv4, rental.ipv6_prefix) == ("active", "198.51.100.7", "2001:db8:7::/64")
    bad = act(
        admin_client,
        "rental",
        "mark_provisioned",
        rental.pk,
        reason="again",
        ipv4="198.51.100.8",
        ipv6_prefix="2001:db8:7::/48",
    )
    assert bad.status_code == 302  # refused with a message; nothing changed
    assert Rental.objects.get(pk=rental.pk).ipv4 == "198.51.100.7"


def test_cancel_order_from_admin(admin_client, ordered):
    resp = act(admin_client, "order", "cancel_order", ordered["id"], reason="duplicate order, ticket 9")
    assert resp.status_code == 302
    order = Order.objects.get(pk=ordered["id"])
    assert order.status == "cancelled" and order.close_reason == "duplicate order, ticket 9"
    assert AuditEntry.objects.filter(action="order.cancel", reason="duplicate order, ticket 9").exists()


def test_dashboard(admin_client, active_rental):
    with time_machine.travel(T0 + timedelta(hours=1), tick=False):  # the month the invoice settled in
        resp = admin_client.get("/admin/rentals/rentaldashboard/")
    assert resp.status_code == 200
    html = resp.content.decode()
    queue = html[html.index('id="provisioning-queue"') : html.index('id="rentals-by-status"')]
    assert "Nothing waiting." in queue and str(active_rental) not in queue  # handed over: not waiting
    assert "LTC" in html and "2.77777778 LTC" in html and "250.00" in html  # revenue this month


def test_order_and_rental_lists_render(admin_client, active_rental):
    for url in (
        "/admin/rentals/order/",
        "/admin/rentals/rental/",
        f"/admin/rentals/rental/{active_rental.pk}/change/",
        f"/admin/rentals/order/{active_rental.order_id}/change/",
        "/admin/billing/invoice/",
        "/admin/billing/payment/",
        "/admin/billing/creditentry/",
    ):
        assert admin_client.get(url).status_code == 200, url


def test_an_order_shows_and_is_found_by_its_client_network(admin_client, ordered):
    order = Order.objects.get(pk=ordered["id"])
    assert order.client_network  # the test client's address, as the trusted hop saw it
    page = admin_client.get(f"/admin/rentals/order/{order.pk}/change/")
    assert order.client_network.encode() in page.content
    found = admin_client.get("/admin/rentals/order/", {"q": order.client_network})
    assert list(found.context["cl"].result_list) == [order]
    assert list(admin_client.get("/admin/rentals/order/", {"q": "203.0.113.0/24"}).context["cl"].result_list) == []
