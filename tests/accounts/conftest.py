"""Accounts test helpers: sign up through the API, authenticated clients, staff
accounts, the login throttle's limits, and SSH keys generated in the test run."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from rest_framework.test import APIClient

from tests.accounts.helpers import PASSWORD


@pytest.fixture(autouse=True)
def _fast_argon2(settings):
    from accounts.services import passwords

    passwords._dummy_password_hash.cache_clear()
    yield
    passwords._dummy_password_hash.cache_clear()


@pytest.fixture
def signup(api):
    """Sign up through the API; returns the 201 body."""

    def _signup(username: str = "alice", password: str = PASSWORD) -> dict:
        resp = api.post("/api/v1/accounts", {"username": username, "password": password}, format="json")
        assert resp.status_code == 201, resp.json()
        return resp.json()

    return _signup


@pytest.fixture
def client_with():
    """A fresh API client that sends `Authorization: Bearer <token>`."""

    def _client(token: str | None = None, **extra) -> APIClient:
        client = APIClient(**extra)
        if token:
            client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
        return client

    return _client


@pytest.fixture
def alice(signup, client_with):
    """Alice signed up; her signup body and a client holding her token."""
    body = signup("alice")
    return body, client_with(body["token"])


@pytest.fixture
def limits(settings):
    """The login throttle's limits, pinned for the tests that count failures."""
    settings.AUTH_FAILURES_PER_USERNAME = 5
    settings.AUTH_FAILURES_PER_ADDRESS = 50
    settings.AUTH_FAILURE_WINDOW_SECONDS = 900
    settings.TRUSTED_PROXY_COUNT = 0
    return settings


@pytest.fixture
def boss(db):
    """A superuser."""
    from accounts.models import Account

    return Account.objects.create_superuser("boss", PASSWORD)


@pytest.fixture
def clerk(db):
    """A staff account with no permissions."""
    from accounts.models import Account

    return Account.objects.create_user("clerk", PASSWORD, is_staff=True)


@pytest.fixture(scope="session")
def ssh_private_keys() -> dict:
    """One private key of every accepted type, plus a 1024-bit RSA key."""
    return {
        "ssh-ed25519": ed25519.Ed25519PrivateKey.generate(),
        "ecdsa-sha2-nistp256": ec.generate_private_key(ec.SECP256R1()),
        "ecdsa-sha2-nistp384": ec.generate_private_key(ec.SECP384R1()),
        "ecdsa-sha2-nistp521": ec.generate_private_key(ec.SECP521R1()),
        "ssh-rsa": rsa.generate_private_key(public_exponent=65537, key_size=2048),
        "rsa-1024": rsa.generate_private_key(public_exponent=65537, key_size=1024),
    }
