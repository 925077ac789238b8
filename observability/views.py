"""GET /metrics: the Prometheus exposition (docs/operations.md#metrics).

Not public: with METRICS_TOKEN set, a scrape must send `Authorization: Bearer
<METRICS_TOKEN>` (compared in constant time); without it the endpoint is off
(404), except on a local run (DEBUG) for a client on this machine. nginx
(deploy/nginx/gpurenthub.conf) also refuses /metrics to every address but the
ones an operator allows.
"""

from __future__ import annotations

import hmac
import ipaddress
import os

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import CollectorRegistry, multiprocess
from prometheus_client.exposition import choose_encoder

from observability.collector import DatabaseCollector
from observability.metrics import PROCESS_METRICS


def _refused(status: int, code: str, message: str) -> JsonResponse:
    response = JsonResponse({"error": {"code": code, "message": message, "details": {}}}, status=status)
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
    return response


def _loopback(request: HttpRequest) -> bool:
    try:
        return ipaddress.ip_address(request.META.get("REMOTE_ADDR", "")).is_loopback
    except ValueError:
        return False


def access_refused(request: HttpRequest) -> JsonResponse | None:
    token = settings.METRICS_TOKEN
    if not token:
        if settings.DEBUG and _loopback(request):
            return None
        return _refused(404, "not_found", "Not found.")
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token.encode()):
        return _refused(401, "not_authenticated", "Send Authorization: Bearer <METRICS_TOKEN>.")
    return None


def registry_build() -> CollectorRegistry:
    """This scrape's registry: the process metrics (every process's, from the files
    in multiprocess mode) and the database collector."""
    registry = CollectorRegistry(auto_describe=False)
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.MultiProcessCollector(registry)
    else:
        for metric in PROCESS_METRICS:
            registry.register(metric)
    registry.register(DatabaseCollector())
    return registry


@never_cache
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    refused = access_refused(request)
    if refused is not None:
        return refused
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    return HttpResponse(encoder(registry_build()), content_type=content_type)
