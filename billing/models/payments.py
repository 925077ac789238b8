from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from billing.models.invoices import Invoice, PaymentRequest
from core.fields import BaseUnitsModelField


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
    position). Later sightings update it; a reorg or a replaced transaction
    un-counts it (status removed); nothing is deleted."""

    request = models.ForeignKey(PaymentRequest, on_delete=models.PROTECT, related_name="payments")
    invoice = models.ForeignKey(Invoice, on_delete=models.PROTECT, related_name="payments")
    chain = models.CharField(max_length=16)
    currency = models.CharField(max_length=8)
    txid = models.CharField(max_length=128)
    output_index = models.IntegerField(help_text="Output (UTXO chains) or log index (tokens); -1 where there is none.")
    position = models.CharField(
        max_length=64,
        help_text="Where in the transaction: the output (UTXO), tx (a transaction's own ether), "
        "call:<trace address> (ether sent by a contract), log:<index> (a token transfer), "
        "balance:<address> (ether found by a balance check; the txid is then the block's hash).",
    )
    amount = BaseUnitsModelField()
    amount_usd = models.DecimalField(
        max_digits=14,
        decimal_places=2,
        help_text="Its value, rounded down to the cent: at the request's locked rate, or at late_rate_usd.",
    )
    late_rate_usd = models.DecimalField(
        max_digits=30,
        decimal_places=12,
        null=True,
        blank=True,
        verbose_name="late rate (USD a coin)",
        help_text="Seen after its quote's rate lock ended, when the market rate then was below the locked rate: "
        "the rate it is valued and counted at (USD per whole coin); for a quote still live, the locked rate for "
        "what the invoice lacked and the market's for the rest. Empty: the locked rate.",
    )
    confirmations = models.PositiveIntegerField(default=0)
    block_height = models.PositiveBigIntegerField(null=True, blank=True)
    block_hash = models.CharField(max_length=128, blank=True)
    matures_at_height = models.BigIntegerField(  # no CHECK: adding one would scan the table
        null=True,
        blank=True,
        help_text="A coinbase output (a miner paid from a block's reward): it cannot be spent, and does not "
        "settle, before the chain's tip reaches this height, whatever the confirmation policy says.",
    )
    status = models.CharField(max_length=16, choices=PaymentStatus.choices, default=PaymentStatus.PENDING)
    disposition = models.CharField(max_length=16, choices=PaymentDisposition.choices, default=PaymentDisposition.OPEN)
    source = models.CharField(max_length=16, default="watcher", help_text="watcher or manual")
    first_seen_at = models.DateTimeField()
    confirmed_at = models.DateTimeField(null=True, blank=True)
    removed_at = models.DateTimeField(null=True, blank=True)
    removal_reason = models.CharField(max_length=200, blank=True)
    flagged_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When a watcher flagged it for staff (a transfer locked by an unlock time, ...); once per payment.",
    )
    flag_reason = models.CharField(max_length=200, blank=True, default="", db_default="")
    recorded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    reason = models.TextField(blank=True, help_text="Why staff recorded it by hand.")

    class Meta:
        ordering = ["first_seen_at", "id"]
        indexes = [
            models.Index(fields=["chain", "status"]),
            models.Index(fields=["txid"]),
            # The confirmation refresh's check of the stored blocks' payments (the last
            # CHAIN_REORG_WINDOW heights), confirmed ones included: billing/chains/machinery.py.
            models.Index(fields=["chain", "block_height"], name="payment_chain_height"),
        ]
        constraints = [
            models.UniqueConstraint(fields=["chain", "txid", "position"], name="payment_recorded_once"),
            models.CheckConstraint(condition=Q(amount__gt=0), name="payment_amount_positive"),
            models.CheckConstraint(
                condition=Q(late_rate_usd__isnull=True) | Q(late_rate_usd__gt=0), name="payment_late_rate_positive"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.currency} {self.txid}:{self.position}"

    @property
    def counted(self) -> bool:
        return self.status != PaymentStatus.REMOVED


class StrayTransfer(models.Model):
    """A transfer a watcher saw reach a watched destination that nothing may credit:
    a token of a contract the system does not accept, or one currency sent to
    another currency's invoice address. Recorded once per (chain, txid,
    position) for staff to look at (refund or ignore), never credited."""

    chain = models.CharField(max_length=16)
    txid = models.CharField(max_length=128)
    position = models.CharField(max_length=64)
    kind = models.CharField(max_length=24, help_text="unknown_token, wrong_currency, ...")
    address = models.CharField(max_length=128, help_text="The destination it reached (a watcher's match key).")
    asset = models.CharField(max_length=128, help_text="What was sent: a currency code or a token contract.")
    currency = models.CharField(max_length=8, blank=True, help_text="The currency it is, when it is one.")
    paid_currency = models.CharField(max_length=8, blank=True, help_text="The currency the destination asked for.")
    amount = BaseUnitsModelField(help_text="Base units of the asset.")
    request = models.ForeignKey(
        PaymentRequest, null=True, blank=True, on_delete=models.PROTECT, related_name="stray_transfers"
    )
    invoice = models.ForeignKey(
        Invoice, null=True, blank=True, on_delete=models.PROTECT, related_name="stray_transfers"
    )
    block_height = models.PositiveBigIntegerField(null=True, blank=True)
    block_hash = models.CharField(max_length=128, blank=True)
    note = models.CharField(max_length=300, blank=True)
    first_seen_at = models.DateTimeField()
    removed_at = models.DateTimeField(null=True, blank=True, help_text="Its block left the chain.")
    needs_review = models.BooleanField(default=True)
    reviewed_at = models.DateTimeField(null=True, blank=True)
    reviewed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    review_note = models.TextField(blank=True)

    class Meta:
        ordering = ["-first_seen_at", "-id"]
        indexes = [models.Index(fields=["needs_review", "-first_seen_at"])]
        constraints = [
            models.UniqueConstraint(fields=["chain", "txid", "position"], name="stray_recorded_once"),
            models.CheckConstraint(condition=Q(amount__gt=0), name="stray_amount_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.chain} {self.txid}:{self.position} ({self.kind})"
