"""Sizing endpoints: public, like the catalog (a customer sizes before signing up)."""

import json
from decimal import Decimal

from django.http import HttpResponse
from drf_spectacular.utils import extend_schema
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response

from catalog.selectors import catalog_current, catalog_memo, gpu_get, stock
from catalog.views import PublicView
from core.api import error_doc
from core.throttle import client_address

from . import compare, payloads, selectors, serializers, services


class ModelListView(PublicView):
    @extend_schema(responses=payloads.ArchitectureOutput(many=True), summary="Models the sizing API knows")
    def get(self, request):
        return Response(payloads.ArchitectureOutput(selectors.architecture_list(), many=True).data)


class CheckView(PublicView):
    @extend_schema(
        request=serializers.CheckInput,
        responses={
            200: payloads.CheckOutput,
            429: error_doc(
                "`throttled`: more new sizings (checks, comparisons, recommendations not asked before) than "
                "SIZING_NEW_PER_ADDRESS from this address in the window (`details.retry_after_seconds`, and "
                "`Retry-After`)."
            ),
        },
        summary="Does this configuration hold the model? (fits=false is a report, answered 200)",
    )
    def post(self, request):
        _new_sizing_counted(request)  # before the body is read: reading a large one costs too
        data = serializers.CheckInput(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        result = services.sizing_check(
            request=v["workload"], gpu=gpu_get(slug=v["gpu"]), gpu_count=v["gpu_count"], term=v["term"], solve=True
        )
        return Response(payloads.CheckOutput(payloads.check_payload(result)).data)


# Fields of a recommendation that filter or advise; the rest names the workload.
RECOMMEND_FILTERS = ("region", "vendor", "max_gpus", "gpu_count", "term", "tokens_per_month", "traffic", "use")


def _workload_key(body) -> str:
    """The workload of a request body, as a key for the arithmetic kept per
    workload (sizing_recommend's memo_key): the body without its filters."""
    return json.dumps({k: v for k, v in body.items() if k not in RECOMMEND_FILTERS}, sort_keys=True, default=str)


def _new_sizing_counted(request) -> None:
    """services.sizing_new_counted for the request's client address: a check, a
    comparison, or a recommendation this worker has no answer kept for (the
    whole sizing: every card and count)."""
    services.sizing_new_counted(client_address=client_address(request))


class RecommendView(PublicView):
    @extend_schema(
        request=serializers.RecommendInput,
        responses={
            200: payloads.RecommendOutput,
            429: error_doc(
                "`throttled`: more new sizings (recommendations for workloads not asked before, checks, "
                "comparisons) than SIZING_NEW_PER_ADDRESS from this address in the window "
                "(`details.retry_after_seconds`, and `Retry-After`); a recommendation asked before is still answered."
            ),
        },
        summary="Every configuration that holds the model, cheapest first",
    )
    def post(self, request):
        def validated() -> dict:
            # A body no worker has kept: counted before it is read (reading a
            # large one costs too), once for its validation and its sizing.
            _new_sizing_counted(request)
            data = serializers.RecommendInput(data=request.data)
            data.is_valid(raise_exception=True)
            return data.validated_data

        # The validated request (its architecture read from the database) is kept
        # per catalog version and body, like the arithmetic it names; what is free
        # in the region is read anew each time. A refusal raises and is not kept.
        catalog_now = catalog_current()
        # A posted config.json makes a large workload: counted as four times its body.
        v = catalog_memo(catalog_now, ("recommend-input", request.body), validated, cost=4 * len(request.body) + 4096)
        region = v.get("region")
        rows = None
        if region is not None:
            region = catalog_now.region(region).code
            rows = stock(region=region, catalog_now=catalog_now)

        def answer() -> bytes:
            rec = services.sizing_recommend(
                request=v["workload"],
                region=region,
                vendor=v.get("vendor"),
                max_gpus=v.get("max_gpus"),
                gpu_count=v.get("gpu_count"),
                term=v["term"],
                tokens_per_month=v.get("tokens_per_month"),
                traffic=v.get("traffic"),
                use=v.get("use"),
                memo_key=_workload_key(request.data),
                catalog_now=catalog_now,
                stock_rows=rows,
            )
            # Sent as built (sizing.payloads: RecommendOutput's builder, held to it
            # field by field): re-rendering up to sixty candidates through DRF
            # fields would cost more than the sizing itself.
            return JSONRenderer().render(payloads.recommend_payload(rec))

        # The whole answer is kept per catalog version, body and the region's
        # stock as just read: asked again while nothing changed, it is sent as it was.
        key = ("recommend", request.body, tuple(rows) if rows is not None else None)
        return HttpResponse(catalog_memo(catalog_now, key, answer), content_type="application/json")


class CompareView(PublicView):
    @extend_schema(
        request=serializers.CompareInput,
        responses={
            200: payloads.CompareOutput,
            400: error_doc(
                "Invalid input: `invalid` (details.fields: fewer than 2 or more than 5 `candidates`, "
                "`concurrency` and `requests_per_s` together), `unknown_gpu` (a candidate's card), "
                "`unknown_region`, and the sizing body's codes. A candidate that does not run the workload is "
                "a row with `fits` false and its reasons, not a refusal."
            ),
            429: error_doc(
                "`throttled`: more new sizings (comparisons, checks, recommendations not asked before) than "
                "SIZING_NEW_PER_ADDRESS from this address in the window (`details.retry_after_seconds`, and "
                "`Retry-After`)."
            ),
        },
        summary="The buyer's table: 2-5 candidates by cost per accepted output token under a latency target",
    )
    def post(self, request):
        _new_sizing_counted(request)  # before the body is read: reading a large one costs too
        data = serializers.CompareInput(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        api_price = None
        if "api_usd_per_million_input" in v or "api_usd_per_million_output" in v:
            api_price = compare.ApiPrice(
                usd_per_million_input=v.get("api_usd_per_million_input", Decimal(0)),
                usd_per_million_output=v.get("api_usd_per_million_output", Decimal(0)),
            )
        rate = v.get("requests_per_s")
        result = compare.sizing_compare(
            request=v["workload"],
            candidates=[(c["gpu"], c.get("gpu_count")) for c in v["candidates"]],
            load=compare.Load(concurrency=None if rate is not None else v["concurrency"], requests_per_s=rate),
            targets=compare.Targets(ttft_p95_ms=v.get("ttft_p95_ms"), e2e_p95_ms=v.get("e2e_p95_ms")),
            utilization=Decimal(str(v["utilization"])),
            term=v["term"],
            region=v.get("region"),
            api_price=api_price,
            output_tokens_per_month=v.get("output_tokens_per_month"),
            use=v.get("use"),
        )
        return Response(payloads.CompareOutput(payloads.compare_payload(result)).data)
