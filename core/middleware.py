"""Everything under /api/ answers in the API's error shape, in every mode.

Django's own pages (the 404 of an unknown URL, the 405 of a plain view, and
with DEBUG its technical 404 and 500 pages) are HTML; a client of the API
gets JSON instead: {"error": {"code", "message", "details"}}. A URL that only
differs by a trailing slash says which one exists.

A NUL character in a path or query is refused with 400 before any view sees
it (NulCharacterRefusedMiddleware). A view that finds the database gone
answers 503 with Retry-After (DatabaseUnavailableMiddleware).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse
from django.http.response import HttpResponseBase

from core.api import error_body, not_found_details

log = logging.getLogger(__name__)

_CODES = {
    400: ("bad_request", "Bad request."),
    403: ("permission_denied", "You do not have permission to perform this action."),
    404: ("not_found", "Not found."),
    405: ("method_not_allowed", "Method not allowed."),
    500: ("server_error", "Internal error; it has been logged."),
}


class ApiJsonErrorsMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        response = self.get_response(request)
        if (
            request.path.startswith("/api/")
            and response.status_code >= 400
            and not response.get("Content-Type", "").startswith("application/json")
        ):
            status = response.status_code
            code, message = _CODES.get(status, ("error", response.reason_phrase or "Error."))
            replaced = JsonResponse(
                error_body(code, message, not_found_details(request) if status == 404 else {}), status=status
            )
            for header in ("Allow", "Retry-After"):
                if header in response:
                    replaced[header] = response[header]
            return replaced
        return response


NUL = "\x00"


def _has_nul(request: HttpRequest) -> bool:
    if NUL in request.path:
        return True
    return any(NUL in name or any(NUL in value for value in values) for name, values in request.GET.lists())


class NulCharacterRefusedMiddleware:
    """A NUL character (%00) in the path or in the query string is refused
    with 400 before any view sees it: PostgreSQL stores no NUL in text, so a
    lookup or filter that passed one on (a checkout token, an admin list's
    ?status=) failed with a 500. Under /api/ the answer has the API's error
    shape (code `bad_request`); elsewhere it is a plain-text 400."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        if _has_nul(request):
            message = "The address contains a NUL character (%00)."
            if request.path.startswith("/api/"):
                return JsonResponse(error_body("bad_request", message, {"reason": "nul_character"}), status=400)
            return HttpResponseBadRequest(message, content_type="text/plain; charset=utf-8")
        return self.get_response(request)


class DatabaseUnavailableMiddleware:
    """A view that finds the database gone (it restarts, fails over, refuses
    connections) answers 503 with `Retry-After`, not 500: the request did
    nothing and may be sent again. Under /api/ (and the checkout page's status)
    in the error shape, code `service_unavailable`; elsewhere plain text. Every
    other exception is left to Django's 500 handler."""

    RETRY_AFTER_SECONDS = 5

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, (OperationalError, InterfaceError)):
            return None
        log.warning("database unavailable on %s %s: %s", request.method, request.path, exception)
        message = "The database is not answering; nothing was done. Try again in a few seconds."
        response: HttpResponse
        if request.path.startswith("/api/") or request.path.endswith("/status"):
            details = {"retry_after_seconds": self.RETRY_AFTER_SECONDS}
            response = JsonResponse(error_body("service_unavailable", message, details), status=503)
        else:
            response = HttpResponse(message, status=503, content_type="text/plain; charset=utf-8")
        response["Retry-After"] = str(self.RETRY_AFTER_SECONDS)
        return response
