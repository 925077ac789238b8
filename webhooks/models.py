"""Customer webhooks: endpoints, the events they subscribe to, and every
delivery attempt (a log the customer can read)."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models

from webhooks.failures import Failure

WEBHOOK_EVENTS = (
    "order.created",
    "invoice.processing",
    "invoice.settled",
    "invoice.expired",
    "rental.provisioning",
    "rental.active",
    "rental.renewal_due",
    "rental.suspended",
    "rental.terminated",
)


class WebhookEndpoint(models.Model):
    account = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="webhook_endpoints")
    url = models.URLField(max_length=500)
    events = models.JSONField(help_text="Event types delivered to this endpoint.")
    secret = models.CharField(max_length=80, help_text="Signs deliveries; shown to the customer once.")
    previous_secret = models.CharField(
        max_length=80, blank=True, help_text="The secret a rotation replaced: it signs too until it expires."
    )
    previous_secret_expires_at = models.DateTimeField(null=True, blank=True)
    description = models.CharField(max_length=200, blank=True)
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["account", "created_at"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(previous_secret="") | models.Q(previous_secret_expires_at__isnull=False),
                name="webhookendpoint_previous_secret_expires",
            ),
        ]

    def __str__(self) -> str:
        return self.url


class WebhookEvent(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    account = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="webhook_events")
    type = models.CharField(max_length=48)
    data = models.JSONField()
    created_at = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.type} {self.id}"


class DeliveryStatus(models.TextChoices):
    PENDING = "pending", "Pending (will retry)"
    SUCCEEDED = "succeeded", "Delivered"
    FAILED = "failed", "Failed (retries exhausted)"


class WebhookDelivery(models.Model):
    event = models.ForeignKey(WebhookEvent, on_delete=models.CASCADE, related_name="deliveries")
    endpoint = models.ForeignKey(WebhookEndpoint, on_delete=models.CASCADE, related_name="deliveries")
    status = models.CharField(max_length=16, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True, db_index=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "webhook deliveries"
        constraints = [models.UniqueConstraint(fields=["event", "endpoint"], name="delivery_once_per_endpoint")]
        # The metrics' count and oldest per status (observability.selectors) read this index alone,
        # not a table of every delivery ever made.
        indexes = [models.Index(fields=["status", "created_at"], name="delivery_status_created")]

    def __str__(self) -> str:
        return f"{self.event} -> {self.endpoint}"


class WebhookAttempt(models.Model):
    delivery = models.ForeignKey(WebhookDelivery, on_delete=models.CASCADE, related_name="attempt_log")
    at = models.DateTimeField()
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    # What the customer reads: a category and its fixed sentence (webhooks.failures);
    # the network library's raw error goes to the log only.
    error_category = models.CharField(max_length=32, choices=Failure.choices, blank=True)
    error = models.CharField(max_length=300, blank=True)
    duration_ms = models.PositiveIntegerField()

    class Meta:
        ordering = ["delivery", "at"]

    def __str__(self) -> str:
        return f"{self.delivery} {self.status_code or self.error}"
