"""Staff views of invoices, payments, credit and rates. Issued invoices,
payments and ledger rows are read-only: corrections go through the actions
and forms below, which call billing services and record who, when and why."""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, Any, TypedDict

from django import forms
from django.contrib import admin
from django.contrib.admin.options import InlineModelAdmin
from django.contrib.auth.base_user import AbstractBaseUser
from django.db.models import DecimalField, Model, OuterRef, Prefetch, QuerySet, Subquery, Sum
from django.http import HttpRequest
from django.templatetags.static import static
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from billing import services
from billing.admin_forms import RecordPaymentForm, RefundAmountField, refund_amount_clean
from billing.currencies import amount_label
from billing.models import (
    ChainState,
    CreditBalance,
    CreditEntry,
    CreditKind,
    Invoice,
    InvoiceException,
    InvoiceLine,
    InvoiceStatus,
    Payment,
    PaymentRequest,
    RateSample,
    StrayTransfer,
)
from billing.payable import UnknownPayable, payable_describe, payable_get
from billing.rates import rate_manual_end, rate_manual_set
from billing.selectors import chain_health, payments_fraction, quote_rest
from billing.serializers import checkout_url
from core import display
from core.admin import (
    PANEL_ROWS,
    ReadOnlyAdmin,
    ReadOnlyInline,
    ReasonForm,
    RecordAdmin,
    ServiceAddAdmin,
    admin_link,
    changelist_url,
    display_function,
    json_display,
    reason_action,
    related_panel_register,
    related_table,
    usd_display,
)

# --- How amounts, rates and transactions read ------------------------------------


@display_function(description="amount due")
def amount_due_coins(request_row: PaymentRequest) -> str:
    return amount_label(request_row.currency, request_row.amount_due)


@display_function(description="rate (USD per coin)", ordering="rate_usd")
def usd_rate(row: PaymentRequest) -> str:
    return display.price(row.rate_usd)


@display_function(description="amount")
def payment_coins(payment: Payment) -> str:
    return amount_label(payment.currency, payment.amount)


@display_function(description="amount", ordering="amount")
def payment_coins_short(payment: Payment) -> SafeString:
    return format_html(
        '{}<span class="figure-sub">{}</span>',
        amount_label(payment.currency, payment.amount, with_base_units=False),
        f"{int(payment.amount):,}",
    )


@display_function(description="transaction", ordering="txid")
def transaction_short(payment: Payment | StrayTransfer) -> SafeString:
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


def _record_payment(
    invoice: Invoice,
    *,
    actor: Any,
    reason: str,
    txid: str,
    amount: int,
    confirmations: int,
    output_index: int,
    currency: str,
) -> None:
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


# --- What an invoice pays for, as a link ----------------------------------------------
# billing knows a subject as (subject_kind, subject_id); the kind's Payable
# (billing.payable, registered by the app that sells it) names it and its
# admin page, so billing links to it without importing that app.


def subject_link(invoice: Invoice) -> str:
    """What the invoice pays for, as a link to its admin page when it has one."""
    text = payable_describe(kind=invoice.subject_kind, subject_id=invoice.subject_id)
    try:
        payable = payable_get(invoice.subject_kind)
    except UnknownPayable:
        return text
    url = payable.admin_url(subject_id=invoice.subject_id)
    return text if url is None else format_html('<a href="{}">{}</a>', url, text)


# --- What is left to pay, in words --------------------------------------------------

# Credit entries that came from this invoice's payments (as the checkout page counts them).
CREDIT_FROM_PAYMENTS = ("overpayment", "late_payment", "payment_credit", "unfulfilled")


def _credited_subquery() -> Subquery:
    return Subquery(
        CreditEntry.objects.filter(invoice=OuterRef("pk"), kind__in=CREDIT_FROM_PAYMENTS)
        .order_by()
        .values("invoice")
        .annotate(total=Sum("amount_usd"))
        .values("total"),
        output_field=DecimalField(max_digits=14, decimal_places=2),
    )


def to_pay_text(invoice: Invoice, *, credited_usd: Decimal | None) -> str:
    """What the invoice still asks for, or why it asks for nothing: "0.31 LTC",
    "0.16 LTC of 0.31 LTC" after a partial payment, "paid from credit",
    "credited 130.00 USD" for an invalid or expired invoice whose payments
    became credit. Reads the invoice's prefetched requests and payments."""
    requests = {r.pk: r for r in invoice.requests.all()}
    counted = [p for p in invoice.payments.all() if p.counted]
    credited = f"credited {display.usd(credited_usd)} USD" if credited_usd else ""
    status = invoice.status
    if status == InvoiceStatus.SETTLED:
        paid = {"credit": "paid from credit", "staff": "marked settled"}.get(invoice.settled_via, "paid")
        return f"{paid}; over-payment {credited}" if credited else paid
    if status == InvoiceStatus.PROCESSING:
        return "nothing: paid, confirming"
    received = ", ".join(
        amount_label(code, sum(int(p.amount) for p in counted if p.currency == code), with_base_units=False)
        for code in dict.fromkeys(p.currency for p in counted)
    )
    if status in (InvoiceStatus.INVALID, InvoiceStatus.EXPIRED):
        closed = f"nothing ({status})"
        if credited:
            return f"{closed}; {credited}"
        if received:
            return f"{closed}; {received} received, to become credit"
        return closed if status == InvoiceStatus.INVALID else "nothing (expired unpaid)"
    request = invoice.active_request
    if request is None:
        return f"{display.usd(invoice.total_usd)} USD, currency not chosen"
    # As billing's state machine counts (payments_fraction), and as the checkout page asks (quote_rest).
    open_ = [p for p in counted if p.disposition == "open" and p.request_id in requests]
    seen = payments_fraction(invoice=invoice, payments=open_, requests=requests)
    amount_due = int(request.amount_due)
    due = quote_rest(invoice=invoice, request=request, seen=seen, counted=counted)
    due_text = amount_label(request.currency, due, with_base_units=False)
    # Past its rate lock an invoice still "new" is expired for the payer (the periodic job closes it).
    ended = ", quote ended" if timezone.now() >= invoice.expires_at else ""
    if seen:
        return f"{due_text} of {amount_label(request.currency, amount_due, with_base_units=False)} (part paid{ended})"
    return "nothing (quote ended unpaid)" if ended else due_text


class _Credited(TypedDict):
    credited_usd: Decimal | None


if TYPE_CHECKING:  # WithAnnotations takes its TypedDict in type hints only
    from django_stubs_ext import WithAnnotations

    # An invoice as InvoiceAdmin.get_queryset reads it: with what its payments credited.
    CreditedInvoice = WithAnnotations[Invoice, _Credited]


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
        "attention",
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
                    "pays_for",
                    "status",
                    "exception",
                    "attention_page",
                )
            },
        ),
        ("Money", {"fields": (usd_display("total_usd", "total USD"), "amount_due", "settled_via", "credited")}),
        ("Times (UTC)", {"fields": ("created_at", "expires_at", "monitoring_until", "settled_at")}),
        ("What it pays for", {"fields": (json_display("metadata", "snapshot"),)}),
    )
    # checkout_token is the page's key: shown as the link above, never as a bare value.
    shown_otherwise = (
        "id",
        "total_usd",
        "metadata",
        "checkout_token",
        "subject",
        "subject_kind",
        "subject_id",
        "needs_attention",
    )
    list_filter = ("status", "exception", "subject_kind", "requests__currency", "needs_attention", "settled_via")
    search_fields = ("number", "account__username", "subject", "requests__address", "payments__txid")
    date_hierarchy = "created_at"
    list_select_related = ("account",)
    inlines = [InvoiceLineInline, PaymentRequestInline, PaymentInline, StrayTransferInline]

    def get_inlines(self, request: HttpRequest, obj: Invoice | None) -> list[type[InlineModelAdmin[Any, Any]]]:
        # Strays are rare: their table shows only on invoices that received one.
        inlines = list(super().get_inlines(request, obj))
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

    def get_queryset(self, request: HttpRequest) -> QuerySet[Invoice]:
        invoices: QuerySet[Invoice] = (
            super()
            .get_queryset(request)
            .prefetch_related(
                "requests", Prefetch("payments", queryset=Payment.objects.order_by("first_seen_at", "id"))
            )
            .annotate(credited_usd=_credited_subquery())
            .distinct()
        )
        return invoices

    @admin.display(description="to pay")
    def amount_due(self, invoice: CreditedInvoice) -> str:
        """What is left to pay in the active quote's coins, or why nothing is."""
        return to_pay_text(invoice, credited_usd=invoice.credited_usd)

    @admin.display(description="credited from its payments")
    def credited(self, invoice: CreditedInvoice) -> str:
        if not invoice.credited_usd:
            return display.EMPTY
        url = changelist_url("admin:billing_creditentry_changelist", invoice__id__exact=invoice.pk)
        return format_html('{} USD (<a href="{}">ledger rows</a>)', display.usd(invoice.credited_usd), url)

    @admin.display(description="needs attention", ordering="needs_attention", empty_value="")
    def attention(self, invoice: Invoice) -> SafeString | None:
        """A mark on the rows that need a look; nothing on the others."""
        if not invoice.needs_attention:
            return None
        return format_html(
            '<span class="attention"><img src="{}" alt="" width="14" height="14"> review</span>',
            static("admin/img/icon-alert.svg"),
        )

    @admin.display(description="needs attention")
    def attention_page(self, invoice: Invoice) -> str:
        if not invoice.needs_attention:
            return "no"
        return format_html(
            "{} money already applied or credited was later un-counted (a deep reorg): check its payments",
            self.attention(invoice),
        )

    @admin.display(description="pays for", ordering="subject_kind")
    def pays_for(self, invoice: Invoice) -> str:
        """The subject as a link to its page (an order, a rental's renewal)."""
        return subject_link(invoice)

    @admin.display(description="checkout page")
    def checkout_page(self, invoice: Invoice) -> SafeString:
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
        ("Amount", {"fields": (payment_coins, usd_display("amount_usd", "USD value"), "late_rate_usd")}),
        (
            "On chain",
            {"fields": ("status", "confirmations", "block_height", "block_hash", "first_seen_at", "confirmed_at")},
        ),
        ("Use", {"fields": ("disposition", "removed_at", "removal_reason")}),
        ("Flagged for staff", {"fields": ("flagged_at", "flag_reason")}),
        ("Recorded by staff", {"fields": ("source", "recorded_by", "reason")}),
    )
    shown_otherwise = ("id", "amount", "amount_usd")
    list_filter = ("chain", "currency", "status", "disposition", "source", ("flagged_at", admin.EmptyFieldListFilter))
    search_fields = ("txid", "invoice__number", "invoice__account__username", "request__address")
    list_select_related = ("invoice",)


class CreditEntryForm(forms.ModelForm[CreditEntry]):
    """Staff entries only: an adjustment (up or down) or a refund sent from outside."""

    kind = forms.ChoiceField(choices=[(CreditKind.ADJUSTMENT, "Adjustment"), (CreditKind.REFUND, "Refund sent")])
    amount_usd = forms.DecimalField(
        max_digits=14,
        decimal_places=2,
        help_text="Adjustment: positive adds credit, negative removes it. Refund: the USD value refunded (positive).",
    )
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), required=True)
    refund_amount = RefundAmountField()

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

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        assert data is not None  # ModelForm.clean returns cleaned_data
        refund_amount_clean(self, data)
        return data


@display_function(description="refund amount")
def refund_coins(entry: CreditEntry) -> str:
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

    # Names and display functions (refund_coins): Any, as core.admin.DisplayFunction says why.
    def get_fields(self, request: HttpRequest, obj: CreditEntry | None = None) -> Any:
        return self.readonly_page if obj is not None else super().get_fields(request, obj)

    def get_readonly_fields(self, request: HttpRequest, obj: CreditEntry | None = None) -> Any:
        return self.readonly_page if obj is not None else ()

    def add_through_service(self, request: HttpRequest, data: dict[str, Any]) -> Model:
        """Staff entries go through the ledger service (balance lock, audit)."""
        if data["kind"] == CreditKind.REFUND:
            return services.credit_refund_record(
                account_id=data["account"].pk,
                amount_usd=Decimal(data["amount_usd"]),
                currency=data["refund_currency"] or "",
                destination=data["refund_destination"],
                amount=data["refund_amount"] or 0,
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


class ManualRateForm(forms.ModelForm[RateSample]):
    class Meta:
        model = RateSample
        fields = ("currency", "usd", "valid_until", "note")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if "note" in self.fields:
            self.fields["note"].required = True  # why, for the audit trail
            self.fields["note"].label = "Reason"


class EndRateForm(ReasonForm):
    pass


def _end_rate(sample: RateSample, *, actor: Any, reason: str) -> None:
    rate_manual_end(sample_id=sample.pk, actor=actor, reason=reason)


@display_function(description="USD per coin", ordering="usd")
def usd_price(sample: RateSample) -> str:
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

    def add_through_service(self, request: HttpRequest, data: dict[str, Any]) -> Model:
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
    def healthy(self, state: ChainState) -> bool:
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


# --- On a customer's page (accounts' admin): their invoices and credit -----------------


def _status_words(invoice: Invoice) -> str:
    """`Settled`, `New (awaiting payment), Paid partially`: the status and any exception."""
    if invoice.exception in ("", InvoiceException.NONE):
        return invoice.get_status_display()
    return f"{invoice.get_status_display()}, {invoice.get_exception_display()}"


def _account_invoices(account: AbstractBaseUser) -> SafeString:
    invoices = (
        Invoice.objects.filter(account_id=account.pk)
        .prefetch_related("requests", "payments")
        .annotate(credited_usd=_credited_subquery())
        .order_by("-created_at", "-id")
    )
    return related_table(
        rows=list(invoices[:PANEL_ROWS]),
        columns=[
            ("number", lambda i: admin_link("admin:billing_invoice_change", i.pk, i.number)),
            ("pays for", lambda i: subject_link(i)),
            ("status", _status_words),
            ("total USD", lambda i: display.usd(i.total_usd)),
            ("to pay", lambda i: to_pay_text(i, credited_usd=i.credited_usd)),
            ("created", lambda i: f"{i.created_at:%Y-%m-%d %H:%M}"),
        ],
        total=Invoice.objects.filter(account_id=account.pk).count(),
        list_url=changelist_url("admin:billing_invoice_changelist", account__id__exact=account.pk),
        noun="invoices",
    )


def _account_credit(account: AbstractBaseUser) -> SafeString:
    balance = CreditBalance.objects.filter(account_id=account.pk).values_list("balance_usd", flat=True).first()
    entries = CreditEntry.objects.filter(account_id=account.pk).select_related("invoice").order_by("-created_at", "-id")
    table = related_table(
        rows=list(entries[:5]),
        columns=[
            ("when", lambda e: admin_link("admin:billing_creditentry_change", e.pk, f"{e.created_at:%Y-%m-%d %H:%M}")),
            ("kind", lambda e: e.get_kind_display()),
            ("amount USD", lambda e: display.usd(e.amount_usd)),
            ("balance after", lambda e: display.usd(e.balance_after_usd)),
            ("invoice", lambda e: e.invoice.number if e.invoice else display.EMPTY),
        ],
        total=CreditEntry.objects.filter(account_id=account.pk).count(),
        list_url=changelist_url("admin:billing_creditentry_changelist", account__id__exact=account.pk),
        noun="ledger rows",
    )
    return format_html(
        '<p class="credit-balance">Balance: <strong>{} USD</strong></p>{}', display.usd(balance or 0), table
    )


related_panel_register(
    model="accounts.Account",
    name="invoices",
    title="invoices",
    render=_account_invoices,
    permission="billing.view_invoice",
    order=20,
)
related_panel_register(
    model="accounts.Account",
    name="credit",
    title="credit",
    render=_account_credit,
    permission="billing.view_creditentry",
    order=40,
)
