"""End to end on the regtest node: an order paid in LTC goes from invoice to an
active rental through the real watcher task, the way it runs in production."""

from __future__ import annotations

import pytest

from rentals.models import ProvisioningJob
from rentals.services import rental_activate
from tests.chains.harness import chain_task_run, order_place

pytestmark = [pytest.mark.chain, pytest.mark.django_db]


def scan(capture) -> dict:
    """One run of the periodic task, with what its commits trigger (signals to rentals)."""
    return chain_task_run("LTC", capture)


def test_order_paid_in_ltc_on_regtest_becomes_a_rental(
    ltc, node, catalog, customer, customer_api, django_capture_on_commit_callbacks
):
    order, public_key = order_place(customer, customer_api, "LTC")
    invoice = order["invoice"]
    assert invoice["amount_usd"] == "70.00" and invoice["amount"] == "77777778"  # $70 at $90, rounded up
    assert invoice["address"].startswith("rltc1q")

    txid = node.send(invoice["address"], int(invoice["amount"]))
    assert scan(django_capture_on_commit_callbacks)["unconfirmed"] == 1
    body = customer_api.get(f"/api/v1/invoices/{invoice['id']}").json()
    assert body["status"] == "processing"
    assert customer_api.get(f"/api/v1/orders/{order['id']}").json()["status"] == "awaiting_payment"

    node.mine(6)
    assert scan(django_capture_on_commit_callbacks)["blocks"] == 6
    body = customer_api.get(f"/api/v1/invoices/{invoice['id']}").json()
    assert (body["status"], body["exception"]) == ("settled", "none")
    assert customer_api.get(f"/api/v1/orders/{order['id']}").json()["status"] == "paid"
    [rental] = customer_api.get("/api/v1/rentals").json()
    assert (rental["status"], rental["gpu"], rental["region"]) == ("provisioning", "l4", "PDX-1")
    job = ProvisioningJob.objects.get(rental_id=rental["id"])
    assert job.action == "provision" and job.payload["rental"]["ssh_keys"] == [public_key]

    rental_activate(
        rental_id=rental["id"], ipv4="203.0.113.7", ipv6_prefix="2001:db8:7::/64", actor=None, reason="handed over"
    )
    [rental] = customer_api.get("/api/v1/rentals").json()
    assert (rental["status"], rental["ipv4"]) == ("active", "203.0.113.7")
    # The payment counted once, and nothing is left for the watcher to do.
    again = scan(django_capture_on_commit_callbacks)
    assert (again["blocks"], again["recorded"], again["unconfirmed"]) == (0, 0, 0)
    [payment] = customer_api.get(f"/api/v1/invoices/{invoice['id']}").json()["payments"]
    assert payment["txid"] == txid
