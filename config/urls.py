from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularSwaggerSplitView

from core import views as core_views
from core.csp import content_security_policy
from observability.views import metrics

# The API docs page under the strict policy (core/csp.py): its script comes as a
# file (/api/docs/?script=, the split view) instead of inline, its styles from
# templates/drf_spectacular/swagger_ui.html's stylesheet; Swagger UI's stylesheet
# draws its icons from data: URIs.
api_docs = content_security_policy(img_src=["'self'", "data:"])(SpectacularSwaggerSplitView.as_view(url_name="schema"))

urlpatterns = [
    path("healthz", core_views.healthz, name="healthz"),
    path("readyz", core_views.readyz, name="readyz"),
    # Prometheus (docs/operations.md#metrics): METRICS_TOKEN, and nginx lets in only the allowed addresses.
    path("metrics", metrics, name="metrics"),
    path("admin/", admin.site.urls),
    path("api/schema/", core_views.SchemaView.as_view(), name="schema"),
    path("api/docs/", api_docs, name="docs"),
    path("api/v1/", include("config.api_urls")),
    path("pay/", include("billing.checkout_urls")),
]

handler400 = "core.api.json_bad_request"
handler404 = "core.api.json_page_not_found"
handler500 = "core.api.json_server_error"
