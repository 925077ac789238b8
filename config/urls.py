from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from core import views as core_views

admin.site.site_header = "GPU Rent Hub staff"
admin.site.site_title = "GPU Rent Hub"

urlpatterns = [
    path("healthz", core_views.healthz, name="healthz"),
    path("readyz", core_views.readyz, name="readyz"),
    path("admin/", admin.site.urls),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="docs"),
    path("api/v1/", include("config.api_urls")),
    path("pay/", include("billing.checkout_urls")),
]

handler400 = "core.api.json_bad_request"
handler404 = "core.api.json_page_not_found"
handler500 = "core.api.json_server_error"
