"""The LTC watcher wired into the billing engine, on the real regtest node:
0-conf, the confirmation policy, partial, over and late payments, reorgs,
replacements, double spends, a worker killed mid-block, the lease, catching up."""

from __future__ import annotations

import contextlib
from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from billing import services, signals
from billing.chains import machinery
from billing.chains.utxo.scanner import height_at_time
from billing.models import (
    ChainBlock,
    ChainState,
    CreditEntry,
    InvoiceException,
    InvoiceStatus,
    Payment,
    PaymentDisposition,
    PaymentStatus,
)
from billing.selectors import credit_balance_usd
from billing.tasks import chain_scan as chain_scan_task
from core.lease import single_flight
from tests.chains.harness import scan_losing_the_lease_once_recorded

pytestmark = [pytest.mark.chain, pytest.mark.django_db]


def status(ltc, invoice) -> tuple[str, str]:
    fresh = ltc.reload(invoice)
    return fresh.status, fresh.exception


@contextlib.contextmanager
def reopenings(capture):
    """Invoices sent back to `new` (signal sent on commit) while the block runs."""
    reopened: list[int] = []

    def on_reopened(sender, invoice_id, **kwargs):
        reopened.append(invoice_id)

    signals.invoice_reopened.connect(on_reopened)
    try:
        with capture(execute=True):
            yield reopened
    finally:
        signals.invoice_reopened.disconnect(on_reopened)


def test_zero_conf_is_processing_and_the_policy_settles_it(ltc, node):
    invoice = ltc.invoice()
    request = invoice.active_request
    assert request.address.startswith("rltc1q") and request.network == "litecoin-regtest"
    assert ltc.due(invoice) == 10_000_000  # $9.00 at $90: 0.1 LTC
    txid = ltc.pay(invoice)

    # The real Celery task code, as beat runs it.
    result = chain_scan_task.apply(args=["LTC"]).get()
    assert (result["error"], result["skipped"], result["unconfirmed"]) == ("", "", 1)
    assert status(ltc, invoice) == (InvoiceStatus.PROCESSING, InvoiceException.NONE)
    [payment] = ltc.payments(invoice)
    assert (payment.txid, int(payment.amount), payment.confirmations) == (txid, 10_000_000, 0)
    assert payment.status == PaymentStatus.PENDING and payment.block_height is None
    assert payment.chain == "litecoin" and payment.source == "watcher"

    mined = node.mine(5)
    report = ltc.scan()
    assert (report.blocks, report.recorded, report.caught_up) == (5, 1, True)
    assert status(ltc, invoice)[0] == InvoiceStatus.PROCESSING
    payment.refresh_from_db()
    assert (payment.confirmations, payment.block_hash) == (5, mined[0])
    assert payment.block_height == node.height() - 4

    [last] = node.mine(1)
    report = ltc.scan()
    assert report.confirmations_updated == 1
    assert status(ltc, invoice) == (InvoiceStatus.SETTLED, InvoiceException.NONE)
    payment.refresh_from_db()
    assert (payment.confirmations, payment.status, payment.disposition) == (
        6,
        PaymentStatus.CONFIRMED,
        PaymentDisposition.APPLIED,
    )
    state = ltc.state()
    assert (state.height, state.block_hash, state.tip_height) == (node.height(), last, node.height())
    assert state.consecutive_failures == 0 and state.last_ok_at is not None
    assert ChainBlock.objects.filter(chain="litecoin").order_by("-height").first().block_hash == last
    assert not CreditEntry.objects.exists()

    # Running again changes nothing.
    again = ltc.scan()
    assert (again.blocks, again.recorded, again.unconfirmed, again.confirmations_updated, again.uncounted) == (
        0,
        0,
        0,
        0,
        0,
    )
    assert Payment.objects.count() == 1


def test_a_coinbase_output_settles_only_once_it_can_be_spent(ltc, node):
    """A miner pays an invoice straight from a block's reward. The policy's 6
    confirmations are not enough: the coins cannot be spent before 100
    (COINBASE_MATURITY), and an orphaned block's coinbase never comes back. The
    invoice is processing until then, and settles at the 100th."""
    from billing.chains.utxo.scanner import COINBASE_MATURITY

    invoice = ltc.invoice()
    [block] = node.mine(1, address=invoice.active_request.address)
    ltc.scan()
    [payment] = ltc.payments(invoice)
    height = node.height()
    assert (payment.block_hash, payment.matures_at_height) == (block, height + COINBASE_MATURITY - 1)
    node.mine(10)
    ltc.scan()
    payment.refresh_from_db()
    assert payment.confirmations == 11 and payment.status == PaymentStatus.PENDING
    assert status(ltc, invoice)[0] == InvoiceStatus.PROCESSING
    node.mine(COINBASE_MATURITY - 12)
    ltc.scan()
    assert status(ltc, invoice)[0] == InvoiceStatus.PROCESSING  # 99 confirmations
    node.mine(1)
    ltc.scan()
    payment.refresh_from_db()
    assert payment.confirmations == COINBASE_MATURITY and payment.status == PaymentStatus.CONFIRMED
    assert status(ltc, invoice)[0] == InvoiceStatus.SETTLED


def test_the_confirmation_policy_is_a_setting(ltc, node, settings):
    settings.CONFIRMATIONS = {**settings.CONFIRMATIONS, "LTC": 2}
    invoice = ltc.invoice()
    ltc.pay(invoice)
    node.mine(1)
    ltc.scan()
    assert status(ltc, invoice)[0] == InvoiceStatus.PROCESSING
    node.mine(1)
    ltc.scan()
    assert status(ltc, invoice)[0] == InvoiceStatus.SETTLED


def test_late_payment_settles_late_and_expiry_needs_a_healthy_watcher(ltc, node):
    invoice = ltc.invoice(now=timezone.now() - timedelta(minutes=40))  # its rate lock ended 10 minutes ago
    ltc.scan()  # the watcher is healthy: nothing can be on chain unseen
    assert services.invoices_advance_due() == 1
    assert status(ltc, invoice) == (InvoiceStatus.EXPIRED, InvoiceException.NONE)
    ltc.pay(invoice)
    ltc.scan()
    assert status(ltc, invoice) == (InvoiceStatus.EXPIRED, InvoiceException.PAID_LATE)
    node.mine(6)
    ltc.scan()
    assert status(ltc, invoice) == (InvoiceStatus.SETTLED, InvoiceException.PAID_LATE)


def test_reorg_puts_the_payment_back_to_unconfirmed_then_it_settles_once(ltc, node, django_capture_on_commit_callbacks):
    invoice = ltc.invoice()
    txid = ltc.pay(invoice)
    base = node.height()
    mined = node.mine(3)
    ltc.scan()
    [payment] = ltc.payments(invoice)
    assert (payment.confirmations, payment.block_hash) == (3, mined[0])
    try:
        node.invalidate(mined[0])
        assert txid in node.mempool()
        with reopenings(django_capture_on_commit_callbacks) as reopened:
            report = ltc.scan()
        assert (report.reorgs, report.height, report.uncounted) == (1, base, 0)
        assert reopened == []  # back in the mempool: still paid, never briefly unpaid
        payment.refresh_from_db()
        assert (payment.status, payment.confirmations, payment.block_height, payment.block_hash) == (
            PaymentStatus.PENDING,
            0,
            None,
            "",
        )
        assert status(ltc, invoice)[0] == InvoiceStatus.PROCESSING
        assert not ltc.reload(invoice).needs_attention  # nothing was applied yet: nothing for staff
        assert ltc.state().height == base
        assert not ChainBlock.objects.filter(chain="litecoin", height__gt=base).exists()
    finally:
        node.reconsider(mined[0])
    report = ltc.scan()
    assert (report.reorgs, report.blocks) == (0, 3)
    payment.refresh_from_db()
    assert (payment.confirmations, payment.block_hash) == (3, mined[0])
    node.mine(3)
    ltc.scan()
    assert status(ltc, invoice) == (InvoiceStatus.SETTLED, InvoiceException.NONE)
    assert Payment.objects.count() == 1 and not CreditEntry.objects.exists()


def test_reorg_that_loses_the_payment_returns_the_invoice_to_new(ltc, node, django_capture_on_commit_callbacks):
    invoice = ltc.invoice()
    txid = ltc.pay(invoice)
    [block] = node.mine(1)
    ltc.scan()
    assert status(ltc, invoice)[0] == InvoiceStatus.PROCESSING
    try:
        node.invalidate(block)
        # While the payment is back in the mempool its coins are spent elsewhere,
        # and that transaction is what the new branch confirms.
        double_spend = node.replace(txid, address=node.new_address())
        node.mine(1)
        with reopenings(django_capture_on_commit_callbacks) as reopened:
            report = ltc.scan()
        assert (report.reorgs, report.uncounted) == (1, 1)
        assert reopened == [invoice.pk]
        [payment] = ltc.payments(invoice)
        assert payment.status == PaymentStatus.REMOVED and payment.removal_reason.startswith("reorg: block")
        assert status(ltc, invoice) == (InvoiceStatus.NEW, InvoiceException.NONE)
        assert double_spend not in node.mempool()
    finally:
        node.reconsider(block)


def test_a_settled_invoice_survives_a_reorg_and_its_return_without_double_credit(ltc, node):
    """A settled payment whose block is invalidated is back at 0 confirmations: the
    invoice stays settled, flagged for staff (it could yet be double spent)."""
    from core.models import AuditEntry

    invoice = ltc.invoice()
    txid = ltc.pay(invoice)
    mined = node.mine(6)
    ltc.scan()
    assert status(ltc, invoice)[0] == InvoiceStatus.SETTLED
    assert not ltc.reload(invoice).needs_attention
    try:
        node.invalidate(mined[0])
        assert txid in node.mempool()
        ltc.scan()
        [payment] = ltc.payments(invoice)
        assert (payment.status, payment.confirmations) == (PaymentStatus.PENDING, 0)
        assert status(ltc, invoice)[0] == InvoiceStatus.SETTLED
        assert ltc.reload(invoice).needs_attention
        [flag] = AuditEntry.objects.filter(action="payment.flagged", object_id=str(payment.pk))
        assert flag.reason.startswith(f"reorg: block {node.height() + 1} {mined[0]} orphaned after the payment")
        assert "applied" in flag.reason
        payment.refresh_from_db()
        assert payment.flagged_at is not None and payment.flag_reason == flag.reason[:200]
        flagged_at = payment.flagged_at
        ltc.scan()  # seen again at 0 confirmations: flagged once
        assert AuditEntry.objects.filter(action="payment.flagged", object_id=str(payment.pk)).count() == 1
        payment.refresh_from_db()
        assert payment.flagged_at == flagged_at
    finally:
        node.reconsider(mined[0])
    ltc.scan()
    [payment] = ltc.payments(invoice)
    assert (payment.status, payment.confirmations, payment.block_hash) == (PaymentStatus.CONFIRMED, 6, mined[0])
    assert payment.disposition == PaymentDisposition.APPLIED
    assert status(ltc, invoice) == (InvoiceStatus.SETTLED, InvoiceException.NONE)
    assert not CreditEntry.objects.exists()


def test_rbf_bumpfee_replaces_the_payment_without_reopening_the_invoice(ltc, node, django_capture_on_commit_callbacks):
    invoice = ltc.invoice()
    txid = ltc.pay(invoice)
    ltc.scan()
    bumped = node.bumpfee(txid)
    with reopenings(django_capture_on_commit_callbacks) as reopened:
        report = ltc.scan()
    assert (report.unconfirmed, report.uncounted) == (1, 1)
    original, replacement = ltc.payments(invoice)
    assert (original.txid, original.status) == (txid, PaymentStatus.REMOVED)
    assert "conflicted" in original.removal_reason
    assert (replacement.txid, replacement.status) == (bumped, PaymentStatus.PENDING)
    assert status(ltc, invoice) == (InvoiceStatus.PROCESSING, InvoiceException.NONE)
    assert reopened == []
    node.mine(6)
    ltc.scan()
    assert status(ltc, invoice) == (InvoiceStatus.SETTLED, InvoiceException.NONE)
    assert not CreditEntry.objects.exists()


def test_replacement_paying_elsewhere_is_uncounted(ltc, node):
    invoice = ltc.invoice()
    txid = ltc.pay(invoice)
    ltc.scan()
    node.replace(txid, address=node.new_address())
    report = ltc.scan()
    assert (report.uncounted, report.unconfirmed) == (1, 0)
    [payment] = ltc.payments(invoice)
    assert payment.status == PaymentStatus.REMOVED
    assert status(ltc, invoice) == (InvoiceStatus.NEW, InvoiceException.NONE)


def test_a_conflicting_transaction_that_confirms_wins(ltc, node):
    invoice = ltc.invoice()
    txid = ltc.pay(invoice)
    ltc.scan()
    double_spend = node.replace(txid, address=node.new_address())
    [block] = node.mine(1)  # confirmed before the watcher looked at the mempool again
    report = ltc.scan()
    assert (report.blocks, report.uncounted) == (1, 1)
    [payment] = ltc.payments(invoice)
    assert payment.status == PaymentStatus.REMOVED
    assert payment.removal_reason == f"{txid} conflicted by {double_spend} in block {node.height()}"
    assert ltc.state().block_hash == block
    assert status(ltc, invoice) == (InvoiceStatus.NEW, InvoiceException.NONE)


class Killed(Exception):
    pass


def test_a_worker_killed_between_recording_and_the_cursor_credits_once(ltc, node, monkeypatch, customer):
    invoice = ltc.invoice()
    ltc.pay(invoice, 15_000_000)  # over-paid: settling it also posts credit
    start = ltc.state().height
    node.mine(6)
    cursor_store = machinery._cursor_store
    recorded_before_the_kill = []

    def killed(**kwargs):
        recorded_before_the_kill.append(Payment.objects.count())
        raise Killed

    monkeypatch.setattr(machinery, "_cursor_store", killed)
    with pytest.raises(Killed):
        ltc.scan()
    assert recorded_before_the_kill == [1]  # the payment was written, then the block's transaction died
    assert Payment.objects.count() == 0 and not CreditEntry.objects.exists()
    state = ltc.state()
    assert (state.height, state.consecutive_failures) == (start, 1)
    assert "Killed" in state.last_error

    monkeypatch.setattr(machinery, "_cursor_store", cursor_store)
    report = ltc.scan()
    assert report.blocks == 6
    assert status(ltc, invoice) == (InvoiceStatus.SETTLED, InvoiceException.PAID_OVER)
    assert Payment.objects.count() == 1 and CreditEntry.objects.count() == 1
    assert credit_balance_usd(account=customer) == Decimal("4.50")
    assert ltc.state().consecutive_failures == 0
    ltc.scan()
    assert Payment.objects.count() == 1 and CreditEntry.objects.count() == 1


def test_two_scans_at_once_one_runs(ltc, node):
    invoice = ltc.invoice()
    ltc.pay(invoice)
    with single_flight(name="chain_scan:litecoin", ttl=timedelta(minutes=1)) as owner:
        assert owner is not None
        busy = ltc.scan()
        assert (busy.skipped, busy.unconfirmed) == ("busy", 0)
        assert chain_scan_task.apply(args=["LTC"]).get()["skipped"] == "busy"
        assert not Payment.objects.exists()
    assert ltc.scan().unconfirmed == 1


def test_a_scan_asked_for_during_a_run_is_made_right_after_it(ltc, node, monkeypatch):
    """A push that finds the chain busy is not lost: the run in progress runs the
    chain once more when it is done, and finds the payment that came meanwhile."""
    from billing.chains import machinery

    invoice = ltc.invoice()
    real, runs = machinery.chain_run, []

    def run_and_meanwhile(watcher, **kwargs):
        runs.append(len(runs) + 1)
        report = real(watcher, **kwargs)
        if len(runs) == 1:  # while the first run holds the chain: a payment, and its push
            ltc.pay(invoice)
            assert ltc.scan().skipped == "busy"
        return report

    monkeypatch.setattr(machinery, "chain_run", run_and_meanwhile)
    report = ltc.scan()
    assert runs == [1, 2]
    assert report.unconfirmed == 1  # the second run's report
    assert ltc.reload(invoice).status == "processing"
    ltc.scan()
    assert runs == [1, 2, 3]  # nothing asked meanwhile: one run


def test_the_confirmation_refresh_keeps_the_lease_as_it_goes(ltc, node, monkeypatch):
    """The refresh renews the run's lease before each payment it writes, as the
    block steps do after each block: over many payments it outlasted the lease, and
    another run could take the chain while this one still wrote confirmations. A
    payment with nothing new to write costs no renewal."""
    real, renewals = machinery.chain_run, []

    def counting_renewals(watcher, *, renew, **kwargs):
        def counted():
            renewals.append(1)
            return renew()

        return real(watcher, renew=counted, **kwargs)

    monkeypatch.setattr(machinery, "chain_run", counting_renewals)
    node.mine(1)
    ltc.scan()
    node.mine(1)
    renewals.clear()
    ltc.scan()  # one block, no payment pending
    alone = len(renewals)
    invoices = [ltc.invoice() for _ in range(3)]
    for invoice in invoices:
        ltc.pay(invoice)
    node.mine(1)
    ltc.scan()
    assert all(p.status == PaymentStatus.PENDING and p.block_height for i in invoices for p in ltc.payments(i))
    renewals.clear()
    ltc.scan()  # no block: nothing new to write
    assert renewals == []
    node.mine(1)
    ltc.scan()  # one block, and the three's new confirmations written
    assert len(renewals) == alone + 3
    assert all(p.confirmations == 2 for i in invoices for p in ltc.payments(i))


def test_a_run_whose_lease_another_run_took_stops_after_what_it_committed(ltc, node, monkeypatch):
    """A run that stalled past its lease (a slow node, a long pause) while another
    run took the chain stops at its next renewal: the block it committed stands,
    it records nothing more, and the chain is left to the holder; once the lease
    is free again a run goes on from that block and finds the payment."""
    from core.models import Lease

    real, renewals = machinery.chain_run, []

    def taken_after_the_first_block(watcher, *, renew, **kwargs):
        def renewing():
            renewals.append(1)
            if len(renewals) == 1:  # while this run stalled, its lease expired and another took it
                Lease.objects.filter(name="chain_scan:litecoin").update(owner="another-worker")
            return renew()

        return real(watcher, renew=renewing, **kwargs)

    node.mine(1)
    ltc.scan()
    start = ltc.state().height
    invoice = ltc.invoice()
    node.mine(1)
    ltc.pay(invoice)
    node.mine(2)  # the payment in block start + 2
    monkeypatch.setattr(machinery, "chain_run", taken_after_the_first_block)
    report = ltc.scan()
    assert (report.skipped, report.blocks, report.recorded) == ("lease_lost", 1, 0)
    assert ltc.state().height == start + 1 and not ltc.payments(invoice)
    assert "skipped (lease_lost)" in report.summary()
    monkeypatch.setattr(machinery, "chain_run", real)
    assert ltc.scan().skipped == "busy"  # the other run holds the chain
    Lease.objects.filter(name="chain_scan:litecoin").update(expires_at=timezone.now() - timedelta(seconds=1))
    report = ltc.scan()
    assert (report.skipped, report.blocks, report.recorded) == ("", 2, 1)
    assert ltc.state().height == start + 3 and status(ltc, invoice)[0] == InvoiceStatus.PROCESSING


@pytest.mark.parametrize("confirmations", [6, 2])
def test_a_payment_mined_again_higher_up_stays_counted_while_the_new_branch_is_recorded_in_parts(
    ltc, node, monkeypatch, confirmations
):
    """A reorg mines a payment's transaction again two blocks higher, the payment
    settled (6 confirmations: a reorg deeper than the policy) or still confirming (2).
    The run that applied the fork stopped after the new branch's first block (its lease
    taken), and the next run records one block more: neither reached the block that
    carries the payment again, so neither un-counts it or puts its invoice before
    staff; the run that records that block moves the payment to it."""
    from core.models import AuditAction, AuditEntry

    invoice = ltc.invoice()
    txid = ltc.pay(invoice)
    mined = node.mine(confirmations)
    ltc.scan()
    [payment] = ltc.payments(invoice)
    counted = PaymentStatus.CONFIRMED if confirmations == 6 else PaymentStatus.PENDING
    assert (payment.status, payment.block_hash) == (counted, mined[0])
    node.invalidate(mined[0])
    assert txid in node.mempool()
    address = node.new_address()
    empty = [node.rpc.call("generateblock", address, [])["hash"] for _ in range(2)]
    again = node.mine(6)  # the policy's 6 confirmations again, two blocks higher
    assert txid in node.rpc.call("getblock", again[0])["tx"]

    report = scan_losing_the_lease_once_recorded(ltc.scan, monkeypatch, chain="litecoin", block_hash=empty[0])
    assert (report.skipped, report.reorgs, report.blocks, report.uncounted) == ("lease_lost", 1, 1, 0)
    report = ltc.scan(max_blocks=1)  # the second empty block: the chain has moved on from the payment's old one
    assert (report.blocks, report.caught_up, report.uncounted) == (1, False, 0)
    assert ChainBlock.objects.get(chain="litecoin", height=payment.block_height).block_hash == empty[0]
    payment.refresh_from_db()
    assert (payment.status, payment.block_hash) == (counted, mined[0])
    assert not ltc.reload(invoice).needs_attention
    report = ltc.scan()
    assert (report.caught_up, report.uncounted) == (True, 0)
    payment.refresh_from_db()
    assert (payment.status, payment.block_hash, payment.disposition) == (
        PaymentStatus.CONFIRMED,
        again[0],
        PaymentDisposition.APPLIED,
    )
    assert status(ltc, invoice) == (InvoiceStatus.SETTLED, InvoiceException.NONE)
    assert not ltc.reload(invoice).needs_attention
    assert not AuditEntry.objects.filter(action=AuditAction.PAYMENT_UNCOUNTED_AFTER_USE).exists()


def test_a_chain_that_comes_back_to_a_payments_block_keeps_it_counted(ltc, node, monkeypatch):
    """A settled payment's block leaves the chain for a branch that mines its transaction
    two blocks higher; the run that applied that fork stopped after the branch's first
    block (its lease taken). Then the chain comes back to the payment's own blocks: the
    next run applies that fork, records the payment again in its own block, and the end
    of that step does not take it for one the new branch dropped."""
    from core.models import AuditEntry

    invoice = ltc.invoice()
    txid = ltc.pay(invoice)
    mined = node.mine(6)
    ltc.scan()
    [payment] = ltc.payments(invoice)
    assert (payment.status, payment.block_hash) == (PaymentStatus.CONFIRMED, mined[0])
    node.invalidate(mined[0])
    elsewhere = node.new_address()
    branch = [node.rpc.call("generateblock", elsewhere, [])["hash"] for _ in range(2)] + node.mine(6)
    assert txid in node.rpc.call("getblock", branch[2])["tx"]
    assert (
        scan_losing_the_lease_once_recorded(ltc.scan, monkeypatch, chain="litecoin", block_hash=branch[0]).skipped
        == "lease_lost"
    )
    assert ltc.state().extra["fork_left"]["hashes"] == [mined[0]]
    node.reconsider(mined[0])
    node.invalidate(branch[0])  # the payment's own branch is the chain again
    report = ltc.scan()
    assert (report.reorgs, report.uncounted) == (1, 0)
    payment.refresh_from_db()
    assert (payment.status, payment.block_hash) == (PaymentStatus.CONFIRMED, mined[0])
    assert not ltc.reload(invoice).needs_attention
    assert not AuditEntry.objects.filter(object_id=str(payment.pk)).exists()
    assert "fork_left" not in ltc.state().extra


def test_a_confirming_payment_above_a_cursor_a_reorg_moved_back_is_not_counted_up_on_its_old_block(
    ltc, node, monkeypatch
):
    """A payment 4 blocks above a reorg's fork point, at 2 of its 6 confirmations, is
    mined again 10 blocks up the new branch. The run that applied the fork stopped after
    the branch's first block (its lease taken) and the next records one block more: the
    cursor is below the payment's old height, whose block the fork removed, so nothing
    says that block is gone; its confirmations are not brought up to the tip on it (which
    would settle its invoice on a block the chain no longer has) until the branch's block
    that carries it is recorded."""

    invoice = ltc.invoice()
    txid = ltc.pay(invoice)  # before the blocks below: its coins stay spendable when they go
    address = node.new_address()
    below = [node.rpc.call("generateblock", address, [])["hash"] for _ in range(4)]  # above the fork point
    mined = node.mine(2)
    ltc.scan()
    [payment] = ltc.payments(invoice)
    assert (payment.status, payment.confirmations, payment.block_hash) == (PaymentStatus.PENDING, 2, mined[0])
    node.invalidate(below[0])
    assert txid in node.mempool()
    elsewhere = node.new_address()  # not the invalidated blocks again
    empty = [node.rpc.call("generateblock", elsewhere, [])["hash"] for _ in range(10)]
    again = node.mine(2)
    assert txid in node.rpc.call("getblock", again[0])["tx"]

    assert (
        scan_losing_the_lease_once_recorded(ltc.scan, monkeypatch, chain="litecoin", block_hash=empty[0]).skipped
        == "lease_lost"
    )
    report = ltc.scan(max_blocks=1)
    assert (report.blocks, report.caught_up, report.uncounted) == (1, False, 0)
    assert report.height < payment.block_height
    payment.refresh_from_db()
    assert (payment.status, payment.confirmations, payment.block_hash) == (PaymentStatus.PENDING, 2, mined[0])
    assert status(ltc, invoice)[0] == InvoiceStatus.PROCESSING
    ltc.scan()
    payment.refresh_from_db()
    assert (payment.status, payment.confirmations, payment.block_hash) == (PaymentStatus.PENDING, 2, again[0])


def test_a_payment_to_a_destination_no_longer_watched_is_left_as_it_is_by_a_reorg(ltc, node, settings):
    """One transaction pays two invoices; the second's destination has left the watched
    set (its invoice's watch ended longer than WATCH_AFTER_CLOSE_DAYS ago) when a reorg
    mines the transaction again one block higher. The new branch's block records the
    first payment again and nothing for the second, which it no longer watches: the
    transaction pays what it paid, so the second payment is not un-counted."""
    from billing.chains.utxo.watcher import process_state_clear
    from billing.models import Invoice
    from devtools.litecoind import base_units_to_coins, script_to_address

    first, second = ltc.invoice(), ltc.invoice()
    outputs = {
        script_to_address(i.active_request.match_key, hrp=node.hrp): base_units_to_coins(ltc.due(i))
        for i in (first, second)
    }
    txid = node.wallet_rpc.call("sendmany", "", outputs)
    mined = node.mine(2)
    ltc.scan()
    [kept] = ltc.payments(second)
    assert (kept.status, kept.block_hash) == (PaymentStatus.PENDING, mined[0])
    ended = timezone.now() - timedelta(days=settings.WATCH_AFTER_CLOSE_DAYS + 1)
    Invoice.objects.filter(pk=second.pk).update(expires_at=ended, monitoring_until=ended)
    process_state_clear()  # the watcher reads its watched set again
    node.invalidate(mined[0])
    node.rpc.call("generateblock", node.new_address(), [])
    again = node.mine(3)
    assert txid in node.rpc.call("getblock", again[0])["tx"]
    report = ltc.scan()
    assert (report.reorgs, report.uncounted) == (1, 0)
    [moved] = ltc.payments(first)
    assert (moved.status, moved.block_hash) == (PaymentStatus.PENDING, again[0])
    kept.refresh_from_db()
    assert (kept.status, kept.block_hash) == (PaymentStatus.PENDING, mined[0])


def test_a_cursor_moved_by_another_scanner_stops_this_one(ltc, node):
    invoice = ltc.invoice()
    ltc.pay(invoice)
    node.mine(1)
    ChainState.objects.filter(chain="litecoin").update(block_hash="00" * 32)
    report = ltc.scan()
    assert report.skipped == "busy" and report.blocks == 0
    assert not Payment.objects.exists()


def test_catching_up_in_bounded_runs_with_progress(ltc, node):
    invoice = ltc.invoice()
    start = node.height()
    node.mine(9)
    ltc.pay(invoice)
    node.mine(21)  # the payment is in block start + 10
    first = ltc.scan(max_blocks=10)
    assert (first.blocks, first.height, first.caught_up, first.tip_height) == (10, start + 10, False, start + 30)
    assert status(ltc, invoice)[0] == InvoiceStatus.SETTLED  # 21 confirmations once found
    second = ltc.scan(max_blocks=10)
    assert (second.blocks, second.height, second.caught_up) == (10, start + 20, False)

    node.mine(5)
    lines = []
    call_command("scan_chain", "LTC", "--max-blocks", "6", stdout=Capture(lines))
    assert [line for line in lines if "scanned to" in line] == [
        f"LTC: scanned to {start + 26} of {start + 35} (6 block(s), 0 payment(s) so far)",
        f"LTC: scanned to {start + 32} of {start + 35} (6 block(s), 0 payment(s) so far)",
        f"LTC: scanned to {start + 35} of {start + 35} (3 block(s), 0 payment(s) so far)",
    ]
    assert lines[-1].startswith(f"LTC: cursor at {start + 35} (node tip {start + 35}); 3 block(s)")
    assert ltc.state().height == start + 35


class Capture:
    def __init__(self, lines):
        self.lines = lines

    def write(self, text):
        self.lines.extend(t for t in text.splitlines() if t)

    def flush(self):
        pass


def test_scan_chain_command_from_a_height_and_refusals(ltc, node):
    invoice = ltc.invoice()
    ltc.pay(invoice)
    [block] = node.mine(1)
    ltc.scan()
    height = node.height()
    Payment.objects.all().delete()  # as if never seen: rescanning finds it again
    lines = []
    call_command("scan_chain", "ltc", "--from-height", str(height), stdout=Capture(lines))
    assert lines[0] == f"Cursor set to block {height - 1} {node.rpc.call('getblockhash', height - 1)}."
    [payment] = ltc.payments(invoice)
    assert payment.block_hash == block
    with pytest.raises(CommandError, match="no_watcher"):
        call_command("scan_chain", "DOGE")
    with pytest.raises(CommandError, match="BTC is not watched: set BTC_XPUB and BTC_RPC_URL"):
        call_command("scan_chain", "BTC")


def test_first_run_without_a_cursor(ltc, node):
    ChainBlock.objects.all().delete()
    ChainState.objects.all().delete()
    [tip] = node.mine(1)
    # No destination watched: start at the node's tip.
    report = ltc.scan()
    assert (report.blocks, report.height, ltc.state().block_hash) == (1, node.height(), tip)


def test_height_at_time_finds_the_first_block_at_a_median_time(node):
    node.mine(3)
    tip = node.height()

    def median(height):
        return int(node.rpc.call("getblockheader", node.rpc.call("getblockhash", height))["mediantime"])

    at = median(tip - 20)
    found = height_at_time(node.rpc, at=at, tip_height=tip)
    assert median(found) >= at and (found == 0 or median(found - 1) < at)
    assert height_at_time(node.rpc, at=median(tip) + 3600, tip_height=tip) == tip
    assert height_at_time(node.rpc, at=0, tip_height=tip) == 0


def test_watched_scripts_are_the_open_and_recently_closed_destinations(ltc, settings):
    from billing.chains.utxo.watcher import watched_scripts

    now = timezone.now()
    fresh = ltc.invoice()
    closed_recently = ltc.invoice(now=now - timedelta(days=settings.WATCH_AFTER_CLOSE_DAYS - 1))
    closed_long_ago = ltc.invoice(now=now - timedelta(days=settings.WATCH_AFTER_CLOSE_DAYS + 2))
    scripts = watched_scripts(currency="LTC", now=now)
    assert fresh.active_request.match_key in scripts and closed_recently.active_request.match_key in scripts
    assert closed_long_ago.active_request.match_key not in scripts
    assert watched_scripts(currency="BTC", now=now) == frozenset()


def test_a_reorg_deeper_than_the_stored_blocks_is_walked_back_to_its_fork(ltc, node, settings):
    settings.CHAIN_REORG_WINDOW = 3
    first, second = ltc.invoice(), ltc.invoice()
    base = node.height()
    lost = ltc.pay(first)
    old_branch = node.mine(5)  # the first payment in base + 1
    ltc.scan()
    assert sorted(ChainBlock.objects.values_list("height", flat=True)) == [base + 3, base + 4, base + 5]
    assert status(ltc, first)[0] == InvoiceStatus.PROCESSING  # 5 of 6 confirmations
    try:
        node.invalidate(old_branch[0])
        node.replace(lost, address=node.new_address())  # the first payment's coins go elsewhere
        ltc.pay(second)
        new_branch = node.mine(7)  # the second payment in the new base + 1
        report = ltc.scan()
        assert report.reorgs == 1 and report.height == base + 7
        # Every orphaned block was un-counted, below the stored window too ...
        [payment] = ltc.payments(first)
        assert payment.status == PaymentStatus.REMOVED
        assert payment.removal_reason == f"reorg: block {base + 1} {old_branch[0]} orphaned"
        assert status(ltc, first) == (InvoiceStatus.NEW, InvoiceException.NONE)
        # ... and the new branch was scanned from the fork point, not from the window.
        [payment] = ltc.payments(second)
        assert (payment.block_hash, payment.confirmations) == (new_branch[0], 7)
        assert status(ltc, second) == (InvoiceStatus.SETTLED, InvoiceException.NONE)
        assert ltc.state().block_hash == new_branch[-1]
    finally:
        node.reconsider(old_branch[0])


def test_a_coinbase_output_staff_recorded_first_keeps_its_maturity_once_the_watcher_sees_it(ltc, node):
    """Staff recorded the output by hand before the watcher saw it: the
    watcher's sighting takes it over with the height it matures at, and the
    refresh keeps it pending until then."""
    from billing.chains.utxo.scanner import COINBASE_MATURITY, coins_to_base_units

    invoice = ltc.invoice()
    [block] = node.mine(1, address=invoice.active_request.address)
    coinbase = node.rpc.call("getblock", block, 2)["tx"][0]
    vout = next(o["n"] for o in coinbase["vout"] if o["scriptPubKey"]["hex"] == invoice.active_request.match_key)
    services.payment_record_manual(
        invoice_number=invoice.number,
        txid=coinbase["txid"],
        amount=coins_to_base_units(coinbase["vout"][vout]["value"], decimals=8),
        confirmations=1,
        reason="seen on an explorer",
        actor=None,
        output_index=vout,
    )
    ltc.scan()
    node.mine(10)
    ltc.scan()
    [payment] = ltc.payments(invoice)
    assert payment.matures_at_height == node.height() - 10 + COINBASE_MATURITY - 1
    assert payment.status == PaymentStatus.PENDING and payment.confirmations == 11
