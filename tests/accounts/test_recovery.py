import hashlib

import pytest
from django.db import connection

from accounts.models import ApiToken, RecoveryCode
from tests.accounts.helpers import NEW_PASSWORD, PASSWORD

pytestmark = pytest.mark.django_db


def _recover(api, code, username="alice", new_password=NEW_PASSWORD):
    return api.post(
        "/api/v1/auth/recover",
        {"username": username, "recovery_code": code, "new_password": new_password},
        format="json",
    )


def _login(api, password, username="alice"):
    return api.post("/api/v1/auth/token", {"username": username, "password": password}, format="json")


def test_recovery_sets_the_password_and_revokes_every_token(api, alice, client_with):
    body, client = alice
    extra = _login(api, PASSWORD).json()["token"]

    resp = _recover(api, body["recovery_codes"][0])

    assert resp.status_code == 200
    out = resp.json()
    assert out["username"] == "alice"
    assert out["revoked_tokens"] == 2
    assert out["recovery_codes_remaining"] == 9
    assert client.get("/api/v1/account").status_code == 401
    assert client_with(extra).get("/api/v1/account").status_code == 401
    assert client_with(out["token"]).get("/api/v1/account").status_code == 200
    assert _login(api, PASSWORD).status_code == 401
    assert _login(api, NEW_PASSWORD).status_code == 201


def test_a_recovery_code_works_once(api, alice):
    body, _client = alice
    code = body["recovery_codes"][3]
    assert _recover(api, code).status_code == 200
    again = _recover(api, code, new_password="second-attempt-password-77")
    assert again.status_code == 401
    assert again.json()["error"]["code"] == "invalid_credentials"
    assert _login(api, NEW_PASSWORD).status_code == 201
    assert RecoveryCode.objects.filter(used_at__isnull=False).count() == 1


def test_codes_are_read_leniently(api, alice):
    body, _client = alice
    code = body["recovery_codes"][1]
    typed = code.upper().replace("-", " ").replace("1", "l").replace("0", "O")
    assert _recover(api, typed).status_code == 200


def test_another_accounts_code_does_not_work(api, alice, signup):
    body, _client = alice
    signup("bob")
    resp = _recover(api, body["recovery_codes"][0], username="bob")
    assert resp.status_code == 401
    assert RecoveryCode.objects.filter(used_at__isnull=False).count() == 0


def test_unknown_username_and_wrong_code_answer_alike(api, alice):
    wrong = _recover(api, "0000-0000-0000-0000")
    unknown = _recover(api, "0000-0000-0000-0000", username="nobody-here")
    assert wrong.status_code == unknown.status_code == 401
    assert wrong.json() == unknown.json()


def test_a_weak_new_password_does_not_burn_the_code(api, alice):
    body, client = alice
    resp = _recover(api, body["recovery_codes"][0], new_password="short")
    assert resp.status_code == 400
    assert resp.json()["error"]["code"] == "weak_password"
    assert RecoveryCode.objects.filter(used_at__isnull=True).count() == 10
    assert client.get("/api/v1/account").status_code == 200
    assert _recover(api, body["recovery_codes"][0]).status_code == 200


def test_codes_are_stored_hashed(alice):
    body, _client = alice
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM accounts_recoverycode")
        dump = repr(cursor.fetchall())
    digests = set(RecoveryCode.objects.values_list("digest", flat=True))
    for code in body["recovery_codes"]:
        assert code not in dump
        assert code.replace("-", "") not in dump
        assert hashlib.sha256(code.replace("-", "").encode()).hexdigest() in digests


def test_regeneration_kills_the_old_codes(api, alice):
    body, client = alice
    resp = client.post("/api/v1/account/recovery-codes", {"password": PASSWORD}, format="json")
    assert resp.status_code == 200
    new_codes = resp.json()["recovery_codes"]
    assert len(new_codes) == 10
    assert not set(new_codes) & set(body["recovery_codes"])
    assert RecoveryCode.objects.count() == 10

    for old in body["recovery_codes"][:3]:
        assert _recover(api, old).status_code == 401
    assert _recover(api, new_codes[0]).status_code == 200


def test_regeneration_needs_the_password(alice):
    _body, client = alice
    resp = client.post("/api/v1/account/recovery-codes", {"password": "not-my-password"}, format="json")
    assert resp.status_code == 403
    assert resp.json()["error"]["code"] == "wrong_password"
    assert RecoveryCode.objects.filter(used_at__isnull=True).count() == 10


def test_regeneration_needs_a_token(api):
    resp = api.post("/api/v1/account/recovery-codes", {"password": PASSWORD}, format="json")
    assert resp.status_code == 401


def test_recovery_leaves_other_accounts_alone(api, alice, signup, client_with):
    body, _client = alice
    bob = signup("bob")
    assert _recover(api, body["recovery_codes"][0]).status_code == 200
    assert client_with(bob["token"]).get("/api/v1/account").status_code == 200
    assert ApiToken.objects.filter(account__username="bob", revoked_at__isnull=True).count() == 1
