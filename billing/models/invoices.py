from __future__ import annotations

import secrets

from django.conf import settings
from django.db import models
from django.db.models import F, Q

from core.db import related_all
from core.fields import BaseUnitsModelField


class InvoiceStatus(models.TextChoices):
    NEW = "new", "New (awaiting payment)"
    PROCESSING = "processing", "Processing (paid, not yet confirmed)"
    SETTLED = "settled", "Settled"
    EXPIRED = "expired", "Expired"
    INVALID = "invalid", "Invalid"


class InvoiceException(models.TextChoices):
    NONE = "none", "None"
    PAID_PARTIAL = "paid_partial", "Paid partially"
    PAID_OVER = "paid_over", "Paid over"
    PAID_LATE = "paid_late", "Paid late"
    MARKED = "marked", "Marked by staff"


class InvoiceCounter(models.Model):
    """The last number issued per prefix and year; locked while a number is taken
    so numbers are sequential without gaps (a rolled-back invoice rolls the
    counter back with it)."""

    series = models.CharField(max_length=32, primary_key=True)
    last = models.PositiveIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.series}: {self.last}"


def checkout_token_new() -> str:
    """A fresh checkout token: 256 random bits, URL-safe (43 characters). It is
    the only key to the invoice's public checkout page, so it is random, never
    derived from the invoice's id or number."""
    return secrets.token_urlsafe(32)


class Invoice(models.Model):
    number = models.CharField(max_length=40, unique=True)
    checkout_token = models.CharField(
        max_length=64,
        unique=True,
        default=checkout_token_new,
        editable=False,
        help_text="Opens the invoice's checkout page (/pay/<token>) without logging in.",
    )
    account = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="invoices")
    # What it pays for: a kind registered with billing.payable and the id of its object.
    subject_kind = models.CharField(
        max_length=16, db_default="", blank=True, help_text="The kind of what it pays for: order, renewal, usage."
    )
    subject_id = models.BigIntegerField(db_default=0, help_text="The id of what it pays for (an order's, a rental's).")
    # The reference as the release before subject_kind/subject_id wrote it ("order:12"), still written
    # as "<kind>:<id>" for a process of that release running during an upgrade; read by nothing.
    subject = models.CharField(
        max_length=64, db_index=True, help_text="Opaque reference to what it pays for, e.g. order:12."
    )
    description = models.CharField(max_length=200)
    total_usd = models.DecimalField(max_digits=12, decimal_places=2)
    status = models.CharField(max_length=16, choices=InvoiceStatus.choices, default=InvoiceStatus.NEW)
    exception = models.CharField(max_length=16, choices=InvoiceException.choices, default=InvoiceException.NONE)
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField(help_text="End of the rate lock: pay before this.")
    monitoring_until = models.DateTimeField(help_text="Payments are matched to this invoice until then.")
    settled_at = models.DateTimeField(null=True, blank=True)
    settled_via = models.CharField(max_length=16, blank=True, help_text="payment, credit or staff")
    metadata = models.JSONField(default=dict, blank=True, help_text="A snapshot of what it pays for.")
    needs_attention = models.BooleanField(
        default=False, help_text="Set when money already applied or credited was later un-counted (deep reorg)."
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["status", "expires_at"]),
            models.Index(fields=["status", "monitoring_until"]),
            models.Index(fields=["account", "-created_at"]),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(total_usd__gt=0), name="invoice_total_positive"),
            models.CheckConstraint(
                condition=Q(monitoring_until__gte=F("expires_at")), name="invoice_monitoring_after_expiry"
            ),
            models.CheckConstraint(
                condition=~Q(status="settled") | Q(settled_at__isnull=False), name="invoice_settled_has_time"
            ),
        ]

    def __str__(self) -> str:
        return self.number

    @property
    def subject_ref(self) -> str:
        """What it pays for as one reference, "<kind>:<id>" (the API's `subject`)."""
        return f"{self.subject_kind}:{self.subject_id}"

    @property
    def active_request(self) -> PaymentRequest | None:
        # The requests prefetched or kept by the write that made them, else one query for all of them (few).
        return next((r for r in related_all(self, "requests") if r.is_active), None)


class InvoiceLine(models.Model):
    invoice = models.ForeignKey(Invoice, on_delete=models.CASCADE, related_name="lines")
    position = models.PositiveSmallIntegerField()
    code = models.CharField(max_length=48, blank=True)
    description = models.CharField(max_length=200)
    quantity = models.DecimalField(max_digits=12, decimal_places=4)
    unit_usd = models.DecimalField(max_digits=12, decimal_places=2)
    discount_usd = models.DecimalField(max_digits=12, decimal_places=2, default=0)
    amount_usd = models.DecimalField(max_digits=12, decimal_places=2)

    class Meta:
        ordering = ["invoice", "position"]
        constraints = [
            models.UniqueConstraint(fields=["invoice", "position"], name="invoiceline_position_unique"),
            models.CheckConstraint(condition=Q(discount_usd__gte=0), name="invoiceline_discount_nonneg"),
        ]

    def __str__(self) -> str:
        return self.description


class PaymentRequest(models.Model):
    """What the customer is asked to pay in one currency: a fresh destination,
    the amount in base units at a locked rate, and the payment URI. Switching
    currency or re-quoting adds a request; earlier ones stay watched.

    A request asks for `amount_usd` of the invoice's total (all of it, unless
    the invoice was partly paid when the request was made): a payment of `x`
    base units to it pays `x / amount_due * amount_usd / total_usd` of the
    invoice."""

    invoice = models.ForeignKey(Invoice, on_delete=models.CASCADE, related_name="requests")
    currency = models.CharField(max_length=8)
    network = models.CharField(max_length=32)
    address = models.CharField(max_length=128, help_text="Where to pay.")
    match_key = models.CharField(max_length=128, help_text="What the watcher matches (script, address, reference).")
    reference = models.CharField(max_length=64, blank=True, help_text="Solana Pay reference.")
    keyset = models.CharField(max_length=96, help_text="The watch-only key the destination was derived from.")
    derivation_index = models.PositiveBigIntegerField()
    amount_due = BaseUnitsModelField(help_text="Base units, rounded up.")
    amount_usd = models.DecimalField(
        max_digits=12,
        decimal_places=2,
        help_text="The USD this request asks for: the invoice's total, or what was left of it when the "
        "request was made (a fresh quote of a partly paid invoice).",
    )
    rate_usd = models.DecimalField(max_digits=30, decimal_places=12, help_text="USD per whole coin.")
    rate_source = models.CharField(max_length=64)
    rate_at = models.DateTimeField()
    payment_uri = models.TextField()
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    is_active = models.BooleanField(default=True)

    class Meta:
        ordering = ["invoice", "created_at", "id"]
        indexes = [models.Index(fields=["currency", "match_key"])]
        constraints = [
            models.UniqueConstraint(fields=["keyset", "derivation_index"], name="request_destination_never_reused"),
            models.UniqueConstraint(fields=["currency", "match_key"], name="request_match_key_unique"),
            models.UniqueConstraint(
                fields=["invoice"], condition=Q(is_active=True), name="request_one_active_per_invoice"
            ),
            models.CheckConstraint(condition=Q(amount_due__gt=0), name="request_amount_positive"),
            models.CheckConstraint(condition=Q(amount_usd__gt=0), name="request_amount_usd_positive"),
            models.CheckConstraint(condition=Q(rate_usd__gt=0), name="request_rate_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.invoice.number} {self.currency} {self.address}"


class DerivationCounter(models.Model):
    """The next unused derivation index of one watch-only key: locked and
    advanced in the transaction that issues a destination."""

    keyset = models.CharField(max_length=96, primary_key=True)
    next_index = models.PositiveBigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.keyset}: {self.next_index}"
