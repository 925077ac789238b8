"""The checkout page at /pay/<token> acts for whoever holds the token (the
payer need not log in): the same services as the API, found by token, with
an audit row naming the page."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction

from billing.models import Invoice
from billing.services.common import CHECKOUT_ACTOR
from billing.services.invoices import invoice_requote, invoice_switch_currency


@transaction.atomic(durable=True)
def checkout_currency_switch(*, token: str, currency: str, now: datetime | None = None) -> Invoice:
    """Pay the invoice a checkout token opens in another currency."""
    from billing.selectors import invoice_by_checkout_token

    found = invoice_by_checkout_token(token=token)
    return invoice_switch_currency(
        invoice_id=found.pk,
        account=found.account_id,
        currency=currency,
        actor=CHECKOUT_ACTOR,
        reason="checkout page",
        now=now,
    )


@transaction.atomic(durable=True)
def checkout_requote(*, token: str, currency: str | None = None, now: datetime | None = None) -> Invoice:
    """A fresh quote for the expired invoice a checkout token opens."""
    from billing.selectors import invoice_by_checkout_token

    found = invoice_by_checkout_token(token=token)
    return invoice_requote(
        invoice_id=found.pk,
        account=found.account_id,
        currency=currency,
        actor=CHECKOUT_ACTOR,
        reason="checkout page",
        now=now,
    )
