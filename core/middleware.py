"""Everything under /api/ answers in the API's error shape, in every mode.

Django's own pages (the 404 of an unknown URL, the 405 of a plain view, and
with DEBUG its technical 404 and 500 pages) are HTML; a client of the API
gets JSON instead: {"error": {"code", "message", "details"}}. A URL that only
differs by a trailing slash says which one exists.

A NUL character in a path or query is refused with 400 before any view sees
it (NulCharacterRefusedMiddleware).
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponseBadRequest, JsonResponse
from django.http.response import HttpResponseBase

from core.api import error_body, not_found_details

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
