"""Closing an account: the apps that keep rows naming it decide what happens
to them (account_closing), and accounts deletes the row only when nothing
refers to it any more."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.dispatch import receiver as connect

from accounts.models import Account, ApiToken
from accounts.signals import account_closing
from billing.models import CreditBalance
from core.errors import DomainError
from core.models import AuditEntry
from rentals.models import IdempotencyKey
from tests.accounts.helpers import PASSWORD
from webhooks import services as webhooks
from webhooks.models import WebhookDelivery, WebhookEndpoint, WebhookEvent

pytestmark = pytest.mark.django_db


def _webhook_and_key(account: Account) -> None:
    webhooks.endpoint_create(account=account, url="https://93.184.215.14/hooks", events=["invoice.settled"])
    webhooks.event_emit(account=account, type="invoice.settled", data={"invoice": "GRH-000001"})
    IdempotencyKey.objects.create(
        account=account, key="k-1", scope="orders.create", request_hash="0" * 64, created_at="2031-03-01T12:00:00Z"
    )


def test_an_account_with_webhooks_and_idempotency_keys_is_still_deleted(alice):
    _body, client = alice
    account = Account.objects.get(username="alice")
    _webhook_and_key(account)
    assert WebhookDelivery.objects.count() == 1

    assert client.delete("/api/v1/account", {"password": PASSWORD}, format="json").status_code == 204

    assert not Account.objects.filter(username="alice").exists()
    assert not WebhookEndpoint.objects.exists() and not WebhookEvent.objects.exists()
    assert not WebhookDelivery.objects.exists() and not IdempotencyKey.objects.exists()
    assert AuditEntry.objects.get(action="account.delete").changes["outcome"] == "deleted"


def test_a_kept_account_gets_no_more_webhooks(alice):
    _body, client = alice
    account = Account.objects.get(username="alice")
    _webhook_and_key(account)
    CreditBalance.objects.create(account=account, balance_usd=Decimal("0.00"))  # billing keeps the account

    assert client.delete("/api/v1/account", {"password": PASSWORD}, format="json").status_code == 204

    account.refresh_from_db()
    assert account.is_active is False
    assert not WebhookEndpoint.objects.filter(account=account).exists()
    assert not WebhookEvent.objects.filter(account=account).exists()
    assert not IdempotencyKey.objects.filter(account=account).exists()
    assert webhooks.event_emit(account=account, type="invoice.settled", data={}) is None
    assert CreditBalance.objects.get(account=account).balance_usd == Decimal("0.00")
    assert AuditEntry.objects.get(action="account.delete").changes["outcome"] == "deactivated"


def test_a_receiver_may_refuse_the_closing_and_nothing_changes(alice):
    _body, client = alice
    account = Account.objects.get(username="alice")
    _webhook_and_key(account)

    def refuse(sender, account, **kwargs):
        raise DomainError("account_has_open_orders", "Cancel the open orders first.", status=409)

    connect(account_closing, dispatch_uid="test.refuse")(refuse)
    try:
        resp = client.delete("/api/v1/account", {"password": PASSWORD}, format="json")
    finally:
        account_closing.disconnect(dispatch_uid="test.refuse")

    assert resp.status_code == 409
    assert resp.json()["error"]["code"] == "account_has_open_orders"
    account.refresh_from_db()
    assert account.is_active and account.has_usable_password()
    assert ApiToken.objects.filter(account=account, revoked_at__isnull=True).count() == 1
    assert WebhookEndpoint.objects.filter(account=account).count() == 1
    assert IdempotencyKey.objects.filter(account=account).count() == 1
    assert not AuditEntry.objects.filter(action="account.delete").exists()
    assert client.get("/api/v1/account").status_code == 200


def test_every_app_that_keeps_account_rows_listens(alice):
    """The receivers are registered by the apps that own the rows, not listed in accounts."""
    dispatch_uids = {entry[0][0] for entry in account_closing.receivers}  # (lookup key = (uid, sender), ...)
    assert {"webhooks.account_closing", "rentals.account_closing"} <= dispatch_uids
