"""End to end on monerod regtest: an order paid in XMR goes from invoice to an active
rental through the real watcher task and the merchant's view-only wallet."""

from __future__ import annotations

import pytest

from billing.models import PaymentRequest
from tests.chains.harness import chain_task_run, order_place, order_settled_becomes_a_rental

pytestmark = [pytest.mark.chain, pytest.mark.slow, pytest.mark.django_db]


def scan(capture) -> dict:
    """One run of the periodic task, with what its commits trigger (signals to rentals)."""
    return chain_task_run("XMR", capture)


def test_order_paid_in_xmr_on_regtest_becomes_a_rental(
    xmr, catalog, customer, customer_api, django_capture_on_commit_callbacks
):
    order, public_key = order_place(customer, customer_api, "XMR")
    invoice = order["invoice"]
    assert invoice["amount_usd"] == "70.00" and invoice["amount"] == "350000000000"  # $70 at $200, in piconero
    assert invoice["payment_uri"].startswith(f"monero:{invoice['address']}?tx_amount=0.35")

    txid = xmr.net.pay([(invoice["address"], int(invoice["amount"]))])
    assert scan(django_capture_on_commit_callbacks)["unconfirmed"] == 1  # seen in the pool
    body = customer_api.get(f"/api/v1/invoices/{invoice['id']}").json()
    assert body["status"] == "processing"
    assert customer_api.get(f"/api/v1/orders/{order['id']}").json()["status"] == "awaiting_payment"

    xmr.net.mine(3)  # 3 confirmations in these tests
    scan(django_capture_on_commit_callbacks)
    order_settled_becomes_a_rental(customer_api, order, public_key)
    # The payment counted once, and nothing is left for the watcher to do.
    again = scan(django_capture_on_commit_callbacks)
    assert (again["recorded"], again["uncounted"]) == (0, 0)  # the wallet still lists it: settled, left alone
    [payment] = customer_api.get(f"/api/v1/invoices/{invoice['id']}").json()["payments"]
    request = PaymentRequest.objects.get(invoice_id=invoice["id"], currency="XMR")
    assert (payment["txid"], payment["position"]) == (txid, request.match_key)  # the subaddress "0/i"
