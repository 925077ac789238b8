"""End to end on the regtest node: an order paid in LTC goes from invoice to an
active rental through the real watcher task, the way it runs in production."""

from __future__ import annotations

import pytest

from tests.chains.harness import chain_task_run, order_place, order_settled_becomes_a_rental

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
    order_settled_becomes_a_rental(customer_api, order, public_key)
    # The payment counted once, and nothing is left for the watcher to do.
    again = scan(django_capture_on_commit_callbacks)
    assert (again["blocks"], again["recorded"], again["unconfirmed"]) == (0, 0, 0)
    [payment] = customer_api.get(f"/api/v1/invoices/{invoice['id']}").json()["payments"]
    assert payment["txid"] == txid
