"""Every API route under /api/v1/, one include per app."""

from django.urls import include, path

from core.views import ApiIndexView

urlpatterns = [
    path("", ApiIndexView.as_view(), name="api-index"),
    path("", include("catalog.urls")),
    path("", include("billing.urls")),
    path("", include("accounts.urls")),
    path("", include("rentals.urls")),
    path("", include("webhooks.urls")),
    path("sizing/", include("sizing.urls")),
]
