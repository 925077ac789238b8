"""End to end against the loopback Solana node: an order paid in SOL goes from
invoice to an active rental through the real watcher task, the way it runs in
production; the wallet pays the Solana Pay URI the API hands out."""

from __future__ import annotations

from decimal import Decimal
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.chains.harness import chain_task_run, order_place, order_settled_becomes_a_rental

pytestmark = [pytest.mark.chain, pytest.mark.django_db]


def scan(capture) -> dict:
    """One run of the periodic task, with what its commits trigger (signals to rentals)."""
    return chain_task_run("SOL", capture)


def test_order_paid_in_sol_becomes_a_rental(sol, catalog, customer, customer_api, django_capture_on_commit_callbacks):
    order, public_key = order_place(customer, customer_api, "SOL")
    invoice = order["invoice"]
    assert invoice["amount_usd"] == "70.00" and invoice["amount"] == "466666667"  # $70 at $150, lamports rounded up

    # The wallet reads the Solana Pay URI: recipient, amount in SOL, reference.
    uri = urlsplit(invoice["payment_uri"])
    query = parse_qs(uri.query)
    assert (uri.scheme, uri.path) == ("solana", sol.recipient) == ("solana", invoice["address"])
    assert query["reference"] == [invoice["reference"]]
    lamports = int(Decimal(query["amount"][0]) * 10**9)
    assert lamports == int(invoice["amount"])
    signature = sol.ledger.pay(sol.payer, uri.path, lamports, references=query["reference"])

    assert scan(django_capture_on_commit_callbacks)["recorded"] == 1
    body = customer_api.get(f"/api/v1/invoices/{invoice['id']}").json()
    assert body["status"] == "processing"
    assert customer_api.get(f"/api/v1/orders/{order['id']}").json()["status"] == "awaiting_payment"

    sol.ledger.finalize()
    assert scan(django_capture_on_commit_callbacks)["recorded"] == 1
    order_settled_becomes_a_rental(customer_api, order, public_key)
    # The payment counted once, and nothing is left for the watcher to do.
    again = scan(django_capture_on_commit_callbacks)
    assert (again["recorded"], again["uncounted"], again["strays"]) == (0, 0, 0)
    [payment] = customer_api.get(f"/api/v1/invoices/{invoice['id']}").json()["payments"]
    assert payment["txid"] == signature
