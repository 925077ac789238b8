"""The hosted checkout page of an invoice, /pay/<token>: thin callers of the
checkout selectors and services (docs/checkout.md).

The token is the only key: whoever has the link can see the invoice and pay
it, switch its currency or get a fresh quote, without logging in. Anything
else is a 404 that names no invoice. Pages are English or Spanish, from the
`lang` switch (remembered in the language cookie) or Accept-Language.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import translation
from django.utils.cache import patch_vary_headers
from django.utils.translation import gettext as _
from django.views.decorators.cache import never_cache

from billing import selectors, services, wording
from billing.chains.config import enabled_currencies
from billing.currencies import CURRENCIES
from billing.qr import qr_svg
from billing.serializers import CheckoutStatusOutput
from core.api import error_body
from core.csp import content_security_policy
from core.errors import DomainError, NotFound
from core.throttle import address_bucket, client_address, rate_hit

LANGUAGE_PARAM = "lang"
LANGUAGE_COOKIE_MAX_AGE = 365 * 24 * 3600


def _language(request: HttpRequest) -> str:
    """The language cookie (set by the page's switch), else Accept-Language, else English."""
    return translation.get_supported_language_variant(translation.get_language_from_request(request))


def _wants_html(request: HttpRequest) -> bool:
    return "text/html" in request.headers.get("Accept", "")


def _private(response: HttpResponse, language: str | None = None) -> HttpResponse:
    """Headers for a page whose address is a key: never sent to another site as a
    referrer (same-origin, not no-referrer: browsers then send `Origin: null` on
    the page's own forms, which CSRF protection refuses), never indexed."""
    response["Referrer-Policy"] = "same-origin"
    response["X-Robots-Tag"] = "noindex, nofollow"
    if language:
        response["Content-Language"] = language
        patch_vary_headers(response, ("Accept-Language", "Cookie"))
    return response


def _not_found(request: HttpRequest) -> HttpResponse:
    """The same answer for every unknown token: it tells nothing about other invoices."""
    if _wants_html(request):
        language = _language(request)
        with translation.override(language):
            response = render(request, "billing/checkout/not_found.html", {"language": language}, status=404)
        return _private(response, language)
    return _private(JsonResponse(error_body("not_found", "No such payment page."), status=404))


View = Callable[..., HttpResponse]


def _methods(*allowed: str) -> Callable[[View], View]:
    """Refuse other HTTP methods with the error shape (405)."""

    def decorator(view: View) -> View:
        @wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if request.method not in allowed and not (request.method == "HEAD" and "GET" in allowed):
                response = JsonResponse(
                    error_body("method_not_allowed", f"Method {request.method} is not allowed here."), status=405
                )
                response["Allow"] = ", ".join(allowed)
                return _private(response)
            return view(request, *args, **kwargs)

        return wrapped

    return decorator


def _page_url(token: str) -> str:
    return reverse("checkout", kwargs={"token": token})


def _see_other(url: str) -> HttpResponse:
    response = HttpResponseRedirect(url)
    response.status_code = 303
    return _private(response)


def _status_payload(status: selectors.CheckoutStatus) -> dict[str, Any]:
    payload = dict(CheckoutStatusOutput(status).data)
    payload["poll_seconds"] = settings.CHECKOUT_POLL_SECONDS
    return payload


def _metadata_facts(metadata: dict[str, Any]) -> dict[str, Any]:
    """What an invoice pays for, where its issuer recorded it (cards, region, term)."""
    facts: dict[str, Any] = {}
    count, gpu = metadata.get("gpu_count"), metadata.get("gpu_name") or metadata.get("gpu")
    if count and gpu:
        facts["cards"] = f"{count} \N{MULTIPLICATION SIGN} {gpu}"
    if metadata.get("region"):
        facts["region"] = metadata["region"]
    if metadata.get("term") in ("weekly", "monthly") and isinstance(metadata.get("terms"), int):
        facts["term"], facts["terms"] = metadata["term"], metadata["terms"]
    return facts


@never_cache
@content_security_policy()
@_methods("GET")
def checkout_page(request: HttpRequest, token: str) -> HttpResponse:
    chosen = request.GET.get(LANGUAGE_PARAM)
    if chosen is not None:
        # The switch: remember the choice, then show the page at its plain address.
        response = _see_other(_page_url(token))
        if chosen in dict(settings.LANGUAGES):
            response.set_cookie(
                settings.LANGUAGE_COOKIE_NAME,
                chosen,
                max_age=LANGUAGE_COOKIE_MAX_AGE,
                samesite="Lax",
                secure=settings.LANGUAGE_COOKIE_SECURE or request.is_secure(),
                httponly=True,
            )
        return response
    try:
        invoice = selectors.invoice_by_checkout_token(token=token)
    except NotFound:
        return _not_found(request)
    language = _language(request)
    status = selectors.checkout_status(invoice=invoice)
    live = _status_payload(status)
    currencies = [(code, CURRENCIES[code].name) for code in enabled_currencies()]
    context = {
        "language": language,
        "languages": settings.LANGUAGES,
        "invoice": invoice,
        "lines": list(invoice.lines.all()),
        "facts": _metadata_facts(invoice.metadata or {}),
        # A closed renewal is followed by a new renewal, not a new order.
        "renewal": (invoice.metadata or {}).get("kind") in wording.RENEWAL_KINDS,
        "status": status,
        "live": live,
        "currency": CURRENCIES[status.currency] if status.currency else None,
        "currencies": currencies,
        "requote_currency": status.currency or (currencies[0][0] if currencies else ""),
        "support_url": settings.CHECKOUT_SUPPORT_URL,
        "status_url": reverse("checkout-status", kwargs={"token": token}),
        "currency_url": reverse("checkout-currency", kwargs={"token": token}),
        "requote_url": reverse("checkout-requote", kwargs={"token": token}),
    }
    with translation.override(language):
        response = render(request, "billing/checkout/page.html", context)
    return _private(response, language)


@never_cache
@_methods("GET")
def checkout_status(request: HttpRequest, token: str) -> HttpResponse:
    try:
        invoice = selectors.invoice_by_checkout_token(token=token)
    except NotFound:
        return _private(JsonResponse(error_body("not_found", "No such payment page."), status=404))
    return _private(JsonResponse(_status_payload(selectors.checkout_status(invoice=invoice))))


@never_cache
@_methods("GET")
def checkout_qr(request: HttpRequest, token: str) -> HttpResponse:
    """The QR code of what to pay now (the rest, after a partial payment)."""
    try:
        invoice = selectors.invoice_by_checkout_token(token=token)
    except NotFound:
        return _private(JsonResponse(error_body("not_found", "No such payment page."), status=404))
    status = selectors.checkout_status(invoice=invoice)
    if not status.pay_uri:
        return _private(
            JsonResponse(error_body("no_payment_request", "This invoice has no payment request yet."), status=404)
        )
    return _private(HttpResponse(qr_svg(status.pay_uri, sized=False), content_type="image/svg+xml"))


def _refusal(exc: DomainError) -> str:
    """A refused action, said to the payer in the page's language."""
    messages_by_code = {
        "invoice_not_open": _("This invoice can no longer change currency."),
        "invoice_has_payments": _(
            "The payments sent to this invoice already pay it in full; it is paid once they confirm."
        ),
        "invoice_not_expired": _("This invoice does not need a fresh quote."),
        "currency_unchanged": _("This invoice is already in that currency."),
        "quote_limit_reached": _("This invoice cannot be quoted again. Place a new order."),
        "currency_unavailable": _("That currency is not available right now; choose another."),
        "unknown_currency": _("Choose one of the currencies in the list."),
        "rate_unavailable": _("No exchange rate is available for that currency right now; try again in a minute."),
        "stablecoin_depegged": _("That stablecoin is off its peg right now; choose another currency."),
        "payment_check_pending": _(
            "We are still checking the blockchain for a payment to this invoice; try again in a few minutes."
        ),
        "insufficient_stock": _("The servers of this order are no longer available. Place a new order."),
        "order_not_cancellable": _("This order was cancelled. Place a new order."),
    }
    return messages_by_code.get(exc.code, _("This could not be done: %(reason)s") % {"reason": exc.message})


def _throttled(request: HttpRequest, token: str) -> HttpResponse | None:
    """Count a POST against its page and its client address (an IPv6 client
    by its /64, as sign-ups and logins count it: core.throttle.address_bucket);
    429 once either is over its limit in the window."""
    window = settings.CHECKOUT_POST_WINDOW_SECONDS
    waits = [
        rate_hit(scope="checkout-token", ident=token, limit=settings.CHECKOUT_POSTS_PER_TOKEN, window_seconds=window),
        rate_hit(
            scope="checkout-address",
            ident=address_bucket(client_address(request)),
            limit=settings.CHECKOUT_POSTS_PER_ADDRESS,
            window_seconds=window,
        ),
    ]
    wait = max(waits)
    if not wait:
        return None
    language = _language(request)
    with translation.override(language):
        message = _("Too many changes to this invoice; try again in %(seconds)s seconds.") % {"seconds": wait}
    if _wants_html(request):
        response = HttpResponse(message, status=429, content_type="text/plain; charset=utf-8")
    else:
        response = JsonResponse(error_body("throttled", message, {"retry_after_seconds": wait}), status=429)
    response["Retry-After"] = str(wait)
    return _private(response, language)


def _act(request: HttpRequest, token: str, action: Callable[[], object]) -> HttpResponse:
    throttled = _throttled(request, token)
    if throttled is not None:
        return throttled
    language = _language(request)
    with translation.override(language):
        try:
            action()
        except NotFound:
            return _not_found(request)
        except DomainError as exc:
            messages.error(request, _refusal(exc))
    return _see_other(_page_url(token))


@never_cache
@content_security_policy()
@_methods("POST")
def checkout_currency(request: HttpRequest, token: str) -> HttpResponse:
    currency = request.POST.get("currency", "")
    return _act(request, token, lambda: services.checkout_currency_switch(token=token, currency=currency))


@never_cache
@content_security_policy()
@_methods("POST")
def checkout_requote(request: HttpRequest, token: str) -> HttpResponse:
    currency = request.POST.get("currency") or None
    return _act(request, token, lambda: services.checkout_requote(token=token, currency=currency))
