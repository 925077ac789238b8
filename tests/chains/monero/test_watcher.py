"""The Monero watcher wired into the billing engine, on a real monerod regtest with a
view-only merchant wallet: a payment seen in the pool then settled, partial and
top-up, over-payment, two invoices in one transaction, a high subaddress index
and the subaddress table grown ahead of it, a wallet-rpc restart, a locked
transfer, a spend-capable wallet refused, and a wallet behind its daemon reported
in /readyz. Reorgs and vanished pool transactions are in test_reorg.py."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.core.management import call_command
from django.test import Client

from billing.chains.watchers import chain_scan, watcher_for
from billing.models import (
    CreditEntry,
    DerivationCounter,
    InvoiceException,
    InvoiceStatus,
    Payment,
    PaymentDisposition,
    PaymentStatus,
)
from billing.selectors import credit_balance_usd
from billing.tasks import chain_scan as chain_scan_task

pytestmark = [pytest.mark.chain, pytest.mark.slow, pytest.mark.django_db]

NEW, PROCESSING, SETTLED = InvoiceStatus.NEW, InvoiceStatus.PROCESSING, InvoiceStatus.SETTLED
NONE = InvoiceException.NONE


def test_a_payment_is_processing_in_the_pool_and_settles_at_ten_confirmations(xmr, settings, readiness_checks, capsys):
    settings.CONFIRMATIONS = {**settings.CONFIRMATIONS, "XMR": 10}  # the default policy
    invoice = xmr.invoice()
    request = invoice.active_request
    assert (request.network, request.match_key) == ("monero-mainnet", f"0/{request.derivation_index}")
    assert xmr.due(invoice) == 175_000_000_000  # $35 at $200: 0.175 XMR in piconero
    txid = xmr.pay(invoice)

    result = chain_scan_task.apply(args=["XMR"]).get()  # the real task code, as beat runs it
    assert (result["error"], result["recorded"], result["unconfirmed"]) == ("", 1, 1)
    assert xmr.status(invoice) == (PROCESSING, NONE)
    [payment] = xmr.payments(invoice)
    assert (payment.txid, payment.position, int(payment.amount), payment.confirmations) == (
        txid,
        request.match_key,
        175_000_000_000,
        0,
    )
    assert (payment.block_height, payment.status) == (None, PaymentStatus.PENDING)

    height = xmr.net.mine(9)
    xmr.scan()
    payment.refresh_from_db()
    assert (payment.confirmations, payment.block_height, xmr.status(invoice)) == (9, height - 9, (PROCESSING, NONE))
    xmr.net.mine(1)
    call_command("scan_chain", "XMR")  # the operator's command settles it
    assert "XMR" in capsys.readouterr().out
    assert xmr.status(invoice) == (SETTLED, NONE)
    payment.refresh_from_db()
    assert (payment.confirmations, payment.status, payment.disposition) == (
        10,
        PaymentStatus.CONFIRMED,
        PaymentDisposition.APPLIED,
    )
    again = xmr.scan()
    assert (again.uncounted, Payment.objects.filter(invoice=invoice).count()) == (0, 1)

    # Health: /readyz, the currencies endpoint, the chain's state.
    from billing.chains import watchers

    watchers.readiness_checks_register()
    check = Client().get("/readyz").json()["checks"]["chain:monero"]
    assert (check["ok"], check["currency"], check["blocks_behind"]) == (True, "XMR", 0)
    rows = {row["code"]: row for row in Client().get("/api/v1/currencies").json()}
    assert (rows["XMR"]["chain"], rows["XMR"]["health"]["ok"], rows["XMR"]["confirmations"]) == ("monero", True, 10)
    state = xmr.state()
    assert state.height == state.tip_height == xmr.net.height() - 1


def test_two_invoices_paid_in_one_transaction_are_two_payments(xmr):
    first, second = xmr.invoice(), xmr.invoice("70.00")
    txid = xmr.net.pay([(xmr.address(first), xmr.due(first)), (xmr.address(second), xmr.due(second))], mine=True)
    xmr.net.mine(2)
    assert xmr.scan().recorded == 2
    assert xmr.status(first) == xmr.status(second) == (SETTLED, NONE)
    [a], [b] = xmr.payments(first), xmr.payments(second)
    assert (a.txid, b.txid) == (txid, txid)
    assert (a.position, b.position) == (first.active_request.match_key, second.active_request.match_key)


def test_a_payment_to_subaddress_50000_is_seen(xmr, settings):
    """A wallet made with a lookahead past 50,000 sees it without creating 50,000 subaddresses."""
    from billing.chains.config import derivation_keyset

    wallet = xmr.net.view_only_wallet_start(lookahead=51_200)
    try:
        settings.XMR_WALLET_RPC_URL = wallet.url
        settings.XMR_SUBADDRESS_LOOKAHEAD = 51_200
        DerivationCounter.objects.filter(keyset=derivation_keyset(currency="XMR")).update(next_index=50_000)
        invoice = xmr.invoice()
        assert invoice.active_request.match_key == "0/50000"
        xmr.pay(invoice, mine=True)
        xmr.net.mine(2)
        xmr.scan()
        assert xmr.status(invoice) == (SETTLED, NONE)
    finally:
        wallet.stop()


def test_more_watched_subaddresses_than_a_statement_takes_parameters(xmr, settings):
    """70,000 watched subaddresses (PostgreSQL takes 65,535 parameters a statement):
    the run still reads its watched set and finds a payment among them."""
    from billing.chains.config import derivation_keyset
    from tests.chains.harness import xmr_destinations_bulk_create

    many, first = 70_000, 1_000  # (0, 1000) on: below them are other tests' indices
    wallet = xmr.net.view_only_wallet_start(lookahead=first + many + 1_200)
    try:
        settings.XMR_WALLET_RPC_URL = wallet.url
        settings.XMR_SUBADDRESS_LOOKAHEAD = first + many + 1_200
        DerivationCounter.objects.filter(keyset=derivation_keyset(currency="XMR")).update(next_index=first + many)
        invoice = xmr.invoice()
        assert invoice.active_request.match_key == f"0/{first + many}"
        xmr_destinations_bulk_create(invoice, first=first, count=many)
        xmr.pay(invoice)
        report = xmr.scan()
        assert (report.recorded, report.unconfirmed) == (1, 1)
        assert xmr.status(invoice) == (PROCESSING, NONE)
        xmr.net.mine(3)
        xmr.scan()
        assert xmr.status(invoice) == (SETTLED, NONE)
    finally:
        wallet.stop()


def test_the_subaddress_table_is_grown_ahead_of_the_highest_index(xmr, settings):
    """On a wallet with Monero's default lookahead (200): the payer's, whose keys stand in
    for XMR_ADDRESS's here (the session's merchant wallet has a lookahead past 50,000)."""
    from billing.chains.monero import family
    from billing.chains.monero.rpc import WalletRpc

    wallet = WalletRpc(xmr.net.payer.url)
    settings.XMR_ADDRESS = xmr.net.payer_address
    settings.XMR_VIEW_KEY = wallet.call("query_key", key_type="view_key")["key"]
    settings.XMR_SUBADDRESS_LOOKAHEAD = 200
    last = max(wallet.call("create_address", account_index=0, count=1)["address_indices"])
    highest = last + 150  # past what the wallet recognises (its last subaddress + 100 is the margin)
    watcher = watcher_for(currency="XMR")
    created = watcher.subaddresses_ensure(wallet, highest=highest)
    need = highest + 100 - 200  # the table reaches half a lookahead past the highest index
    assert created == need - last
    [found] = wallet.call("get_address", account_index=0, address_index=[need])["addresses"]
    assert found["address"] == family.monero_account().subaddress(major=0, minor=need)
    assert watcher.subaddresses_ensure(wallet, highest=highest) == 0  # nothing more to do
    assert watcher.subaddresses_ensure(wallet, highest=highest + 2) == 2


def test_a_wallet_restart_mid_run_credits_once(xmr, customer):
    invoice = xmr.invoice()
    xmr.pay(invoice, xmr.due(invoice) * 3 // 2)
    xmr.scan()
    xmr.net.merchant_restart()  # it saves the wallet and reloads it from its file
    xmr.net.mine(3)
    xmr.scan()
    xmr.scan()
    assert xmr.status(invoice) == (SETTLED, InvoiceException.PAID_OVER)
    assert len(xmr.payments(invoice)) == 1
    assert credit_balance_usd(account=customer) == Decimal("17.50")
    assert CreditEntry.objects.filter(account=customer).count() == 1


def test_a_locked_transfer_is_flagged_and_settles_only_once_unlocked(xmr):
    invoice = xmr.invoice()
    unlock_at = xmr.net.height() + 6
    xmr.pay(invoice, unlock_time=unlock_at, mine=True)
    xmr.net.mine(2)  # 3 confirmations, still locked
    xmr.scan()
    fresh = xmr.reload(invoice)
    assert (fresh.status, fresh.needs_attention) == (PROCESSING, True)
    [payment] = xmr.payments(invoice)
    assert (payment.confirmations, payment.status) == (3, PaymentStatus.PENDING)
    xmr.net.mine(4)
    xmr.scan()
    assert xmr.status(invoice) == (SETTLED, NONE)


def test_a_wallet_that_can_spend_is_refused(xmr, settings):
    settings.XMR_WALLET_RPC_URL = xmr.net.payer.url  # full keys
    invoice = xmr.invoice()
    xmr.pay(invoice, mine=True)
    report = chain_scan(currency="XMR", force=True)
    assert report.error.startswith("wrong_node:") and "can spend" in report.error
    assert xmr.payments(invoice) == []


def test_a_wallet_behind_its_daemon_is_reported_in_readyz(xmr, settings, readiness_checks):
    from billing.chains import watchers

    behind = xmr.net.wallet_copy_offline()
    try:
        settings.XMR_WALLET_RPC_URL = behind.url
        xmr.net.mine(8)
        report = chain_scan(currency="XMR", force=True)
        assert report.error.startswith("syncing:") and "8 block(s) behind" in report.error
        watchers.readiness_checks_register()
        check = Client().get("/readyz").json()["checks"]["chain:monero"]
        assert (check["ok"], check["blocks_behind"]) == (False, 8)
        assert "behind" in check["error"]
    finally:
        behind.stop()


def test_xmr_to_the_primary_address_or_an_unissued_subaddress_is_recorded_for_staff(xmr, settings):
    """Nothing may credit it: recorded for staff once in a block, with the amount and
    txid; the invoice later given that subaddress is not paid by it."""
    from billing.chains.config import derivation_keyset
    from billing.chains.monero import family
    from billing.models import StrayTransfer

    invoice = xmr.invoice()
    xmr.scan()  # the session wallet's history: earlier tests' invoices are gone with their database
    earlier = set(StrayTransfer.objects.values_list("pk", flat=True))
    issued = int(invoice.active_request.derivation_index)
    unissued = issued + 5  # within what the wallet recognises, never handed out
    to_subaddress = family.monero_account().subaddress(major=0, minor=unissued)
    first = xmr.net.pay([(xmr.net.address, 7_000_000_000), (to_subaddress, 9_000_000_000)])
    second = xmr.pay(invoice)
    report = xmr.scan()
    assert (report.unconfirmed, report.strays) == (1, 0)  # in the pool: not yet

    xmr.net.mine(1)
    height = xmr.net.height() - 1
    report = xmr.scan()
    assert report.strays == 2
    rows = {
        (s.txid, s.position): (s.kind, int(s.amount), s.asset, s.block_height, s.needs_review, s.invoice_id)
        for s in StrayTransfer.objects.filter(chain="monero").exclude(pk__in=earlier)
    }
    assert rows == {
        (first, "0/0"): ("primary_address", 7_000_000_000, "XMR", height, True, None),
        (first, f"0/{unissued}"): ("unissued_subaddress", 9_000_000_000, "XMR", height, True, None),
    }
    [payment] = xmr.payments(invoice)
    assert payment.txid == second
    assert xmr.scan().strays == 0  # seen again: recorded once
    assert StrayTransfer.objects.exclude(pk__in=earlier).count() == 2

    # The subaddress is handed out later: what reached it before is still staff's.
    DerivationCounter.objects.filter(keyset=derivation_keyset(currency="XMR")).update(next_index=unissued)
    later = xmr.invoice()
    assert later.active_request.match_key == f"0/{unissued}"
    xmr.net.mine(3)
    xmr.scan()
    assert xmr.payments(later) == []
    assert xmr.status(later) == (NEW, NONE)
    assert xmr.status(invoice) == (SETTLED, NONE)
