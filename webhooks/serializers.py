"""API serializers for customer webhooks: one per input, one per output.
Inputs only check shape; the rules (URL targets, event types) live in
webhooks.services."""

from __future__ import annotations

from rest_framework import serializers

from core.pagination import PageQuery
from webhooks.failures import Failure
from webhooks.models import WEBHOOK_EVENTS, DeliveryStatus
from webhooks.services import PING_EVENT


def _events_field(**kw) -> serializers.ListField:
    return serializers.ListField(
        child=serializers.ChoiceField(choices=WEBHOOK_EVENTS),
        allow_empty=False,
        max_length=len(WEBHOOK_EVENTS),
        help_text="The event types delivered to this endpoint.",
        **kw,
    )


def _url_field(**kw) -> serializers.CharField:
    # Not URLField: the service checks the URL (and where it leads) itself.
    return serializers.CharField(max_length=500, trim_whitespace=False, help_text="An https:// URL.", **kw)


def _description_field() -> serializers.CharField:
    return serializers.CharField(max_length=200, allow_blank=True, required=False)


# =============================================================================
# Endpoints
# =============================================================================


class WebhookEndpointCreateInput(serializers.Serializer):
    url = _url_field()
    events = _events_field()
    description = _description_field()
    is_active = serializers.BooleanField(required=False, default=True)


class WebhookEndpointUpdateInput(serializers.Serializer):
    url = _url_field(required=False)
    events = _events_field(required=False)
    description = _description_field()
    is_active = serializers.BooleanField(required=False)


class WebhookEndpointOutput(serializers.Serializer):
    id = serializers.IntegerField()
    url = serializers.CharField()
    events = serializers.ListField(child=serializers.ChoiceField(choices=WEBHOOK_EVENTS))
    description = serializers.CharField()
    is_active = serializers.BooleanField()
    created_at = serializers.DateTimeField()
    previous_secret_expires_at = serializers.DateTimeField(
        allow_null=True,
        help_text="After a rotation: until when the replaced secret still signs deliveries beside the new one.",
    )


class WebhookEndpointWithSecretOutput(WebhookEndpointOutput):
    secret = serializers.CharField(
        help_text="Signs every delivery (Standard Webhooks: whsec_ and a base64 key). Shown once: store it now."
    )


class WebhookSecretRotateInput(serializers.Serializer):
    overlap_seconds = serializers.IntegerField(
        required=False,
        min_value=0,
        max_value=30 * 86400,
        help_text=(
            "How long the replaced secret keeps signing beside the new one (default and maximum: the "
            "server's WEBHOOK_SECRET_ROTATION_OVERLAP, 24 hours unless configured). 0 ends it at once."
        ),
    )


# =============================================================================
# Deliveries
# =============================================================================


class WebhookEventOutput(serializers.Serializer):
    id = serializers.UUIDField()
    type = serializers.ChoiceField(choices=(*WEBHOOK_EVENTS, PING_EVENT))
    created_at = serializers.DateTimeField()
    data = serializers.DictField()


class WebhookAttemptOutput(serializers.Serializer):
    at = serializers.DateTimeField()
    status_code = serializers.IntegerField(allow_null=True, help_text="The receiver's HTTP status, if it answered.")
    error_category = serializers.ChoiceField(
        choices=[("", "(delivered)"), *Failure.choices],
        help_text="What went wrong, as a category (empty when the receiver answered 2xx).",
    )
    error = serializers.CharField(help_text="Why the attempt failed, in a sentence of its category (else empty).")
    duration_ms = serializers.IntegerField()


class WebhookDeliveryOutput(serializers.Serializer):
    id = serializers.IntegerField()
    event = WebhookEventOutput()
    status = serializers.ChoiceField(choices=DeliveryStatus.choices)
    attempts = serializers.IntegerField()
    next_attempt_at = serializers.DateTimeField(allow_null=True)
    delivered_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()
    attempt_log = WebhookAttemptOutput(many=True)


class WebhookDeliveryListQuery(PageQuery):
    status = serializers.ChoiceField(choices=DeliveryStatus.choices, required=False)
