import hashlib
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext

from accounts.models import Account, ApiToken
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


def test_tokens_of_an_inactive_account_stop_working(alice):
    _body, client = alice
    Account.objects.filter(username="alice").update(is_active=False)
    assert client.get("/api/v1/account").status_code == 401
