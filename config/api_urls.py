"""Every API route under /api/v1/: each app's routes, in one flat list.

The apps' lists are spliced in rather than included under an empty prefix:
an include that does not match a path raises and records every route it
tried, and a request for an order went through three of them first."""

from importlib import import_module

from django.urls import include, path

from core.views import ApiIndexView


def routes(module: str) -> list:
    return import_module(module).urlpatterns


urlpatterns = [
    path("", ApiIndexView.as_view(), name="api-index"),
    *routes("catalog.urls"),
    *routes("billing.urls"),
    *routes("accounts.urls"),
    *routes("rentals.urls"),
    *routes("webhooks.urls"),
    path("sizing/", include("sizing.urls")),
]
