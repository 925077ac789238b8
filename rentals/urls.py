"""Routes of orders, rentals and the operators' callbacks under /api/v1/
(included from config.api_urls)."""

from django.urls import path

from core import converters  # noqa: F401  (registers the `id` path converter)
from rentals import benchmark_views, views

urlpatterns = [
    path("orders", views.OrderListView.as_view(), name="orders"),
    path("orders/<id:order_id>", views.OrderDetailView.as_view(), name="order"),
    path("orders/<id:order_id>/cancel", views.OrderCancelView.as_view(), name="order-cancel"),
    path("rentals", views.RentalListView.as_view(), name="rentals"),
    path("rentals/<id:rental_id>", views.RentalDetailView.as_view(), name="rental"),
    path("rentals/<id:rental_id>/renew", views.RentalRenewView.as_view(), name="rental-renew"),
    path("rentals/<id:rental_id>/cancel", views.RentalCancelView.as_view(), name="rental-cancel"),
    path(
        "orders/<id:order_id>/benchmark-plan",
        benchmark_views.OrderBenchmarkPlanView.as_view(),
        name="order-benchmark-plan",
    ),
    path(
        "rentals/<id:rental_id>/benchmark-plan",
        benchmark_views.RentalBenchmarkPlanView.as_view(),
        name="rental-benchmark-plan",
    ),
    path(
        "rentals/<id:rental_id>/benchmarks",
        benchmark_views.RentalBenchmarksView.as_view(),
        name="rental-benchmarks",
    ),
    path("ops/rentals/<id:rental_id>/ready", views.OpsRentalReadyView.as_view(), name="ops-rental-ready"),
    path("ops/rentals/<id:rental_id>/usage", views.OpsRentalUsageView.as_view(), name="ops-rental-usage"),
]
