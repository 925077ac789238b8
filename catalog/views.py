"""Public catalog and pricing endpoints (no authentication)."""

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from catalog import selectors, serializers, services
from catalog.models import Addon, GpuModel, Region, Template
from core.api import error_doc
from core.errors import DomainError


class PublicView(APIView):
    authentication_classes: list = []
    permission_classes = [AllowAny]


class GpuListView(PublicView):
    @extend_schema(responses=serializers.GpuOutput(many=True), summary="The cards on offer")
    def get(self, request):
        gpus = GpuModel.objects.filter(is_active=True)
        return Response(serializers.GpuOutput(gpus, many=True).data)


class RegionListView(PublicView):
    @extend_schema(responses=serializers.RegionOutput(many=True), summary="Regions and the cards each has")
    def get(self, request):
        by_region: dict[str, list[str]] = {}
        for row in selectors.stock():
            by_region.setdefault(row.region, []).append(row.gpu)
        regions = [
            {"code": r.code, "name": r.name, "gpus": by_region.get(r.code, [])}
            for r in Region.objects.filter(is_active=True)
        ]
        return Response(serializers.RegionOutput(regions, many=True).data)


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
        query = serializers.StockQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        region = query.validated_data.get("region")
        gpu = query.validated_data.get("gpu")
        if region is not None:
            region = selectors.region_get(code=region).code
        if gpu is not None:
            gpu = selectors.gpu_get(slug=gpu).slug
        rows = selectors.stock(region=region, gpu=gpu)
        return Response(serializers.StockOutput(rows, many=True).data)


class AddonListView(PublicView):
    @extend_schema(responses=serializers.AddonOutput(many=True), summary="Add-ons and usage charges")
    def get(self, request):
        return Response(serializers.AddonOutput(Addon.objects.filter(is_active=True), many=True).data)


class TemplateListView(PublicView):
    @extend_schema(responses=serializers.TemplateOutput(many=True), summary="OS templates and the cards they run on")
    def get(self, request):
        gpus = list(GpuModel.objects.filter(is_active=True))
        out = []
        for t in Template.objects.filter(is_active=True).prefetch_related("gpus"):
            runs_on = [g.slug for g in gpus if t.runs_on(g)]
            out.append(
                {"slug": t.slug, "name": t.name, "description": t.description, "stack": t.stack, "gpus": runs_on}
            )
        return Response(serializers.TemplateOutput(out, many=True).data)


class QuoteView(PublicView):
    @extend_schema(
        request=serializers.QuoteInput,
        responses={200: serializers.QuoteOutput, 409: error_doc("`pricing_unavailable`: the card has no price now.")},
        summary="Price an instance",
    )
    def post(self, request):
        data = serializers.QuoteInput(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        gpu = selectors.gpu_get(slug=v["gpu"])
        addons = []
        for slug in v["addons"]:
            addon = Addon.objects.filter(slug=slug, is_active=True, is_usage=False).first()
            if addon is None:
                raise DomainError("unknown_addon", f"No add-on {slug!r}.", details={"addon": slug})
            addons.append(addon)
        template = None
        if "template" in v:
            template = Template.objects.filter(slug=v["template"], is_active=True).first()
            if template is None:
                raise DomainError("unknown_template", f"No template {v['template']!r}.")
        q = services.quote(
            gpu=gpu, gpu_count=v["gpu_count"], term=v["term"], terms=v["terms"], addons=addons, template=template
        )
        return Response(serializers.QuoteOutput(q).data)
