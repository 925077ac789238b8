"""Passwords: validation, checking without telling which half was wrong, confirming a sensitive change."""

from __future__ import annotations

import secrets
from functools import lru_cache

from django.contrib.auth.hashers import check_password, make_password
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError

from accounts.models import Account
from accounts.throttling import (
    AuthThrottled,
    auth_attempt_begin,
    auth_attempt_succeeded,
    counts_give_back,
    password_proof_begin,
)
from core.errors import DomainError


def _password_validate(*, password: str, account: Account) -> None:
    """Django's password validators (AUTH_PASSWORD_VALIDATORS), as `weak_password`."""
    try:
        validate_password(password, user=account)
    except ValidationError as exc:
        raise DomainError("weak_password", " ".join(exc.messages), details={"messages": list(exc.messages)}) from exc


@lru_cache(maxsize=1)
def _dummy_password_hash() -> str:
    return make_password(secrets.token_urlsafe(32))


def _password_matches(*, account: Account | None, password: str) -> bool:
    """Check a password. Without an account (unknown or inactive username) a
    dummy hash is verified instead, so the answer costs the same time."""
    if account is None or not account.is_active:
        check_password(password, _dummy_password_hash())
        return False
    return account.check_password(password)


def _password_attempt(*, username: str, address: str) -> tuple[list[str], list[str]]:
    """Count a password check before it is hashed: as a possible failure
    (auth_attempt_begin), then as a proof (password_proof_begin); 429 past
    either limit. Returns (failures counted, proofs counted): a right password
    gives the failures back (auth_attempt_succeeded), a wrong one the proofs
    (counts_give_back)."""
    counted = auth_attempt_begin(username=username, address=address)
    try:
        proofs = password_proof_begin(username=username, address=address)
    except AuthThrottled:
        counts_give_back(counted)
        raise
    return counted, proofs


def _invalid_credentials(message: str = "Unknown username or wrong password.") -> DomainError:
    return DomainError("invalid_credentials", message, status=401)


def _password_confirm(*, account: Account, password: str, client_address: str) -> None:
    """A signed-in account proves its password again before a sensitive change.
    Wrong guesses count against the same throttle as logins; right ones against
    the proofs (accounts/throttling.py)."""
    counted, proofs = _password_attempt(username=account.username, address=client_address)
    if not account.check_password(password):
        counts_give_back(proofs)
        raise DomainError("wrong_password", "The password is wrong.", status=403)
    auth_attempt_succeeded(username=account.username, address=client_address, counted=counted)
