"""The admin's login: throttled like the API's (the same counters), and
two-factor authentication with an authenticator app (TOTP): enrolment, the
code at login, the policy that requires it, turning it off, and a superuser's
reset. Codes are computed from the device's key at a frozen time."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.contrib.auth.models import Permission
from django.test import Client
from django_otp.plugins.otp_totp.models import TOTPDevice

from accounts.models import Account, ApiToken
from accounts.services import token_create
from core.models import AuditEntry
from tests.accounts.helpers import PASSWORD, code_for, enrolled, wrong_code_for

pytestmark = pytest.mark.django_db

T0 = datetime(2031, 5, 4, 9, 0, tzinfo=UTC)
STEP = timedelta(seconds=30)  # a TOTP code is good for one 30-second step, once
# Fixtures `limits`, `boss` and `clerk`: tests/accounts/conftest.py.


def login(client: Client, username: str, password: str = PASSWORD, code: str = "", **extra):
    return client.post(
        "/admin/login/?next=/admin/",
        {"username": username, "password": password, "otp_token": code},
        **extra,
    )


# --- Throttling ------------------------------------------------------------------


def test_wrong_passwords_are_throttled_and_then_even_the_right_one_waits(limits, boss):
    client = Client()
    for _ in range(5):
        resp = login(client, "boss", "not-the-password-1")
        assert resp.status_code == 200
        assert "Enter the username and password of a staff account." in resp.content.decode()
    locked = login(client, "boss")
    assert locked.status_code == 429
    assert 0 < int(locked["Retry-After"]) <= 900
    assert "Too many failed attempts" in locked.content.decode()
    assert "_auth_user_id" not in client.session
    assert client.get("/admin/").status_code == 302  # still outside


def test_the_window_closes_and_the_right_password_gets_in(limits, boss):
    client = Client()
    with time_machine.travel(T0, tick=False) as clock:
        for _ in range(5):
            login(client, "boss", "not-the-password-1")
        assert login(client, "boss").status_code == 429
        clock.shift(timedelta(seconds=901))
        assert login(client, "boss").status_code == 302
    assert client.get("/admin/").status_code == 200


def test_api_and_admin_failures_count_together(limits, boss, api):
    for _ in range(3):
        assert (
            api.post("/api/v1/auth/token", {"username": "boss", "password": "wrong-one-123"}, format="json").status_code
            == 401
        )
    client = Client()
    for _ in range(2):
        assert login(client, "boss", "not-the-password-1").status_code == 200
    assert login(client, "boss").status_code == 429
    assert api.post("/api/v1/auth/token", {"username": "boss", "password": PASSWORD}, format="json").status_code == 429


def test_a_customer_cannot_log_into_the_admin_and_it_counts(limits):
    Account.objects.create_user("alice", PASSWORD)
    client = Client()
    resp = login(client, "alice")
    assert resp.status_code == 200 and "staff account" in resp.content.decode()
    assert "_auth_user_id" not in client.session


def test_a_successful_login_is_audited_with_the_address(boss):
    client = Client()
    assert login(client, "boss", REMOTE_ADDR="192.0.2.44").status_code == 302
    entry = AuditEntry.objects.get(action="account.admin_login")
    assert entry.actor == boss and entry.changes == {"second_factor": False, "address": "192.0.2.44"}


# --- Two-factor: enrolment -------------------------------------------------------------


def test_superusers_must_enrol_when_the_setting_says_so(settings, boss):
    settings.ADMIN_OTP_REQUIRED = "superusers"
    client = Client()
    with time_machine.travel(T0, tick=False) as clock:
        resp = login(client, "boss")
        assert resp.status_code == 302 and resp["Location"] == "/admin/two-factor/"
        # Nothing else opens until the authenticator is set up.
        for url in ("/admin/", "/admin/billing/invoice/", "/admin/login/"):
            hop = client.get(url, follow=True)
            assert hop.redirect_chain[-1][0] == "/admin/two-factor/", url
        page = client.get("/admin/two-factor/")
        html = page.content.decode()
        assert page.status_code == 200 and "<svg" in html and "ADMIN_OTP_REQUIRED=superusers" in html
        key = re.search(r'id="otp-secret">([A-Z2-7 ]+)<', html).group(1)
        device = TOTPDevice.objects.get(user=boss, confirmed=False)
        assert key.replace(" ", "") in device.config_url  # the key shown is the one in the QR code
        assert client.get("/admin/two-factor/").content.decode().count(key) == 1  # a reload keeps the same key

        wrong = client.post("/admin/two-factor/", {"otp_token": wrong_code_for(device)})
        assert wrong.status_code == 200 and "wrong or has expired" in wrong.content.decode()
        clock.shift(STEP)
        done = client.post("/admin/two-factor/", {"otp_token": code_for(device)})
        assert done.status_code == 302 and done["Location"] == "/admin/"
        assert client.get("/admin/").status_code == 200  # this session counts as verified
    device.refresh_from_db()
    assert device.confirmed
    assert AuditEntry.objects.filter(action="account.otp_enable", actor=boss).count() == 1


def test_the_policy_leaves_other_staff_free_to_choose(settings, clerk):
    settings.ADMIN_OTP_REQUIRED = "superusers"
    client = Client()
    resp = login(client, "clerk")
    assert resp.status_code == 302 and resp["Location"] == "/admin/"
    settings.ADMIN_OTP_REQUIRED = "staff"
    assert client.get("/admin/", follow=True).redirect_chain[-1][0] == "/admin/two-factor/"


def test_a_session_that_must_enrol_can_still_log_out(settings, boss):
    settings.ADMIN_OTP_REQUIRED = "superusers"
    client = Client()
    login(client, "boss")
    resp = client.post("/admin/logout/")
    assert resp.status_code == 200 and "_auth_user_id" not in client.session


# --- Two-factor: logging in with a code ------------------------------------------------


def test_enrolled_staff_log_in_with_password_and_code(limits, clerk):
    device = enrolled(clerk)
    client = Client()
    with time_machine.travel(T0, tick=False) as clock:
        missing = login(client, "clerk")
        assert missing.status_code == 200 and "6-digit code" in missing.content.decode()
        wrong = login(client, "clerk", code=wrong_code_for(device))
        assert wrong.status_code == 200 and "wrong or has expired" in wrong.content.decode()
        assert "_auth_user_id" not in client.session
        clock.shift(STEP)
        ok = login(client, "clerk", code=code_for(device))
        assert ok.status_code == 302 and ok["Location"] == "/admin/"
        assert client.get("/admin/").status_code == 200
        # The same code cannot be used twice.
        other = Client()
        assert login(other, "clerk", code=code_for(device)).status_code == 200
    assert AuditEntry.objects.get(action="account.admin_login").changes["second_factor"] is True


def test_a_password_only_session_is_not_enough_once_enrolled(clerk):
    enrolled(clerk)
    client = Client()
    client.force_login(clerk)  # as if signed in before the authenticator was set up
    resp = client.get("/admin/billing/invoice/")
    assert resp.status_code == 302 and resp["Location"].startswith("/admin/login/")


def test_missing_and_wrong_codes_count_as_failures(limits, clerk):
    device = enrolled(clerk)
    client = Client()
    with time_machine.travel(T0, tick=False):
        for _ in range(5):
            login(client, "clerk", code="")
        assert login(client, "clerk", code=code_for(device)).status_code == 429


# --- Two-factor: off and reset -----------------------------------------------------------


def test_staff_turn_their_own_two_factor_off_with_a_code(clerk):
    device = enrolled(clerk)
    token = token_create(account=clerk, name="cli").token
    client = Client()
    with time_machine.travel(T0, tick=False) as clock:
        assert login(client, "clerk", code=code_for(device)).status_code == 302
        clock.shift(STEP)
        page = client.get("/admin/two-factor/")
        assert "Two-factor authentication is on" in page.content.decode()
        resp = client.post("/admin/two-factor/", {"otp_token": code_for(device)})
        assert resp.status_code == 302
    assert not TOTPDevice.objects.filter(user=clerk).exists()
    entry = AuditEntry.objects.get(action="account.otp_disable", actor=clerk)
    # A staff account holds API tokens only under a second factor: those it had die with it.
    token.refresh_from_db()
    assert token.revoked_at is not None and entry.changes["revoked_tokens"] == 1


def test_required_two_factor_cannot_be_turned_off(settings, boss):
    settings.ADMIN_OTP_REQUIRED = "superusers"
    device = enrolled(boss)
    client = Client()
    with time_machine.travel(T0, tick=False) as clock:
        assert login(client, "boss", code=code_for(device)).status_code == 302
        clock.shift(STEP)
        page = client.get("/admin/two-factor/").content.decode()
        assert "stays on" in page and "Turn two-factor off" not in page
        resp = client.post("/admin/two-factor/", {"otp_token": code_for(device)})
        assert resp.status_code == 200 and "required for this account" in resp.content.decode()
    assert TOTPDevice.objects.filter(user=boss, confirmed=True).exists()


def test_a_superuser_resets_a_lost_authenticator_with_a_reason(boss, clerk):
    enrolled(clerk)
    token_create(account=clerk, name="cli")
    token_create(account=clerk, name="laptop")
    kept = token_create(account=boss, name="own").token
    admin = Client()
    admin.force_login(boss)
    url = "/admin/accounts/account/"
    first = admin.post(url, {"action": "reset_two_factor", "_selected_action": [clerk.pk]})
    assert first.status_code == 200 and b"Confirm" in first.content
    done = admin.post(
        url,
        {"action": "reset_two_factor", "_selected_action": [clerk.pk], "apply": "1", "reason": "phone lost, ticket 71"},
    )
    assert done.status_code == 302
    assert not TOTPDevice.objects.filter(user=clerk).exists()
    entry = AuditEntry.objects.get(action="account.otp_reset")
    assert (entry.actor, entry.object_id, entry.reason) == (boss, str(clerk.pk), "phone lost, ticket 71")
    # The tokens issued against the lost authenticator are revoked with it; no one else's.
    assert not ApiToken.objects.filter(account=clerk, revoked_at__isnull=True).exists()
    assert entry.changes == {"devices_removed": 1, "revoked_tokens": 2}
    kept.refresh_from_db()
    assert kept.revoked_at is None
    # Staff who are not superusers do not get the action.
    clerk.user_permissions.add(*Permission.objects.filter(codename__in=["view_account", "change_account"]))
    staff = Client()
    staff.force_login(clerk)
    listing = staff.get(url)
    assert listing.status_code == 200 and b"reset_two_factor" not in listing.content


def test_authenticator_secrets_are_not_listed_in_the_admin(boss):
    admin = Client()
    admin.force_login(boss)
    assert admin.get("/admin/otp_totp/totpdevice/").status_code == 404
