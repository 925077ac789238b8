from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from billing.models.invoices import Invoice
from billing.models.payments import Payment
from core.fields import BaseUnitsModelField


class CreditKind(models.TextChoices):
    PAYMENT_CREDIT = "payment_credit", "Payment credited (invoice closed)"
    OVERPAYMENT = "overpayment", "Over-payment"
    LATE_PAYMENT = "late_payment", "Late payment"
    INVOICE_PAYMENT = "invoice_payment", "Invoice paid from credit"
    ADJUSTMENT = "adjustment", "Staff adjustment"
    REFUND = "refund", "Refund sent by staff"
    REVERSAL = "reversal", "Reversal of a credited payment"
    UNFULFILLED = "unfulfilled", "Paid for something no longer available"


class CreditBalance(models.Model):
    """The running balance of one account, the row debits lock so the balance
    can never go negative, also under concurrent debits."""

    account = models.OneToOneField(
        settings.AUTH_USER_MODEL, primary_key=True, on_delete=models.PROTECT, related_name="credit_balance"
    )
    balance_usd = models.DecimalField(max_digits=14, decimal_places=2, default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.CheckConstraint(condition=Q(balance_usd__gte=0), name="credit_balance_nonneg")]

    def __str__(self) -> str:
        return f"{self.account}: {self.balance_usd} USD"


class CreditEntry(models.Model):
    """Append-only USD ledger: credits are positive, debits negative."""

    account = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="credit_entries")
    kind = models.CharField(max_length=24, choices=CreditKind.choices)
    amount_usd = models.DecimalField(max_digits=14, decimal_places=2)
    balance_after_usd = models.DecimalField(max_digits=14, decimal_places=2)
    invoice = models.ForeignKey(Invoice, null=True, blank=True, on_delete=models.PROTECT, related_name="credit_entries")
    payment = models.ForeignKey(Payment, null=True, blank=True, on_delete=models.PROTECT, related_name="credit_entries")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    reason = models.TextField(blank=True)
    refund_currency = models.CharField(max_length=8, blank=True)
    refund_destination = models.CharField(max_length=128, blank=True)
    refund_amount = BaseUnitsModelField[int | None, int | None](null=True, blank=True)
    refund_txid = models.CharField(max_length=128, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "credit entries"
        constraints = [
            models.CheckConstraint(condition=~Q(amount_usd=0), name="credit_entry_nonzero"),
            models.CheckConstraint(condition=Q(balance_after_usd__gte=0), name="credit_entry_balance_nonneg"),
            # Money arriving from a payment is credited once, whoever sees it first.
            models.UniqueConstraint(
                fields=["payment"],
                condition=Q(kind__in=["payment_credit", "late_payment"]),
                name="credit_payment_once",
            ),
            models.UniqueConstraint(
                fields=["invoice"], condition=Q(kind="overpayment"), name="credit_overpayment_once"
            ),
            models.UniqueConstraint(
                fields=["invoice"], condition=Q(kind="invoice_payment"), name="credit_invoice_paid_once"
            ),
            models.UniqueConstraint(
                fields=["invoice"], condition=Q(kind="unfulfilled"), name="credit_unfulfilled_once"
            ),
            models.CheckConstraint(
                condition=~Q(kind__in=["adjustment", "refund"]) | ~Q(reason=""), name="credit_staff_entry_has_reason"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.account} {self.kind} {self.amount_usd}"
