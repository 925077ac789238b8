import re
import threading
from collections.abc import Iterable
from typing import Any, ClassVar

from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import translation
from django.utils.module_loading import import_string
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularAPIView
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from core.api import PublicApiView, error_body
from core.health import readiness
from core.schema import ENUMS_VERSION


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


def _invalid_parameter(name: str, message: str) -> JsonResponse:
    return JsonResponse(error_body("invalid", message, {"fields": {name: [message]}}), status=400)


class SchemaView(SpectacularAPIView):
    """The OpenAPI schema (/api/schema/), generated once per process for each
    catalog version, format and language, then sent as it was. Generating it
    takes 170-280 ms of CPU, so unkept, anyone could keep a web worker busy by
    asking for it. It changes with the code and with the catalog (its enums:
    core.schema.ENUMS, read at core.schema.ENUMS_VERSION); what else varies it
    is bounded: the format (one of the view's four renderers, by `?format=` or
    Accept, and a JSON indent of 0 to 8 asked for in Accept) and the language
    (`?lang=`, one of LANGUAGES; another is a 400).
    There is one version: a `version` query parameter, which would be written
    into the schema, is a 400."""

    kept: ClassVar[dict[tuple[int, str, int | None, str], tuple[bytes, str, str]]] = {}
    kept_lock = threading.Lock()

    @extend_schema(exclude=True)  # as the view it extends, under SERVE_INCLUDE_SCHEMA False
    def get(self, request: Request, *args: Any, **kwargs: Any) -> HttpResponseBase:
        lang = request.query_params.get("lang") or ""
        if lang and lang not in dict(settings.LANGUAGES):
            return _invalid_parameter("lang", f"`lang` is one of {', '.join(dict(settings.LANGUAGES))}.")
        if "version" in request.query_params:
            return _invalid_parameter("version", "The schema has one version: leave out `version`.")
        version = import_string(ENUMS_VERSION)()
        renderer = request.accepted_renderer
        # A JSON client may ask for an indent in its Accept header (`; indent=2`: 0 to 8).
        indent = renderer.get_indent(request.accepted_media_type, {}) if hasattr(renderer, "get_indent") else None
        key = (version, renderer.media_type, indent, lang or translation.get_language())
        kept = self.kept.get(key)
        if kept is not None:
            content, content_type, disposition = kept
            answer = HttpResponse(content, content_type=content_type)
            answer["Content-Disposition"] = disposition
            return answer
        response: Response = super().get(request, *args, **kwargs)  # type: ignore[no-untyped-call]  # drf-spectacular has no hints

        def keep(rendered: Any) -> None:
            if rendered.status_code != 200 or not version:
                return
            with self.kept_lock:
                for old in [k for k in self.kept if k[0] != version]:  # an older catalog's
                    del self.kept[old]
                self.kept[key] = (rendered.content, rendered["Content-Type"], rendered["Content-Disposition"])

        response.add_post_render_callback(keep)
        return response
