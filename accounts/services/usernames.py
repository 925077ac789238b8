"""Usernames: their rules, the reserved ones, and how a login's is read."""

from __future__ import annotations

import re

from core.errors import DomainError

USERNAME_MIN_LENGTH = 3
USERNAME_MAX_LENGTH = 32
_USERNAME_CHARS = re.compile(r"^[a-z0-9_.-]+$")
_USERNAME_SEPARATORS = re.compile(r"[_.-]")

# Names a customer could use to pass for the company, its staff or the system.
# Compared with separators removed, so "ad.min" and "root_" are refused too.
RESERVED_USERNAMES = frozenset(
    [
        "abuse",
        "account",
        "accounts",
        "admin",
        "administrator",
        "administrators",
        "anonymous",
        "api",
        "apis",
        "app",
        "auth",
        "billing",
        "bin",
        "cert",
        "daemon",
        "default",
        "dev",
        "docs",
        "everyone",
        "ftp",
        "gpurenthub",
        "grh",
        "guest",
        "help",
        "helpdesk",
        "hostmaster",
        "info",
        "invoice",
        "invoices",
        "legal",
        "localhost",
        "login",
        "logout",
        "mail",
        "mailerdaemon",
        "me",
        "moderator",
        "noc",
        "nobody",
        "noreply",
        "null",
        "official",
        "operator",
        "operators",
        "ops",
        "owner",
        "password",
        "payment",
        "payments",
        "postmaster",
        "privacy",
        "register",
        "root",
        "sales",
        "security",
        "self",
        "service",
        "settings",
        "signin",
        "signup",
        "ssh",
        "staff",
        "status",
        "sudo",
        "superuser",
        "support",
        "sys",
        "sysadmin",
        "system",
        "team",
        "test",
        "undefined",
        "user",
        "users",
        "webmaster",
        "www",
    ]
)


def username_normalize(*, username: str, allow_reserved: bool = False) -> str:
    """The stored form of a username (lower case), or DomainError
    `invalid_username` with `details.reason` one of length, characters,
    reserved. Staff creating staff accounts may use reserved names."""
    name = username.strip().lower()
    if not USERNAME_MIN_LENGTH <= len(name) <= USERNAME_MAX_LENGTH:
        raise DomainError(
            "invalid_username",
            f"A username has {USERNAME_MIN_LENGTH} to {USERNAME_MAX_LENGTH} characters.",
            details={"reason": "length", "min": USERNAME_MIN_LENGTH, "max": USERNAME_MAX_LENGTH},
        )
    if not _USERNAME_CHARS.match(name):
        raise DomainError(
            "invalid_username",
            "A username may contain only a-z, 0-9, underscore, dot and hyphen.",
            details={"reason": "characters", "allowed": "a-z 0-9 _ . -"},
        )
    if not allow_reserved and (name in RESERVED_USERNAMES or _USERNAME_SEPARATORS.sub("", name) in RESERVED_USERNAMES):
        raise DomainError("invalid_username", "This username is reserved.", details={"reason": "reserved"})
    return name


def _login_username(username: str) -> str:
    """Usernames typed at login: compared in lower case, never validated (a
    malformed name simply matches no account)."""
    return username.strip().lower()
