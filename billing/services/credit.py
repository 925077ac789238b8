"""The account credit ledger: every row appended under the balance's lock,
the balance never negative; invoices paid from credit; staff adjustments and
refunds sent from outside."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from billing import signals
from billing.currencies import CURRENCIES
from billing.models import (
    CreditBalance,
    CreditEntry,
    CreditKind,
    Invoice,
    InvoiceException,
    InvoiceStatus,
    Payment,
    PaymentDisposition,
    PaymentStatus,
)
from billing.rates import rate_market_at
from billing.selectors import invoice_has_payments, invoice_received_usd
from billing.services.common import invoice_lock, invoice_transition, log, reason_required
from core.audit import AuditAction, audit_record
from core.errors import Conflict, DomainError
from core.money import cents, cents_down


def payment_value_as_buying_nothing(
    *, payment: Payment, markets: dict[tuple[str, datetime], Any] | None = None
) -> None:
    """A payment a watcher saw whose money bought nothing in the end (its
    invoice expired short; or it paid a renewal of a rental its customer
    cancelled before it could apply): it counts at the lower of its quote's
    locked rate and the market's when it was seen (rate_market_at), as coins
    that buy nothing do (payments.`_late_rate`). At the locked rate, a short
    payment left to expire, or a renewal paid while it confirmed and the rental
    then cancelled, was a free option on the coin: sent once the price had
    fallen below a renewal's 24-hour lock, it became credit at the old price.
    Staff-recorded payments keep their rate, as they do at any time. `markets`:
    rates read already (outputs of one transaction share one sighting time)."""
    if payment.source != "watcher":
        return
    request = payment.request
    key = (request.currency, payment.first_seen_at)
    if markets is not None and key in markets:
        market = markets[key]
    else:
        market = rate_market_at(currency=request.currency, now=payment.first_seen_at)
        if markets is not None:
            markets[key] = market
    rate = payment.late_rate_usd or request.rate_usd
    if market is None or market >= rate:
        return
    log.info("payment %s bought nothing: valued at %s USD a coin, the market's when seen", payment, market)
    payment.late_rate_usd = market
    payment.amount_usd = cents_down(Decimal(int(payment.amount)) * market / CURRENCIES[request.currency].scale)
    payment.save(update_fields=["late_rate_usd", "amount_usd"])


def _balance_lock(account_id: int) -> CreditBalance:
    try:
        with transaction.atomic():
            CreditBalance.objects.get_or_create(account_id=account_id)
    except IntegrityError:
        pass
    return CreditBalance.objects.select_for_update().get(account_id=account_id)


def credit_post(
    *,
    account_id: int,
    kind: str,
    amount_usd: Decimal,
    invoice: Invoice | None = None,
    payment: Payment | None = None,
    actor: Any = None,
    reason: str = "",
    refund: dict[str, Any] | None = None,
) -> CreditEntry:
    """Append one ledger row and move the balance, under the balance row's lock.
    A debit larger than the balance is refused: the balance never goes negative."""
    amount = cents(amount_usd)
    if amount == 0:
        raise DomainError("invalid", "A ledger entry moves a non-zero amount.")
    with transaction.atomic():
        balance = _balance_lock(account_id)
        after = balance.balance_usd + amount
        if after < 0:
            raise Conflict(
                "insufficient_credit",
                f"The account has {balance.balance_usd} USD of credit; {-amount} USD is needed.",
                details={"credit_usd": f"{balance.balance_usd:.2f}", "needed_usd": f"{-amount:.2f}"},
            )
        balance.balance_usd = after
        balance.save(update_fields=["balance_usd", "updated_at"])
        refund = refund or {}
        entry = CreditEntry.objects.create(
            account_id=account_id,
            kind=kind,
            amount_usd=amount,
            balance_after_usd=after,
            invoice=invoice,
            payment=payment,
            created_by=actor if getattr(actor, "pk", None) else None,
            reason=reason,
            refund_currency=refund.get("currency", ""),
            refund_destination=refund.get("destination", ""),
            refund_amount=refund.get("amount"),
            refund_txid=refund.get("txid", ""),
        )
    transaction.on_commit(
        lambda: signals.credit_changed.send(sender=CreditEntry, account_id=account_id, balance_usd=after)
    )
    return entry


@transaction.atomic
def invoice_pay_with_credit(
    *, invoice_id: int, account: Any, actor: Any = None, now: datetime | None = None
) -> Invoice:
    """Settle an open invoice from account credit when the credit covers it all.
    `actor`: who asked, for the audit trail (default: `account`)."""
    now = now or timezone.now()
    invoice = invoice_lock(invoice_id=invoice_id, account=account)
    if invoice.status != InvoiceStatus.NEW:
        raise Conflict("invoice_not_open", f"This invoice is {invoice.status}.", details={"status": invoice.status})
    if invoice_has_payments(invoice=invoice):
        raise Conflict("invoice_has_payments", "This invoice already received a payment; pay the rest on chain.")
    entry = credit_post(
        account_id=invoice.account_id,
        kind=CreditKind.INVOICE_PAYMENT,
        amount_usd=-invoice.total_usd,
        invoice=invoice,
        reason=f"Paid {invoice.number} from credit",
    )
    invoice_transition(
        invoice=invoice, status=InvoiceStatus.SETTLED, exception=InvoiceException.NONE, now=now, via="credit"
    )
    audit_record(
        actor=account if actor is None else actor,
        action=AuditAction.INVOICE_PAY_WITH_CREDIT,
        obj=invoice,
        reason=f"Paid {invoice.number} from credit",
        changes={"amount_usd": invoice.total_usd, "credit_after_usd": entry.balance_after_usd},
    )
    return invoice


def account_closing_check(*, account_id: int) -> None:
    """An account is not closed while it holds credit: the money is the
    customer's, and a closed account can neither spend it nor ask for it. Staff
    refund it first (credit_refund_record); then the account may close."""
    balance = CreditBalance.objects.select_for_update().filter(account_id=account_id).first()
    if balance is not None and balance.balance_usd > 0:
        raise Conflict(
            "account_has_credit",
            f"This account holds {balance.balance_usd:.2f} USD of credit. Spend it, or ask staff to refund it, "
            "before closing the account.",
            details={"credit_usd": f"{balance.balance_usd:.2f}"},
        )


@transaction.atomic
def credit_adjust(*, account_id: int, amount_usd: Decimal, reason: str, actor: Any) -> CreditEntry:
    """A staff correction of an account's credit, up or down, with a reason."""
    reason = reason_required(reason)
    entry = credit_post(
        account_id=account_id, kind=CreditKind.ADJUSTMENT, amount_usd=amount_usd, actor=actor, reason=reason
    )
    audit_record(
        actor=actor,
        action=AuditAction.CREDIT_ADJUST,
        obj=entry,
        reason=reason,
        changes={"amount_usd": str(entry.amount_usd), "balance_after_usd": str(entry.balance_after_usd)},
    )
    return entry


@transaction.atomic
def credit_refund_record(
    *,
    account_id: int,
    amount_usd: Decimal,
    currency: str,
    destination: str,
    amount: int,
    txid: str,
    reason: str,
    actor: Any,
) -> CreditEntry:
    """Staff sent a refund from outside the system (the server holds no spending
    key): record it against the credit, with where it went and its txid."""
    reason = reason_required(reason)
    if currency.upper() not in CURRENCIES:
        raise DomainError(
            "invalid",
            "Say in which currency the refund was sent.",
            details={"currency": currency, "currencies": list(CURRENCIES)},
        )
    if amount_usd <= 0 or amount <= 0 or not destination or not txid:
        raise DomainError("invalid", "A refund needs a positive amount, a destination and a transaction id.")
    entry = credit_post(
        account_id=account_id,
        kind=CreditKind.REFUND,
        amount_usd=-amount_usd,
        actor=actor,
        reason=reason,
        refund={"currency": currency.upper(), "destination": destination, "amount": amount, "txid": txid},
    )
    audit_record(
        actor=actor,
        action=AuditAction.CREDIT_REFUND,
        obj=entry,
        reason=reason,
        changes={"amount_usd": str(amount_usd), "currency": currency, "txid": txid},
    )
    return entry


@transaction.atomic
def invoice_credit_unfulfilled(
    *, invoice_id: int, reason: str, keep_usd: Decimal = Decimal(0), bought_nothing: bool = False
) -> CreditEntry | None:
    """A settled invoice whose subject can no longer be delivered (paid too late
    for stock that is gone, a renewal of a rental ended meanwhile): what it
    received becomes account credit, once. What it received (invoice_received_usd):
    the payments applied to it at their value and the credit spent on it, at most
    its total (an excess was credited already, as an over-payment). Less than the
    total where it settled a hair short, inside the under-payment tolerance, or
    on late coins worth less than their quote; nothing where staff marked it
    settled with nothing received (staff credit by hand what came some other way).
    `keep_usd`: the part of it that paid for something delivered all the same (a
    renewal's egress usage), kept from what is credited back. `bought_nothing`:
    the customer's own doing (a renewal paid for a rental they cancelled): its
    payments count as buying nothing (payment_value_as_buying_nothing), not at
    their quote's rate, and what it credited already as an over-payment is taken
    from what comes back."""
    invoice = invoice_lock(invoice_id=invoice_id)
    if invoice.status != InvoiceStatus.SETTLED:
        raise Conflict("invoice_not_settled", "Only a settled invoice can be credited back.")
    existing = invoice.credit_entries.filter(kind=CreditKind.UNFULFILLED).first()
    if existing is not None:
        return existing
    if bought_nothing:
        applied = list(
            invoice.payments.exclude(status=PaymentStatus.REMOVED)
            .filter(disposition=PaymentDisposition.APPLIED)
            .select_related("request")
        )
        markets: dict[tuple[str, datetime], Any] = {}
        for payment in applied:
            payment_value_as_buying_nothing(payment=payment, markets=markets)
    # Valued again, what all of it was worth when seen comes back as credit once: less what
    # was credited already as its over-payment.
    received = invoice_received_usd(invoice=invoice, net_of_overpayment=bought_nothing) - keep_usd
    if received <= 0:
        log.info("%s cannot be delivered and received nothing to credit back (%s)", invoice.number, reason)
        return None
    entry = credit_post(
        account_id=invoice.account_id,
        kind=CreditKind.UNFULFILLED,
        amount_usd=received,
        invoice=invoice,
        reason=reason,
    )
    audit_record(
        actor=None,
        action=AuditAction.INVOICE_CREDIT_UNFULFILLED,
        obj=invoice,
        reason=reason,
        changes={"amount_usd": str(received), "total_usd": str(invoice.total_usd), "kept_usd": str(keep_usd)},
    )
    return entry
