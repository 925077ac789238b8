"""One error shape for every API refusal:

{"error": {"code": "...", "message": "...", "details": {...}}}

and the bases every app's API views share (the error documentation, the
view classes, the id path parameter).
"""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import models
from django.http import Http404, JsonResponse
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import exceptions, serializers, status
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView
from rest_framework.views import exception_handler as drf_exception_handler

from core.db import related_all
from core.errors import DomainError

log = logging.getLogger(__name__)

_DRF_CODES: dict[type[exceptions.APIException], str] = {
    exceptions.ParseError: "parse_error",
    exceptions.AuthenticationFailed: "authentication_failed",
    exceptions.NotAuthenticated: "not_authenticated",
    exceptions.PermissionDenied: "permission_denied",
    exceptions.NotFound: "not_found",
    exceptions.MethodNotAllowed: "method_not_allowed",
    exceptions.NotAcceptable: "not_acceptable",
    exceptions.UnsupportedMediaType: "unsupported_media_type",
    exceptions.Throttled: "throttled",
    exceptions.ValidationError: "invalid",
}


_shared_outputs: dict[type[serializers.Serializer], serializers.Serializer] = {}


def represent(serializer_class: type[serializers.Serializer], instance: Any) -> dict[str, Any]:
    """`serializer_class(instance).data`, by one instance of the serializer kept
    per class. A serializer builds its fields anew for every instance (a deep
    copy of each declared field, nested ones too): for an order's answer that is
    five times the work of rendering it. The kept instance holds no request
    state, so it serves any thread: only for output serializers that read no
    context (none here does: links come from settings)."""
    shared = _shared_outputs.get(serializer_class)
    if shared is None:
        shared = _shared_outputs.setdefault(serializer_class, serializer_class())
    return shared.to_representation(instance)


class RelatedRows(serializers.ListSerializer):
    """A nested list of a model's related rows (`lines = RelatedRows(child=LineOutput())`,
    what `many=True` makes) that reads those the write kept on the instance
    (core.db.written_keep) before asking the relation's manager for them."""

    def get_attribute(self, instance: Any) -> Any:
        if isinstance(instance, models.Model) and len(self.source_attrs) == 1:
            return related_all(instance, self.source_attrs[0])
        return super().get_attribute(instance)


def error_body(code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details or {}}}


def error_response(code: str, message: str, http_status: int, details: dict[str, Any] | None = None) -> Response:
    return Response(error_body(code, message, details), status=http_status)


def _validation_message(detail: Any) -> str:
    """The first human-readable message in a DRF validation detail."""
    if isinstance(detail, dict):
        for field, value in detail.items():
            inner = _validation_message(value)
            return inner if field == "non_field_errors" else f"{field}: {inner}"
    if isinstance(detail, list) and detail:
        return _validation_message(detail[0])
    return str(detail)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, DomainError):
        response = error_response(exc.code, exc.message, exc.status, exc.details)
        retry_after = getattr(exc, "retry_after", None)  # a Throttled refusal's
        if retry_after is not None:
            response["Retry-After"] = str(retry_after)
        return response
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    elif isinstance(exc, DjangoValidationError):
        exc = exceptions.ValidationError(
            exc.message_dict if hasattr(exc, "error_dict") else {"non_field_errors": exc.messages}
        )

    response = drf_exception_handler(exc, context)
    if response is None:
        return None  # a bug: Django's 500 handler (JSON under /api/) takes it

    assert isinstance(exc, exceptions.APIException)
    code = getattr(exc, "error_code", None) or next((c for t, c in _DRF_CODES.items() if isinstance(exc, t)), "error")
    if isinstance(exc, exceptions.ValidationError):
        details = {"fields": exc.detail if isinstance(exc.detail, dict) else {"non_field_errors": exc.detail}}
        message = _validation_message(exc.detail)
    else:
        details = {}
        message = str(exc.detail)
        if isinstance(exc, exceptions.Throttled) and exc.wait is not None:
            details["retry_after_seconds"] = int(exc.wait + 0.999)
    response.data = error_body(code, message, details)
    return response


def _wants_json(request) -> bool:
    return request.path.startswith("/api/") or request.path in ("/healthz", "/readyz")


def not_found_details(request) -> dict[str, Any]:
    """What a client that asked for an unknown API URL can do next: the same
    path with or without its trailing slash when that one exists, else the index."""
    from django.urls import Resolver404, resolve

    path = request.path
    other = path.rstrip("/") if path.endswith("/") else path + "/"
    if other != path and other.startswith("/api/"):
        try:
            resolve(other)
        except Resolver404:
            pass
        else:
            return {"did_you_mean": other}
    return {"index": "/api/v1/"}


def json_page_not_found(request, exception=None):
    if _wants_json(request):
        details = not_found_details(request) if request.path.startswith("/api/") else {}
        return JsonResponse(error_body("not_found", "Not found.", details), status=status.HTTP_404_NOT_FOUND)
    from django.views.defaults import page_not_found

    return page_not_found(request, exception)


def json_server_error(request):
    if _wants_json(request):
        return JsonResponse(
            error_body("server_error", "Internal error; it has been logged."),
            status=status.HTTP_500_INTERNAL_SERVER_ERROR,
        )
    from django.views.defaults import server_error

    return server_error(request)


def json_bad_request(request, exception=None):
    if _wants_json(request):
        return JsonResponse(error_body("bad_request", "Bad request."), status=400)
    from django.views.defaults import bad_request

    return bad_request(request, exception)


# =============================================================================
# Shared pieces of the apps' API views
# =============================================================================


class ErrorDetailOutput(serializers.Serializer):
    code = serializers.CharField(help_text="A stable snake_case word.")
    message = serializers.CharField()
    details = serializers.DictField()


class ErrorOutput(serializers.Serializer):
    """Documents the error shape in the OpenAPI schema."""

    error = ErrorDetailOutput()


def error_doc(description: str) -> OpenApiResponse:
    return OpenApiResponse(ErrorOutput, description=description)


E401 = error_doc("No valid token (`not_authenticated`, `authentication_failed`).")


def id_parameter(name: str) -> OpenApiParameter:
    return OpenApiParameter(name, int, OpenApiParameter.PATH)


# (Comments, not docstrings, on these bases: drf-spectacular would show a
# docstring as the description of every endpoint.)
# `no_store = True` on views whose answers carry a secret (a token, recovery
# codes, a signing secret): `Cache-Control: no-store`, so no browser or proxy
# cache keeps them.
class ApiView(APIView):
    no_store = False

    def finalize_response(self, request, response, *args, **kwargs):
        response = super().finalize_response(request, response, *args, **kwargs)
        if self.no_store:
            response["Cache-Control"] = "no-store"
            response["Pragma"] = "no-cache"
        return response

    def validated(self, serializer_class) -> dict:
        serializer = serializer_class(data=self.request.data)
        serializer.is_valid(raise_exception=True)
        return serializer.validated_data


# No authentication at all: a stale Authorization header must not stand in the
# way of logging in again.
class PublicApiView(ApiView):
    authentication_classes: list = []
    permission_classes = [AllowAny]
