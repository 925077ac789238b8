import re
from collections.abc import Iterable
from typing import Any

from django.http import HttpRequest, JsonResponse
from django.urls import URLPattern, URLResolver, get_resolver
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from core.api import PublicApiView
from core.health import readiness


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


@never_cache
@require_GET
def readyz(request: HttpRequest) -> JsonResponse:
    ready, body = readiness()
    return JsonResponse(body, status=200 if ready else 503)


def _api_paths(patterns: Iterable[URLPattern | URLResolver], prefix: str = "") -> list[str]:
    """The routes under /api/v1/, with path parameters as {name}."""
    paths: list[str] = []
    for pattern in patterns:
        route = re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", str(pattern.pattern))
        if isinstance(pattern, URLResolver):
            paths.extend(_api_paths(pattern.url_patterns, prefix + route))
        elif isinstance(pattern, URLPattern) and prefix + route:
            paths.append(prefix + route)
    return paths


class ApiIndexOutput(serializers.Serializer[dict[str, Any]]):
    name = serializers.CharField()
    version = serializers.CharField()
    schema = serializers.CharField(help_text="The OpenAPI schema.")
    docs = serializers.CharField(help_text="The browsable API documentation.")
    endpoints = serializers.ListField(child=serializers.CharField(), help_text="Every route under /api/v1/.")


class ApiIndexView(PublicApiView):
    @extend_schema(
        operation_id="api_index",
        tags=["api"],
        auth=[],
        summary="What the API offers: its schema, its docs and its routes",
        responses={200: ApiIndexOutput},
    )
    def get(self, request: Request) -> Response:
        base = "/api/v1/"
        endpoints = sorted(dict.fromkeys(base + p for p in _api_paths(get_resolver("config.api_urls").url_patterns)))
        out = {
            "name": "GPU Rent Hub API",
            "version": "1",
            "schema": "/api/schema/",
            "docs": "/api/docs/",
            "endpoints": endpoints,
        }
        return Response(ApiIndexOutput(out).data)
