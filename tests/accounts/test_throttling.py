import threading
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.contrib.auth.hashers import Argon2PasswordHasher
from django.db import connection
from rest_framework.test import APIClient

from accounts.models import Account
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
    assert _login(api, username="bob", password=PASSWORD, REMOTE_ADDR="198.51.100.201").status_code == 201


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
    assert _login(api, username="alice", password=PASSWORD, REMOTE_ADDR="203.0.113.8").status_code == 201


def test_ipv6_clients_count_per_64(api, signup, limits):
    signup("alice")
    for i in range(5):
        assert _login(api, username=f"user{i}", REMOTE_ADDR=f"2001:db8:1:2::{i + 1}").status_code == 401
    _assert_throttled(_login(api, username="alice", password=PASSWORD, REMOTE_ADDR="2001:db8:1:2:ffff::9"))
    assert _login(api, username="alice", password=PASSWORD, REMOTE_ADDR="2001:db8:1:3::1").status_code == 201


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
    assert ok.status_code == 201


def test_recovery_counts_wrong_codes_but_a_valid_code_gets_through_the_lock_out(api, signup, limits):
    body = signup("alice")
    payload = {"username": "alice", "recovery_code": "0000-0000-0000-0000", "new_password": "fresh-meadow-ridge-11"}
    for i in range(3):
        resp = api.post("/api/v1/auth/recover", payload, format="json", REMOTE_ADDR=f"198.51.100.{i}")
        assert resp.status_code == 401
    # The username is locked: logins and wrong codes wait ...
    _assert_throttled(_login(api, password=PASSWORD, REMOTE_ADDR="198.51.100.99"))
    _assert_throttled(api.post("/api/v1/auth/recover", payload, format="json", REMOTE_ADDR="198.51.100.98"))
    # ... but the holder, with a valid recovery code, is let in.
    payload["recovery_code"] = body["recovery_codes"][0]
    resp = api.post("/api/v1/auth/recover", payload, format="json", REMOTE_ADDR="198.51.100.99")
    assert resp.status_code == 200, resp.json()
    assert resp.json()["token"].startswith("grh_")


def test_recovery_still_holds_the_per_address_limit(api, signup, limits):
    body = signup("alice")
    for i in range(5):
        assert _login(api, username=f"user{i}", REMOTE_ADDR="203.0.113.7").status_code == 401
    payload = {"username": "alice", "recovery_code": body["recovery_codes"][0], "new_password": "fresh-meadow-ridge-11"}
    _assert_throttled(api.post("/api/v1/auth/recover", payload, format="json", REMOTE_ADDR="203.0.113.7"))


def test_an_address_that_logged_in_before_is_not_locked_out_by_a_stranger(api, signup, limits):
    signup("alice")
    assert _login(api, password=PASSWORD, REMOTE_ADDR="198.51.100.77").status_code == 201
    for i in range(3):  # a stranger locks the username
        assert _login(api, REMOTE_ADDR=f"203.0.113.{i}").status_code == 401
    _assert_throttled(_login(api, password=PASSWORD, REMOTE_ADDR="203.0.113.50"))
    # The holder, from where they logged in before, still gets in.
    assert _login(api, password=PASSWORD, REMOTE_ADDR="198.51.100.77").status_code == 201
    # Its failures count against the address's own limit.
    for _ in range(5):
        assert _login(api, REMOTE_ADDR="198.51.100.77").status_code == 401
    _assert_throttled(_login(api, password=PASSWORD, REMOTE_ADDR="198.51.100.77"))


def test_the_sign_up_address_counts_as_known(api, limits):
    resp = api.post(
        "/api/v1/accounts", {"username": "alice", "password": PASSWORD}, format="json", REMOTE_ADDR="198.51.100.5"
    )
    assert resp.status_code == 201
    for i in range(3):
        _login(api, REMOTE_ADDR=f"203.0.113.{i}")
    _assert_throttled(_login(api, password=PASSWORD, REMOTE_ADDR="203.0.113.60"))
    assert _login(api, password=PASSWORD, REMOTE_ADDR="198.51.100.5").status_code == 201


def test_sign_up_is_throttled_per_address(api, limits):
    limits.SIGNUP_PER_ADDRESS = 3
    limits.SIGNUP_WINDOW_SECONDS = 3600
    for i in range(3):
        body = {"username": f"user{i}", "password": PASSWORD}
        assert api.post("/api/v1/accounts", body, format="json", REMOTE_ADDR="203.0.113.9").status_code == 201
    resp = api.post(
        "/api/v1/accounts", {"username": "user9", "password": PASSWORD}, format="json", REMOTE_ADDR="203.0.113.9"
    )
    _assert_throttled(resp, window=3600)
    assert not Account.objects.filter(username="user9").exists()
    other = api.post(
        "/api/v1/accounts", {"username": "user9", "password": PASSWORD}, format="json", REMOTE_ADDR="203.0.113.10"
    )
    assert other.status_code == 201


@pytest.mark.django_db(transaction=True)
def test_concurrent_wrong_passwords_get_no_more_answers_than_the_limit(limits, django_user_model):
    """40 wrong passwords at once for one user, limit 5: exactly 5 are checked
    (401), the rest refused (429). Counting after the check let 12 through."""
    limits.AUTH_FAILURES_PER_USERNAME = 5
    limits.AUTH_FAILURES_PER_ADDRESS = 1000
    django_user_model.objects.create_user("alice", PASSWORD)
    start = threading.Barrier(40)
    statuses: list[int] = []
    lock = threading.Lock()

    def guess(i: int) -> None:
        try:
            client = APIClient()
            start.wait()
            resp = _login(client, password=f"wrong-guess-{i:04d}", REMOTE_ADDR=f"198.51.{i // 200}.{i % 200 + 1}")
            with lock:
                statuses.append(resp.status_code)
        finally:
            connection.close()

    threads = [threading.Thread(target=guess, args=(i,)) for i in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert sorted(set(statuses)) == [401, 429]
    assert statuses.count(401) == 5
    assert statuses.count(429) == 35


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
    assert _login(api, password=PASSWORD, REMOTE_ADDR="198.51.100.10").status_code == 201
    for i in range(2):
        assert _login(api, REMOTE_ADDR=f"198.51.100.{20 + i}").status_code == 401
    assert _login(api, password=PASSWORD, REMOTE_ADDR="198.51.100.30").status_code == 201


def test_the_window_closes(api, signup, limits):
    limits.AUTH_FAILURE_WINDOW_SECONDS = 1
    signup("alice")
    with time_machine.travel(T0, tick=False) as clock:
        for i in range(3):
            _login(api, REMOTE_ADDR=f"198.51.100.{i}")
        _assert_throttled(_login(api, password=PASSWORD, REMOTE_ADDR="198.51.100.9"), window=1)
        clock.shift(timedelta(seconds=1.3))
        assert _login(api, password=PASSWORD, REMOTE_ADDR="198.51.100.9").status_code == 201


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
        assert _login(api, password=PASSWORD, REMOTE_ADDR="198.51.100.9").status_code == 201


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


@pytest.fixture
def proofs(limits):
    limits.PASSWORD_PROOFS_PER_USERNAME = 3
    limits.PASSWORD_PROOFS_PER_ADDRESS = 4
    limits.PASSWORD_PROOF_WINDOW_SECONDS = 600
    return limits


def test_right_passwords_are_limited_per_username_before_they_are_hashed(api, signup, proofs, monkeypatch):
    """Each right password costs an Argon2 hash: from an address the holder has
    proved itself from, past the proofs per username, 429 before hashing,
    whatever the route (a login, the password asked again). A stranger's wrong
    guesses do not use them up, and a stranger is never answered by that count
    (it would tell them the account exists)."""
    proofs.PASSWORD_PROOFS_PER_ADDRESS = 100
    token = signup("alice")["token"]
    holder = APIClient()
    holder.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    home = "192.0.2.1"
    for i in range(2):  # wrong guesses from strangers: failures, given back as proofs
        assert _login(api, REMOTE_ADDR=f"198.51.100.{i}").status_code == 401
    assert _login(api, password=PASSWORD, REMOTE_ADDR=home).status_code == 201  # home is known from now on
    confirm = {"password": PASSWORD}
    assert holder.post("/api/v1/account/recovery-codes", confirm, format="json", REMOTE_ADDR=home).status_code == 200
    assert _login(api, password=PASSWORD, REMOTE_ADDR=home).status_code == 201
    assert _login(api, password=PASSWORD, REMOTE_ADDR=home).status_code == 201
    hashed = []
    real = Argon2PasswordHasher.verify

    def counted(self, password, encoded):
        hashed.append(1)
        return real(self, password, encoded)

    monkeypatch.setattr(Argon2PasswordHasher, "verify", counted)
    retry = _assert_throttled(_login(api, password=PASSWORD, REMOTE_ADDR=home))
    refused = holder.post("/api/v1/account/recovery-codes", confirm, format="json", REMOTE_ADDR=home)
    _assert_throttled(refused)
    assert not hashed  # refused before the hash
    assert "password checks" in refused.json()["error"]["message"]
    # A stranger guessing from a new address gets the answer any username gets.
    assert _login(api, REMOTE_ADDR="203.0.113.9").status_code == 401
    assert _login(api, username="nobody", REMOTE_ADDR="203.0.113.10").status_code == 401
    # Another account is not held up; the window's end lets the holder in again.
    signup("bob")
    assert _login(api, username="bob", password=PASSWORD, REMOTE_ADDR=home).status_code == 201
    with time_machine.travel(datetime.now(UTC) + timedelta(seconds=retry + 1)):
        assert _login(api, password=PASSWORD, REMOTE_ADDR=home).status_code == 201


def test_right_passwords_are_limited_per_address(api, signup, proofs):
    """Many accounts of one client (IPv6: its /64) share the address's proofs."""
    for name in ("alice", "bob", "carol"):
        signup(name)
    answers = [
        _login(api, username=name, password=PASSWORD, REMOTE_ADDR=f"2001:db8:7:7::{i + 1}").status_code
        for i, name in enumerate(("alice", "bob", "carol", "alice"))
    ]
    assert answers == [201, 201, 201, 201]
    _assert_throttled(_login(api, username="bob", password=PASSWORD, REMOTE_ADDR="2001:db8:7:7::99"))
    assert _login(api, username="bob", password=PASSWORD, REMOTE_ADDR="2001:db8:7:8::1").status_code == 201


def test_no_proof_limit_when_it_is_zero(api, signup, proofs):
    proofs.PASSWORD_PROOFS_PER_USERNAME = 0
    proofs.PASSWORD_PROOFS_PER_ADDRESS = 0
    signup("alice")
    assert [_login(api, password=PASSWORD).status_code for _ in range(6)] == [201] * 6
