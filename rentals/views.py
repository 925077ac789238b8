"""Orders, rentals and the operators' callbacks: thin callers of
rentals.services and rentals.selectors. Every object endpoint answers 404 to
other accounts."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.selectors import request_account
from core.api import error_doc, represent
from core.pagination import PageQuery, page_of, paginate
from core.permissions import StaffPermissionRequired
from core.throttle import client_address
from rentals import selectors, services
from rentals.serializers import (
    OpsReadyInput,
    OpsUsageInput,
    OrderCreateInput,
    OrderOutput,
    RenewInput,
    RentalOutput,
    RentalUpdateInput,
    UsageOutput,
)
from rentals.services.idempotency import idempotent_call

IDEMPOTENCY_HEADER = OpenApiParameter(
    "Idempotency-Key",
    str,
    OpenApiParameter.HEADER,
    required=False,
    description="Retry safely: the same key with the same body returns the first response (24 hours).",
)


NEWEST_FIRST = ("-created_at", "-id")


def _order_body(request: Request, order_id: int) -> dict[str, Any]:
    return represent(OrderOutput, selectors.order_get(account=request_account(request), order_id=order_id))


class OrderListView(APIView):
    @extend_schema(
        operation_id="orders_list",
        parameters=[PageQuery],
        responses={200: page_of(OrderOutput), 400: error_doc("`invalid` or `invalid_cursor`.")},
        summary="Your orders, newest first, a page at a time",
    )
    def get(self, request: Request) -> Response:
        return paginate(
            request, selectors.orders_for(account=request_account(request)), OrderOutput, ordering=NEWEST_FIRST
        )

    @extend_schema(
        request=OrderCreateInput,
        responses={
            201: OrderOutput,
            400: error_doc(
                "`invalid` (every wrong field in details.fields), `unknown_currency` (details.currencies), "
                "`workload_too_large`, `invalid_idempotency_key`, or a rule the schema cannot state: "
                "`unknown_ssh_key` (an id that is not one of your keys), the card's allowed counts "
                "(`min_gpus`, `invalid_gpu_count`), `template_incompatible`, `gpu_unavailable`, a workload "
                "that does not fit or cannot be read (`does_not_fit`, `malformed_config`, ...; docs/sizing.md)."
            ),
            409: error_doc(
                "`insufficient_stock`, `region_unavailable`, `unpaid_limit`, `unpaid_limit_address`, "
                "`hold_share_exceeded`, `rate_unavailable`, `stablecoin_depegged`, ..."
            ),
            422: error_doc("`idempotency_key_reused`: the same key with another body."),
            429: error_doc(
                "`throttled` (`details.retry_after_seconds`, and `Retry-After`): UNPAID_LAPSES_MAX orders of the "
                "account or of its address closed unpaid within the window, or an order with a `workload` past "
                "SIZING_NEW_PER_ADDRESS new sizings from this address."
            ),
        },
        parameters=[IDEMPOTENCY_HEADER],
        summary="Order a server: validate, price, reserve, invoice",
    )
    def post(self, request: Request) -> Response:
        data = OrderCreateInput(data=request.data)

        def run() -> tuple[int, dict[str, Any]]:
            data.valid_or_refuse()
            order = services.order_create(
                account=request_account(request), spec=data.spec(), client_address=client_address(request)
            )
            # The order comes back with everything its answer shows: no second read.
            return status.HTTP_201_CREATED, represent(OrderOutput, order)

        key = request.headers.get("Idempotency-Key")
        if key is None:
            code, body = run()
            return Response(body, status=code)
        code, body, replayed = idempotent_call(
            account=request_account(request), key=key, scope="orders.create", body=request.data, run=run
        )
        response = Response(body, status=code)
        if replayed:
            response["Idempotent-Replayed"] = "true"
        return response


class OrderDetailView(APIView):
    @extend_schema(responses=OrderOutput, summary="One order and its invoice")
    def get(self, request: Request, order_id: int) -> Response:
        return Response(_order_body(request, order_id))


class OrderCancelView(APIView):
    @extend_schema(
        request=None,
        responses={200: OrderOutput, 409: error_doc("`order_not_cancellable`, `order_has_payments`.")},
        summary="Cancel an unpaid order: its slots go back to stock",
    )
    def post(self, request: Request, order_id: int) -> Response:
        services.order_cancel(order_id=order_id, account=request_account(request))
        return Response(_order_body(request, order_id))


def _rental_body(request: Request, rental_id: int) -> dict[str, Any]:
    return represent(RentalOutput, selectors.rental_get(account=request_account(request), rental_id=rental_id))


class RentalListView(APIView):
    @extend_schema(
        operation_id="rentals_list",
        parameters=[PageQuery],
        responses={200: page_of(RentalOutput), 400: error_doc("`invalid` or `invalid_cursor`.")},
        summary="Your rentals, newest first, a page at a time",
    )
    def get(self, request: Request) -> Response:
        return paginate(
            request, selectors.rentals_for(account=request_account(request)), RentalOutput, ordering=NEWEST_FIRST
        )


class RentalDetailView(APIView):
    @extend_schema(responses=RentalOutput, summary="One rental: status, addresses, paid periods")
    def get(self, request: Request, rental_id: int) -> Response:
        return Response(_rental_body(request, rental_id))

    @extend_schema(
        request=RentalUpdateInput,
        responses={200: RentalOutput, 409: error_doc("`rental_cancelled`.")},
        summary="Turn automatic renewal on or off",
    )
    def patch(self, request: Request, rental_id: int) -> Response:
        data = RentalUpdateInput(data=request.data)
        data.is_valid(raise_exception=True)
        services.rental_auto_renew_set(
            rental_id=rental_id, account=request_account(request), auto_renew=data.validated_data["auto_renew"]
        )
        return Response(_rental_body(request, rental_id))


class RentalRenewView(APIView):
    @extend_schema(
        request=RenewInput,
        responses={
            201: RentalOutput,
            400: error_doc("`unknown_currency` (details.currencies), or `invalid`."),
            409: error_doc(
                "`renewal_open`, `rental_not_renewable`, `rental_terminated`, `rental_cancelled`, `rate_unavailable`, ..."
            ),
        },
        summary="Renew now: an invoice for more terms at the price on the order",
    )
    def post(self, request: Request, rental_id: int) -> Response:
        data = RenewInput(data=request.data)
        data.valid_or_refuse()
        services.rental_renew_now(
            rental_id=rental_id,
            account=request_account(request),
            terms=data.validated_data.get("terms"),
            currency=data.validated_data.get("pay_currency"),
        )
        return Response(_rental_body(request, rental_id), status=status.HTTP_201_CREATED)


class RentalCancelView(APIView):
    @extend_schema(
        request=None,
        responses={200: RentalOutput, 409: error_doc("`rental_terminated`.")},
        summary="Cancel: no renewal; the rental runs to the end of its paid period",
    )
    def post(self, request: Request, rental_id: int) -> Response:
        services.rental_cancel(rental_id=rental_id, account=request_account(request))
        return Response(_rental_body(request, rental_id))


class OpsRentalReadyView(APIView):
    permission_classes = [StaffPermissionRequired.of("accounts.provision_rental")]

    @extend_schema(
        request=OpsReadyInput,
        responses={200: RentalOutput, 409: error_doc("The rental is not waiting to be handed over.")},
        tags=["ops"],
        summary="Operators: the server is handed over (staff token)",
    )
    def post(self, request: Request, rental_id: int) -> Response:
        data = OpsReadyInput(data=request.data)
        data.is_valid(raise_exception=True)
        rental = services.rental_activate(
            rental_id=rental_id, actor=request.user, reason="provisioning system reported ready", **data.validated_data
        )
        return Response(RentalOutput(selectors.rentals_for(account=rental.account).get(pk=rental.pk)).data)


class OpsRentalUsageView(APIView):
    permission_classes = [StaffPermissionRequired.of("accounts.record_usage")]

    @extend_schema(
        request=OpsUsageInput,
        responses={
            200: UsageOutput,
            409: error_doc("`usage_already_billed`, or a month the rental cannot be billed for."),
        },
        tags=["ops"],
        summary="Operators: report a month's egress (staff token)",
    )
    def post(self, request: Request, rental_id: int) -> Response:
        data = OpsUsageInput(data=request.data)
        data.is_valid(raise_exception=True)
        report = services.usage_report(
            rental_id=rental_id,
            month=data.validated_data["month"],
            egress_tb=data.validated_data["egress_tb"],
            actor=request.user,
        )
        return Response(UsageOutput(report).data)
