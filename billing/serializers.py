from __future__ import annotations

from typing import Any

from django.conf import settings
from django.urls import reverse
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from billing.currencies import CURRENCIES
from billing.models import Invoice, Payment, PaymentRequest, PaymentStatus
from billing.selectors import CheckoutStatus, invoice_progress
from billing.services import confirmations_required
from core.api import RelatedRows, represent
from core.db import related_all
from core.errors import DomainError
from core.fields import BaseUnitsField, MoneyField


def checkout_url(invoice: Invoice) -> str:
    """The absolute address of an invoice's checkout page."""
    return str(settings.SITE_URL).rstrip("/") + reverse("checkout", kwargs={"token": invoice.checkout_token})


class RateOutput(serializers.Serializer[Any]):
    usd = serializers.CharField(source="rate_usd")
    # Declared fields are taken off the class (the serializer's metaclass): not Field.source, as the stubs see it.
    source = serializers.CharField(source="rate_source")  # type: ignore[assignment]
    at = serializers.DateTimeField(source="rate_at")


class PaymentRequestOutput(serializers.Serializer[Any]):
    currency = serializers.CharField()
    network = serializers.CharField()
    address = serializers.CharField()
    reference = serializers.CharField()
    amount = BaseUnitsField(source="amount_due")
    amount_display = serializers.SerializerMethodField(help_text="The amount in whole coins.")
    amount_usd = MoneyField(
        help_text="The USD this request asks for: the invoice's total, or the rest of a partly paid invoice."
    )
    payment_uri = serializers.CharField()
    rate = RateOutput(source="*")
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField()
    active = serializers.BooleanField(source="is_active")

    def get_amount_display(self, req: PaymentRequest) -> str:
        return CURRENCIES[req.currency].coins_str(int(req.amount_due))


class PaymentOutput(serializers.Serializer[Any]):
    currency = serializers.CharField()
    txid = serializers.CharField()
    index = serializers.IntegerField(source="output_index", help_text="Output or log index; -1 where there is none.")
    position = serializers.CharField(
        help_text="Where in the transaction: the output, tx, call:<trace address>, log:<index> or balance:<address>."
    )
    amount = BaseUnitsField()
    amount_display = serializers.SerializerMethodField()
    amount_usd = MoneyField(
        help_text="What it is worth, rounded down to the cent: at its quote's locked rate, or at late_rate_usd."
    )
    late_rate_usd = serializers.CharField(
        allow_null=True,
        help_text="Seen after its quote's rate lock ended, when the market rate then was lower: the rate (USD "
        "per whole coin) it counts at. null: the quote's locked rate.",
    )
    confirmations = serializers.IntegerField()
    confirmations_required = serializers.SerializerMethodField()
    status = serializers.ChoiceField(choices=PaymentStatus.choices)
    disposition = serializers.CharField()
    first_seen_at = serializers.DateTimeField()
    confirmed_at = serializers.DateTimeField(allow_null=True)

    def get_amount_display(self, p: Payment) -> str:
        return CURRENCIES[p.currency].coins_str(int(p.amount))

    def get_confirmations_required(self, p: Payment) -> int:
        return confirmations_required(currency=p.currency)


class InvoiceLineOutput(serializers.Serializer[Any]):
    position = serializers.IntegerField()
    code = serializers.CharField()
    description = serializers.CharField()
    quantity = serializers.DecimalField(max_digits=12, decimal_places=4, coerce_to_string=True, normalize_output=True)
    unit_usd = MoneyField()
    discount_usd = MoneyField()
    amount_usd = MoneyField()


class PaymentSummaryOutput(serializers.Serializer[Any]):
    """What happened to what was paid to an invoice (billing.selectors.invoice_progress)."""

    counted_usd = MoneyField(
        help_text="What the payments that count toward this invoice pay of it (seen, confirming or applied)."
    )
    due_usd = MoneyField(help_text="What is left to pay while the invoice can be paid (new or expired), else 0.00.")
    credited_usd = MoneyField(
        help_text="What payments to this invoice became account credit: an over-payment, money that arrived "
        "too late, or what was left when it closed unpaid."
    )
    credit_at = serializers.DateTimeField(
        allow_null=True,
        help_text="Expired with money counted: when that money becomes account credit, unless a fresh quote "
        "for the rest (POST .../requote) is paid first.",
    )


class InvoiceOutput(serializers.Serializer[Any]):
    """An invoice with its active payment request's fields at the top level."""

    id = serializers.IntegerField()
    number = serializers.CharField()
    status = serializers.CharField()
    exception = serializers.CharField()
    description = serializers.CharField()
    subject = serializers.CharField(source="subject_ref", help_text='What it pays for: "<kind>:<id>".')
    subject_kind = serializers.CharField(help_text="order, renewal or usage.")
    subject_id = serializers.IntegerField(help_text="The order's id, or the rental's for a renewal or usage.")
    amount_usd = MoneyField(source="total_usd")
    lines = RelatedRows(child=InvoiceLineOutput())
    pay_currency = serializers.SerializerMethodField()
    network = serializers.SerializerMethodField()
    amount = serializers.SerializerMethodField(help_text="Amount due in base units of pay_currency (string).")
    amount_display = serializers.SerializerMethodField()
    address = serializers.SerializerMethodField()
    reference = serializers.SerializerMethodField(help_text="Solana Pay reference (SOL only).")
    payment_uri = serializers.SerializerMethodField()
    qr_url = serializers.SerializerMethodField()
    checkout_url = serializers.SerializerMethodField(
        help_text="The invoice's payment page (SITE_URL + /pay/<token>): whoever has it can pay without logging in."
    )
    paid_amount = serializers.SerializerMethodField(help_text="Counted so far to the active request, base units.")
    confirmed_amount = serializers.SerializerMethodField(
        help_text="Confirmed so far to the active request, base units."
    )
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField()
    monitoring_until = serializers.DateTimeField()
    settled_at = serializers.DateTimeField(allow_null=True)
    settled_via = serializers.CharField()
    payment_summary = serializers.SerializerMethodField()
    requests = RelatedRows(child=PaymentRequestOutput())
    payments = RelatedRows(child=PaymentOutput())

    @extend_schema_field(PaymentSummaryOutput)
    def get_payment_summary(self, inv: Invoice) -> dict[str, Any]:
        return represent(PaymentSummaryOutput, invoice_progress(invoice=inv))

    def _req(self, inv: Invoice) -> PaymentRequest | None:
        return inv.active_request

    def get_pay_currency(self, inv: Invoice) -> str | None:
        r = self._req(inv)
        return r.currency if r else None

    def get_network(self, inv: Invoice) -> str | None:
        r = self._req(inv)
        return r.network if r else None

    @extend_schema_field({"type": "string", "nullable": True, "example": "390000"})
    def get_amount(self, inv: Invoice) -> str | None:
        r = self._req(inv)
        return str(int(r.amount_due)) if r else None

    def get_amount_display(self, inv: Invoice) -> str | None:
        r = self._req(inv)
        return CURRENCIES[r.currency].coins_str(int(r.amount_due)) if r else None

    def get_address(self, inv: Invoice) -> str | None:
        r = self._req(inv)
        return r.address if r else None

    def get_reference(self, inv: Invoice) -> str | None:
        r = self._req(inv)
        return (r.reference or None) if r else None

    def get_payment_uri(self, inv: Invoice) -> str | None:
        r = self._req(inv)
        return r.payment_uri if r else None

    def get_qr_url(self, inv: Invoice) -> str | None:
        return reverse("invoice-qr", kwargs={"invoice_id": inv.pk}) if self._req(inv) else None

    def get_checkout_url(self, inv: Invoice) -> str:
        return checkout_url(inv)

    def _sum(self, inv: Invoice, confirmed_only: bool) -> str | None:
        r = self._req(inv)
        if r is None:
            return None
        total = 0
        for p in related_all(inv, "payments"):
            if p.request_id != r.pk or not p.counted:
                continue
            if confirmed_only and p.status != PaymentStatus.CONFIRMED:
                continue
            total += int(p.amount)
        return str(total)

    @extend_schema_field({"type": "string", "nullable": True})
    def get_paid_amount(self, inv: Invoice) -> str | None:
        return self._sum(inv, confirmed_only=False)

    @extend_schema_field({"type": "string", "nullable": True})
    def get_confirmed_amount(self, inv: Invoice) -> str | None:
        return self._sum(inv, confirmed_only=True)


@extend_schema_field({"type": "string", "enum": list(CURRENCIES)})
class CurrencyCodeField(serializers.CharField):
    """A pay currency's code in any case (`usdc`), read as its canonical
    upper-case code (`USDC`); the input's `validate_<field>` refuses an unknown
    one (currency_refusal) with the list of valid codes."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("max_length", 16)
        kwargs.setdefault("help_text", f"One of {', '.join(CURRENCIES)} (any case).")
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> str:
        return super().to_internal_value(data).upper()


def currency_refusal(code: str) -> DomainError | None:
    """`unknown_currency` (with the valid codes) for a code that is none; None for a valid one."""
    if code in CURRENCIES:
        return None
    return DomainError(
        "unknown_currency",
        f"{code!r} is not a pay currency; use one of {', '.join(CURRENCIES)}.",
        details={"currency": code, "currencies": list(CURRENCIES)},
    )


class CurrencyChoiceInput(serializers.Serializer[Any]):
    currency = CurrencyCodeField()

    def validate_currency(self, value: str) -> str:
        refusal = currency_refusal(value)
        if refusal is not None:
            raise refusal
        return value


class RequoteInput(CurrencyChoiceInput):
    currency = CurrencyCodeField(required=False)


class ChainHealthOutput(serializers.Serializer[Any]):
    ok = serializers.BooleanField()
    height = serializers.IntegerField(allow_null=True)
    tip_height = serializers.IntegerField(allow_null=True)
    last_ok_at = serializers.DateTimeField(allow_null=True)
    error = serializers.CharField()


class CurrencyOutput(serializers.Serializer[Any]):
    code = serializers.CharField()
    name = serializers.CharField()
    decimals = serializers.IntegerField()
    unit = serializers.CharField()
    chain = serializers.CharField()
    network = serializers.CharField()
    confirmations = serializers.IntegerField(help_text="Confirmations needed to settle (SOL: finalized = 1).")
    health = ChainHealthOutput()


class CreditEntryOutput(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    kind = serializers.CharField()
    amount_usd = MoneyField()
    balance_after_usd = MoneyField()
    invoice = serializers.CharField(source="invoice.number", allow_null=True, default=None)
    reason = serializers.CharField()
    created_at = serializers.DateTimeField()


class CheckoutStatusOutput(serializers.Serializer[Any]):
    """What the checkout page polls (/pay/<token>/status): language-free facts the
    page's script writes into the page, whose text the server rendered."""

    state = serializers.CharField(help_text="new, seen, paid, expired or invalid")
    status = serializers.CharField(source="invoice.status")
    exception = serializers.CharField(source="invoice.exception")
    request = serializers.SerializerMethodField(help_text="Id of the active payment request: it changes on a switch.")
    currency = serializers.CharField(allow_null=True)
    network = serializers.SerializerMethodField()
    address = serializers.SerializerMethodField()
    amount_due = BaseUnitsField()
    amount_due_display = serializers.SerializerMethodField()
    paid = BaseUnitsField()
    paid_display = serializers.SerializerMethodField()
    due = BaseUnitsField()
    due_display = serializers.SerializerMethodField()
    due_usd = MoneyField(help_text="What is still due is worth, in USD.")
    counted_usd = MoneyField(help_text="What the payments counting toward the invoice pay of it, in USD.")
    pay_uri = serializers.CharField()
    qr_url = serializers.SerializerMethodField()
    confirmations = serializers.IntegerField(allow_null=True)
    confirmations_required = serializers.IntegerField(allow_null=True)
    expires_at = serializers.DateTimeField(source="invoice.expires_at")
    monitoring_until = serializers.DateTimeField(source="invoice.monitoring_until")
    seconds_left = serializers.IntegerField()
    credited_usd = MoneyField()
    credit_at = serializers.DateTimeField(
        allow_null=True, help_text="Expired, partly paid: when what arrived becomes credit unless the rest is paid."
    )
    credited = serializers.SerializerMethodField()
    # Declared fields are taken off the class (the serializer's metaclass): not BaseSerializer.partial.
    partial = serializers.SerializerMethodField()  # type: ignore[assignment]
    paid_over = serializers.SerializerMethodField()
    via_credit = serializers.SerializerMethodField()
    can_switch_currency = serializers.BooleanField()
    can_requote = serializers.BooleanField()
    partial_expired = serializers.SerializerMethodField(
        help_text="Expired with money counted toward it: a fresh quote for the rest, or it becomes credit at credit_at."
    )
    covered = serializers.SerializerMethodField(
        help_text="Expired, but the payments sent (some still confirming) pay it in full."
    )
    final = serializers.SerializerMethodField(help_text="Nothing on the page changes any more: stop polling.")

    def get_request(self, st: CheckoutStatus) -> int | None:
        return st.request.pk if st.request else None

    def get_network(self, st: CheckoutStatus) -> str | None:
        return st.request.network if st.request else None

    def get_address(self, st: CheckoutStatus) -> str | None:
        return st.request.address if st.request else None

    def get_amount_due_display(self, st: CheckoutStatus) -> str:
        return st.coins(st.amount_due)

    def get_paid_display(self, st: CheckoutStatus) -> str:
        return st.coins(st.paid)

    def get_due_display(self, st: CheckoutStatus) -> str:
        return st.coins(st.due)

    def get_qr_url(self, st: CheckoutStatus) -> str | None:
        if st.request is None:
            return None
        # The address in the query tells browsers a new picture when what it encodes changes.
        path = reverse("checkout-qr", kwargs={"token": st.invoice.checkout_token})
        return f"{path}?v={st.request.pk}-{st.due}"

    def get_credited(self, st: CheckoutStatus) -> bool:
        return st.credited_usd > 0

    def get_partial(self, st: CheckoutStatus) -> bool:
        return st.state == "new" and st.counted_usd > 0

    def get_paid_over(self, st: CheckoutStatus) -> bool:
        return st.invoice.exception == "paid_over"

    def get_via_credit(self, st: CheckoutStatus) -> bool:
        return st.invoice.settled_via == "credit"

    def get_partial_expired(self, st: CheckoutStatus) -> bool:
        return st.state == "expired" and st.credit_at is not None and st.can_requote

    def get_covered(self, st: CheckoutStatus) -> bool:
        return st.state == "expired" and st.credit_at is not None and not st.can_requote

    def get_final(self, st: CheckoutStatus) -> bool:
        return st.state in ("paid", "invalid")
