"""The Solana watcher wired into the billing engine, against the loopback node:
`processing` at `confirmed` and settled at `finalized`, legacy and version 0
transfers (the reference only in a lookup table), failed transactions,
transfers without a reference for staff, two invoices in one transaction,
partial, over and late payments, a confirmed payment dropped with its fork,
rate limiting, a node on another cluster, a listing longer than a page carried
across runs, health in /readyz, /api/v1/currencies and the admin.

What one pass does with the node (paging, cursors, which calls) is
test_scan.py's; here the pass's findings reach invoices, payments and credit."""

from __future__ import annotations

import io
from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone
from solders.pubkey import Pubkey

from billing.chains.solana.cluster import GENESIS_HASHES, MAX_PROCESSING_AGE
from billing.chains.watchers import chain_scan, watcher_for
from billing.models import (
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

pytestmark = [pytest.mark.chain, pytest.mark.django_db]

NEW, PROCESSING, SETTLED, EXPIRED = (
    InvoiceStatus.NEW,
    InvoiceStatus.PROCESSING,
    InvoiceStatus.SETTLED,
    InvoiceStatus.EXPIRED,
)
NONE = InvoiceException.NONE


def test_a_legacy_transfer_is_processing_at_confirmed_and_settles_at_finalized(sol, settings):
    settings.SOL_SCAN_REFERENCES = True  # each open reference listed too (the recipient alone is the default)
    invoice = sol.invoice()
    request = invoice.active_request
    assert (request.network, request.address, request.match_key) == (
        "solana-localnet",
        sol.recipient,
        request.reference,
    )
    assert sol.due(invoice) == 233_333_334  # $35 at $150, rounded up to the lamport
    sig = sol.pay(invoice)

    result = chain_scan_task.apply(args=["SOL"]).get()  # the real task code, as beat runs it
    assert (result["error"], result["skipped"], result["recorded"]) == ("", "", 1)
    assert sol.status(invoice) == (PROCESSING, NONE)
    [payment] = sol.payments(invoice)
    position = [str(k) for k in sol.ledger.transaction(sig).account_keys].index(request.reference)
    assert (payment.chain, payment.currency, payment.txid, payment.position) == ("solana", "SOL", sig, str(position))
    assert (int(payment.amount), payment.block_height, payment.status) == (
        sol.due(invoice),
        sol.ledger.transaction(sig).slot,
        PaymentStatus.PENDING,
    )
    assert set(sol.state().extra["pending"]) == {sig}

    assert sol.scan().recorded == 0  # still confirmed: nothing new
    assert sol.status(invoice) == (PROCESSING, NONE)

    sol.ledger.finalize()
    assert sol.scan().recorded == 1
    assert sol.status(invoice) == (SETTLED, NONE)
    payment.refresh_from_db()
    assert (payment.status, payment.disposition) == (PaymentStatus.CONFIRMED, PaymentDisposition.APPLIED)
    state = sol.state()
    assert state.extra["pending"] == {} and state.extra["cursors"][request.reference]["until"] == sig

    sol.node.stats_reset()
    quiet = sol.scan()
    assert (quiet.recorded, quiet.uncounted, quiet.strays) == (0, 0, 0)
    assert sol.node.stats.calls["getTransaction"] == 0
    assert Payment.objects.count() == 1


def test_scan_chain_sol_settles_an_invoice(sol):
    invoice = sol.invoice()
    sol.pay(invoice)
    sol.ledger.finalize()
    out = io.StringIO()
    call_command("scan_chain", "SOL", stdout=out)
    assert sol.status(invoice) == (SETTLED, NONE)
    assert "1 part(s) for invoices" in out.getvalue(), out.getvalue()


def test_a_version_0_transfer_with_the_reference_only_in_a_lookup_table(sol):
    invoice = sol.invoice()
    table = sol.ledger.lookup_table_create(sol.payer, [Pubkey.from_string(sol.reference(invoice))])
    sig = sol.pay(invoice, version=0, lookup_tables=[table])
    tx = sol.ledger.transaction(sig)
    assert str(sol.reference(invoice)) not in [str(k) for k in tx.static_keys]
    sol.ledger.finalize()
    sol.scan()
    assert sol.status(invoice) == (SETTLED, NONE)
    [payment] = sol.payments(invoice)
    assert payment.txid == sig and int(payment.position) >= len(tx.static_keys)


def test_a_failed_transaction_counts_nothing(sol, settings):
    settings.SOL_SCAN_REFERENCES = True  # each open reference listed too (the recipient alone is the default)
    invoice = sol.invoice()
    poor = sol.ledger.keypair_funded(3_000_000)
    sig = sol.ledger.pay(poor, sol.merchant.pubkey(), sol.due(invoice), references=[sol.reference(invoice)])
    assert sol.ledger.transaction(sig).err is not None
    sol.scan()
    sol.ledger.finalize()
    report = sol.scan()
    assert (report.recorded, report.strays) == (0, 0)
    assert sol.status(invoice) == (NEW, NONE) and not Payment.objects.exists()
    assert sol.state().extra["cursors"][sol.reference(invoice)]["until"] == sig  # passed over once final


def test_a_transfer_without_a_reference_is_recorded_for_staff_once_final(sol, django_user_model):
    invoice = sol.invoice()
    sol.scan()  # the recipient's listing starts here
    sig = sol.ledger.pay(sol.payer, sol.merchant.pubkey(), 4_000_000)
    assert sol.scan().strays == 0 and not StrayTransfer.objects.exists()  # only confirmed: it may still drop
    sol.ledger.finalize()
    assert sol.scan().strays == 1
    [stray] = StrayTransfer.objects.all()
    position = sol.ledger.transaction(sig).account_keys.index(sol.merchant.pubkey())
    assert (stray.chain, stray.txid, stray.position, stray.kind) == ("solana", sig, str(position), "no_reference")
    assert (stray.address, int(stray.amount), stray.paid_currency) == (sol.recipient, 4_000_000, "SOL")
    assert sol.status(invoice) == (NEW, NONE) and not Payment.objects.exists()
    assert sol.scan().strays == 0 and StrayTransfer.objects.count() == 1
    staff = django_user_model.objects.create_superuser("operator", "a long staff passphrase")
    admin = Client()
    admin.force_login(staff)
    page = admin.get("/admin/billing/straytransfer/?chain=solana").content.decode()
    assert sig in page and "no_reference" in page


def test_two_invoices_paid_by_one_transaction_each_get_their_part(sol):
    first, second = sol.invoice(), sol.invoice("70.00")
    instructions = [
        ix
        for inv in (first, second)
        for ix in sol.ledger.payment_instructions(
            payer=sol.payer.pubkey(), recipient=sol.recipient, lamports=sol.due(inv), references=[sol.reference(inv)]
        )
    ]
    sig = sol.ledger.submit(sol.ledger.build(sol.payer, instructions))
    sol.ledger.finalize()
    assert sol.scan().recorded == 2
    assert sol.status(first) == sol.status(second) == (SETTLED, NONE)
    keys = [str(k) for k in sol.ledger.transaction(sig).account_keys]
    assert sorted((p.txid, p.position, int(p.amount)) for p in Payment.objects.all()) == sorted(
        [
            (sig, str(keys.index(sol.reference(first))), sol.due(first)),
            (sig, str(keys.index(sol.reference(second))), sol.due(second)),
        ]
    )


def test_a_late_payment_settles_late_inside_the_window_and_is_credit_after_it(sol, customer, settings):
    settings.SOL_SCAN_REFERENCES = True  # each open reference listed too (the recipient alone is the default)
    from billing.services import invoices_advance_due

    late = sol.invoice(now=timezone.now() - timedelta(minutes=settings.INVOICE_EXPIRY_MINUTES + 5))
    closed_at = timezone.now() - timedelta(hours=settings.INVOICE_MONITORING_HOURS + 1)
    closed = sol.invoice(now=closed_at - timedelta(minutes=settings.INVOICE_EXPIRY_MINUTES))
    sol.scan()  # the watcher is healthy: expiry does not wait for it
    invoices_advance_due()
    assert sol.status(late)[0] == sol.status(closed)[0] == EXPIRED
    sol.pay(late)
    sol.pay(closed)
    sol.ledger.finalize()
    sol.scan()
    assert sol.status(late) == (SETTLED, InvoiceException.PAID_LATE)
    assert sol.status(closed) == (EXPIRED, InvoiceException.PAID_LATE)
    # Past its monitoring window a reference is no longer listed: the recipient's listing found it.
    cursors = sol.state().extra["cursors"]
    assert sol.reference(late) in cursors and sol.reference(closed) not in cursors
    [entry] = CreditEntry.objects.filter(invoice=closed)
    assert (entry.kind, entry.amount_usd) == ("late_payment", Decimal("35.00"))
    assert credit_balance_usd(account=customer) == Decimal("35.00")


def test_a_confirmed_payment_dropped_before_finalized_is_uncounted_once_its_blockhash_expired(sol):
    invoice = sol.invoice()
    sig = sol.pay(invoice)
    sol.scan()
    assert sol.status(invoice) == (PROCESSING, NONE)
    sol.ledger.drop(sig)  # its fork is abandoned
    sol.ledger.advance(10)
    sol.ledger.finalize()
    assert sol.scan().uncounted == 0  # its blockhash is still valid: it could land yet
    assert sol.status(invoice) == (PROCESSING, NONE)

    sol.ledger.advance(MAX_PROCESSING_AGE)
    sol.ledger.finalize()
    assert sol.scan().uncounted == 1
    [payment] = sol.payments(invoice)
    assert payment.status == PaymentStatus.REMOVED
    assert sol.status(invoice) == (NEW, NONE)
    assert sol.state().extra["pending"] == {}


def test_rate_limiting_is_waited_out_and_a_provider_that_keeps_refusing_fails_the_run(sol, readiness_checks):
    invoice = sol.invoice()
    sol.pay(invoice)
    sol.ledger.finalize()
    sol.node.rate_limit(2, retry_after=1)
    sol.node.rate_limit(1, style="jsonrpc")
    sol.scan()
    assert sol.status(invoice) == (SETTLED, NONE)
    assert sol.waits == [1, 1, 2]  # Retry-After, then the client's own back-off (third attempt)

    sol.waits.clear()
    sol.node.rate_limit(10)
    report = chain_scan(currency="SOL", force=True)
    assert report.error.startswith("rate_limited: ") and "SOL_RPC_MAX_RPS" in report.error
    assert sol.waits == [0.5, 1, 2, 4, 8, 16]
    from billing.chains import watchers

    watchers.readiness_checks_register()
    check = Client().get("/readyz").json()["checks"]["chain:solana"]
    assert check["ok"] is False and check["error"].startswith("rate_limited")


def test_a_node_on_another_cluster_is_refused(sol, settings, readiness_checks):
    invoice = sol.invoice()
    sol.pay(invoice)
    sol.ledger.finalize()
    settings.SOL_CLUSTER = "mainnet-beta"
    report = chain_scan(currency="SOL", force=True)
    assert report.error.startswith("wrong_cluster: ") and "SOL_CLUSTER=mainnet-beta" in report.error
    assert not Payment.objects.exists() and sol.status(invoice) == (NEW, NONE)
    from billing.chains import watchers

    watchers.readiness_checks_register()
    check = Client().get("/readyz").json()["checks"]["chain:solana"]
    assert check["ok"] is False and "SOL_CLUSTER=mainnet-beta" in check["error"]
    rows = {row["code"]: row for row in Client().get("/api/v1/currencies").json()}
    assert (rows["SOL"]["chain"], rows["SOL"]["health"]["ok"]) == ("solana", False)

    settings.SOL_CLUSTER = "localnet"
    settings.SOL_GENESIS_HASH = GENESIS_HASHES["devnet"]  # a pinned hash the node does not have
    assert chain_scan(currency="SOL", force=True).error.startswith("wrong_cluster: ")
    settings.SOL_GENESIS_HASH = sol.ledger.genesis_hash
    sol.scan()
    assert sol.status(invoice) == (SETTLED, NONE)
    check = Client().get("/readyz").json()["checks"]["chain:solana"]
    assert (check["ok"], check["currency"], check["blocks_behind"]) == (True, "SOL", 0)


def test_health_in_readyz_currencies_and_admin(sol, readiness_checks, django_user_model):
    from billing.chains import watchers

    sol.scan()
    watchers.readiness_checks_register()
    check = Client().get("/readyz").json()["checks"]["chain:solana"]
    assert (check["ok"], check["currency"], check["currencies"]) == (True, "SOL", ["SOL"])
    rows = {row["code"]: row for row in Client().get("/api/v1/currencies").json()}
    assert (rows["SOL"]["chain"], rows["SOL"]["network"], rows["SOL"]["health"]["ok"]) == (
        "solana",
        "solana-localnet",
        True,
    )
    staff = django_user_model.objects.create_superuser("operator", "a long staff passphrase")
    admin = Client()
    admin.force_login(staff)
    page = admin.get("/admin/billing/chainstate/").content.decode()
    assert "solana" in page and "icon-yes.svg" in page


def test_beat_schedules_a_scan_of_solana(monkeypatch):
    import importlib

    import config.settings as base

    monkeypatch.setenv("SOL_RECIPIENT", "placeholder")
    monkeypatch.setenv("SOL_RPC_URL", "http://127.0.0.1:1")
    monkeypatch.setenv("CHAIN_SCAN_SECONDS", "7")
    try:
        fresh = importlib.reload(base)
        entry = fresh.CELERY_BEAT_SCHEDULE["billing.chain_scan.SOL"]
        assert entry == {"task": "billing.chain_scan", "schedule": 7.0, "args": ("SOL",), "options": {"expires": 7.0}}
    finally:
        monkeypatch.undo()
        importlib.reload(base)
    assert "billing.chain_scan.SOL" not in importlib.import_module("config.settings").CELERY_BEAT_SCHEDULE


def test_from_height_lists_every_watched_reference_again(sol):
    invoice = sol.invoice()
    sig = sol.pay(invoice)
    sol.ledger.finalize()
    sol.scan()
    Payment.objects.all().delete()  # as if never seen: listing again finds it
    sol.scan()
    assert not Payment.objects.exists()  # the cursor is past it
    out = io.StringIO()
    call_command("scan_chain", "SOL", "--from-height", "1", stdout=out)
    assert "listed again" in out.getvalue()
    [payment] = sol.payments(invoice)
    assert payment.txid == sig and payment.status == PaymentStatus.CONFIRMED


@pytest.mark.slow  # makes over a thousand transactions
def test_more_than_a_thousand_signatures_on_one_reference_across_runs(sol, settings):
    settings.SOL_SCAN_REFERENCES = True  # each open reference listed too (the recipient alone is the default)
    settings.SOL_SCAN_MAX_PAGES = 1  # one page of 1,000 per address and run: the listing is cut
    invoice = sol.invoice()
    sol.pay(invoice)
    bystander = sol.ledger.keypair_funded(10**9)
    for _ in range(1000):
        sol.ledger.pay(sol.payer, bystander.pubkey(), 1, references=[sol.reference(invoice)])
    sol.ledger.finalize()
    cut = sol.scan()
    assert not cut.caught_up and sol.status(invoice) == (NEW, NONE)
    assert sol.state().extra["cursors"][sol.reference(invoice)]["before"]
    resumed = sol.scan()  # a new run goes on from where the last one stopped (ChainState.extra)
    assert resumed.caught_up and resumed.recorded == 1
    assert sol.status(invoice) == (SETTLED, NONE)
    assert "before" not in sol.state().extra["cursors"][sol.reference(invoice)]


def test_a_payment_staff_recorded_first_is_the_one_the_watcher_sees(sol):
    from billing import services

    invoice = sol.invoice()
    sig = sol.pay(invoice)
    position = [str(k) for k in sol.ledger.transaction(sig).account_keys].index(sol.reference(invoice))
    manual = services.payment_record_manual(
        invoice_number=invoice.number,
        txid=sig,
        amount=sol.due(invoice),
        confirmations=1,
        output_index=position,
        actor=None,
        reason="customer sent the signature",
    )
    assert manual.position == str(position)
    sol.ledger.finalize()
    sol.scan()
    assert [p.pk for p in Payment.objects.all()] == [manual.pk]
    assert sol.status(invoice) == (SETTLED, NONE)


def test_the_watcher_is_named_by_currency_or_chain(sol):
    assert watcher_for(currency="sol") is watcher_for(currency="solana")


@pytest.mark.parametrize(
    ("setting", "value", "message"),
    [
        ("SOL_RPC_URL", "mainnet.example/?api-key=s3cret", "SOL_RPC_URL must look like https://host"),
        ("SOL_GENESIS_HASH", "not-base58-0OIl", "SOL_GENESIS_HASH is"),
        ("SOL_CLUSTER", "mainnet", "SOL_CLUSTER is 'mainnet'"),
    ],
)
def test_malformed_watcher_settings_are_refused_at_start_up(sol, settings, setting, value, message):
    from django.core.exceptions import ImproperlyConfigured

    from billing.chains.config import chain_config_validate

    chain_config_validate()
    setattr(settings, setting, value)
    with pytest.raises(ImproperlyConfigured, match=message) as refused:
        chain_config_validate()
    assert "s3cret" not in str(refused.value)


def test_recipient_only_passes_cost_three_calls_and_still_find_payments(sol, settings):
    settings.SOL_SCAN_REFERENCES = False
    invoices = [sol.invoice() for _ in range(3)]
    sol.scan()  # the recipient's listing starts at its newest finalized transaction
    sig = sol.pay(invoices[1])
    sol.ledger.finalize()
    sol.node.stats_reset()
    sol.scan()
    assert [sol.status(i)[0] for i in invoices] == [NEW, SETTLED, NEW]
    assert sol.payments(invoices[1])[0].txid == sig
    assert sol.node.stats.calls["getSignaturesForAddress"] == 1  # the recipient's, not one per invoice
    sol.node.stats_reset()
    sol.scan()
    assert dict(sol.node.stats.calls) == {"getGenesisHash": 1, "getSlot": 2, "getSignaturesForAddress": 1}


def test_the_recipient_only_first_pass_reaches_back_to_the_oldest_watched_invoice(sol, settings):
    """Paid and finalized before the watcher's first pass: the recipient's first listing
    starts below the oldest watched invoice, not at its newest transaction (the payment)."""
    settings.SOL_SCAN_REFERENCES = False
    early, late = sol.invoice(), sol.invoice()
    sig = sol.pay(early)
    sol.ledger.finalize()
    sol.node.stats_reset()
    sol.scan()
    assert sol.status(early) == (SETTLED, NONE) and sol.status(late)[0] == NEW
    assert sol.payments(early)[0].txid == sig
    assert sol.node.stats.calls["getSignaturesForAddress"] == 2  # the walk back, then the listing
    sol.node.stats_reset()
    sol.scan()  # quiet: a handful of calls, whatever the number of invoices
    assert dict(sol.node.stats.calls) == {"getGenesisHash": 1, "getSlot": 2, "getSignaturesForAddress": 1}


def test_a_run_that_dies_mid_record_commits_nothing_and_the_next_one_records_it_all(sol, monkeypatch):
    from billing import services

    first, second = sol.invoice(), sol.invoice()
    sol.pay(first)
    sol.pay(second)
    sol.ledger.finalize()
    real = services.payment_observe
    seen = []

    def dies_on_the_second(**kwargs):
        seen.append(kwargs["observation"].txid)
        if len(seen) == 2:
            raise RuntimeError("worker killed")
        return real(**kwargs)

    monkeypatch.setattr(services, "payment_observe", dies_on_the_second)
    with pytest.raises(RuntimeError, match="worker killed"):
        chain_scan(currency="SOL", force=True)
    assert not Payment.objects.exists() and "cursors" not in sol.state().extra
    assert sol.state().last_error.startswith("internal: RuntimeError")
    monkeypatch.setattr(services, "payment_observe", real)
    assert sol.scan().recorded == 2
    assert sol.status(first) == sol.status(second) == (SETTLED, NONE)


def test_the_provider_key_in_the_url_is_never_shown(sol, settings, readiness_checks):
    settings.SOL_RPC_URL = "http://127.0.0.1:9/v2/k3y-s3cret?api-key=s3cret"  # nothing listens on port 9
    report = chain_scan(currency="SOL", force=True)
    assert report.error.startswith("unreachable: ") and "http://127.0.0.1:9" in report.error
    from billing.chains import watchers

    watchers.readiness_checks_register()
    check = Client().get("/readyz").json()["checks"]["chain:solana"]
    assert check["ok"] is False and "s3cret" not in str(check) and "s3cret" not in sol.state().last_error
