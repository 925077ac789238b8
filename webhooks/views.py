"""API views for customer webhooks: thin callers of webhooks.services and
webhooks.selectors. Every route answers 404 for an endpoint or delivery of
another account."""

from __future__ import annotations

from datetime import timedelta

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.response import Response

from core.api import E401, ApiView, error_doc
from core.errors import NotFound
from core.pagination import PageQuery, page_of, paginate
from webhooks import selectors, services
from webhooks.serializers import (
    WebhookDeliveryListQuery,
    WebhookDeliveryOutput,
    WebhookEndpointCreateInput,
    WebhookEndpointOutput,
    WebhookEndpointUpdateInput,
    WebhookEndpointWithSecretOutput,
    WebhookSecretRotateInput,
)

TAG_WEBHOOKS = "webhooks"


_E404 = error_doc("`webhook_not_found`: no such endpoint on this account.")
_E404_DELIVERY = error_doc("`webhook_not_found` or `delivery_not_found`.")
_E400_URL = error_doc(
    "`invalid_url`, `https_required`, `unresolvable_host`, `target_not_allowed` (a loopback, private, "
    "link-local, multicast, reserved or unspecified address), `invalid_events` or `invalid`."
)
_E409_INACTIVE = error_doc("`webhook_inactive`: the endpoint is switched off.")
_E429_MANUAL = error_doc(
    "`throttled`: more pings and redeliveries than WEBHOOK_MANUAL_PER_ACCOUNT from this account in the window "
    "(`details.retry_after_seconds`, and `Retry-After`)."
)
_ENDPOINT_ID = OpenApiParameter("endpoint_id", int, OpenApiParameter.PATH)
_DELIVERY_ID = OpenApiParameter("delivery_id", int, OpenApiParameter.PATH)


def _endpoint_or_404(request, endpoint_id: int):
    endpoint = selectors.endpoint_get(account=request.user, endpoint_id=endpoint_id)
    if endpoint is None:
        raise NotFound("No such webhook endpoint.", code="webhook_not_found")
    return endpoint


def _delivery_response(request, endpoint_id: int, delivery_id: int, http_status: int = 200) -> Response:
    delivery = selectors.delivery_get(account=request.user, endpoint_id=endpoint_id, delivery_id=delivery_id)
    if delivery is None:
        _endpoint_or_404(request, endpoint_id)
        raise NotFound("No such delivery.", code="delivery_not_found")
    return Response(WebhookDeliveryOutput(delivery).data, status=http_status)


class WebhookEndpointListView(ApiView):
    no_store = True  # the answer carries a secret

    @extend_schema(
        operation_id="webhooks_list",
        tags=[TAG_WEBHOOKS],
        summary="The account's webhook endpoints",
        description="Secrets are never listed: they are shown once, on creation and rotation.",
        parameters=[PageQuery],
        responses={
            200: page_of(WebhookEndpointOutput),
            400: error_doc("`invalid` or `invalid_cursor`."),
            401: E401,
        },
    )
    def get(self, request):
        endpoints = selectors.endpoint_list(account=request.user)
        return paginate(request, endpoints, WebhookEndpointOutput, ordering=("created_at", "id"))

    @extend_schema(
        operation_id="webhooks_create",
        tags=[TAG_WEBHOOKS],
        summary="Register a webhook endpoint",
        description="The signing secret is generated here and shown in this response only.",
        request=WebhookEndpointCreateInput,
        responses={
            201: WebhookEndpointWithSecretOutput,
            400: _E400_URL,
            401: E401,
            409: error_doc("`webhook_limit_reached`."),
        },
    )
    def post(self, request):
        data = self.validated(WebhookEndpointCreateInput)
        created = services.endpoint_create(account=request.user, **data)
        out = {**WebhookEndpointOutput(created.endpoint).data, "secret": created.secret}
        return Response(WebhookEndpointWithSecretOutput(out).data, status=status.HTTP_201_CREATED)


class WebhookEndpointDetailView(ApiView):
    @extend_schema(
        operation_id="webhooks_retrieve",
        tags=[TAG_WEBHOOKS],
        summary="One webhook endpoint",
        parameters=[_ENDPOINT_ID],
        responses={200: WebhookEndpointOutput, 401: E401, 404: _E404},
    )
    def get(self, request, endpoint_id: int):
        return Response(WebhookEndpointOutput(_endpoint_or_404(request, endpoint_id)).data)

    @extend_schema(
        operation_id="webhooks_update",
        tags=[TAG_WEBHOOKS],
        summary="Change an endpoint's URL, events, description or switch it on or off",
        description="Pending deliveries go to the new URL at their next attempt.",
        parameters=[_ENDPOINT_ID],
        request=WebhookEndpointUpdateInput,
        responses={200: WebhookEndpointOutput, 400: _E400_URL, 401: E401, 404: _E404},
    )
    def patch(self, request, endpoint_id: int):
        data = self.validated(WebhookEndpointUpdateInput)
        endpoint = services.endpoint_update(account=request.user, endpoint_id=endpoint_id, **data)
        return Response(WebhookEndpointOutput(endpoint).data)

    @extend_schema(
        operation_id="webhooks_delete",
        tags=[TAG_WEBHOOKS],
        summary="Delete an endpoint and its delivery log",
        parameters=[_ENDPOINT_ID],
        request=None,
        responses={204: None, 401: E401, 404: _E404},
    )
    def delete(self, request, endpoint_id: int):
        services.endpoint_delete(account=request.user, endpoint_id=endpoint_id)
        return Response(status=status.HTTP_204_NO_CONTENT)


class WebhookSecretRotateView(ApiView):
    no_store = True  # the answer carries a secret

    @extend_schema(
        operation_id="webhooks_rotate_secret",
        tags=[TAG_WEBHOOKS],
        summary="Replace the signing secret",
        description=(
            "The new secret signs every attempt from now on and is shown in this response only. The replaced "
            "secret keeps signing beside it until `previous_secret_expires_at` (the body may shorten that "
            "overlap, down to 0 for a leaked secret): each delivery meanwhile carries both signatures."
        ),
        parameters=[_ENDPOINT_ID],
        request=WebhookSecretRotateInput,
        responses={
            200: WebhookEndpointWithSecretOutput,
            400: error_doc("`invalid_overlap` or `invalid`."),
            401: E401,
            404: _E404,
        },
    )
    def post(self, request, endpoint_id: int):
        data = self.validated(WebhookSecretRotateInput)
        overlap = timedelta(seconds=data["overlap_seconds"]) if "overlap_seconds" in data else None
        rotated = services.endpoint_secret_rotate(account=request.user, endpoint_id=endpoint_id, overlap=overlap)
        out = {**WebhookEndpointOutput(rotated.endpoint).data, "secret": rotated.secret}
        return Response(WebhookEndpointWithSecretOutput(out).data)


class WebhookPingView(ApiView):
    @extend_schema(
        operation_id="webhooks_ping",
        tags=[TAG_WEBHOOKS],
        summary="Send a `ping` test event to this endpoint",
        description="Queued at once; the answer is the delivery as it stands (look it up again for the outcome).",
        parameters=[_ENDPOINT_ID],
        request=None,
        responses={202: WebhookDeliveryOutput, 401: E401, 404: _E404, 409: _E409_INACTIVE, 429: _E429_MANUAL},
    )
    def post(self, request, endpoint_id: int):
        delivery = services.endpoint_ping(account=request.user, endpoint_id=endpoint_id)
        return _delivery_response(request, endpoint_id, delivery.pk, status.HTTP_202_ACCEPTED)


class WebhookDeliveryListView(ApiView):
    @extend_schema(
        operation_id="webhooks_deliveries_list",
        tags=[TAG_WEBHOOKS],
        summary="The endpoint's delivery log, newest first, with every attempt, a page at a time",
        parameters=[_ENDPOINT_ID, WebhookDeliveryListQuery],
        responses={
            200: page_of(WebhookDeliveryOutput),
            400: error_doc("`invalid` or `invalid_cursor`."),
            401: E401,
            404: _E404,
        },
    )
    def get(self, request, endpoint_id: int):
        query = WebhookDeliveryListQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        _endpoint_or_404(request, endpoint_id)
        status_filter = query.validated_data.get("status")
        deliveries = selectors.delivery_list(account=request.user, endpoint_id=endpoint_id, status=status_filter)
        return paginate(request, deliveries, WebhookDeliveryOutput, ordering=("-id",), query=query.validated_data)


class WebhookDeliveryDetailView(ApiView):
    @extend_schema(
        operation_id="webhooks_deliveries_retrieve",
        tags=[TAG_WEBHOOKS],
        summary="One delivery with every attempt",
        parameters=[_ENDPOINT_ID, _DELIVERY_ID],
        responses={200: WebhookDeliveryOutput, 401: E401, 404: _E404_DELIVERY},
    )
    def get(self, request, endpoint_id: int, delivery_id: int):
        return _delivery_response(request, endpoint_id, delivery_id)


class WebhookRedeliverView(ApiView):
    @extend_schema(
        operation_id="webhooks_deliveries_redeliver",
        tags=[TAG_WEBHOOKS],
        summary="Attempt a delivery again now, whatever its state",
        description=(
            "The attempt is queued at once and counts as an attempt: if it fails, retries follow the "
            "schedule while the delivery has had fewer than 6 attempts."
        ),
        parameters=[_ENDPOINT_ID, _DELIVERY_ID],
        request=None,
        responses={
            202: WebhookDeliveryOutput,
            401: E401,
            404: _E404_DELIVERY,
            409: _E409_INACTIVE,
            429: _E429_MANUAL,
        },
    )
    def post(self, request, endpoint_id: int, delivery_id: int):
        services.delivery_redeliver(account=request.user, endpoint_id=endpoint_id, delivery_id=delivery_id)
        return _delivery_response(request, endpoint_id, delivery_id, status.HTTP_202_ACCEPTED)
