"""Reads for customer webhooks: every read is scoped to the caller's account."""

from __future__ import annotations

from typing import Any

from django.db.models import Prefetch, QuerySet

from webhooks.models import WebhookAttempt, WebhookDelivery, WebhookEndpoint


def endpoint_list(*, account: Any) -> QuerySet[WebhookEndpoint]:
    return WebhookEndpoint.objects.filter(account=account).order_by("created_at", "id")


def endpoint_get(*, account: Any, endpoint_id: int) -> WebhookEndpoint | None:
    return WebhookEndpoint.objects.filter(account=account, pk=endpoint_id).first()


def _deliveries(*, account: Any, endpoint_id: int) -> QuerySet[WebhookDelivery]:
    return (
        WebhookDelivery.objects.filter(endpoint__account=account, endpoint_id=endpoint_id)
        .select_related("event")
        .prefetch_related(Prefetch("attempt_log", queryset=WebhookAttempt.objects.order_by("at", "id")))
    )


def delivery_list(*, account: Any, endpoint_id: int, status: str | None = None) -> QuerySet[WebhookDelivery]:
    """The endpoint's delivery log, each with its attempts (the view pages it, newest first)."""
    queryset = _deliveries(account=account, endpoint_id=endpoint_id)
    if status:
        queryset = queryset.filter(status=status)
    return queryset


def delivery_get(*, account: Any, endpoint_id: int, delivery_id: int) -> WebhookDelivery | None:
    return _deliveries(account=account, endpoint_id=endpoint_id).filter(pk=delivery_id).first()
