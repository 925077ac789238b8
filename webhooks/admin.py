"""Staff views of customer webhooks: read-only (customers manage their
endpoints through the API), and the signing secrets are never shown."""

from __future__ import annotations

from django.contrib import admin

from core.admin import ReadOnlyAdmin, ReadOnlyInline, json_display
from webhooks.models import WebhookAttempt, WebhookDelivery, WebhookEndpoint, WebhookEvent


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(ReadOnlyAdmin):
    # The signing secret is the customer's: never shown here.
    fields = readonly_fields = (
        "account",
        "url",
        json_display("events", "events"),
        "description",
        "is_active",
        "created_at",
        "previous_secret_expires_at",
    )
    list_display = ("url", "account", "is_active", "created_at")
    list_filter = ("is_active",)
    search_fields = ("url", "account__username")
    list_select_related = ("account",)
    ordering = ("-created_at", "-id")

    def lookup_allowed(self, lookup, value, request=None):
        # A filter on the secret in the list's query string (?secret__startswith=...)
        # would tell its characters one count at a time, as UserAdmin refuses for passwords.
        if lookup.split("__", 1)[0] in ("secret", "previous_secret"):
            return False
        return super().lookup_allowed(lookup, value, request)


@admin.register(WebhookEvent)
class WebhookEventAdmin(ReadOnlyAdmin):
    fields = readonly_fields = ("id", "account", "type", json_display("data", "data"), "created_at")
    list_display = ("id", "type", "account", "created_at")
    list_filter = ("type",)
    search_fields = ("=id", "account__username")
    list_select_related = ("account",)
    date_hierarchy = "created_at"


class WebhookAttemptInline(ReadOnlyInline):
    model = WebhookAttempt
    fields = readonly_fields = ("at", "status_code", "error_category", "error", "duration_ms")


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(ReadOnlyAdmin):
    fields = readonly_fields = (
        "event",
        "endpoint",
        "status",
        "attempts",
        "next_attempt_at",
        "delivered_at",
        "created_at",
    )
    list_display = ("id", "event_type", "endpoint", "account", "status", "attempts", "next_attempt_at", "created_at")
    list_filter = ("status", "event__type")
    search_fields = ("=event__id", "endpoint__url", "endpoint__account__username")
    list_select_related = ("event", "endpoint__account")
    date_hierarchy = "created_at"
    inlines = [WebhookAttemptInline]

    @admin.display(description="event", ordering="event__type")
    def event_type(self, obj):
        return obj.event.type

    @admin.display(description="account", ordering="endpoint__account__username")
    def account(self, obj):
        return obj.endpoint.account
