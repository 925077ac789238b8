"""Invoice, credit and currency endpoints: thin callers of services and selectors."""

from django.http import HttpResponse
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.authentication import BaseAuthentication
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from billing import selectors, serializers, services
from billing.qr import qr_svg
from core.api import error_doc
from core.errors import NotFound
from core.pagination import PageQuery, page_of, paginate
from core.permissions import request_user

NEWEST_FIRST = ("-created_at", "-id")


def _invoice_response(request: Request, invoice_id: int, status: int = 200) -> Response:
    invoice = selectors.invoice_get(invoice_id=invoice_id, account=request_user(request))
    return Response(serializers.InvoiceOutput(invoice).data, status=status)


class InvoiceListView(APIView):
    @extend_schema(
        operation_id="invoices_list",
        parameters=[PageQuery],
        responses={200: page_of(serializers.InvoiceOutput), 400: error_doc("`invalid` or `invalid_cursor`.")},
        summary="Your invoices, newest first, a page at a time",
    )
    def get(self, request: Request) -> Response:
        invoices = selectors.invoices_for(account=request_user(request))
        return paginate(request, invoices, serializers.InvoiceOutput, ordering=NEWEST_FIRST)


class InvoiceDetailView(APIView):
    @extend_schema(responses=serializers.InvoiceOutput, summary="One invoice, its requests and payments")
    def get(self, request: Request, invoice_id: int) -> Response:
        return _invoice_response(request, invoice_id)


class InvoiceCurrencyView(APIView):
    @extend_schema(
        request=serializers.CurrencyChoiceInput,
        responses={
            200: serializers.InvoiceOutput,
            400: error_doc("`invalid`, `unknown_currency`, `currency_unavailable`."),
            409: error_doc(
                "`invoice_not_open`, `invoice_has_payments` (they pay it all already), `currency_unchanged` (already quoted "
                "in it), `quote_limit_reached`, "
                "`rate_unavailable`, `stablecoin_depegged`."
            ),
        },
        summary="Pay what is left of an open invoice in another currency (new address, new rate, same expiry)",
    )
    def post(self, request: Request, invoice_id: int) -> Response:
        data = serializers.CurrencyChoiceInput(data=request.data)
        data.is_valid(raise_exception=True)
        services.invoice_switch_currency(
            invoice_id=invoice_id, account=request_user(request), currency=data.validated_data["currency"]
        )
        return _invoice_response(request, invoice_id)


class InvoiceRequoteView(APIView):
    @extend_schema(
        request=serializers.RequoteInput,
        responses={
            200: serializers.InvoiceOutput,
            409: error_doc(
                "`invoice_not_expired`, `invoice_has_payments`, `insufficient_stock`, `unpaid_limit`, "
                "`order_not_cancellable`, `rate_unavailable`, ..."
            ),
        },
        summary="Re-open an expired invoice at a fresh rate, for what its payments do not pay yet",
    )
    def post(self, request: Request, invoice_id: int) -> Response:
        data = serializers.RequoteInput(data=request.data)
        data.is_valid(raise_exception=True)
        services.invoice_requote(
            invoice_id=invoice_id, account=request_user(request), currency=data.validated_data.get("currency")
        )
        return _invoice_response(request, invoice_id)


class InvoicePayWithCreditView(APIView):
    @extend_schema(
        request=None,
        responses={
            200: serializers.InvoiceOutput,
            409: error_doc("`invoice_not_open`, `invoice_has_payments`, `insufficient_credit`."),
        },
        summary="Settle an open invoice from account credit",
    )
    def post(self, request: Request, invoice_id: int) -> Response:
        services.invoice_pay_with_credit(invoice_id=invoice_id, account=request_user(request))
        return _invoice_response(request, invoice_id)


class InvoiceQrView(APIView):
    @extend_schema(
        responses={(200, "image/svg+xml"): OpenApiResponse(description="The payment URI as a QR code")},
        summary="QR code of the invoice's payment URI",
    )
    def get(self, request: Request, invoice_id: int) -> HttpResponse:
        invoice = selectors.invoice_get(invoice_id=invoice_id, account=request_user(request))
        req = invoice.active_request
        if req is None:
            raise NotFound("This invoice has no payment request yet: choose a currency.", code="no_payment_request")
        return HttpResponse(qr_svg(req.payment_uri), content_type="image/svg+xml")


class CreditView(APIView):
    @extend_schema(
        operation_id="account_credit_list",
        parameters=[PageQuery],
        responses={200: page_of(serializers.CreditEntryOutput), 400: error_doc("`invalid` or `invalid_cursor`.")},
        summary="Your credit ledger, newest first, a page at a time",
    )
    def get(self, request: Request) -> Response:
        entries = selectors.credit_entries(account=request_user(request))
        return paginate(request, entries, serializers.CreditEntryOutput, ordering=NEWEST_FIRST)


class CurrencyListView(APIView):
    authentication_classes: list[type[BaseAuthentication]] = []
    permission_classes = [AllowAny]

    @extend_schema(
        responses=serializers.CurrencyOutput(many=True), summary="Currencies accepted now, and their chains' health"
    )
    def get(self, request: Request) -> Response:
        rows = selectors.currencies_enabled()
        for row in rows:
            row["health"] = row["health"].as_dict()
        return Response(serializers.CurrencyOutput(rows, many=True).data)
