"""The Ethereum watcher wired into the billing engine, on the session's anvil node:
ETH from an account and through contracts (trace and balance modes), USDT and USDC,
partial, over and late payments, failed transactions, strays, reorgs and
re-inclusion, replaced transactions, both finality policies, a node on the wrong
chain, a provider capping eth_getLogs, a worker killed mid-block, catching up."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.core.management import call_command
from django.test import Client
from web3 import Web3

from billing.chains import machinery
from billing.chains.watchers import chain_scan, watcher_for
from billing.models import (
    ChainBlock,
    CreditEntry,
    InvoiceException,
    InvoiceStatus,
    Payment,
    PaymentDisposition,
    PaymentStatus,
    StrayTransfer,
)
from billing.selectors import credit_balance_usd
from billing.tasks import chain_scan as chain_scan_task
from tests.chains.ethereum.rpc_proxy import logs_span_limit, trace_fails
from tests.chains.harness import scan_losing_the_lease_once_recorded

pytestmark = [pytest.mark.chain, pytest.mark.django_db]

NEW, PROCESSING, SETTLED, EXPIRED = (
    InvoiceStatus.NEW,
    InvoiceStatus.PROCESSING,
    InvoiceStatus.SETTLED,
    InvoiceStatus.EXPIRED,
)
NONE = InvoiceException.NONE


def test_ether_from_an_account_is_processing_in_a_block_and_settles_at_the_policy(eth):
    invoice = eth.invoice("ETH")
    request = invoice.active_request
    assert request.network == f"ethereum-{eth.node.chain_id}" and request.match_key == request.address.lower()
    assert eth.due(invoice) == 10**16  # $35 at $3,500: 0.01 ETH
    txid = eth.pay(invoice, mine=False)
    assert eth.scan().recorded == 0  # no 0-conf on EVM: the mempool is not watched
    assert eth.status(invoice) == (NEW, NONE)

    height = eth.node.mine()
    result = chain_scan_task.apply(args=["ETH"]).get()  # the real task code, as beat runs it
    assert (result["error"], result["blocks"], result["recorded"]) == ("", 1, 1)
    assert eth.status(invoice) == (PROCESSING, NONE)
    [payment] = eth.payments(invoice)
    assert (payment.txid, payment.position, int(payment.amount)) == (txid, "tx", 10**16)
    assert (payment.chain, payment.currency, payment.confirmations, payment.block_height) == (
        "ethereum",
        "ETH",
        1,
        height,
    )
    assert payment.status == PaymentStatus.PENDING

    eth.node.mine(2)
    report = eth.scan()
    assert (report.blocks, report.confirmations_updated) == (2, 1)
    assert eth.status(invoice) == (SETTLED, NONE)
    payment.refresh_from_db()
    assert (payment.confirmations, payment.status, payment.disposition) == (
        3,
        PaymentStatus.CONFIRMED,
        PaymentDisposition.APPLIED,
    )
    again = eth.scan()
    assert (again.blocks, again.recorded, again.confirmations_updated) == (0, 0, 0)
    assert Payment.objects.filter(invoice=invoice).count() == 1


@pytest.mark.parametrize("mode", ["trace_block", "debug_trace", "balance"])
def test_ether_through_a_contract_in_each_detection_mode(eth, settings, mode):
    settings.ETH_INTERNAL_TRANSFERS = mode
    invoice = eth.invoice("ETH")
    txid = eth.pay_through_contract(invoice)
    eth.node.mine(2)
    report = eth.scan()
    assert report.recorded == 1
    assert eth.status(invoice) == (SETTLED, NONE)
    [payment] = eth.payments(invoice)
    assert int(payment.amount) == eth.due(invoice)
    if mode == "balance":
        block = eth.node.block(payment.block_height)
        assert (payment.txid, payment.position) == (block["hash"], f"balance:{invoice.active_request.match_key}")
    else:
        assert (payment.txid, payment.position) == (txid, "call:0")


def test_two_invoices_paid_by_one_contract_call(eth):
    first, second = eth.invoice("ETH"), eth.invoice("ETH", "70.00")
    txid = eth.node.transact(
        eth.evm.forwarder,
        "split",
        [Web3.to_checksum_address(eth.address(first)), Web3.to_checksum_address(eth.address(second))],
        [eth.due(first), eth.due(second)],
        value=eth.due(first) + eth.due(second),
    )
    eth.node.mine(3)
    assert eth.scan().recorded == 2
    assert eth.status(first) == eth.status(second) == (SETTLED, NONE)
    positions = sorted((p.txid, p.position) for p in Payment.objects.filter(invoice__in=[first, second]))
    assert positions == [(txid, "call:0"), (txid, "call:1")]


@pytest.mark.parametrize("currency", ["USDT", "USDC"])
def test_token_payments(eth, currency):
    invoice = eth.invoice(currency)
    assert eth.due(invoice) == 35_000_000  # $35 at $1: 35 units of 6 decimals
    assert invoice.active_request.payment_uri.startswith(f"ethereum:{eth.token(currency)}@{eth.node.chain_id}/transfer")
    txid = eth.pay(invoice)
    eth.scan()
    assert eth.status(invoice) == (PROCESSING, NONE)
    eth.node.mine(2)
    eth.scan()
    assert eth.status(invoice) == (SETTLED, NONE)
    [payment] = eth.payments(invoice)
    receipt = eth.node.receipt(txid)
    [log] = [entry for entry in receipt["logs"] if entry["address"].lower() == eth.token(currency).lower()]
    assert (payment.currency, payment.txid, payment.position) == (currency, txid, f"log:{int(log['logIndex'], 16)}")
    assert payment.output_index == int(log["logIndex"], 16)


def test_failed_transactions_are_not_counted(eth):
    eth_invoice, token_invoice = eth.invoice("ETH"), eth.invoice("USDT")
    reverted = eth.node.transact(
        eth.evm.forwarder,
        "forwardThenRevert",
        Web3.to_checksum_address(eth.address(eth_invoice)),
        value=eth.due(eth_invoice),
    )
    broke = eth.node.accounts[6]  # holds no USDT: the transfer reverts
    no_funds = eth.node.token_transfer(eth.evm.usdt, eth.address(token_invoice), eth.due(token_invoice), sender=broke)
    eth.node.mine(3)
    assert eth.node.receipt(reverted)["status"] == eth.node.receipt(no_funds)["status"] == "0x0"
    report = eth.scan()
    assert (report.blocks, report.recorded) == (3, 0)
    assert eth.status(eth_invoice) == eth.status(token_invoice) == (NEW, NONE)
    assert not Payment.objects.exists()


def test_tokens_nobody_credits_are_recorded_for_staff(eth, django_user_model):
    invoice = eth.invoice("USDT")
    other = eth.node.token_transfer(eth.evm.other, eth.address(invoice), 5 * 10**18)
    wrong = eth.node.send_eth(eth.address(invoice), 10**15)  # ether to a USDT invoice's address
    eth.node.mine(3)
    report = eth.scan()
    assert (report.recorded, report.strays) == (0, 2)
    assert eth.status(invoice) == (NEW, NONE)
    strays = {s.txid: s for s in StrayTransfer.objects.all()}
    assert (strays[other].kind, strays[other].asset, int(strays[other].amount)) == (
        "unknown_token",
        eth.evm.other.lower(),
        5 * 10**18,
    )
    assert (strays[wrong].kind, strays[wrong].currency, strays[wrong].paid_currency) == (
        "wrong_currency",
        "ETH",
        "USDT",
    )
    assert all(s.request_id == invoice.active_request.pk and s.needs_review for s in strays.values())
    assert eth.scan().strays == 0  # recorded once
    staff = django_user_model.objects.create_superuser("operator", "a long staff passphrase")
    admin = Client()
    admin.force_login(staff)
    page = admin.get("/admin/billing/straytransfer/").content.decode()
    assert other in page and "unknown_token" in page


def test_a_reorg_removes_a_payment_and_its_reinclusion_counts_once(eth):
    invoice = eth.invoice("ETH")
    request = invoice.active_request
    txid = eth.pay(invoice)
    eth.scan()
    assert eth.status(invoice) == (PROCESSING, NONE)
    [payment] = eth.payments(invoice)
    orphaned = payment.block_hash

    eth.node.reorg(1)  # the payment's block is replaced by an empty one
    report = eth.scan()
    assert (report.reorgs, report.uncounted) == (1, 1)
    payment.refresh_from_db()
    assert payment.status == PaymentStatus.REMOVED
    assert payment.removal_reason == f"reorg: block {payment.block_height} {orphaned} orphaned"
    assert eth.status(invoice) == (NEW, NONE)

    # The same transaction mined again in a later block: the same payment counts again, once.
    again = eth.node.send_eth(request.address, eth.due(invoice))
    eth.node.mine(3)
    eth.scan()
    assert eth.status(invoice) == (SETTLED, NONE)
    counted = [p for p in eth.payments(invoice) if p.counted]
    assert [p.txid for p in counted] == [again]
    assert txid != again and Payment.objects.filter(invoice=invoice).count() == 2


def test_a_payment_reincluded_in_the_new_branch_is_recorded_once(eth):
    invoice = eth.invoice("USDC")
    txid = eth.pay(invoice)
    raw = eth.node.rpc("eth_getRawTransactionByHash", txid)
    eth.scan()
    [payment] = eth.payments(invoice)
    old_block = payment.block_hash
    # The branch that wins carries the very same signed transfer.
    eth.node.reorg(1, [(raw, 0)])
    eth.node.mine(2)
    report = eth.scan()
    assert report.reorgs == 1
    [payment] = eth.payments(invoice)
    assert (payment.txid, payment.status) == (txid, PaymentStatus.CONFIRMED)
    assert payment.block_hash != old_block and payment.block_hash == eth.node.block_hash(payment.block_height)
    assert eth.status(invoice) == (SETTLED, NONE)
    assert CreditEntry.objects.count() == 0


def _paid_by_split_until(eth, always, until, *, later: int = 0) -> tuple[int, str]:
    """One transaction through the test forwarder paying `always`, and `until` only
    if it is mined no later than `later` blocks after the block it is mined in now:
    (that block's height, the signed transaction, to mine it again later)."""
    last = eth.node.height() + 1  # the block the transaction is mined in
    txid = eth.node.transact(
        eth.evm.forwarder,
        "splitUntil",
        Web3.to_checksum_address(eth.address(always)),
        eth.due(always),
        Web3.to_checksum_address(eth.address(until)),
        last + later,
        value=eth.due(always) + eth.due(until),
    )
    assert eth.node.mine() == last
    return last, eth.node.rpc("eth_getRawTransactionByHash", txid)


def test_a_transaction_mined_again_without_a_transfer_it_made_uncounts_that_payment(eth):
    """A contract pays two invoices, the second only up to a block. A reorg mines
    the very same transaction again one block later: it pays the first invoice
    and not the second. The reorg left both payments to the new branch (their
    transaction is in it); the second, recorded in a block that left the chain
    and in no block of the new one, is un-counted, not confirmed at its old
    height until its invoice settled on ether that never arrived."""
    always, until = eth.invoice("ETH"), eth.invoice("ETH")
    last, raw = _paid_by_split_until(eth, always, until)
    eth.scan()
    assert eth.status(always) == eth.status(until) == (PROCESSING, NONE)
    [lost] = eth.payments(until)
    eth.node.mine()
    eth.node.reorg(2, [(raw, 1)])  # the same transaction, one block later
    report = eth.scan()
    assert (report.reorgs, report.uncounted) == (1, 1)  # un-counted by the refresh, not by the reorg
    lost.refresh_from_db()
    assert lost.status == PaymentStatus.REMOVED and "left the chain" in lost.removal_reason
    assert eth.status(until) == (NEW, NONE)
    [kept] = eth.payments(always)
    assert kept.counted and kept.block_height == last + 1
    eth.node.mine(12)
    eth.scan()
    assert eth.status(always) == (SETTLED, NONE) and eth.status(until) == (NEW, NONE)


def test_a_confirmed_payment_whose_transfer_a_reorg_past_the_policy_took_is_uncounted_for_staff(eth):
    """The same contract and transaction, the reorg deeper than the policy: the second
    invoice had settled on its payment (confirmed and applied) when the transaction is
    mined again one block later, paying the first only. The reorg leaves both payments
    to the new branch; the one its block does not carry is un-counted, not kept
    confirmed in a block the chain no longer has, and its invoice is put before staff."""
    from core.models import AuditAction, AuditEntry

    always, until = eth.invoice("ETH"), eth.invoice("ETH")
    last, raw = _paid_by_split_until(eth, always, until)
    eth.node.mine(2)  # 3 confirmations: the policy here
    eth.scan()
    assert eth.status(always) == eth.status(until) == (SETTLED, NONE)
    [lost] = eth.payments(until)
    assert (lost.status, lost.disposition) == (PaymentStatus.CONFIRMED, PaymentDisposition.APPLIED)
    assert not eth.reload(until).needs_attention
    eth.node.reorg(3, [(raw, 1)])  # every block from the payment's on: the transaction one block later
    report = eth.scan()
    assert (report.reorgs, report.uncounted) == (1, 1)
    lost.refresh_from_db()
    assert lost.status == PaymentStatus.REMOVED
    assert lost.removal_reason.startswith(f"reorg: block {last} ") and "after the payment was confirmed" in (
        lost.removal_reason
    )
    assert eth.reload(until).needs_attention
    [entry] = AuditEntry.objects.filter(action=AuditAction.PAYMENT_UNCOUNTED_AFTER_USE, object_id=str(lost.pk))
    assert entry.reason == lost.removal_reason
    [kept] = eth.payments(always)
    assert kept.counted and kept.block_height == last + 1 and not eth.reload(always).needs_attention
    again = eth.scan()  # nothing left to find: un-counted once
    assert (again.uncounted, AuditEntry.objects.filter(object_id=str(lost.pk)).count()) == (0, 1)


def _confirmed_then_mined_again_a_block_later(eth, *, confirmations=3):
    """`_paid_by_split_until` at `confirmations` (3: confirmed, the policy here), then a
    reorg of its blocks that mines the transaction one block later: it pays the first
    invoice only. (the invoice always paid, the one it no longer pays, the old block,
    that payment)."""
    always, until = eth.invoice("ETH"), eth.invoice("ETH")
    last, raw = _paid_by_split_until(eth, always, until)
    eth.node.mine(confirmations - 1)
    eth.scan()
    [lost] = eth.payments(until)
    assert lost.status == (PaymentStatus.CONFIRMED if confirmations >= 3 else PaymentStatus.PENDING)
    eth.node.reorg(confirmations, [(raw, 1)])
    return always, until, last, lost


def test_a_transfer_the_new_branch_dropped_is_uncounted_once_the_fork_steps_blocks_are_recorded(eth):
    """The same reorg as above, in a run whose block budget (two) stops it short of the
    tip: the fork step records the new branch's two blocks, the transaction in the
    second paying the first invoice only. What the step's blocks did not record again
    is un-counted at the end of the step, in that run, not left confirmed in a block
    the chain no longer has until a run reaches the tip."""
    always, until, last, lost = _confirmed_then_mined_again_a_block_later(eth)
    report = eth.scan(max_blocks=2)
    assert (report.reorgs, report.blocks, report.caught_up, report.uncounted) == (1, 2, False, 1)
    lost.refresh_from_db()
    assert lost.status == PaymentStatus.REMOVED and "after the payment was confirmed" in lost.removal_reason
    assert eth.reload(until).needs_attention
    [kept] = eth.payments(always)
    assert kept.counted and kept.block_height == last + 1
    assert eth.scan().uncounted == 0  # the run that reaches the tip finds nothing more


def test_a_fork_steps_left_payments_are_settled_by_its_last_block_in_the_run_that_records_it(eth, monkeypatch):
    """The same reorg, with two more blocks on the new branch. The run that applied the
    fork (a block budget of three: its step is the new branch's first three blocks) lost
    its lease after the first; the next run (a budget of two) records the other two of
    the step and stops short of the tip. The block that ends the step un-counts what the
    step's blocks did not record again, in that run, though no fork is seen in it and
    the payment's height is less than a step below its cursor."""

    always, _, last, lost = _confirmed_then_mined_again_a_block_later(eth)
    eth.node.mine(2)
    first = eth.node.rpc("eth_getBlockByNumber", hex(last), False)["hash"]
    report = scan_losing_the_lease_once_recorded(
        eth.scan, monkeypatch, chain="ethereum", block_hash=first, max_blocks=3
    )
    assert (report.skipped, report.reorgs, report.blocks, report.uncounted) == ("lease_lost", 1, 1, 0)
    report = eth.scan(max_blocks=2)
    assert (report.reorgs, report.blocks, report.caught_up, report.uncounted) == (0, 2, False, 1)
    lost.refresh_from_db()
    assert lost.status == PaymentStatus.REMOVED and "after the payment was confirmed" in lost.removal_reason
    [kept] = eth.payments(always)
    assert kept.counted and kept.block_height == last + 1
    assert "fork_left" not in eth.state().extra
    assert eth.scan().uncounted == 0


@pytest.mark.parametrize("confirmations", [3, 2])
def test_a_cursor_moved_by_hand_inside_a_fork_step_puts_its_left_payments_before_staff(eth, monkeypatch, confirmations):
    """The run that applied the fork lost its lease inside the step; an operator then
    moves the cursor to the tip (`scan_chain ETH --from`), so the step's blocks will not
    be read. The payment the step left to them, confirmed (3) or confirming (2), is
    neither un-counted nor quietly kept: it is put before staff, a confirming one
    unconfirmed again rather than counted up on a block the chain no longer has, and no
    later block takes it for one the new branch dropped."""
    from core.models import AuditEntry

    _, until, last, lost = _confirmed_then_mined_again_a_block_later(eth, confirmations=confirmations)
    first = eth.node.rpc("eth_getBlockByNumber", hex(last), False)["hash"]
    orphaned = lost.block_hash
    assert (
        scan_losing_the_lease_once_recorded(eth.scan, monkeypatch, chain="ethereum", block_hash=first).skipped
        == "lease_lost"
    )
    assert eth.state().extra["fork_left"]["hashes"] == [orphaned]
    watcher_for(currency="ETH").cursor_set(height=eth.node.height())
    assert "fork_left" not in eth.state().extra
    lost.refresh_from_db()
    if confirmations == 3:
        kept = (PaymentStatus.CONFIRMED, 3, orphaned)
        assert eth.status(until)[0] == InvoiceStatus.SETTLED
    else:
        kept = (PaymentStatus.PENDING, 0, "")
        assert eth.status(until)[0] == InvoiceStatus.PROCESSING
    assert (lost.status, lost.confirmations, lost.block_hash) == kept and lost.flagged_at is not None
    assert eth.reload(until).needs_attention
    [flag] = AuditEntry.objects.filter(action="payment.flagged", object_id=str(lost.pk))
    assert "the cursor was moved by hand" in flag.reason
    eth.node.mine(3)
    assert eth.scan().uncounted == 0
    lost.refresh_from_db()
    assert (lost.status, lost.confirmations, lost.block_hash) == kept


def test_a_second_fork_leaves_a_payment_to_a_destination_no_longer_watched_as_it_is(eth, monkeypatch, settings):
    """One transaction pays two invoices (the forwarder, no time limit in reach); the
    second's watch then ends. A reorg mines the transaction again a block later: the run
    that applied it records the branch's first four blocks (the first invoice's payment
    again, nothing for the second, no longer watched) and loses its lease short of the
    step's end. A second reorg then replaces the blocks above the transaction's: the
    second payment, still naming its first block, is judged by that fork; its
    transaction is not in the new blocks, but it is still on the chain below them and
    pays what it paid, so the payment is left as it is."""
    from datetime import timedelta

    from django.utils import timezone

    from billing.models import Invoice

    always, other = eth.invoice("ETH"), eth.invoice("ETH")
    last, raw = _paid_by_split_until(eth, always, other, later=100)
    eth.node.mine(2)
    eth.scan()
    [kept] = eth.payments(other)
    assert kept.status == PaymentStatus.CONFIRMED
    ended = timezone.now() - timedelta(days=settings.WATCH_AFTER_CLOSE_DAYS + 1)
    Invoice.objects.filter(pk=other.pk).update(expires_at=ended, monitoring_until=ended)
    watcher_for(currency="ETH").process_state_clear()
    eth.node.reorg(3, [(raw, 1)])
    eth.node.mine(3)
    fourth = eth.node.rpc("eth_getBlockByNumber", hex(last + 3), False)["hash"]
    report = scan_losing_the_lease_once_recorded(eth.scan, monkeypatch, chain="ethereum", block_hash=fourth)
    assert (report.skipped, report.reorgs, report.blocks, report.uncounted) == ("lease_lost", 1, 4, 0)
    [moved] = eth.payments(always)
    assert moved.block_height == last + 1
    eth.node.reorg(4, [])  # the blocks above the transaction's
    report = eth.scan()
    assert (report.reorgs, report.uncounted) == (1, 0)
    kept.refresh_from_db()
    assert kept.status == PaymentStatus.CONFIRMED and kept.block_height == last


def test_a_replaced_transaction_never_counts_twice(eth):
    invoice = eth.invoice("ETH")
    payer = eth.node.accounts[7]
    nonce = int(eth.node.rpc("eth_getTransactionCount", payer, "latest"), 16)
    eth.node.send_eth(eth.address(invoice), eth.due(invoice), sender=payer, nonce=nonce)
    eth.node.mine()
    eth.scan()
    assert eth.status(invoice) == (PROCESSING, NONE)
    # The payer's replacement (same nonce, another payee) wins a reorg.
    elsewhere = {"from": payer, "to": eth.evm.address(), "value": hex(eth.due(invoice)), "nonce": hex(nonce)}
    eth.node.reorg(1, [(elsewhere, 0)])
    eth.node.mine(3)
    report = eth.scan()
    assert (report.reorgs, report.uncounted) == (1, 1)
    assert eth.status(invoice) == (NEW, NONE)
    [payment] = eth.payments(invoice)
    assert payment.status == PaymentStatus.REMOVED


def test_finality_by_the_finalized_block(eth, settings):
    settings.ETH_FINALITY = "finalized"  # anvil here: two epochs of two slots, 4 blocks below the tip
    invoice = eth.invoice("ETH")
    eth.pay(invoice)
    eth.node.mine(3)  # 4 confirmations, more than CONFIRMATIONS_ETH: not what counts now
    eth.scan()
    assert eth.status(invoice) == (PROCESSING, NONE)
    [payment] = eth.payments(invoice)
    assert payment.confirmations == 4 and payment.status == PaymentStatus.PENDING
    eth.node.mine(1)  # the payment's block is now finalized
    eth.scan()
    assert eth.status(invoice) == (SETTLED, NONE)


def test_finality_by_confirmations(eth, settings):
    settings.CONFIRMATIONS = {**settings.CONFIRMATIONS, "ETH": 5}
    invoice = eth.invoice("ETH")
    eth.pay(invoice)
    eth.node.mine(3)
    eth.scan()
    assert eth.status(invoice) == (PROCESSING, NONE)
    eth.node.mine(1)
    eth.scan()
    assert eth.status(invoice) == (SETTLED, NONE)


def test_a_node_on_the_wrong_chain_is_refused(eth, settings, readiness_checks):
    invoice = eth.invoice("ETH")
    settings.ETH_CHAIN_ID = 1
    watcher_for(currency="ETH").process_state_clear()
    eth.pay(invoice)
    report = chain_scan(currency="ETH", force=True)
    assert report.error.startswith("wrong_node: ") and "chain id 31337, but ETH_CHAIN_ID is 1" in report.error
    assert not Payment.objects.exists()
    from billing.chains import watchers

    watchers.readiness_checks_register()
    check = Client().get("/readyz").json()["checks"]["chain:ethereum"]
    assert check["ok"] is False and "ETH_CHAIN_ID is 1" in check["error"]
    rows = {row["code"]: row for row in Client().get("/api/v1/currencies").json()}
    assert all(rows[c]["health"]["ok"] is False for c in ("ETH", "USDT", "USDC"))


def test_a_token_with_other_decimals_is_refused(eth, settings):
    settings.USDT_CONTRACT = eth.evm.other  # 18 decimals
    watcher_for(currency="ETH").process_state_clear()
    report = chain_scan(currency="USDT", force=True)
    assert report.error.startswith("misconfigured: USDT_CONTRACT")


def test_a_provider_refusing_wide_log_ranges(eth, settings, proxy):
    proxy.rules.append(logs_span_limit(2))
    settings.ETH_RPC_URL = proxy.url
    watcher_for(currency="ETH").process_state_clear()
    invoices = [eth.invoice("USDT") for _ in range(3)]
    for invoice in invoices:
        eth.pay(invoice)
        eth.node.mine(2)
    report = eth.scan()
    assert (report.blocks, report.recorded) == (9, 3)
    assert all(eth.status(i) == (SETTLED, NONE) for i in invoices[:2])
    assert "eth_getLogs" in proxy.seen


def test_a_block_the_node_never_traces_is_read_from_balances_after_three_runs(eth, settings, proxy):
    """Through the watcher's runs, each of which drops its scanners when it
    fails: blind on the first runs (said so in health), then the block's ether
    moved by contracts is read from balances, and the payment is credited."""
    from billing.chains.ethereum.scanner import UNTRACEABLE_RUNS

    settings.ETH_RPC_URL = proxy.url
    settings.ETH_INTERNAL_TRANSFERS = "debug_trace"
    watcher_for(currency="ETH").process_state_clear()
    invoice = eth.invoice("ETH")
    eth.pay_through_contract(invoice)
    stuck = eth.node.height()

    proxy.rewrites.append(trace_fails(stuck))
    eth.node.mine(3)
    for _ in range(UNTRACEABLE_RUNS - 1):
        report = chain_scan(currency="ETH", force=True)
        assert "execution timeout" in report.error
        assert eth.status(invoice) == (NEW, NONE)
    report = chain_scan(currency="ETH", force=True)
    assert not report.error and report.recorded == 1
    [payment] = eth.payments(invoice)
    assert payment.position == f"balance:{eth.address(invoice).lower()}" and payment.txid == payment.block_hash
    assert eth.status(invoice) == (SETTLED, NONE)


class Killed(Exception):
    pass


def test_a_worker_killed_between_recording_and_the_cursor_credits_once(eth, monkeypatch, customer):
    invoice = eth.invoice("USDT")
    eth.pay(invoice, 40_000_000)  # over-paid: settling it also posts credit
    start = eth.state().height
    eth.node.mine(2)
    cursor_store = machinery._cursor_store
    recorded_before_the_kill = []

    def killed(**kwargs):
        recorded_before_the_kill.append(Payment.objects.count())
        raise Killed

    monkeypatch.setattr(machinery, "_cursor_store", killed)
    with pytest.raises(Killed):
        eth.scan()
    assert recorded_before_the_kill == [1]
    assert Payment.objects.count() == 0 and not CreditEntry.objects.exists()
    state = eth.state()
    assert (state.height, state.consecutive_failures) == (start, 1)

    monkeypatch.setattr(machinery, "_cursor_store", cursor_store)
    eth.scan()
    assert eth.status(invoice) == (SETTLED, InvoiceException.PAID_OVER)
    assert Payment.objects.count() == 1 and CreditEntry.objects.count() == 1
    assert credit_balance_usd(account=customer) == Decimal("5.00")
    eth.scan()
    assert Payment.objects.count() == 1 and CreditEntry.objects.count() == 1


def test_catching_up_is_bounded_per_run(eth):
    invoice = eth.invoice("ETH")
    start = eth.state().height
    eth.pay(invoice)
    eth.node.mine(9)
    first = eth.scan(max_blocks=4)
    assert (first.blocks, first.height, first.caught_up) == (4, start + 4, False)
    assert eth.status(invoice) == (SETTLED, NONE)
    second = eth.scan(max_blocks=4)
    assert (second.blocks, second.height) == (4, start + 8)
    third = eth.scan(max_blocks=4)
    assert (third.blocks, third.caught_up) == (2, True)
    assert ChainBlock.objects.filter(chain="ethereum").count() == 11  # the cursor's block and the 10 scanned
    assert Payment.objects.count() == 1


def test_scan_chain_command_for_each_currency_of_the_chain(eth, capsys):
    invoices = [eth.invoice(c) for c in ("ETH", "USDT", "USDC")]
    for invoice in invoices:
        eth.pay(invoice)
    eth.node.mine(2)
    call_command("scan_chain", "USDC")
    out = capsys.readouterr().out
    assert "ETH/USDT/USDC: cursor at" in out
    assert all(eth.status(i) == (SETTLED, NONE) for i in invoices)
    call_command("scan_chain", "ETH", "--from-height", str(eth.state().height - 3))
    assert Payment.objects.count() == 3  # rescanned, recorded once


def test_a_first_run_starts_before_the_oldest_watched_invoice(eth, settings):
    invoice = eth.invoice("ETH")
    eth.pay(invoice)
    eth.node.mine(2)
    from billing.models import ChainState

    ChainState.objects.filter(chain="ethereum").delete()
    ChainBlock.objects.filter(chain="ethereum").delete()
    watcher_for(currency="ETH").process_state_clear()
    eth.scan()
    assert eth.status(invoice) == (SETTLED, NONE)


def test_health_in_readyz_currencies_and_admin(eth, readiness_checks, django_user_model):
    from billing.chains import watchers

    eth.scan()
    watchers.readiness_checks_register()
    check = Client().get("/readyz").json()["checks"]["chain:ethereum"]
    assert (check["ok"], check["currency"], check["currencies"], check["blocks_behind"]) == (
        True,
        "ETH",
        ["ETH", "USDT", "USDC"],
        0,
    )
    rows = {row["code"]: row for row in Client().get("/api/v1/currencies").json()}
    assert {c: (rows[c]["chain"], rows[c]["health"]["ok"]) for c in ("ETH", "USDT", "USDC")} == {
        "ETH": ("ethereum", True),
        "USDT": ("ethereum", True),
        "USDC": ("ethereum", True),
    }
    staff = django_user_model.objects.create_superuser("operator", "a long staff passphrase")
    admin = Client()
    admin.force_login(staff)
    page = admin.get("/admin/billing/chainstate/").content.decode()
    assert "ethereum" in page and "icon-yes.svg" in page


def test_beat_schedules_one_scan_for_the_chain(monkeypatch):
    import importlib

    import config.settings as base

    monkeypatch.setenv("ETH_XPUB", "xpub-placeholder")
    monkeypatch.setenv("ETH_RPC_URL", "http://127.0.0.1:1")
    monkeypatch.setenv("CHAIN_SCAN_SECONDS", "9")
    try:
        fresh = importlib.reload(base)
        entry = fresh.CELERY_BEAT_SCHEDULE["billing.chain_scan.ETH"]
        assert entry == {"task": "billing.chain_scan", "schedule": 9.0, "args": ("ETH",), "options": {"expires": 9.0}}
        assert not {"billing.chain_scan.USDT", "billing.chain_scan.USDC"} & set(fresh.CELERY_BEAT_SCHEDULE)
    finally:
        monkeypatch.undo()
        importlib.reload(base)


def test_a_payment_staff_recorded_first_is_the_one_the_watcher_sees(eth):
    from billing import services

    invoice = eth.invoice("USDT")
    txid = eth.pay(invoice)
    log_index = int(eth.node.receipt(txid)["logs"][0]["logIndex"], 16)
    manual = services.payment_record_manual(
        invoice_number=invoice.number,
        txid=txid,
        amount=eth.due(invoice),
        confirmations=1,
        reason="seen on a block explorer",
        actor=None,
        output_index=log_index,
    )
    assert manual.position == f"log:{log_index}"
    eth.node.mine(2)
    eth.scan()
    [payment] = eth.payments(invoice)
    # The watcher's from now on (it checks it again as its own); who recorded it, and why, stay.
    assert (payment.pk, payment.source, payment.confirmations) == (manual.pk, "watcher", 3)
    assert payment.reason == "seen on a block explorer"
    assert eth.status(invoice) == (SETTLED, NONE)


def test_staff_review_a_stray_with_a_reason(eth, django_user_model):
    from core.models import AuditEntry

    invoice = eth.invoice("ETH")
    eth.node.token_transfer(eth.evm.other, eth.address(invoice), 10**18)
    eth.node.mine()
    eth.scan()
    [stray] = StrayTransfer.objects.all()
    staff = django_user_model.objects.create_superuser("operator", "a long staff passphrase")
    admin = Client()
    admin.force_login(staff)
    url = "/admin/billing/straytransfer/"
    asked = admin.post(url, {"action": "mark_reviewed", "_selected_action": [stray.pk]})
    assert asked.status_code == 200 and "reason" in asked.content.decode()
    admin.post(
        url,
        {"action": "mark_reviewed", "_selected_action": [stray.pk], "apply": "1", "reason": "refunded by hand"},
    )
    stray.refresh_from_db()
    assert (stray.needs_review, stray.review_note, stray.reviewed_by) == (False, "refunded by hand", staff)
    assert AuditEntry.objects.filter(action="stray_transfer.review").count() == 1


def test_an_invoice_page_shows_its_strays(eth, django_user_model):
    invoice = eth.invoice("USDC")
    eth.node.token_transfer(eth.evm.usdt, eth.address(invoice), 5_000_000)  # USDT to a USDC invoice
    eth.node.mine()
    eth.scan()
    [stray] = StrayTransfer.objects.filter(invoice=invoice)
    assert (stray.kind, stray.currency, stray.paid_currency) == ("wrong_currency", "USDT", "USDC")
    staff = django_user_model.objects.create_superuser("operator", "a long staff passphrase")
    admin = Client()
    admin.force_login(staff)
    page = admin.get(f"/admin/billing/invoice/{invoice.pk}/change/").content.decode()
    assert "Stray transfers (never credited: review them)" in page and "wrong_currency" in page
