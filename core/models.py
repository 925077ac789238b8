from django.conf import settings
from django.contrib.contenttypes.models import ContentType
from django.db import models


class AuditAction(models.TextChoices):
    """Every action the audit trail records, by name: audit_record takes one of
    these, never a free string, so a misspelt action cannot reach the trail
    and staff can filter the trail by what happened."""

    ACCOUNT_ADMIN_LOGIN = "account.admin_login"
    ACCOUNT_CREATE = "account.create"
    ACCOUNT_CREATE_STAFF = "account.create_staff"
    ACCOUNT_DEACTIVATE = "account.deactivate"
    ACCOUNT_DELETE = "account.delete"
    ACCOUNT_OTP_DISABLE = "account.otp_disable"
    ACCOUNT_OTP_ENABLE = "account.otp_enable"
    ACCOUNT_OTP_RESET = "account.otp_reset"
    ACCOUNT_PASSWORD_CHANGE = "account.password_change"
    ACCOUNT_PASSWORD_RESET = "account.password_reset"
    ACCOUNT_RECOVER = "account.recover"
    ACCOUNT_RECOVERY_CODES_REGENERATE = "account.recovery_codes_regenerate"
    ADMIN_ADD = "admin.add"
    ADMIN_CHANGE = "admin.change"
    ADMIN_DELETE = "admin.delete"
    CHAIN_CURSOR_SET = "chain.cursor_set"
    CREDIT_ADJUST = "credit.adjust"
    CREDIT_REFUND = "credit.refund"
    INVOICE_CREDIT_UNFULFILLED = "invoice.credit_unfulfilled"
    INVOICE_MARK_INVALID = "invoice.mark_invalid"
    INVOICE_MARK_SETTLED = "invoice.mark_settled"
    INVOICE_PAY_WITH_CREDIT = "invoice.pay_with_credit"
    INVOICE_REQUOTE = "invoice.requote"
    INVOICE_SWITCH_CURRENCY = "invoice.switch_currency"
    INVOICE_VOID = "invoice.void"
    ORDER_CANCEL = "order.cancel"
    PAYMENT_FLAGGED = "payment.flagged"
    PAYMENT_RECORD = "payment.record"
    PAYMENT_UNCOUNTED_AFTER_USE = "payment.uncounted_after_use"
    RATE_MANUAL_END = "rate.manual_end"
    RATE_MANUAL_SET = "rate.manual_set"
    RENTAL_ACTIVATE = "rental.activate"
    RENTAL_AUTO_RENEW_OFF = "rental.auto_renew_off"
    RENTAL_AUTO_RENEW_ON = "rental.auto_renew_on"
    RENTAL_BENCHMARK_UPLOAD = "rental.benchmark_upload"
    RENTAL_CANCEL = "rental.cancel"
    RENTAL_EXTEND = "rental.extend"
    RENTAL_RENEW = "rental.renew"
    RENTAL_SUSPEND = "rental.suspend"
    RENTAL_TERMINATE = "rental.terminate"
    RENTAL_UNSUSPEND = "rental.unsuspend"
    RENTAL_USAGE = "rental.usage"
    SLOT_IN_SERVICE = "slot.in_service"
    SLOT_OUT_OF_SERVICE = "slot.out_of_service"
    SSH_KEY_ADD = "ssh_key.add"
    SSH_KEY_DELETE = "ssh_key.delete"
    STRAY_TRANSFER_RECORD = "stray_transfer.record"
    STRAY_TRANSFER_REVIEW = "stray_transfer.review"
    TOKEN_CREATE = "token.create"
    TOKEN_REVOKE = "token.revoke"
    WEBHOOK_CREATE = "webhook.create"
    WEBHOOK_DELETE = "webhook.delete"
    WEBHOOK_PING = "webhook.ping"
    WEBHOOK_REDELIVER = "webhook.redeliver"
    WEBHOOK_ROTATE_SECRET = "webhook.rotate_secret"
    WEBHOOK_UPDATE = "webhook.update"


class AuditEntry(models.Model):
    """Who did what to which object, when and why. Append-only."""

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_name = models.CharField(max_length=64, blank=True, help_text="Kept when the account goes.")
    action = models.CharField(max_length=64, choices=AuditAction.choices)
    content_type = models.ForeignKey(ContentType, null=True, blank=True, on_delete=models.SET_NULL)
    object_id = models.CharField(max_length=64, blank=True)
    object_repr = models.CharField(max_length=200, blank=True)
    changes = models.JSONField(default=dict, blank=True)
    reason = models.TextField(blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["content_type", "object_id"])]
        verbose_name_plural = "audit entries"

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M} {self.actor_name or 'system'} {self.action} {self.object_repr}"


class Lease(models.Model):
    """A named, expiring lock held in the database: one holder at a time across
    every worker on every machine (single-flight periodic jobs)."""

    name = models.CharField(max_length=100, primary_key=True)
    owner = models.CharField(max_length=100, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return self.name
