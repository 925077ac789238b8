"""The outermost middleware: a request id for the request's log lines and tasks,
and the request metrics (route, method, status, time), with orders placed and
refused counted from the answer to POST /api/v1/orders.

Each answered request also writes one access line (logger `gpurenthub.access`,
INFO): method, path (a checkout page's token masked), route, status, time and the
request id. gunicorn's own access log is off (deploy/gunicorn.conf.py) so that
production has one JSON line per request, not a second line in another format.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from observability import logs
from observability.metrics import LATENCY, ORDERS_PLACED, ORDERS_REFUSED, REQUESTS

access_log = logging.getLogger("gpurenthub.access")

ORDERS_ROUTE = "api/v1/orders"


def _route(request: HttpRequest) -> str:
    match = getattr(request, "resolver_match", None)
    if match is None:
        return "unmatched"  # 404s of unknown paths: one label, not one per path tried
    return match.route or match.view_name or "unnamed"


def _error_code(response: HttpResponse) -> str:
    """The stable error code of an API answer (core/errors.py's shape), read from
    DRF's response data before it was rendered."""
    data = getattr(response, "data", None)
    if isinstance(data, dict) and isinstance(data.get("error"), dict):
        code = data["error"].get("code")
        if isinstance(code, str) and code.isidentifier() and len(code) <= 64:
            return code
    return f"http_{response.status_code}"


class ObservabilityMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        rid = logs.request_id_from(request.headers.get(logs.REQUEST_ID_HEADER))
        token = logs.request_id_set(rid)
        started = time.perf_counter()
        try:
            response = self.get_response(request)
            response[logs.REQUEST_ID_HEADER] = rid
            seconds = time.perf_counter() - started
            route, method, status = _route(request), request.method or "", response.status_code
            REQUESTS.labels(route, method, str(status)).inc()
            LATENCY.labels(route, method).observe(seconds)
            if route == ORDERS_ROUTE and method == "POST":
                if status == 201:
                    ORDERS_PLACED.inc()
                elif 400 <= status < 500:
                    ORDERS_REFUSED.labels(_error_code(response)).inc()
            access_log.info(
                "%s %s %s %.0f ms",
                method,
                request.path,
                status,
                seconds * 1000,
                extra={
                    "method": method,
                    "path": request.path,
                    "route": route,
                    "status": status,
                    "duration_ms": round(seconds * 1000, 1),
                },
            )
            return response
        finally:
            logs.request_id_reset(token)
