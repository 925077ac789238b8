"""Test-side glue over the regtest node (`devtools.litecoind`): hand out fresh
destinations and point a currency at the node through the billing engine.

Starting and stopping nodes lives in `devtools.litecoind` (`regtest_node_start`
fails, never skips, when litecoind is missing), where the sandbox and the
benchmark use it too.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from devtools.litecoind import RegtestNode, WatchOnlyAccount


@dataclass(frozen=True)
class Destination:
    index: int
    address: str
    script_hex: str


@dataclass
class Destinations:
    """Hands out addresses of the session's watch-only account, never twice.

    Tests share one node; fresh destinations keep one test's payments out of
    another's scans.
    """

    account: WatchOnlyAccount
    _next: itertools.count = field(default_factory=itertools.count)

    def new(self) -> Destination:
        index = next(self._next)
        return Destination(index, self.account.address(index), self.account.script_hex(index))

    def many(self, n: int) -> list[Destination]:
        return [self.new() for _ in range(n)]


@dataclass
class WatchedChain:
    """One currency (BTC or LTC) configured against the regtest node, with a
    fresh watch-only account, for tests that go through the billing engine."""

    currency: str
    node: RegtestNode
    account: WatchOnlyAccount
    customer: object

    def invoice(self, total: str = "9.00", *, now=None):
        from decimal import Decimal

        from billing import services

        amount = Decimal(total)
        return services.invoice_create(
            account=self.customer,
            payable=("test", 0),
            description="Chain test",
            lines=[services.LineSpec("GPU time", Decimal(1), amount, amount)],
            currency=self.currency,
            now=now,
        )

    def due(self, invoice) -> int:
        return int(invoice.active_request.amount_due)

    def pay(self, invoice, amount: int | None = None) -> str:
        """Pay the invoice's destination (by its script, whichever chain it was derived for)."""
        request = invoice.active_request
        return self.node.send_to_script(request.match_key, self.due(invoice) if amount is None else amount)

    def scan(self, **kwargs):
        from billing.chains.watchers import chain_scan

        kwargs.setdefault("force", True)
        report = chain_scan(currency=self.currency, **kwargs)
        assert not report.error, report.error
        return report

    @staticmethod
    def reload(invoice):
        from billing.models import Invoice

        return Invoice.objects.get(pk=invoice.pk)

    @staticmethod
    def payments(invoice) -> list:
        from billing.models import Payment

        return list(Payment.objects.filter(invoice=invoice).order_by("id"))

    def state(self):
        from billing.chains.utxo.watcher import FAMILIES
        from billing.models import ChainState

        return ChainState.objects.get(chain=FAMILIES[self.currency].chain)


def chain_configure(settings, *, currency: str, node: RegtestNode, customer) -> WatchedChain:
    """Point `currency` at `node` with a fresh regtest account; cursor at the node's tip."""
    from billing.chains.utxo.watcher import bitcoin_cursor_set, process_state_clear
    from devtools.litecoind import watch_only_account_generate

    account = watch_only_account_generate(hrp=node.hrp)
    setattr(settings, f"{currency}_XPUB", account.vpub)
    setattr(settings, f"{currency}_NETWORK", "regtest")
    setattr(settings, f"{currency}_RPC_URL", node.url)
    settings.MANUAL_RATES_USD = "LTC=90,BTC=95000"
    process_state_clear()
    bitcoin_cursor_set(currency=currency, height=node.height())
    return WatchedChain(currency, node, account, customer)


def chain_task_run(currency: str, capture) -> dict:
    """One run of the periodic watcher task for `currency`'s chain, with what its
    commits trigger (signals to rentals): `capture` is pytest-django's
    django_capture_on_commit_callbacks."""
    from billing.tasks import chain_scan as chain_scan_task

    with capture(execute=True):
        result = chain_scan_task.apply(args=(currency,)).get()
    assert result["error"] == "" and result["skipped"] == "", result
    return result


def order_place(customer, customer_api, currency: str) -> tuple[dict, str]:
    """The end-to-end tests' order, placed through the API: one L4 in PDX-1 for a
    week, paid in `currency`, with a fresh SSH key. Its answer, checked open, and
    the public key the rental must hand over."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    from accounts.services import ssh_key_add

    public_key = (
        ed25519.Ed25519PrivateKey.generate()
        .public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
    )
    key = ssh_key_add(account=customer, public_key=public_key, name="laptop")
    body = {
        "region": "PDX-1",
        "gpu": "l4",
        "gpu_count": 1,
        "term": "weekly",
        "terms": 1,
        "template": "ubuntu-24.04",
        "addons": [],
        "ssh_keys": [key.pk],
        "pay_currency": currency,
    }
    created = customer_api.post("/api/v1/orders", body, format="json")
    assert created.status_code == 201, created.json()
    order = created.json()
    invoice = order["invoice"]
    assert (order["status"], invoice["status"], invoice["pay_currency"]) == ("awaiting_payment", "new", currency)
    return order, public_key


def order_settled_becomes_a_rental(customer_api, order: dict, public_key: str) -> dict:
    """After the watcher settled `order`'s invoice: the order is paid, its rental
    waits for hand-over with a provisioning job carrying the customer's key, and
    handing it over makes it active. The active rental's answer."""
    from rentals.models import ProvisioningJob
    from rentals.services import rental_activate

    invoice = order["invoice"]
    body = customer_api.get(f"/api/v1/invoices/{invoice['id']}").json()
    assert (body["status"], body["exception"]) == ("settled", "none")
    assert customer_api.get(f"/api/v1/orders/{order['id']}").json()["status"] == "paid"
    [rental] = customer_api.get("/api/v1/rentals").json()["results"]
    assert (rental["status"], rental["gpu"], rental["region"]) == ("provisioning", "l4", "PDX-1")
    job = ProvisioningJob.objects.get(rental_id=rental["id"])
    assert job.action == "provision" and job.payload["rental"]["ssh_keys"] == [public_key]

    rental_activate(
        rental_id=rental["id"], ipv4="203.0.113.7", ipv6_prefix="2001:db8:7::/64", actor=None, reason="handed over"
    )
    [rental] = customer_api.get("/api/v1/rentals").json()["results"]
    assert (rental["status"], rental["ipv4"]) == ("active", "203.0.113.7")
    return rental


def xmr_destinations_bulk_create(invoice, *, first: int, count: int) -> None:
    """`count` more watched XMR destinations on `invoice`, subaddresses (0, first) on:
    earlier quotes of it (inactive requests) written in bulk, for tests at scale.
    The watcher matches on match_key alone; the address is only shown to a payer."""
    from billing.models import PaymentRequest

    quote = invoice.active_request
    rows = [
        PaymentRequest(
            invoice=invoice,
            currency="XMR",
            network=quote.network,
            address=f"{quote.address[:80]}-{index}",
            match_key=f"0/{index}",
            keyset=quote.keyset,
            derivation_index=index,
            amount_due=quote.amount_due,
            amount_usd=quote.amount_usd,
            rate_usd=quote.rate_usd,
            rate_source=quote.rate_source,
            rate_at=quote.rate_at,
            payment_uri=quote.payment_uri,
            created_at=quote.created_at,
            expires_at=quote.expires_at,
            is_active=False,
        )
        for index in range(first, first + count)
    ]
    # A batch stays well under the 65,535 parameters a PostgreSQL statement takes (a row binds ~17).
    PaymentRequest.objects.bulk_create(rows, batch_size=2_000)


def scan_losing_the_lease_once_recorded(scan, monkeypatch, *, chain: str, block_hash: str, **kwargs):
    """`scan(**kwargs)` as a run whose lease another run takes at its first renewal after
    it recorded `block_hash` on `chain` (it stalled past the lease meanwhile), then that
    lease expired as the other run's would: its report."""
    from datetime import timedelta

    from django.utils import timezone

    from billing.chains import machinery
    from billing.models import ChainBlock
    from core.models import Lease

    real = machinery.chain_run

    def run(watcher, *, renew, **options):
        def renewing():
            if ChainBlock.objects.filter(chain=chain, block_hash=block_hash).exists():
                Lease.objects.filter(name=f"chain_scan:{chain}").update(owner="another-worker")
            return renew()

        return real(watcher, renew=renewing, **options)

    monkeypatch.setattr(machinery, "chain_run", run)
    try:
        report = scan(**kwargs)
    finally:
        monkeypatch.setattr(machinery, "chain_run", real)
    Lease.objects.filter(name=f"chain_scan:{chain}").update(expires_at=timezone.now() - timedelta(seconds=1))
    return report
