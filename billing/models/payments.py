from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from billing.currencies import CURRENCY_CHOICES
from billing.models.invoices import BASE_UNITS, Invoice, PaymentRequest


class PaymentStatus(models.TextChoices):
    PENDING = "pending", "Seen, not yet confirmed"
    CONFIRMED = "confirmed", "Confirmed per the chain's policy"
    REMOVED = "removed", "Un-counted (reorg, replaced, dropped)"


class PaymentDisposition(models.TextChoices):
    OPEN = "open", "Not yet used"
    APPLIED = "applied", "Applied to the invoice"
    CREDITED = "credited", "Turned into account credit"


class Payment(models.Model):
    """One transfer to a destination, recorded exactly once per (chain, txid,
    output or log index). Later sightings update it; a reorg or a replaced
    transaction un-counts it (status removed); nothing is deleted."""

    request = models.ForeignKey(PaymentRequest, on_delete=models.PROTECT, related_name="payments")
    invoice = models.ForeignKey(Invoice, on_delete=models.PROTECT, related_name="payments")
    chain = models.CharField(max_length=16)
    currency = models.CharField(max_length=8, choices=CURRENCY_CHOICES)
    txid = models.CharField(max_length=128)
    output_index = models.IntegerField(help_text="Output (UTXO chains), log index (tokens), -1 for native ETH.")
    amount = models.DecimalField(**BASE_UNITS)
    amount_usd = models.DecimalField(max_digits=14, decimal_places=2, help_text="At the request's locked rate.")
    confirmations = models.PositiveIntegerField(default=0)
    block_height = models.PositiveBigIntegerField(null=True, blank=True)
    block_hash = models.CharField(max_length=128, blank=True)
    status = models.CharField(max_length=16, choices=PaymentStatus.choices, default=PaymentStatus.PENDING)
    disposition = models.CharField(max_length=16, choices=PaymentDisposition.choices, default=PaymentDisposition.OPEN)
    source = models.CharField(max_length=16, default="watcher", help_text="watcher or manual")
    first_seen_at = models.DateTimeField()
    confirmed_at = models.DateTimeField(null=True, blank=True)
    removed_at = models.DateTimeField(null=True, blank=True)
    removal_reason = models.CharField(max_length=200, blank=True)
    recorded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    reason = models.TextField(blank=True, help_text="Why staff recorded it by hand.")

    class Meta:
        ordering = ["first_seen_at", "id"]
        indexes = [models.Index(fields=["chain", "status"]), models.Index(fields=["txid"])]
        constraints = [
            models.UniqueConstraint(fields=["chain", "txid", "output_index"], name="payment_recorded_once"),
            models.CheckConstraint(condition=Q(amount__gt=0), name="payment_amount_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.currency} {self.txid}:{self.output_index}"

    @property
    def counted(self) -> bool:
        return self.status != PaymentStatus.REMOVED
