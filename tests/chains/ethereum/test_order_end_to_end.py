"""End to end on anvil: an order paid in USDT goes from invoice to an active rental
through the real watcher task, the way it runs in production."""

from __future__ import annotations

import pytest

from tests.chains.harness import chain_task_run, order_place, order_settled_becomes_a_rental

pytestmark = [pytest.mark.chain, pytest.mark.django_db]


def scan(capture, currency: str = "USDT") -> dict:
    """One run of the periodic task, with what its commits trigger (signals to rentals)."""
    return chain_task_run(currency, capture)


def test_order_paid_in_usdt_on_anvil_becomes_a_rental(
    eth, catalog, customer, customer_api, django_capture_on_commit_callbacks
):
    order, public_key = order_place(customer, customer_api, "USDT")
    invoice = order["invoice"]
    assert invoice["amount_usd"] == "70.00" and invoice["amount"] == "70000000"  # 6 decimals
    assert invoice["payment_uri"].startswith(f"ethereum:{eth.evm.usdt}@{eth.node.chain_id}/transfer?address=")

    txid = eth.node.token_transfer(eth.evm.usdt, invoice["address"], int(invoice["amount"]))
    eth.node.mine()
    assert scan(django_capture_on_commit_callbacks)["recorded"] == 1
    body = customer_api.get(f"/api/v1/invoices/{invoice['id']}").json()
    assert body["status"] == "processing"
    assert customer_api.get(f"/api/v1/orders/{order['id']}").json()["status"] == "awaiting_payment"

    eth.node.mine(2)  # 3 confirmations in these tests
    assert scan(django_capture_on_commit_callbacks, "ETH")["blocks"] == 2  # one scan serves the chain's currencies
    order_settled_becomes_a_rental(customer_api, order, public_key)
    # The payment counted once, and nothing is left for the watcher to do.
    again = scan(django_capture_on_commit_callbacks)
    assert (again["blocks"], again["recorded"], again["confirmations_updated"]) == (0, 0, 0)
    [payment] = customer_api.get(f"/api/v1/invoices/{invoice['id']}").json()["payments"]
    assert (payment["txid"], payment["position"].startswith("log:")) == (txid, True)
