"""Staff views of invoices, payments, credit and rates. Issued invoices,
payments and ledger rows are read-only: corrections go through the actions
and forms below, which call billing services and record who, when and why."""

from __future__ import annotations

from decimal import Decimal

from django import forms
from django.contrib import admin
from django.utils.html import format_html

from billing import services
from billing.currencies import CURRENCIES, amount_label
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
    StrayTransfer,
)
from billing.rates import rate_manual_end, rate_manual_set
from billing.selectors import chain_health
from billing.serializers import checkout_url
from core import display
from core.admin import (
    ReadOnlyAdmin,
    ReadOnlyInline,
    ReasonForm,
    RecordAdmin,
    ServiceAddAdmin,
    json_display,
    reason_action,
    usd_display,
)

# --- How amounts, rates and transactions read ------------------------------------


@admin.display(description="amount due")
def amount_due_coins(request_row):
    return amount_label(request_row.currency, request_row.amount_due)


@admin.display(description="rate (USD per coin)", ordering="rate_usd")
def usd_rate(row):
    return display.price(row.rate_usd)


@admin.display(description="amount")
def payment_coins(payment):
    return amount_label(payment.currency, payment.amount)


@admin.display(description="amount", ordering="amount")
def payment_coins_short(payment):
    return format_html(
        '{}<span class="figure-sub">{}</span>',
        amount_label(payment.currency, payment.amount, with_base_units=False),
        f"{int(payment.amount):,}",
    )


@admin.display(description="transaction", ordering="txid")
def transaction_short(payment):
    """The txid cut to its ends (the whole one is on the payment's page and in its title)."""
    txid = payment.txid
    short = txid if len(txid) <= 20 else f"{txid[:10]}\u2026{txid[-8:]}"
    return format_html('<span class="monospace" title="{}">{}:{}</span>', txid, short, payment.position)


class InvoiceLineInline(ReadOnlyInline):
    model = InvoiceLine
    fields = (
        "position",
        "code",
        "description",
        "quantity",
        usd_display("unit_usd", "unit USD"),
        usd_display("discount_usd", "discount USD"),
        usd_display("amount_usd", "amount USD"),
    )
    readonly_fields = fields


class PaymentRequestInline(ReadOnlyInline):
    model = PaymentRequest
    fields = (
        "currency",
        "network",
        "address",
        amount_due_coins,
        usd_rate,
        "rate_source",
        "rate_at",
        "expires_at",
        "is_active",
    )
    readonly_fields = fields
    verbose_name_plural = "payment requests (each: a currency, a destination, a locked rate)"


class PaymentInline(ReadOnlyInline):
    model = Payment
    fk_name = "invoice"
    fields = (
        transaction_short,
        payment_coins_short,
        usd_display("amount_usd", "USD"),
        "confirmations",
        "status",
        "disposition",
        "source",
        "first_seen_at",
        "reason",
    )
    readonly_fields = fields
    show_change_link = True


class StrayTransferInline(ReadOnlyInline):
    """Transfers to this invoice's addresses that nothing may credit (see Stray transfers)."""

    model = StrayTransfer
    fk_name = "invoice"
    fields = (transaction_short, "kind", "asset", "amount", "needs_review", "removed_at", "first_seen_at")
    readonly_fields = fields
    show_change_link = True
    verbose_name_plural = "stray transfers (never credited: review them)"


class RecordPaymentForm(ReasonForm):
    txid = forms.CharField(max_length=128)
    amount = forms.IntegerField(min_value=1, help_text="Base units (satoshi, wei, piconero, lamport, ...).")
    confirmations = forms.IntegerField(min_value=0)
    output_index = forms.IntegerField(
        initial=0,
        help_text="Output index (BTC, LTC), log index (USDT, USDC) or subaddress index (XMR); ignored for ETH.",
    )
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
class InvoiceAdmin(RecordAdmin):
    """Issued invoices are never edited: corrections are the actions below
    (each with a reason, through the billing services, audited)."""

    list_display = (
        "number",
        "account",
        "status",
        "exception",
        usd_display("total_usd", "total USD"),
        "amount_due",
        "created_at",
        "settled_at",
        "needs_attention",
    )
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "number",
                    "account",
                    "checkout_page",
                    "description",
                    "subject",
                    "status",
                    "exception",
                    "needs_attention",
                )
            },
        ),
        ("Money", {"fields": (usd_display("total_usd", "total USD"), "amount_due", "settled_via")}),
        ("Times (UTC)", {"fields": ("created_at", "expires_at", "monitoring_until", "settled_at")}),
        ("What it pays for", {"fields": (json_display("metadata", "snapshot"),)}),
    )
    # checkout_token is the page's key: shown as the link above, never as a bare value.
    shown_otherwise = ("id", "total_usd", "metadata", "checkout_token")
    list_filter = ("status", "exception", "requests__currency", "needs_attention", "settled_via")
    search_fields = ("number", "account__username", "subject", "requests__address", "payments__txid")
    date_hierarchy = "created_at"
    list_select_related = ("account",)
    inlines = [InvoiceLineInline, PaymentRequestInline, PaymentInline, StrayTransferInline]

    def get_inlines(self, request, obj):
        # Strays are rare: their table shows only on invoices that received one.
        inlines = super().get_inlines(request, obj)
        if obj is None or not obj.stray_transfers.exists():
            inlines = [i for i in inlines if i is not StrayTransferInline]
        return inlines

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

    @admin.display(description="to pay")
    def amount_due(self, invoice):
        """What the active payment request asks for, in whole coins."""
        req = invoice.active_request
        return amount_label(req.currency, req.amount_due, with_base_units=False) if req else display.EMPTY

    @admin.display(description="checkout page")
    def checkout_page(self, invoice):
        """The payer's page (docs/checkout.md): staff can hand the link on."""
        url = checkout_url(invoice)
        return format_html('<a href="{}" target="_blank" rel="noopener noreferrer">{}</a>', url, url)


@admin.register(Payment)
class PaymentAdmin(ReadOnlyAdmin):
    list_display = (
        transaction_short,
        payment_coins_short,
        usd_display("amount_usd", "USD"),
        "confirmations",
        "status",
        "disposition",
        "source",
        "invoice",
        "first_seen_at",
    )
    fieldsets = (
        (None, {"fields": ("invoice", "request", "chain", "currency", "txid", "position", "output_index")}),
        ("Amount", {"fields": (payment_coins, usd_display("amount_usd", "USD at the locked rate"))}),
        (
            "On chain",
            {"fields": ("status", "confirmations", "block_height", "block_hash", "first_seen_at", "confirmed_at")},
        ),
        ("Use", {"fields": ("disposition", "removed_at", "removal_reason")}),
        ("Recorded by staff", {"fields": ("source", "recorded_by", "reason")}),
    )
    shown_otherwise = ("id", "amount", "amount_usd")
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


@admin.display(description="refund amount")
def refund_coins(entry):
    if not entry.refund_currency or entry.refund_amount is None:
        return display.EMPTY
    return amount_label(entry.refund_currency, entry.refund_amount)


@admin.register(CreditEntry)
class CreditEntryAdmin(ServiceAddAdmin):
    list_display = (
        "created_at",
        "account",
        "kind",
        usd_display("amount_usd", "amount USD"),
        usd_display("balance_after_usd", "balance after"),
        "invoice",
        "created_by",
        "reason",
    )
    list_filter = ("kind",)
    search_fields = ("account__username", "invoice__number", "refund_txid", "reason")
    list_select_related = ("account", "invoice", "created_by")
    date_hierarchy = "created_at"
    form = CreditEntryForm
    # A saved entry's page (never editable): the ledger row, amounts as money.
    readonly_page = (
        "account",
        "kind",
        usd_display("amount_usd", "amount USD"),
        usd_display("balance_after_usd", "balance after USD"),
        "invoice",
        "payment",
        "created_at",
        "created_by",
        "reason",
        "refund_currency",
        "refund_destination",
        refund_coins,
        "refund_txid",
    )

    def get_fields(self, request, obj=None):
        return self.readonly_page if obj is not None else super().get_fields(request, obj)

    def get_readonly_fields(self, request, obj=None):
        return self.readonly_page if obj is not None else ()

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
    list_display = ("account", usd_display("balance_usd", "balance USD"), "updated_at")
    fields = ("account", usd_display("balance_usd", "balance USD"), "updated_at")
    search_fields = ("account__username",)


class ManualRateForm(forms.ModelForm):
    class Meta:
        model = RateSample
        fields = ("currency", "usd", "valid_until", "note")


class EndRateForm(ReasonForm):
    pass


def _end_rate(sample, *, actor, reason):
    rate_manual_end(sample_id=sample.pk, actor=actor, reason=reason)


@admin.display(description="USD per coin", ordering="usd")
def usd_price(sample):
    return display.price(sample.usd)


@admin.register(RateSample)
class RateSampleAdmin(ServiceAddAdmin):
    """Fetched samples are read-only; staff add manual rates (they take
    precedence over the market median until `valid_until`) and end them early."""

    list_display = ("currency", usd_price, "source", "observed_at", "valid_until", "created_by", "note")
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


@admin.register(StrayTransfer)
class StrayTransferAdmin(RecordAdmin):
    """Transfers that reached an invoice's address and that nothing may credit: a
    token of another contract, one currency sent to another's address, or SOL sent
    to the recipient without any invoice's reference (`no_reference`). Refund them
    from outside (the server holds no spending key) or keep them, then mark them
    reviewed with why."""

    list_display = (
        "needs_review",
        "kind",
        "chain",
        "txid",
        "position",
        "asset",
        "amount",
        "paid_currency",
        "invoice",
        "block_height",
        "removed_at",
        "first_seen_at",
    )
    list_filter = ("needs_review", "kind", "chain")
    search_fields = ("txid", "address", "asset", "invoice__number")
    list_select_related = ("invoice",)
    actions = [
        reason_action(
            name="mark_reviewed",
            description="Mark reviewed",
            call=lambda stray, actor, reason: services.stray_transfer_review(
                stray_id=stray.pk, actor=actor, reason=reason
            ),
        )
    ]
