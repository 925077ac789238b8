"""The benchmark plan of an order or rental, and the results uploaded for a
rental: thin callers of rentals.services.benchmarks. Every endpoint answers 404
to other accounts; a `read` token may GET, uploading needs `full`."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.selectors import request_account
from core.api import error_doc
from core.pagination import PageQuery, page_of, paginate
from rentals import selectors
from rentals.serializers import BenchmarkOutput, BenchmarkPlanOutput, BenchmarkUploadInput
from rentals.services import benchmarks

PLAN_ERRORS = {
    404: error_doc("`not_found`: no such order or rental of yours."),
    409: error_doc(
        "`workload_missing` (ordered without a workload), `workload_unreadable`, or the reason the workload "
        "does not run on the configuration (`does_not_fit`, ...)."
    ),
}


class OrderBenchmarkPlanView(APIView):
    @extend_schema(
        responses={200: BenchmarkPlanOutput, **PLAN_ERRORS},
        summary="The benchmark plan of an order: three vllm bench serve lines and their predicted figures",
    )
    def get(self, request: Request, order_id: int) -> Response:
        context = benchmarks.order_benchmark_plan(account=request_account(request), order_id=order_id)
        return Response(BenchmarkPlanOutput(benchmarks.plan_view(context)).data)


class RentalBenchmarkPlanView(APIView):
    @extend_schema(
        responses={200: BenchmarkPlanOutput, **PLAN_ERRORS},
        summary="The benchmark plan of a rental: three vllm bench serve lines and their predicted figures",
    )
    def get(self, request: Request, rental_id: int) -> Response:
        context = benchmarks.rental_benchmark_plan(account=request_account(request), rental_id=rental_id)
        return Response(BenchmarkPlanOutput(benchmarks.plan_view(context)).data)


class RentalBenchmarksView(APIView):
    @extend_schema(
        operation_id="rentals_benchmarks_list",
        parameters=[PageQuery],
        responses={
            200: page_of(BenchmarkOutput),
            400: error_doc("`invalid` or `invalid_cursor`."),
            404: error_doc("`not_found`: no such rental of yours."),
        },
        summary="The rental's uploaded results: measured beside predicted, the ratio, the cost per 1M accepted tokens",
    )
    def get(self, request: Request, rental_id: int) -> Response:
        rental, runs = benchmarks.rental_benchmarks(account=request_account(request), rental_id=rental_id)
        return paginate(
            request,
            runs,
            BenchmarkOutput,
            ordering=("uploaded_at", "id"),
            rows=lambda page: [benchmarks.run_view(run, order=rental.order) for run in page],
        )

    @extend_schema(
        request=BenchmarkUploadInput,
        responses={
            201: BenchmarkOutput,
            400: error_doc(
                "`invalid_bench_result` (details.field names the result's field), `bench_result_too_large`, "
                "`invalid` (details.fields)."
            ),
            404: error_doc("`not_found`: no such rental of yours."),
            409: error_doc("`benchmark_limit`, `workload_missing`, `workload_unreadable`."),
        },
        summary="Upload a vllm bench serve --save-result file for one trace of the plan",
    )
    def post(self, request: Request, rental_id: int) -> Response:
        body = request.data  # parsed first, as on every endpoint: malformed or too deeply nested JSON is a 400
        # Another account's rental: 404 before the file is read.
        selectors.rental_get(account=request_account(request), rental_id=rental_id)
        data = BenchmarkUploadInput(data=body)
        data.valid_or_refuse()
        run = benchmarks.benchmark_upload(
            account=request_account(request),
            rental_id=rental_id,
            result=data.validated_data["result"],
            trace=data.validated_data.get("trace"),
            environment=data.validated_data.get("environment"),
        )
        return Response(
            BenchmarkOutput(benchmarks.run_view(run, order=run.rental.order)).data, status=status.HTTP_201_CREATED
        )
