import hashlib
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext

from accounts.models import Account, ApiToken
from accounts.services.tokens import TOKEN_LAST_USED_RESOLUTION, token_authenticate
from tests.accounts.helpers import PASSWORD

pytestmark = pytest.mark.django_db


def _login(api, username="alice", name=""):
    resp = api.post("/api/v1/auth/token", {"username": username, "password": PASSWORD, "name": name}, format="json")
    assert resp.status_code == 201, resp.json()
    return resp.json()


def test_tokens_are_stored_as_sha256_digests_only(alice):
    body, _client = alice
    raw = body["token"]
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM accounts_apitoken")
        columns = [c.name for c in cursor.description]
        rows = cursor.fetchall()
    assert len(rows) == 1
    row = dict(zip(columns, rows[0], strict=False))
    assert all(raw not in str(value) for value in row.values())
    assert row["digest"] == hashlib.sha256(raw.encode()).hexdigest()
    assert row["prefix"] == raw[:12]
    assert raw[12:20] not in row["prefix"]


def test_no_token_is_401_in_the_error_shape(api):
    resp = api.get("/api/v1/account")
    assert resp.status_code == 401
    assert resp["WWW-Authenticate"] == "Bearer"
    error = resp.json()["error"]
    assert error["code"] == "not_authenticated"
    assert set(error) == {"code", "message", "details"}


@pytest.mark.parametrize(
    "header",
    ["Bearer grh_" + "A" * 43, "Bearer nonsense", "Bearer a b", "Bearer", "Bearer " + "x" * 5000, "   "],
)
def test_bad_tokens_are_401_in_the_error_shape(api, signup, header):
    signup("alice")
    resp = api.get("/api/v1/account", HTTP_AUTHORIZATION=header)
    assert resp.status_code == 401
    assert resp.json()["error"]["code"] in {"authentication_failed", "not_authenticated"}


def test_list_tokens(api, alice, signup, client_with):
    body, client = alice
    second = _login(api, name="ci")
    signup("bob")  # someone else's token stays out of the list

    resp = client.get("/api/v1/auth/tokens")
    assert resp.status_code == 200
    tokens = resp.json()["results"]
    assert [t["name"] for t in tokens] == ["ci", "signup"]
    assert {"id", "name", "prefix", "created_at", "last_used_at", "current"} <= set(tokens[0])
    assert [t["prefix"] for t in tokens] == [second["token"][:12], body["token"][:12]]
    assert [t["current"] for t in tokens] == [False, True]
    assert all("token" not in t and "digest" not in t for t in tokens)


def test_revoke_a_token(api, alice, client_with):
    _body, client = alice
    other = _login(api, name="ci")

    resp = client.delete(f"/api/v1/auth/tokens/{other['id']}")
    assert resp.status_code == 204
    assert client_with(other["token"]).get("/api/v1/account").status_code == 401
    assert ApiToken.objects.get(pk=other["id"]).revoked_at is not None
    assert [t["name"] for t in client.get("/api/v1/auth/tokens").json()["results"]] == ["signup"]

    again = client.delete(f"/api/v1/auth/tokens/{other['id']}")
    assert again.status_code == 404
    assert again.json()["error"]["code"] == "token_not_found"


def test_revoking_the_current_token_signs_out(alice):
    _body, client = alice
    token_id = ApiToken.objects.get().pk
    assert client.delete(f"/api/v1/auth/tokens/{token_id}").status_code == 204
    assert client.get("/api/v1/account").status_code == 401


def test_cannot_revoke_someone_elses_token(alice, signup):
    _body, client = alice
    bob = signup("bob")
    bob_token = ApiToken.objects.get(account__username="bob")
    resp = client.delete(f"/api/v1/auth/tokens/{bob_token.pk}")
    assert resp.status_code == 404
    bob_token.refresh_from_db()
    assert bob_token.revoked_at is None
    assert bob["token"]


@pytest.mark.parametrize("token_id", ["99999", "999999999999999999", "9" * 40])
def test_unknown_token_ids_are_404(alice, token_id):
    _body, client = alice
    resp = client.delete(f"/api/v1/auth/tokens/{token_id}")
    assert resp.status_code == 404
    assert "error" in resp.json()


def test_last_use_is_recorded_at_most_once_a_minute(alice):
    _body, client = alice
    token = ApiToken.objects.get()
    assert token.last_used_at is None
    start = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)

    with time_machine.travel(start, tick=False):
        assert client.get("/api/v1/account").status_code == 200
    token.refresh_from_db()
    assert token.last_used_at == start

    with time_machine.travel(start + timedelta(seconds=59), tick=False):
        with CaptureQueriesContext(connection) as queries:
            assert client.get("/api/v1/account").status_code == 200
    assert not [q for q in queries.captured_queries if q["sql"].startswith("UPDATE")]
    token.refresh_from_db()
    assert token.last_used_at == start

    later = start + timedelta(seconds=61)
    with time_machine.travel(later, tick=False):
        assert client.get("/api/v1/account").status_code == 200
    token.refresh_from_db()
    assert token.last_used_at == later

    listed = client.get("/api/v1/auth/tokens").json()["results"][0]
    assert listed["last_used_at"] is not None


def test_a_bearer_token_is_read_with_its_account_in_one_query_as_the_orm_reads_them(alice):
    body, _client = alice
    stored = ApiToken.objects.select_related("account").get()
    start = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
    with time_machine.travel(start, tick=False):
        with CaptureQueriesContext(connection) as queries:
            account, token = token_authenticate(raw=body["token"])
    assert len(queries) == 2  # the read, then the first use recorded
    assert queries.captured_queries[1]["sql"].startswith("UPDATE")
    # Every column of the account comes back as the ORM gives it (types, time zone).
    assert {f.attname: getattr(account, f.attname) for f in Account._meta.concrete_fields} == {
        f.attname: getattr(stored.account, f.attname) for f in Account._meta.concrete_fields
    }
    assert isinstance(account.is_active, bool) and account.created_at.tzinfo is not None
    assert (token.pk, token.account_id, token.name, token.prefix, token.scope) == (
        stored.pk,
        stored.account_id,
        stored.name,
        stored.prefix,
        stored.scope,
    )
    assert token.account is account and token.last_used_at == start
    # The columns an authenticated request does not read load when asked, as a deferred field does.
    with CaptureQueriesContext(connection) as queries:
        assert token.created_at == stored.created_at
    assert len(queries) == 1

    # Used exactly TOKEN_LAST_USED_RESOLUTION ago: recorded again; a moment less: not.
    with time_machine.travel(start + TOKEN_LAST_USED_RESOLUTION - timedelta(microseconds=1), tick=False):
        with CaptureQueriesContext(connection) as queries:
            token_authenticate(raw=body["token"])
    assert len(queries) == 1
    with time_machine.travel(start + TOKEN_LAST_USED_RESOLUTION, tick=False):
        with CaptureQueriesContext(connection) as queries:
            token_authenticate(raw=body["token"])
    assert len(queries) == 2
    stored.refresh_from_db()
    assert stored.last_used_at == start + TOKEN_LAST_USED_RESOLUTION

    ApiToken.objects.update(revoked_at=start)
    assert token_authenticate(raw=body["token"]) is None


@pytest.mark.django_db(databases=["default", "sqlite"])
@pytest.mark.parametrize("alias", ["default", "sqlite"])
def test_the_token_read_turns_columns_into_values_on_both_databases(alias):
    """The written-out read (accounts.services.tokens._token_with_account) on
    PostgreSQL and on the embedded default, SQLite, whose driver hands dates
    back as text and booleans as integers."""
    from accounts.services.tokens import _token_with_account

    made = datetime(2030, 1, 1, 12, 0, 0, 250000, tzinfo=UTC)
    account = Account.objects.using(alias).create(username="carol", created_at=made, is_staff=True)
    ApiToken.objects.using(alias).create(
        account=account, name="ci", prefix="grh_abcdefgh", scope="read", digest="a" * 64, last_used_at=made
    )
    stored = Account.objects.using(alias).get()
    found = _token_with_account(digest="a" * 64, stale=made - timedelta(seconds=1), using=alias)
    assert found is not None
    token, stale = found
    assert not stale
    assert {f.attname: getattr(token.account, f.attname) for f in Account._meta.concrete_fields} == {
        f.attname: getattr(stored, f.attname) for f in Account._meta.concrete_fields
    }
    assert token.account.is_staff is True and token.account.created_at == made
    assert (token.name, token.prefix, token.scope, token.account_id) == ("ci", "grh_abcdefgh", "read", account.pk)
    # Stale exactly at the bound, and when never used.
    assert _token_with_account(digest="a" * 64, stale=made, using=alias)[1] is True
    ApiToken.objects.using(alias).update(last_used_at=None)
    assert _token_with_account(digest="a" * 64, stale=made, using=alias)[1] is True
    assert _token_with_account(digest="b" * 64, stale=made, using=alias) is None
    ApiToken.objects.using(alias).update(revoked_at=made)
    assert _token_with_account(digest="a" * 64, stale=made, using=alias) is None


def test_tokens_of_an_inactive_account_stop_working(alice):
    _body, client = alice
    Account.objects.filter(username="alice").update(is_active=False)
    assert client.get("/api/v1/account").status_code == 401
