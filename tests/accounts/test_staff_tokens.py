"""API tokens: the second factor a staff account proves for every token it
gets (login and recovery), the scope each token carries (read, full, ops) and
how it is enforced, and the per-account limits on tokens and SSH keys. Codes
are computed from the device's key at a frozen time."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.db import connection
from django_otp.plugins.otp_totp.models import TOTPDevice
from rest_framework.test import APIClient

from accounts import services
from accounts.models import Account, ApiToken, RecoveryCode, SshKey
from core.errors import Conflict
from core.models import AuditEntry
from tests.accounts.helpers import NEW_PASSWORD, PASSWORD, code_for, enrolled, openssh_line, wrong_code_for

pytestmark = pytest.mark.django_db

T0 = datetime(2031, 5, 4, 9, 0, tzinfo=UTC)
STEP = timedelta(seconds=30)  # a TOTP code is good for one 30-second step, once


def _token(username: str, password: str = PASSWORD, otp: str | None = None, scope: str | None = None):
    body = {"username": username, "password": password}
    if otp is not None:
        body["otp"] = otp
    if scope is not None:
        body["scope"] = scope
    return APIClient().post("/api/v1/auth/token", body, format="json")


def _error(resp) -> str:
    return resp.json()["error"]["code"]


# --- A staff account's token needs the second factor -------------------------------


@pytest.mark.parametrize("policy", ["off", "superusers", "staff"])
def test_staff_without_an_authenticator_get_no_token_whatever_the_policy(limits, boss, clerk, policy):
    limits.ADMIN_OTP_REQUIRED = policy
    for username in ("clerk", "boss"):
        resp = _token(username)
        assert resp.status_code == 403, resp.json()
        error = resp.json()["error"]
        assert error["code"] == "otp_not_enrolled"
        assert error["details"] == {"setup_url": "/admin/two-factor/"}
        assert "two-factor" in error["message"]
        # A code sent anyway changes nothing: there is no device to check it against.
        assert _error(_token(username, otp="123456")) == "otp_not_enrolled"
    assert not ApiToken.objects.exists()


def test_an_authenticator_being_set_up_is_not_enough(limits, clerk):
    pending = TOTPDevice.objects.create(user=clerk, name="Authenticator app", confirmed=False)
    with time_machine.travel(T0, tick=False):
        resp = _token("clerk", otp=code_for(pending))
    assert resp.status_code == 403 and _error(resp) == "otp_not_enrolled"
    assert not ApiToken.objects.exists()


def test_a_staff_token_takes_the_current_code(limits, clerk):
    device = enrolled(clerk)
    with time_machine.travel(T0, tick=False) as clock:
        missing = _token("clerk")
        assert missing.status_code == 401 and _error(missing) == "otp_required"
        wrong = _token("clerk", otp=wrong_code_for(device))
        assert wrong.status_code == 401 and _error(wrong) == "otp_invalid"
        clock.shift(STEP)
        ok = _token("clerk", otp=code_for(device))
    assert ok.status_code == 201, ok.json()
    body = ok.json()
    assert body["token"].startswith("grh_")
    # Without asking, a staff token is no ops token.
    assert body["scope"] == "full"
    assert ApiToken.objects.get(account=clerk).scope == "full"


def test_wrong_codes_count_as_failed_logins(limits, clerk):
    device = enrolled(clerk)
    with time_machine.travel(T0, tick=False):
        for _ in range(5):
            assert _token("clerk", otp=wrong_code_for(device)).status_code == 401
        locked = _token("clerk", otp=code_for(device))
    assert locked.status_code == 429 and _error(locked) == "throttled"
    assert not ApiToken.objects.exists()


def test_customers_send_no_code_under_any_policy(limits, django_user_model):
    django_user_model.objects.create_user("carol", PASSWORD)
    for policy in ("off", "superusers", "staff"):
        limits.ADMIN_OTP_REQUIRED = policy
        resp = _token("carol")
        assert resp.status_code == 201, resp.json()
        assert resp.json()["scope"] == "full"


def test_only_staff_get_ops_tokens(limits, django_user_model, clerk):
    django_user_model.objects.create_user("carol", PASSWORD)
    refused = _token("carol", scope="ops")
    assert refused.status_code == 403 and _error(refused) == "scope_not_allowed"
    assert not ApiToken.objects.filter(account__username="carol").exists()
    # A wrong password still answers as a wrong password: the scope says nothing first.
    assert _error(_token("carol", password="not-her-password-1", scope="ops")) == "invalid_credentials"

    device = enrolled(clerk)
    with time_machine.travel(T0, tick=False):
        ops = _token("clerk", otp=code_for(device), scope="ops")
    assert ops.status_code == 201, ops.json()
    assert ops.json()["scope"] == "ops"
    token = ApiToken.objects.get(account=clerk)
    assert token.scope == "ops"
    entry = AuditEntry.objects.get(action="token.create", actor=clerk)
    assert entry.changes["scope"] == "ops"


def test_an_unknown_scope_is_invalid(limits, signup):
    signup("alice")
    resp = _token("alice", scope="admin")
    assert resp.status_code == 400 and _error(resp) == "invalid"
    assert "scope" in resp.json()["error"]["details"]["fields"]


# --- Recovery mints a token too ------------------------------------------------------


def _recover(username: str, code: str, otp: str | None = None):
    body = {"username": username, "recovery_code": code, "new_password": NEW_PASSWORD}
    if otp is not None:
        body["otp"] = otp
    return APIClient().post("/api/v1/auth/recover", body, format="json")


def _codes_for(account: Account) -> list[str]:
    return services.recovery_codes_regenerate(account=account, password=PASSWORD, client_address="192.0.2.9")


def test_a_staff_recovery_needs_the_second_factor(limits, clerk):
    codes = _codes_for(clerk)
    # No authenticator: refused before anything changes.
    resp = _recover("clerk", codes[0])
    assert resp.status_code == 403 and _error(resp) == "otp_not_enrolled"
    clerk.refresh_from_db()
    assert clerk.check_password(PASSWORD)
    assert RecoveryCode.objects.filter(account=clerk, used_at__isnull=True).count() == 10

    device = enrolled(clerk)
    with time_machine.travel(T0, tick=False) as clock:
        assert _error(_recover("clerk", codes[0])) == "otp_required"
        assert _error(_recover("clerk", codes[0], otp=wrong_code_for(device))) == "otp_invalid"
        clerk.refresh_from_db()
        assert clerk.check_password(PASSWORD)  # nothing changed, the code is still good
        clock.shift(STEP)
        ok = _recover("clerk", codes[0], otp=code_for(device))
    assert ok.status_code == 200, ok.json()
    clerk.refresh_from_db()
    assert clerk.check_password(NEW_PASSWORD)
    assert ApiToken.objects.get(account=clerk, revoked_at__isnull=True).scope == "full"


def test_a_wrong_recovery_code_says_nothing_about_staff(limits, clerk, signup):
    enrolled(clerk)
    signup("alice")
    staff = _recover("clerk", "aaaa-bbbb-cccc-dddd")
    customer = _recover("alice", "aaaa-bbbb-cccc-dddd")
    assert staff.status_code == customer.status_code == 401
    assert staff.json() == customer.json()
    assert _error(staff) == "invalid_credentials"


def test_wrong_codes_in_recovery_count_against_the_username(limits, clerk):
    codes = _codes_for(clerk)
    device = enrolled(clerk)
    with time_machine.travel(T0, tick=False):
        for _ in range(5):
            assert _recover("clerk", codes[0], otp=wrong_code_for(device)).status_code == 401
        locked = _recover("clerk", codes[0], otp=code_for(device))
    assert locked.status_code == 429
    clerk.refresh_from_db()
    assert clerk.check_password(PASSWORD)


# --- Scopes ----------------------------------------------------------------------------


def test_a_read_token_reads_and_cannot_write(limits, signup, client_with, ssh_private_keys):
    full = signup("alice")["token"]
    resp = _token("alice", scope="read")
    assert resp.status_code == 201 and resp.json()["scope"] == "read"
    reader = client_with(resp.json()["token"])

    assert reader.get("/api/v1/account").status_code == 200
    assert reader.get("/api/v1/account/ssh-keys").status_code == 200
    listed = reader.get("/api/v1/auth/tokens").json()["results"]
    assert sorted((t["name"], t["scope"], t["current"]) for t in listed) == [
        ("login", "read", True),
        ("signup", "full", False),
    ]

    line = openssh_line(ssh_private_keys["ssh-ed25519"], "alice@laptop")
    writes = [
        reader.post("/api/v1/account/ssh-keys", {"public_key": line}, format="json"),
        reader.delete(f"/api/v1/auth/tokens/{listed[0]['id']}"),
        reader.post("/api/v1/account/password", {"password": PASSWORD, "new_password": NEW_PASSWORD}, format="json"),
        reader.post("/api/v1/webhooks", {"url": "https://example.com/hook"}, format="json"),
        reader.patch("/api/v1/rentals/1", {"auto_renew": False}, format="json"),
    ]
    for resp in writes:
        assert resp.status_code == 403, resp.json()
        error = resp.json()["error"]
        assert error["code"] == "insufficient_scope"
        assert error["details"] == {"token_scope": "read", "required_scope": "full"}
    assert not SshKey.objects.exists()
    assert ApiToken.objects.filter(revoked_at__isnull=True).count() == 2
    assert Account.objects.get(username="alice").check_password(PASSWORD)

    # The full token does what the read one may not.
    writer = client_with(full)
    assert writer.post("/api/v1/account/ssh-keys", {"public_key": line}, format="json").status_code == 201


def test_every_route_that_takes_a_token_checks_its_scope():
    """A view that sets its own permission classes must still hold a token to
    its scope: it lists TokenScopeAllows or asks for more (StaffPermissionRequired)."""
    from django.urls import URLPattern, URLResolver, get_resolver
    from rest_framework.views import APIView

    from core.permissions import StaffPermissionRequired, TokenScopeAllows

    def views(patterns):
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                yield from views(pattern.url_patterns)
            elif isinstance(pattern, URLPattern):
                cls = getattr(pattern.callback, "view_class", None) or getattr(pattern.callback, "cls", None)
                if isinstance(cls, type) and issubclass(cls, APIView):
                    yield str(pattern.pattern), cls

    checked = 0
    for route, cls in views(get_resolver().url_patterns):
        view = cls()
        if not view.get_authenticators():
            continue  # public: no token is read
        if set(view.allowed_methods) <= {"GET", "HEAD", "OPTIONS"}:
            continue  # reads only: every scope may
        permissions = cls.permission_classes
        scoped = (TokenScopeAllows, StaffPermissionRequired)
        assert any(isinstance(p, type) and issubclass(p, scoped) for p in permissions), route
        checked += 1
    assert checked >= 15  # the walk found the API's routes


# --- Limits ------------------------------------------------------------------------------


def test_the_limits_default_to_20_tokens_and_50_ssh_keys(settings):
    assert (settings.API_TOKENS_MAX_PER_ACCOUNT, settings.SSH_KEYS_MAX_PER_ACCOUNT) == (20, 50)


def test_the_21st_live_token_is_refused(limits, signup, client_with):
    limits.AUTH_FAILURES_PER_ADDRESS = 100
    limits.PASSWORD_PROOFS_PER_USERNAME = 100  # 23 logins of one holder in a minute
    signup("alice")  # the signup token is the first
    tokens = [_token("alice") for _ in range(19)]
    assert [t.status_code for t in tokens] == [201] * 19
    refused = _token("alice")
    assert refused.status_code == 409
    error = refused.json()["error"]
    assert error["code"] == "token_limit_reached" and error["details"] == {"limit": 20}
    assert ApiToken.objects.filter(revoked_at__isnull=True).count() == 20

    # Revoked tokens do not count: revoke one and there is room again.
    client = client_with(tokens[0].json()["token"])
    assert client.delete(f"/api/v1/auth/tokens/{tokens[1].json()['id']}").status_code == 204
    assert _token("alice").status_code == 201
    assert _token("alice").status_code == 409


def test_the_51st_ssh_key_is_refused(signup, client_with):
    from cryptography.hazmat.primitives.asymmetric import ed25519

    client = client_with(signup("alice")["token"])
    lines = [openssh_line(ed25519.Ed25519PrivateKey.generate(), f"key-{i}") for i in range(51)]
    answers = [client.post("/api/v1/account/ssh-keys", {"public_key": line}, format="json") for line in lines[:50]]
    assert [a.status_code for a in answers] == [201] * 50
    refused = client.post("/api/v1/account/ssh-keys", {"public_key": lines[50]}, format="json")
    assert refused.status_code == 409
    error = refused.json()["error"]
    assert error["code"] == "ssh_key_limit_reached" and error["details"] == {"limit": 50}
    assert SshKey.objects.count() == 50

    assert client.delete(f"/api/v1/account/ssh-keys/{answers[0].json()['id']}").status_code == 204
    assert client.post("/api/v1/account/ssh-keys", {"public_key": lines[50]}, format="json").status_code == 201


@pytest.mark.django_db(transaction=True)
def test_concurrent_tokens_never_pass_the_limit(settings):
    settings.API_TOKENS_MAX_PER_ACCOUNT = 3
    account = Account.objects.create_user("alice", PASSWORD)
    barrier = threading.Barrier(8)
    outcomes: list[str] = []

    def make():
        try:
            barrier.wait()
            services.token_create(account=account, name="race")
            outcomes.append("made")
        except Conflict as exc:
            outcomes.append(exc.code)
        finally:
            connection.close()

    threads = [threading.Thread(target=make) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["made"] * 3 + ["token_limit_reached"] * 5
    assert ApiToken.objects.filter(account=account, revoked_at__isnull=True).count() == 3
