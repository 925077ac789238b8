"""TOY's sandbox (copied as toyfam/sandbox.py; the family names it by its dotted
path, as a family names a devtools module): `sandbox_pay` pays a TOY invoice by
recording the payment a node would show, confirmed with --confirm. `make run`
has nothing to start for it."""

from __future__ import annotations

from collections.abc import Callable

from billing import services
from billing.chains.interface import ScanReport
from billing.currencies import CURRENCIES
from billing.models import Invoice
from devtools.scanning import SandboxPayment

SANDBOX_CODE = "TOY"
SANDBOX_STARTS = "foreground"


def serve_start(*, rates: str, say: Callable[[str], object], warn: Callable[[str], object]) -> None:
    return None


def serve_banner(box: object, *, demo: dict[str, str] | None) -> str:
    return ""


def invoice_pay(*, invoice_number: str, amount: int | None, confirm: bool) -> SandboxPayment:
    invoice = Invoice.objects.get(number=invoice_number)
    request = invoice.requests.get(currency="TOY")
    amount = int(request.amount_due) if amount is None else amount
    confirmations = CURRENCIES["TOY"].confirmations if confirm else 0
    services.payment_observe(
        observation=services.Observation(
            currency="TOY",
            txid="ab" * 32,
            output_index=0,
            match_key=request.match_key,
            amount=amount,
            confirmations=confirmations,
            block_height=7 if confirmations else None,
        )
    )
    invoice.refresh_from_db()
    report = ScanReport(currency="TOY", chain="toychain", skipped="not_watched")
    return SandboxPayment(
        invoice.number, "TOY", request.address, amount, "ab" * 32, 0, invoice.status, invoice.exception, report
    )
