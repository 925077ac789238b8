"""Routes of customer webhooks under /api/v1/webhooks (included from config.api_urls)."""

from django.urls import path

from core import converters  # noqa: F401  (registers the `id` path converter)
from webhooks import views

urlpatterns = [
    path("webhooks", views.WebhookEndpointListView.as_view(), name="webhooks"),
    path("webhooks/<id:endpoint_id>", views.WebhookEndpointDetailView.as_view(), name="webhook"),
    path(
        "webhooks/<id:endpoint_id>/rotate-secret", views.WebhookSecretRotateView.as_view(), name="webhook-rotate-secret"
    ),
    path("webhooks/<id:endpoint_id>/ping", views.WebhookPingView.as_view(), name="webhook-ping"),
    path("webhooks/<id:endpoint_id>/deliveries", views.WebhookDeliveryListView.as_view(), name="webhook-deliveries"),
    path(
        "webhooks/<id:endpoint_id>/deliveries/<id:delivery_id>",
        views.WebhookDeliveryDetailView.as_view(),
        name="webhook-delivery",
    ),
    path(
        "webhooks/<id:endpoint_id>/deliveries/<id:delivery_id>/redeliver",
        views.WebhookRedeliverView.as_view(),
        name="webhook-redeliver",
    ),
]
