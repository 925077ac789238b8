"""Staff views of invoices, payments, credit and rates. Issued invoices,
payments and ledger rows are read-only: corrections go through the actions
and forms below, which call billing services and record who, when and why."""

from __future__ import annotations

from decimal import Decimal

from django import forms
from django.contrib import admin
from django.utils.html import format_html

from billing import services
from billing.currencies import CURRENCIES
from billing.models import (
    ChainState,
    CreditBalance,
    CreditEntry,
    CreditKind,
    Invoice,
    InvoiceLine,
    Payment,
    PaymentRequest,
    RateSample,
)
from billing.rates import rate_manual_end, rate_manual_set
from billing.selectors import chain_health
from billing.serializers import checkout_url
from core.admin import ReadOnlyAdmin, ReadOnlyInline, ReasonForm, ServiceAddAdmin, reason_action


class InvoiceLineInline(ReadOnlyInline):
    model = InvoiceLine
    fields = ("position", "code", "description", "quantity", "unit_usd", "discount_usd", "amount_usd")


class PaymentRequestInline(ReadOnlyInline):
    model = PaymentRequest
    fields = (
        "currency",
        "network",
        "address",
        "amount_due",
        "rate_usd",
        "rate_source",
        "rate_at",
        "created_at",
        "expires_at",
        "is_active",
    )


class PaymentInline(ReadOnlyInline):
    model = Payment
    fk_name = "invoice"
    fields = (
        "currency",
        "txid",
        "output_index",
        "amount",
        "amount_usd",
        "confirmations",
        "status",
        "disposition",
        "source",
        "first_seen_at",
        "reason",
    )


class RecordPaymentForm(ReasonForm):
    txid = forms.CharField(max_length=128)
    amount = forms.IntegerField(min_value=1, help_text="Base units (satoshi, wei, piconero, lamport, ...).")
    confirmations = forms.IntegerField(min_value=0)
    output_index = forms.IntegerField(initial=0, help_text="Output or log index.")
    currency = forms.ChoiceField(
        choices=[("", "the invoice's active currency")] + [(c, c) for c in CURRENCIES], required=False
    )


def _record_payment(invoice, *, actor, reason, txid, amount, confirmations, output_index, currency):
    services.payment_record_manual(
        invoice_number=invoice.number,
        txid=txid,
        amount=amount,
        confirmations=confirmations,
        output_index=output_index,
        currency=currency or None,
        reason=reason,
        actor=actor,
    )


@admin.register(Invoice)
class InvoiceAdmin(admin.ModelAdmin):
    list_display = (
        "number",
        "account",
        "status",
        "exception",
        "total_usd",
        "pay_currency",
        "created_at",
        "expires_at",
        "settled_at",
        "needs_attention",
    )
    list_filter = ("status", "exception", "requests__currency", "needs_attention", "settled_via")
    search_fields = ("number", "account__username", "subject", "requests__address", "payments__txid")
    date_hierarchy = "created_at"
    list_select_related = ("account",)
    inlines = [InvoiceLineInline, PaymentRequestInline, PaymentInline]
    actions = [
        reason_action(
            name="mark_settled",
            description="Mark settled",
            call=lambda inv, actor, reason: services.invoice_mark_settled(
                invoice_id=inv.pk, actor=actor, reason=reason
            ),
        ),
        reason_action(
            name="mark_invalid",
            description="Mark invalid",
            call=lambda inv, actor, reason: services.invoice_mark_invalid(
                invoice_id=inv.pk, actor=actor, reason=reason
            ),
        ),
        reason_action(
            name="record_payment",
            description="Record a payment received",
            call=_record_payment,
            form_class=RecordPaymentForm,
            single=True,
        ),
    ]

    def get_queryset(self, request):
        return super().get_queryset(request).prefetch_related("requests").distinct()

    @admin.display(description="currency")
    def pay_currency(self, invoice):
        req = invoice.active_request
        return req.currency if req else "-"

    @admin.display(description="checkout page")
    def checkout_page(self, invoice):
        """The payer's page (docs/checkout.md): staff can hand the link on."""
        url = checkout_url(invoice)
        return format_html('<a href="{}" target="_blank" rel="noopener noreferrer">{}</a>', url, url)

    def get_readonly_fields(self, request, obj=None):
        fields = [f.name for f in Invoice._meta.fields if f.name != "checkout_token"]
        return [*fields[:2], "checkout_page", *fields[2:]]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Payment)
class PaymentAdmin(ReadOnlyAdmin):
    list_display = (
        "txid",
        "output_index",
        "currency",
        "amount",
        "amount_usd",
        "confirmations",
        "status",
        "disposition",
        "source",
        "invoice",
        "first_seen_at",
    )
    list_filter = ("chain", "currency", "status", "disposition", "source")
    search_fields = ("txid", "invoice__number", "request__address")
    list_select_related = ("invoice",)


class CreditEntryForm(forms.ModelForm):
    """Staff entries only: an adjustment (up or down) or a refund sent from outside."""

    kind = forms.ChoiceField(choices=[(CreditKind.ADJUSTMENT, "Adjustment"), (CreditKind.REFUND, "Refund sent")])
    amount_usd = forms.DecimalField(
        max_digits=14,
        decimal_places=2,
        help_text="Adjustment: positive adds credit, negative removes it. Refund: the USD value refunded (positive).",
    )
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), required=True)

    class Meta:
        model = CreditEntry
        fields = (
            "account",
            "kind",
            "amount_usd",
            "reason",
            "refund_currency",
            "refund_destination",
            "refund_amount",
            "refund_txid",
        )


@admin.register(CreditEntry)
class CreditEntryAdmin(ServiceAddAdmin):
    list_display = (
        "created_at",
        "account",
        "kind",
        "amount_usd",
        "balance_after_usd",
        "invoice",
        "created_by",
        "reason",
    )
    list_filter = ("kind",)
    search_fields = ("account__username", "invoice__number", "refund_txid", "reason")
    list_select_related = ("account", "invoice", "created_by")
    date_hierarchy = "created_at"
    form = CreditEntryForm

    def add_through_service(self, request, data):
        """Staff entries go through the ledger service (balance lock, audit)."""
        if data["kind"] == CreditKind.REFUND:
            return services.credit_refund_record(
                account_id=data["account"].pk,
                amount_usd=Decimal(data["amount_usd"]),
                currency=data["refund_currency"] or "",
                destination=data["refund_destination"],
                amount=int(data["refund_amount"] or 0),
                txid=data["refund_txid"],
                reason=data["reason"],
                actor=request.user,
            )
        return services.credit_adjust(
            account_id=data["account"].pk,
            amount_usd=Decimal(data["amount_usd"]),
            reason=data["reason"],
            actor=request.user,
        )


@admin.register(CreditBalance)
class CreditBalanceAdmin(ReadOnlyAdmin):
    list_display = ("account", "balance_usd", "updated_at")
    search_fields = ("account__username",)


class ManualRateForm(forms.ModelForm):
    class Meta:
        model = RateSample
        fields = ("currency", "usd", "valid_until", "note")


class EndRateForm(ReasonForm):
    pass


def _end_rate(sample, *, actor, reason):
    rate_manual_end(sample_id=sample.pk, actor=actor, reason=reason)


@admin.register(RateSample)
class RateSampleAdmin(ServiceAddAdmin):
    """Fetched samples are read-only; staff add manual rates (they take
    precedence over the market median until `valid_until`) and end them early."""

    list_display = ("currency", "usd", "source", "observed_at", "valid_until", "created_by", "note")
    list_filter = ("currency", "source")
    date_hierarchy = "observed_at"
    form = ManualRateForm
    actions = [
        reason_action(name="end_manual_rate", description="End manual rate now", call=_end_rate, form_class=EndRateForm)
    ]

    def add_through_service(self, request, data):
        return rate_manual_set(
            currency=data["currency"],
            usd=data["usd"],
            valid_until=data["valid_until"],
            actor=request.user,
            note=data.get("note", ""),
        )


@admin.register(ChainState)
class ChainStateAdmin(ReadOnlyAdmin):
    list_display = ("chain", "healthy", "height", "tip_height", "last_ok_at", "last_error_at", "consecutive_failures")

    @admin.display(boolean=True, description="healthy")
    def healthy(self, state):
        return chain_health(chain=state.chain).ok
