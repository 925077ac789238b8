from decimal import Decimal

import pytest
from django.contrib.admin.models import ADDITION, LogEntry
from django.db import connection

from accounts.models import Account, ApiToken, RecoveryCode, SshKey
from billing.models import CreditBalance
from core.models import AuditEntry
from tests.accounts.helpers import NEW_PASSWORD, PASSWORD, openssh_line

pytestmark = pytest.mark.django_db


def test_account_table_has_no_email_column():
    with connection.cursor() as cursor:
        columns = [c.name for c in connection.introspection.get_table_description(cursor, Account._meta.db_table)]
    assert "username" in columns and "password" in columns
    assert not [c for c in columns if "mail" in c.lower()]
    assert not [f for f in Account._meta.get_fields() if "mail" in f.name.lower()]


def test_get_account(alice):
    _body, client = alice
    resp = client.get("/api/v1/account")
    assert resp.status_code == 200
    body = resp.json()
    assert body["username"] == "alice"
    assert body["credit_usd"] == "0.00"
    assert body["is_staff"] is False
    assert body["recovery_codes_remaining"] == 10
    assert body["created_at"].endswith("Z")
    assert "password" not in body and "email" not in body


def test_credit_comes_from_the_billing_ledger(alice):
    _body, client = alice
    CreditBalance.objects.create(account=Account.objects.get(username="alice"), balance_usd=Decimal("12.5"))
    assert client.get("/api/v1/account").json()["credit_usd"] == "12.50"


def test_change_password_revokes_the_other_tokens(api, alice, client_with):
    _body, client = alice
    other = api.post("/api/v1/auth/token", {"username": "alice", "password": PASSWORD}, format="json").json()

    resp = client.post("/api/v1/account/password", {"password": PASSWORD, "new_password": NEW_PASSWORD}, format="json")

    assert resp.status_code == 204
    assert client.get("/api/v1/account").status_code == 200
    assert client_with(other["token"]).get("/api/v1/account").status_code == 401
    assert api.post("/api/v1/auth/token", {"username": "alice", "password": PASSWORD}, format="json").status_code == 401
    assert (
        api.post("/api/v1/auth/token", {"username": "alice", "password": NEW_PASSWORD}, format="json").status_code
        == 201
    )


def test_change_password_needs_the_current_one(alice):
    _body, client = alice
    resp = client.post(
        "/api/v1/account/password", {"password": "not-the-password", "new_password": NEW_PASSWORD}, format="json"
    )
    assert resp.status_code == 403
    assert resp.json()["error"]["code"] == "wrong_password"
    assert Account.objects.get().check_password(PASSWORD)


def test_change_password_runs_the_validators(alice):
    _body, client = alice
    resp = client.post("/api/v1/account/password", {"password": PASSWORD, "new_password": "abc"}, format="json")
    assert resp.status_code == 400
    assert resp.json()["error"]["code"] == "weak_password"


def _add_key(client, private_key):
    resp = client.post(
        "/api/v1/account/ssh-keys", {"name": "k", "public_key": openssh_line(private_key)}, format="json"
    )
    assert resp.status_code == 201, resp.json()


def test_delete_needs_the_password(alice):
    _body, client = alice
    resp = client.delete("/api/v1/account", {"password": "not-the-password"}, format="json")
    assert resp.status_code == 403
    assert Account.objects.filter(username="alice", is_active=True).exists()


def test_delete_an_account_nothing_refers_to_frees_the_username(api, alice, ssh_private_keys):
    body, client = alice
    _add_key(client, ssh_private_keys["ssh-ed25519"])

    resp = client.delete("/api/v1/account", {"password": PASSWORD}, format="json")

    assert resp.status_code == 204
    assert not Account.objects.filter(username="alice").exists()
    assert not ApiToken.objects.exists() and not SshKey.objects.exists() and not RecoveryCode.objects.exists()
    assert client.get("/api/v1/account").status_code == 401
    # The audit trail survives (its actor link is cleared, the name kept).
    entry = AuditEntry.objects.filter(action="account.delete").get()
    assert entry.actor_id is None and entry.actor_name == "alice"
    assert entry.changes["outcome"] == "deleted"
    # The name is free again.
    again = api.post("/api/v1/accounts", {"username": "alice", "password": PASSWORD}, format="json")
    assert again.status_code == 201
    assert again.json()["token"] != body["token"]


def test_delete_a_referenced_account_keeps_it_deactivated(api, alice, ssh_private_keys, client_with):
    body, client = alice
    account = Account.objects.get(username="alice")
    _add_key(client, ssh_private_keys["ssh-ed25519"])
    second = api.post("/api/v1/auth/token", {"username": "alice", "password": PASSWORD}, format="json").json()
    # A record that names the account and must outlive it (an admin history row here; orders,
    # invoices and ledger rows later).
    LogEntry.objects.create(user=account, action_flag=ADDITION, object_repr="x")

    resp = client.delete("/api/v1/account", {"password": PASSWORD}, format="json")

    assert resp.status_code == 204
    account.refresh_from_db()
    assert account.is_active is False
    assert account.has_usable_password() is False
    assert LogEntry.objects.filter(user=account).count() == 1
    assert ApiToken.objects.filter(account=account, revoked_at__isnull=True).count() == 0
    assert not SshKey.objects.filter(account=account).exists()
    assert not RecoveryCode.objects.filter(account=account).exists()
    assert client_with(second["token"]).get("/api/v1/account").status_code == 401
    assert api.post("/api/v1/auth/token", {"username": "alice", "password": PASSWORD}, format="json").status_code == 401
    # The username stays taken: the records that name it keep meaning one owner.
    taken = api.post("/api/v1/accounts", {"username": "alice", "password": PASSWORD}, format="json")
    assert taken.status_code == 409
    assert AuditEntry.objects.get(action="account.delete").changes["outcome"] == "deactivated"
    assert body["token"]


def test_delete_without_a_token_is_401(api):
    resp = api.delete("/api/v1/account", {"password": PASSWORD}, format="json")
    assert resp.status_code == 401
    assert resp.json()["error"]["code"] == "not_authenticated"


def test_delete_an_account_with_a_credit_ledger_keeps_it(api, alice):
    _body, client = alice
    account = Account.objects.get(username="alice")
    CreditBalance.objects.create(account=account, balance_usd=Decimal("0.00"))  # spent or refunded
    assert client.delete("/api/v1/account", {"password": PASSWORD}, format="json").status_code == 204
    account.refresh_from_db()
    assert account.is_active is False
    assert CreditBalance.objects.get(account=account).balance_usd == Decimal("0.00")


def test_an_account_holding_credit_is_not_closed(api, alice):
    _body, client = alice
    account = Account.objects.get(username="alice")
    CreditBalance.objects.create(account=account, balance_usd=Decimal("3.00"))
    resp = client.delete("/api/v1/account", {"password": PASSWORD}, format="json")
    assert resp.status_code == 409 and resp.json()["error"]["code"] == "account_has_credit"
    account.refresh_from_db()
    assert account.is_active and account.has_usable_password()
