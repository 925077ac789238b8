"""Public catalog and pricing endpoints (no authentication)."""

from django.http import HttpResponse
from django.utils.http import http_date, parse_http_date_safe
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.permissions import AllowAny
from rest_framework.renderers import JSONRenderer
from rest_framework.views import APIView

from catalog import selectors, serializers, services
from catalog.models import Addon
from core.api import error_doc


class PublicView(APIView):
    authentication_classes: list = []
    permission_classes = [AllowAny]


def _not_modified(request, snapshot: selectors.CatalogSnapshot, etag: str) -> bool:
    """Whether a conditional GET already has this catalog version."""
    if_none_match = request.headers.get("If-None-Match")
    if if_none_match is not None:
        return if_none_match.strip() == "*" or etag in [e.strip() for e in if_none_match.split(",")]
    since = parse_http_date_safe(request.headers.get("If-Modified-Since", ""))
    return since is not None and int(snapshot.changed_at.timestamp()) <= since


def rendered(data) -> bytes:
    return JSONRenderer().render(data)


def json_response(body: bytes, status: int = 200) -> HttpResponse:
    """An answer rendered once and kept (bytes): sent as it is, not rendered again."""
    return HttpResponse(body, status=status, content_type="application/json")


def catalog_response(request, name: str, build) -> HttpResponse:
    """A catalog list, built and rendered once per catalog version and process,
    with its validators: ETag (the version) and Last-Modified (when it changed);
    a conditional request that has it already is answered 304 with no body."""
    snapshot = selectors.catalog_current()
    etag = f'"catalog-{snapshot.version}"'
    if snapshot.version and _not_modified(request, snapshot, etag):
        response = HttpResponse(status=304)
    else:
        response = json_response(selectors.catalog_memo(snapshot, ("list", name), lambda: rendered(build(snapshot))))
    if snapshot.version:
        response["ETag"] = etag
        response["Last-Modified"] = http_date(snapshot.changed_at.timestamp())
        response["Cache-Control"] = "public, max-age=0, must-revalidate"
    return response


class GpuListView(PublicView):
    @extend_schema(responses=serializers.GpuOutput(many=True), summary="The cards on offer")
    def get(self, request):
        def build(snapshot):
            gpus = [g for g in snapshot.gpus.values() if g.is_active]
            return serializers.GpuOutput(gpus, many=True).data

        return catalog_response(request, "gpus", build)


class RegionListView(PublicView):
    @extend_schema(responses=serializers.RegionOutput(many=True), summary="Regions and the cards each has")
    def get(self, request):
        def build(snapshot):
            regions = [
                {
                    "code": r.code,
                    "name": r.name,
                    "gpus": [
                        g.slug
                        for g in snapshot.gpus.values()
                        if g.is_active and r.code in snapshot.gpu_regions.get(g.slug, ())
                    ],
                }
                for r in snapshot.regions.values()
            ]
            return serializers.RegionOutput(regions, many=True).data

        return catalog_response(request, "regions", build)


class StockView(PublicView):
    @extend_schema(
        parameters=[
            OpenApiParameter("region", str, description="A region code, e.g. DFW-1"),
            OpenApiParameter("gpu", str, description="A card slug, e.g. h100-sxm"),
        ],
        responses=serializers.StockOutput(many=True),
        summary="Free GPUs per region and card",
    )
    def get(self, request):
        # Read as they are (StockQuery documents them): an unknown value is refused below.
        region = request.query_params.get("region")
        gpu = request.query_params.get("gpu")
        snapshot = selectors.catalog_current()
        region = None if region is None else snapshot.region(region).code
        gpu = None if gpu is None else snapshot.gpu(gpu).slug

        def build() -> bytes:
            rows = selectors.stock(region=region, gpu=gpu, catalog_now=snapshot)
            # Built in StockOutput's shape directly: the answer is public and asked for
            # often, and its four plain fields need no field-by-field rendering.
            return rendered(
                [
                    {"region": r.region, "gpu": r.gpu, "available": r.available, "max_per_host": r.max_per_host}
                    for r in rows
                ]
            )

        return json_response(selectors.stock_memo(snapshot, ("json", region, gpu), build))


class AddonListView(PublicView):
    @extend_schema(responses=serializers.AddonOutput(many=True), summary="Add-ons and usage charges")
    def get(self, request):
        return catalog_response(
            request,
            "addons",
            lambda snapshot: serializers.AddonOutput(Addon.objects.filter(is_active=True), many=True).data,
        )


class TemplateListView(PublicView):
    @extend_schema(responses=serializers.TemplateOutput(many=True), summary="OS templates and the cards they run on")
    def get(self, request):
        def build(snapshot):
            gpus = [g for g in snapshot.gpus.values() if g.is_active]
            out = []
            for t in snapshot.templates.values():
                runs_on = [g.slug for g in gpus if t.runs_on(g)]
                out.append(
                    {"slug": t.slug, "name": t.name, "description": t.description, "stack": t.stack, "gpus": runs_on}
                )
            return serializers.TemplateOutput(out, many=True).data

        return catalog_response(request, "templates", build)


class QuoteView(PublicView):
    @extend_schema(
        request=serializers.QuoteInput,
        responses={
            200: serializers.QuoteOutput,
            400: error_doc(
                "`unknown_gpu` (details.gpus), `unknown_addon` (details.addons), `unknown_template` "
                "(details.templates), and the rules between fields the schema cannot state: `min_gpus` and "
                "`invalid_gpu_count` (the card's allowed counts, details.allowed_counts), `template_incompatible` "
                "(a template for other cards), `gpu_unavailable`; `invalid` when more than one "
                "field is wrong: each in details.fields, the lists of valid values beside them."
            ),
            409: error_doc("`pricing_unavailable`: the card has no price now."),
        },
        summary="Price an instance",
    )
    def post(self, request):
        snapshot = selectors.catalog_current()
        # Kept per catalog version and request body: the same question asked
        # again is answered without parsing it. A refusal raises and is not kept.
        return json_response(
            selectors.catalog_memo(
                snapshot, ("quote", request.body), lambda: rendered(_quote_payload(snapshot, request))
            )
        )


def _quote_payload(snapshot: selectors.CatalogSnapshot, request) -> dict:
    """The quote's answer from the catalog of `snapshot`. Every field is checked
    before anything is answered (serializers.RefusingInput)."""
    v = serializers.QuoteInput(data=request.data, context={"catalog": snapshot}).valid_or_refuse()
    q = services.quote(
        gpu=v["gpu"],
        gpu_count=v["gpu_count"],
        term=v["term"],
        terms=v["terms"],
        addons=v["addons"],
        template=v.get("template"),
        multi_gpu_tiers=snapshot.multi_gpu_tiers,
        term_tiers=snapshot.term_tiers.get(v["term"], ()),
    )
    return serializers.QuoteOutput(q).data
