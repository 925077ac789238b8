import re

import pytest

from accounts.models import Account, ApiToken, RecoveryCode
from tests.accounts.helpers import PASSWORD

pytestmark = pytest.mark.django_db

CODE_FORMAT = re.compile(r"^[0-9a-hjkmnp-tv-z]{4}(-[0-9a-hjkmnp-tv-z]{4}){3}$")


def test_signup_returns_username_token_and_ten_recovery_codes(api, client_with):
    resp = api.post("/api/v1/accounts", {"username": "alice", "password": PASSWORD}, format="json")

    assert resp.status_code == 201
    body = resp.json()
    assert set(body) == {"username", "token", "recovery_codes"}
    assert body["username"] == "alice"
    assert body["token"].startswith("grh_") and len(body["token"]) == 47
    assert len(body["recovery_codes"]) == 10
    assert len(set(body["recovery_codes"])) == 10
    assert all(CODE_FORMAT.match(code) for code in body["recovery_codes"])

    account = Account.objects.get(username="alice")
    assert account.password.startswith("argon2$")
    assert account.check_password(PASSWORD)
    assert ApiToken.objects.filter(account=account).count() == 1
    assert RecoveryCode.objects.filter(account=account, used_at__isnull=True).count() == 10

    me = client_with(body["token"]).get("/api/v1/account")
    assert me.status_code == 200
    assert me.json()["username"] == "alice"


def test_signup_lower_cases_the_username(signup):
    body = signup("Alice.Smith")
    assert body["username"] == "alice.smith"
    assert Account.objects.filter(username="alice.smith").exists()


def test_signup_username_taken_in_any_case(api, signup):
    signup("alice")
    resp = api.post("/api/v1/accounts", {"username": "ALICE", "password": PASSWORD}, format="json")
    assert resp.status_code == 409
    assert resp.json()["error"]["code"] == "username_taken"
    assert Account.objects.count() == 1


@pytest.mark.parametrize(
    "password",
    ["short1", "password123", "12345678901234", "alexandrina1", " " * 10, " \t \u00a0" * 5],
    ids=["too-short", "common", "numeric", "like-username", "ten-spaces", "blank-whitespace"],
)
def test_signup_refuses_weak_passwords(api, password):
    resp = api.post("/api/v1/accounts", {"username": "alexandrina", "password": password}, format="json")
    assert resp.status_code == 400
    error = resp.json()["error"]
    assert error["code"] == "weak_password"
    assert error["details"]["messages"]
    assert not Account.objects.exists()


def test_signup_missing_fields_use_the_error_shape(api):
    resp = api.post("/api/v1/accounts", {"username": "alice"}, format="json")
    assert resp.status_code == 400
    error = resp.json()["error"]
    assert error["code"] == "invalid"
    assert "password" in error["details"]["fields"]


def test_signup_ignores_a_stale_authorization_header(client_with):
    client = client_with("grh_" + "x" * 43)
    resp = client.post("/api/v1/accounts", {"username": "alice", "password": PASSWORD}, format="json")
    assert resp.status_code == 201


def test_login_issues_a_working_token(api, signup, client_with):
    signup("alice")
    resp = api.post("/api/v1/auth/token", {"username": "alice", "password": PASSWORD, "name": "laptop"}, format="json")
    assert resp.status_code == 201  # a token is created, as every other create answers
    body = resp.json()
    assert body["name"] == "laptop"
    assert body["prefix"] == body["token"][:12]
    assert body["scope"] == "full"  # what a customer's token has always been able to do
    assert {"token", "id", "name", "prefix", "scope", "created_at"} <= set(body)
    assert client_with(body["token"]).get("/api/v1/account").status_code == 200
    assert Account.objects.get(username="alice").last_login is not None


def test_login_username_is_case_insensitive(api, signup):
    signup("alice")
    resp = api.post("/api/v1/auth/token", {"username": " ALICE ", "password": PASSWORD}, format="json")
    assert resp.status_code == 201


def test_login_wrong_password_and_unknown_user_answer_alike(api, signup):
    signup("alice")
    wrong = api.post("/api/v1/auth/token", {"username": "alice", "password": "nope-nope-nope"}, format="json")
    unknown = api.post("/api/v1/auth/token", {"username": "bob", "password": "nope-nope-nope"}, format="json")
    assert wrong.status_code == unknown.status_code == 401
    assert wrong.json() == unknown.json()
    assert wrong.json()["error"]["code"] == "invalid_credentials"


def test_login_refused_for_an_inactive_account(api, signup):
    signup("alice")
    Account.objects.filter(username="alice").update(is_active=False)
    resp = api.post("/api/v1/auth/token", {"username": "alice", "password": PASSWORD}, format="json")
    assert resp.status_code == 401
    assert resp.json()["error"]["code"] == "invalid_credentials"


def test_production_hashes_passwords_with_argon2id():
    from config import settings as production

    assert production.PASSWORD_HASHERS[0] == "django.contrib.auth.hashers.Argon2PasswordHasher"
    account = Account.objects.create_user("frank", PASSWORD)
    assert account.password.startswith("argon2$argon2id$")


def test_a_password_change_to_spaces_is_refused(alice):
    _body, client = alice
    resp = client.post("/api/v1/account/password", {"password": PASSWORD, "new_password": " " * 12}, format="json")
    assert resp.status_code == 400
    assert resp.json()["error"]["code"] == "weak_password"
    assert "spaces" in resp.json()["error"]["message"]
