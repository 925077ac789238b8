from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.contrib.auth.hashers import Argon2PasswordHasher

from tests.accounts.helpers import PASSWORD

pytestmark = pytest.mark.django_db

T0 = datetime(2031, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def limits(settings):
    settings.AUTH_FAILURES_PER_USERNAME = 3
    settings.AUTH_FAILURES_PER_ADDRESS = 5
    settings.AUTH_FAILURE_WINDOW_SECONDS = 600
    settings.TRUSTED_PROXY_COUNT = 0
    return settings


def _login(api, username="alice", password="wrong-password-123", **extra):
    return api.post("/api/v1/auth/token", {"username": username, "password": password}, format="json", **extra)


def _assert_throttled(resp, window=600):
    assert resp.status_code == 429
    error = resp.json()["error"]
    assert error["code"] == "throttled"
    retry_after = int(resp["Retry-After"])
    assert 0 < retry_after <= window
    assert error["details"]["retry_after_seconds"] == retry_after
    return retry_after


def test_per_username_then_429_with_retry_after(api, signup, limits):
    signup("alice")
    for i in range(3):
        assert _login(api, REMOTE_ADDR=f"198.51.100.{i}").status_code == 401
    # Even the right password is refused now, from any address.
    _assert_throttled(_login(api, password=PASSWORD, REMOTE_ADDR="198.51.100.200"))
    # Other usernames are unaffected.
    signup("bob")
    assert _login(api, username="bob", password=PASSWORD, REMOTE_ADDR="198.51.100.201").status_code == 200


def test_throttled_username_does_not_reveal_whether_it_exists(api, signup, limits):
    signup("alice")
    for i in range(3):
        _login(api, username="alice", REMOTE_ADDR=f"198.51.100.{i}")
        _login(api, username="ghost", REMOTE_ADDR=f"203.0.113.{i}")
    known = _login(api, username="alice", REMOTE_ADDR="192.0.2.10")
    unknown = _login(api, username="ghost", REMOTE_ADDR="192.0.2.11")
    _assert_throttled(known)
    _assert_throttled(unknown)
    assert known.json()["error"]["code"] == unknown.json()["error"]["code"]
    assert abs(int(known["Retry-After"]) - int(unknown["Retry-After"])) <= 2


def test_per_address(api, signup, limits):
    signup("alice")
    for i in range(5):
        assert _login(api, username=f"user{i}", REMOTE_ADDR="203.0.113.7").status_code == 401
    _assert_throttled(_login(api, username="alice", password=PASSWORD, REMOTE_ADDR="203.0.113.7"))
    assert _login(api, username="alice", password=PASSWORD, REMOTE_ADDR="203.0.113.8").status_code == 200


def test_ipv6_clients_count_per_64(api, signup, limits):
    signup("alice")
    for i in range(5):
        assert _login(api, username=f"user{i}", REMOTE_ADDR=f"2001:db8:1:2::{i + 1}").status_code == 401
    _assert_throttled(_login(api, username="alice", password=PASSWORD, REMOTE_ADDR="2001:db8:1:2:ffff::9"))
    assert _login(api, username="alice", password=PASSWORD, REMOTE_ADDR="2001:db8:1:3::1").status_code == 200


def test_forwarded_for_is_ignored_without_trusted_proxies(api, signup, limits):
    signup("alice")
    for i in range(5):
        _login(api, username=f"user{i}", REMOTE_ADDR="203.0.113.7", HTTP_X_FORWARDED_FOR=f"10.0.0.{i}")
    _assert_throttled(_login(api, password=PASSWORD, REMOTE_ADDR="203.0.113.7", HTTP_X_FORWARDED_FOR="10.9.9.9"))


def test_trusted_proxy_forwarded_for_names_the_client(api, signup, limits):
    limits.TRUSTED_PROXY_COUNT = 1
    signup("alice")
    for i in range(5):
        # The left entries are the client's own claims; the proxy appended the last one.
        resp = _login(
            api, username=f"user{i}", REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR=f"10.0.0.{i}, 198.51.100.50"
        )
        assert resp.status_code == 401
    _assert_throttled(_login(api, password=PASSWORD, REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR="198.51.100.50"))
    ok = _login(api, password=PASSWORD, REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR="198.51.100.51")
    assert ok.status_code == 200


def test_recovery_is_throttled_too(api, signup, limits):
    body = signup("alice")
    payload = {"username": "alice", "recovery_code": "0000-0000-0000-0000", "new_password": "fresh-meadow-ridge-11"}
    for i in range(3):
        resp = api.post("/api/v1/auth/recover", payload, format="json", REMOTE_ADDR=f"198.51.100.{i}")
        assert resp.status_code == 401
    payload["recovery_code"] = body["recovery_codes"][0]
    resp = api.post("/api/v1/auth/recover", payload, format="json", REMOTE_ADDR="198.51.100.99")
    _assert_throttled(resp)


def test_password_reconfirmation_counts_failures(signup, client_with, limits):
    body = signup("alice")
    client = client_with(body["token"], REMOTE_ADDR="198.51.100.1")
    for _ in range(3):
        resp = client.post("/api/v1/account/recovery-codes", {"password": "guess-guess-guess"}, format="json")
        assert resp.status_code == 403
    resp = client.post("/api/v1/account/recovery-codes", {"password": PASSWORD}, format="json")
    _assert_throttled(resp)


def test_a_good_login_clears_the_username_count(api, signup, limits):
    signup("alice")
    for i in range(2):
        _login(api, REMOTE_ADDR=f"198.51.100.{i}")
    assert _login(api, password=PASSWORD, REMOTE_ADDR="198.51.100.10").status_code == 200
    for i in range(2):
        assert _login(api, REMOTE_ADDR=f"198.51.100.{20 + i}").status_code == 401
    assert _login(api, password=PASSWORD, REMOTE_ADDR="198.51.100.30").status_code == 200


def test_the_window_closes(api, signup, limits):
    limits.AUTH_FAILURE_WINDOW_SECONDS = 1
    signup("alice")
    with time_machine.travel(T0, tick=False) as clock:
        for i in range(3):
            _login(api, REMOTE_ADDR=f"198.51.100.{i}")
        _assert_throttled(_login(api, password=PASSWORD, REMOTE_ADDR="198.51.100.9"), window=1)
        clock.shift(timedelta(seconds=1.3))
        assert _login(api, password=PASSWORD, REMOTE_ADDR="198.51.100.9").status_code == 200


def test_a_closed_window_counts_afresh_while_the_cache_still_holds_it(api, signup, limits):
    """The cache may keep a count past its window (its expiry is its own
    clock): the stored end of the window decides."""
    signup("alice")
    with time_machine.travel(T0, tick=False) as clock:
        for i in range(3):
            _login(api, REMOTE_ADDR=f"198.51.100.{i}")
        retry_after = _assert_throttled(_login(api, password=PASSWORD, REMOTE_ADDR="198.51.100.9"))
        assert retry_after == 600
        clock.shift(timedelta(seconds=601))  # the cache's keys still live: Redis expires them in real time
        assert _login(api, REMOTE_ADDR="198.51.100.3").status_code == 401  # a new window: one failure
        assert _login(api, password=PASSWORD, REMOTE_ADDR="198.51.100.9").status_code == 200


def test_unknown_usernames_cost_one_password_hash_like_known_ones(api, signup, monkeypatch):
    signup("alice")
    calls = []
    original = Argon2PasswordHasher.verify

    def counting_verify(self, password, encoded):
        calls.append(encoded.split("$")[3])  # the cost parameters
        return original(self, password, encoded)

    monkeypatch.setattr(Argon2PasswordHasher, "verify", counting_verify)
    assert _login(api, username="alice").status_code == 401
    known = list(calls)
    calls.clear()
    assert _login(api, username="no-such-user").status_code == 401
    unknown = list(calls)
    assert len(known) == len(unknown) == 1
    assert known == unknown  # same Argon2 cost parameters, so the same time
