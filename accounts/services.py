"""Writes for accounts. Views, serializers and admin call these functions;
each top-level write runs in one transaction with its audit row.

Sections: usernames and passwords; API tokens; recovery codes; accounts;
SSH keys.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import timedelta
from functools import lru_cache

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from django.conf import settings
from django.contrib.auth.hashers import check_password, make_password
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, models, transaction
from django.db.models import ProtectedError, Q, RestrictedError
from django.urls import reverse
from django.utils import timezone

from accounts.models import SSH_RSA_MIN_BITS, Account, ApiToken, RecoveryCode, SshKey, SshKeyType
from accounts.signals import account_closing, account_deactivated
from accounts.throttling import (
    address_remember,
    auth_attempt_begin,
    auth_attempt_succeeded,
    auth_username_attempt_begin,
    auth_username_attempt_give_back,
    auth_username_failure,
    signup_attempt_count,
)
from core.audit import AuditAction, audit_record
from core.db import from_row, locked_or_404, select_columns
from core.errors import Conflict, DomainError
from core.permissions import TokenScope

# =============================================================================
# Usernames and passwords
# =============================================================================

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


def _invalid_credentials(message: str = "Unknown username or wrong password.") -> DomainError:
    return DomainError("invalid_credentials", message, status=401)


def _password_confirm(*, account: Account, password: str, client_address: str) -> None:
    """A signed-in account proves its password again before a sensitive change.
    Wrong guesses count against the same throttle as logins."""
    counted = auth_attempt_begin(username=account.username, address=client_address)
    if not account.check_password(password):
        raise DomainError("wrong_password", "The password is wrong.", status=403)
    auth_attempt_succeeded(username=account.username, address=client_address, counted=counted)


# =============================================================================
# API tokens
# =============================================================================

TOKEN_PREFIX = "grh_"
TOKEN_SECRET_BYTES = 32  # 256 bits
TOKEN_LENGTH = len(TOKEN_PREFIX) + 43  # token_urlsafe(32) is 43 characters
TOKEN_VISIBLE_CHARS = 12  # "grh_" and the first 8 characters of the secret
TOKEN_LAST_USED_RESOLUTION = timedelta(minutes=1)
_TOKEN_CHARS = re.compile(r"^[A-Za-z0-9_-]+$")


@dataclass(frozen=True)
class IssuedToken:
    """A token as issued: `raw` is the bearer secret, shown this once."""

    token: ApiToken
    raw: str


def _account_lock(*, account: Account) -> None:
    """Lock the account's row until the transaction ends: what is counted
    against a per-account limit is then counted by one writer at a time."""
    list(Account.objects.select_for_update().filter(pk=account.pk).values_list("pk", flat=True))


def _sha256_hex(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def _token_issue(*, account: Account, name: str, scope: str = TokenScope.FULL) -> IssuedToken:
    """Make a token; inside the caller's transaction. The account's row is
    locked while its live tokens are counted, so concurrent logins cannot pass
    API_TOKENS_MAX_PER_ACCOUNT between them."""
    scope = TokenScope(scope)
    if scope == TokenScope.OPS and not account.is_staff:
        raise DomainError(
            "scope_not_allowed", "Only staff accounts get tokens of scope `ops`.", status=403, details={"scope": scope}
        )
    _account_lock(account=account)
    limit = settings.API_TOKENS_MAX_PER_ACCOUNT
    if ApiToken.objects.filter(account=account, revoked_at__isnull=True).count() >= limit:
        raise Conflict(
            "token_limit_reached",
            f"An account holds at most {limit} live API tokens: revoke one you no longer use "
            "(DELETE /api/v1/auth/tokens/{id}) first.",
            details={"limit": limit},
        )
    raw = TOKEN_PREFIX + secrets.token_urlsafe(TOKEN_SECRET_BYTES)
    token = ApiToken.objects.create(
        account=account, name=name[:64], prefix=raw[:TOKEN_VISIBLE_CHARS], digest=_sha256_hex(raw), scope=scope
    )
    audit_record(
        actor=account,
        action=AuditAction.TOKEN_CREATE,
        obj=token,
        changes={"name": token.name, "prefix": token.prefix, "scope": token.scope},
    )
    return IssuedToken(token=token, raw=raw)


def _tokens_revoke(*, account: Account, keep: ApiToken | None = None) -> int:
    active = ApiToken.objects.filter(account=account, revoked_at__isnull=True)
    if keep is not None:
        active = active.exclude(pk=keep.pk)
    return active.update(revoked_at=timezone.now())


def token_create(*, account: Account, name: str = "", scope: str = TokenScope.FULL) -> IssuedToken:
    """A new token for an account already known to be its holder's (no
    password or second factor asked here: the caller vouches)."""
    with transaction.atomic():
        return _token_issue(account=account, name=name, scope=scope)


def token_obtain(
    *,
    username: str,
    password: str,
    name: str = "",
    client_address: str,
    otp_token: str = "",
    scope: str | None = None,
) -> IssuedToken:
    """Log in with username and password: a new token of `scope` (`full`
    unless asked; `ops` only for staff, `403 scope_not_allowed` otherwise), or
    `invalid_credentials` (401) / `throttled` (429). A staff account's token
    also needs the second factor, whatever ADMIN_OTP_REQUIRED says (the token
    would skip the admin's): `otp_not_enrolled` (403) without a confirmed
    authenticator, `otp_required` / `otp_invalid` (401, counted as failed
    logins) without its current code or with a wrong one. Past
    API_TOKENS_MAX_PER_ACCOUNT live tokens: `409 token_limit_reached`."""
    username = _login_username(username)
    counted = auth_attempt_begin(username=username, address=client_address)
    account = Account.objects.filter(username=username).first()
    if not _password_matches(account=account, password=password):
        raise _invalid_credentials()
    if account.is_staff:
        _staff_token_second_factor(account=account, otp_token=otp_token)
    auth_attempt_succeeded(username=username, address=client_address, counted=counted)
    with transaction.atomic():
        account.last_login = timezone.now()
        account.save(update_fields=["last_login"])
        return _token_issue(account=account, name=name or "login", scope=scope or TokenScope.FULL)


def _staff_token_second_factor(*, account: Account, otp_token: str) -> None:
    """A staff account's token is issued only against a current code of its
    confirmed authenticator. Verified outside any transaction of the caller's:
    the device records a wrong code (its own throttle), which must stay."""
    from django_otp import verify_token

    device = staff_otp_device(account=account)
    if device is None:
        setup = reverse("admin:two_factor")
        raise DomainError(
            "otp_not_enrolled",
            f"A staff account gets API tokens only with two-factor authentication: set it up in the admin "
            f"({setup}), then send the authenticator's code as `otp`.",
            status=403,
            details={"setup_url": setup},
        )
    token = "".join((otp_token or "").split())
    if not token:
        raise DomainError(
            "otp_required", "Send `otp`: the 6-digit code your authenticator app shows for this account.", status=401
        )
    if verify_token(account, device.persistent_id, token) is None:
        raise DomainError("otp_invalid", "The authentication code is wrong or has expired.", status=401)


def _token_with_account(*, digest: str) -> ApiToken | None:
    """The unrevoked token of this digest with its account, in one written-out
    read: every authenticated request makes it, and the ORM spent three times
    as long building it as the database answering."""
    quote = connection.ops.quote_name
    tokens, accounts = quote(ApiToken._meta.db_table), quote(Account._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {select_columns(ApiToken, 't')}, {select_columns(Account, 'a')} FROM {tokens} t "
            f"JOIN {accounts} a ON a.id = t.account_id WHERE t.digest = %s AND t.revoked_at IS NULL",
            [digest],
        )
        row = cursor.fetchone()
    if row is None:
        return None
    split = len(ApiToken._meta.concrete_fields)
    token = from_row(ApiToken, row[:split])
    token.account = from_row(Account, row[split:])
    return token


def token_authenticate(*, raw: str) -> tuple[Account, ApiToken] | None:
    """The (account, token) a bearer secret belongs to, or None when it is
    unknown, revoked or its account is inactive. Records the token's last use,
    writing at most once per TOKEN_LAST_USED_RESOLUTION."""
    if len(raw) != TOKEN_LENGTH or not raw.startswith(TOKEN_PREFIX) or not _TOKEN_CHARS.match(raw):
        return None
    token = _token_with_account(digest=_sha256_hex(raw))
    if token is None or not token.account.is_active:
        return None
    now = timezone.now()
    stale = now - TOKEN_LAST_USED_RESOLUTION
    if token.last_used_at is None or token.last_used_at <= stale:
        # Conditional, so concurrent requests write once between them.
        ApiToken.objects.filter(pk=token.pk).filter(Q(last_used_at__isnull=True) | Q(last_used_at__lte=stale)).update(
            last_used_at=now
        )
        token.last_used_at = now
    return token.account, token


def token_revoke(*, account: Account, token_id: int) -> None:
    """Revoke one of the account's active tokens (404 when there is none)."""
    with transaction.atomic():
        token = locked_or_404(
            ApiToken.objects.filter(account=account, revoked_at__isnull=True),
            pk=token_id,
            message="No such token.",
            code="token_not_found",
        )
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
        audit_record(actor=account, action=AuditAction.TOKEN_REVOKE, obj=token)


# =============================================================================
# Recovery codes
# =============================================================================

RECOVERY_CODE_COUNT = 10
RECOVERY_CODE_GROUPS = 4
RECOVERY_CODE_GROUP_LENGTH = 4
# Crockford's base32: no i, l, o, u. 16 characters carry 80 bits.
_RECOVERY_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"
_RECOVERY_TYPOS = str.maketrans({"i": "1", "l": "1", "o": "0"})


def _recovery_code_generate() -> str:
    groups = (
        "".join(secrets.choice(_RECOVERY_ALPHABET) for _ in range(RECOVERY_CODE_GROUP_LENGTH))
        for _ in range(RECOVERY_CODE_GROUPS)
    )
    return "-".join(groups)


def _recovery_code_digest(code: str) -> str:
    """Digest of the normalised code: case, spaces, hyphens and the letters
    Crockford's base32 reads as digits do not matter."""
    normal = re.sub(r"[\s-]", "", code.lower()).translate(_RECOVERY_TYPOS)
    return _sha256_hex(normal)


def _recovery_codes_replace(*, account: Account) -> list[str]:
    RecoveryCode.objects.filter(account=account).delete()
    codes: list[str] = []
    while len(codes) < RECOVERY_CODE_COUNT:
        code = _recovery_code_generate()
        if code not in codes:
            codes.append(code)
    RecoveryCode.objects.bulk_create(RecoveryCode(account=account, digest=_recovery_code_digest(c)) for c in codes)
    return codes


def recovery_codes_regenerate(*, account: Account, password: str, client_address: str) -> list[str]:
    """Ten new recovery codes; every earlier one stops working."""
    _password_confirm(account=account, password=password, client_address=client_address)
    with transaction.atomic():
        codes = _recovery_codes_replace(account=account)
        audit_record(actor=account, action=AuditAction.ACCOUNT_RECOVERY_CODES_REGENERATE, obj=account)
    return codes


@dataclass(frozen=True)
class Recovered:
    account: Account
    token: IssuedToken
    revoked_tokens: int


def account_recover(
    *, username: str, recovery_code: str, new_password: str, client_address: str, otp_token: str = ""
) -> Recovered:
    """Set a new password with a one-time recovery code. Burns the code,
    revokes every token and issues a fresh one. A valid code goes through the
    per-username lock-out (so guessing a password cannot lock the holder out
    of recovery); the per-address limit holds, and a wrong code counts as a
    failure of the username and is refused with 429 once it is locked.
    A staff account's recovery mints a token too, so it needs the second
    factor as a login does (`otp_not_enrolled`, `otp_required`, `otp_invalid`;
    the last two count as failures); nothing changes until it is proved."""
    username = _login_username(username)
    counted = auth_attempt_begin(username=username, address=client_address, per_username=False)
    # Checked first: a refused password must not cost the caller a code.
    _password_validate(password=new_password, account=Account(username=username))
    holder = Account.objects.filter(username=username, is_active=True).first()
    second_factor_proved = False
    if holder is not None and holder.is_staff:
        # Asked only once the recovery code is known good (so a wrong one says
        # nothing about the account), before the transaction below (the device
        # keeps its record of a wrong code), and under the username's lock-out,
        # which a valid recovery code otherwise passes.
        digest = _recovery_code_digest(recovery_code)
        if RecoveryCode.objects.filter(account=holder, digest=digest, used_at__isnull=True).exists():
            counted_user = auth_username_attempt_begin(username=username)
            try:
                _staff_token_second_factor(account=holder, otp_token=otp_token)
            except DomainError as exc:
                if exc.code == "otp_not_enrolled":  # nothing was guessed
                    auth_username_attempt_give_back(key=counted_user)
                raise
            second_factor_proved = True
    with transaction.atomic():
        account = Account.objects.select_for_update().filter(username=username, is_active=True).first()
        code = None
        if account is not None:
            code = (
                RecoveryCode.objects.select_for_update()
                .filter(account=account, digest=_recovery_code_digest(recovery_code), used_at__isnull=True)
                .first()
            )
        if code is None:
            # The address was counted up front; the username is counted now, and
            # a locked one answers as a locked login would.
            auth_username_failure(username=username)
            raise _invalid_credentials("Unknown username or invalid recovery code.")
        if account.is_staff and not second_factor_proved:  # made staff a moment ago
            raise DomainError("otp_required", "Send `otp`: the authenticator's current code.", status=401)
        code.used_at = timezone.now()
        code.save(update_fields=["used_at"])
        account.set_password(new_password)
        account.save(update_fields=["password"])
        revoked = _tokens_revoke(account=account)
        audit_record(
            actor=account, action=AuditAction.ACCOUNT_RECOVER, obj=account, changes={"revoked_tokens": revoked}
        )
        issued = _token_issue(account=account, name="recovery")
    auth_attempt_succeeded(username=username, address=client_address, counted=counted)
    return Recovered(account=account, token=issued, revoked_tokens=revoked)


# =============================================================================
# Accounts
# =============================================================================


@dataclass(frozen=True)
class AccountCreated:
    account: Account
    token: IssuedToken
    recovery_codes: list[str]


def _account_insert(*, username: str, password: str, is_staff: bool = False) -> Account:
    if Account.objects.filter(username__iexact=username).exists():
        raise Conflict("username_taken", "This username is taken.")
    account = Account(username=username, is_staff=is_staff)
    account.set_password(password)
    try:
        with transaction.atomic():
            account.save(force_insert=True)
    except IntegrityError as exc:  # a concurrent signup took it first
        raise Conflict("username_taken", "This username is taken.") from exc
    return account


def account_create(*, username: str, password: str, client_address: str | None = None) -> AccountCreated:
    """Sign up: an account, its first token and its ten recovery codes. With
    `client_address` (the API), sign-ups are limited per address (`throttled`,
    429) and the address counts as one the holder has used."""
    if client_address is not None:
        signup_attempt_count(address=client_address)
    username = username_normalize(username=username)
    _password_validate(password=password, account=Account(username=username))
    with transaction.atomic():
        account = _account_insert(username=username, password=password)
        audit_record(actor=account, action=AuditAction.ACCOUNT_CREATE, obj=account)
        issued = _token_issue(account=account, name="signup")
        codes = _recovery_codes_replace(account=account)
    if client_address is not None:
        address_remember(username=username, address=client_address)
    return AccountCreated(account=account, token=issued, recovery_codes=codes)


def staff_account_create(*, username: str, password: str, actor: Account) -> Account:
    """A staff account made by a staff member (admin). Reserved names allowed."""
    username = username_normalize(username=username, allow_reserved=True)
    _password_validate(password=password, account=Account(username=username))
    with transaction.atomic():
        account = _account_insert(username=username, password=password, is_staff=True)
        audit_record(actor=actor, action=AuditAction.ACCOUNT_CREATE_STAFF, obj=account)
    return account


def account_password_change(
    *, account: Account, password: str, new_password: str, keep_token: ApiToken | None, client_address: str
) -> int:
    """Change the password; every token but `keep_token` (the caller's) is
    revoked. Returns how many were."""
    _password_confirm(account=account, password=password, client_address=client_address)
    _password_validate(password=new_password, account=account)
    with transaction.atomic():
        account.set_password(new_password)
        account.save(update_fields=["password"])
        revoked = _tokens_revoke(account=account, keep=keep_token)
        audit_record(
            actor=account, action=AuditAction.ACCOUNT_PASSWORD_CHANGE, obj=account, changes={"revoked_tokens": revoked}
        )
    return revoked


def account_password_reset_by_staff(*, account: Account, actor: Account) -> int:
    """After staff set an account's password in admin: its tokens die too."""
    with transaction.atomic():
        revoked = _tokens_revoke(account=account)
        audit_record(
            actor=actor, action=AuditAction.ACCOUNT_PASSWORD_RESET, obj=account, changes={"revoked_tokens": revoked}
        )
    return revoked


def account_deactivate(*, account: Account, actor: Account, reason: str = "") -> int:
    """Staff switch an account off: it can no longer log in and its tokens are
    revoked. Its records stay. Returns the number of tokens revoked."""
    with transaction.atomic():
        Account.objects.filter(pk=account.pk).update(is_active=False)
        account.is_active = False
        revoked = _tokens_revoke(account=account)
        account_deactivated.send(sender=Account, account=account, actor=actor)
        audit_record(
            actor=actor,
            action=AuditAction.ACCOUNT_DEACTIVATE,
            obj=account,
            changes={"is_active": [True, False], "revoked_tokens": revoked},
            reason=reason,
        )
    return revoked


def _account_is_referenced(*, account: Account) -> bool:
    """Whether any row outside this app points at the account (orders,
    invoices, ledger entries, admin history, ...). The account's own tokens,
    recovery codes and SSH keys go with it; references that survive the
    account's deletion by design (SET_NULL, as in the audit trail) do not
    count. Other apps have settled their rows before this is asked
    (`account_closing`): what is left must outlive the account."""
    for rel in Account._meta.related_objects:
        model = rel.related_model
        if model._meta.app_label == Account._meta.app_label or model._meta.auto_created:
            continue
        if not rel.many_to_many and rel.on_delete is models.SET_NULL:
            continue
        if model._base_manager.filter(**{rel.field.name: account}).exists():
            return True
    return False


ACCOUNT_DELETED = "deleted"
ACCOUNT_DEACTIVATED = "deactivated"


def account_delete(*, account: Account, password: str, client_address: str) -> str:
    """Close an account at its holder's request.

    Its tokens, recovery codes and SSH keys go and it can no longer log in.
    Every other app settles its own rows first (`account_closing`: webhook
    endpoints go, for one). If nothing references the account then, the row
    is deleted and the username is free again (ACCOUNT_DELETED). Otherwise the
    row stays, deactivated with an unusable password, so the orders, invoices
    and payments that name it keep their owner, and the username stays taken
    (ACCOUNT_DEACTIVATED)."""
    _password_confirm(account=account, password=password, client_address=client_address)
    with transaction.atomic():
        account = Account.objects.select_for_update().get(pk=account.pk)
        account_closing.send(sender=Account, account=account)
        if not _account_is_referenced(account=account):
            try:
                with transaction.atomic():
                    audit_record(
                        actor=account,
                        action=AuditAction.ACCOUNT_DELETE,
                        obj=account,
                        changes={"outcome": ACCOUNT_DELETED},
                    )
                    account.delete()
                return ACCOUNT_DELETED
            except (ProtectedError, RestrictedError, IntegrityError):
                pass  # referenced after all: keep the row
        revoked = _tokens_revoke(account=account)
        RecoveryCode.objects.filter(account=account).delete()
        SshKey.objects.filter(account=account).delete()
        account.is_active = False
        account.set_unusable_password()
        account.save(update_fields=["is_active", "password"])
        audit_record(
            actor=account,
            action=AuditAction.ACCOUNT_DELETE,
            obj=account,
            changes={"outcome": ACCOUNT_DEACTIVATED, "revoked_tokens": revoked},
        )
    return ACCOUNT_DEACTIVATED


# =============================================================================
# SSH keys
# =============================================================================

SSH_KEY_MAX_LENGTH = 16_384
SSH_KEY_COMMENT_MAX_LENGTH = 255
SSH_RSA_MAX_BITS = 16_384  # OpenSSH's own ceiling
_SSH_CONTROL_CHARS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


@dataclass(frozen=True)
class ParsedSshKey:
    key_type: str
    bits: int
    fingerprint: str
    public_key: str  # canonical "<type> <base64>[ <comment>]"
    comment: str


def _invalid_ssh_key(message: str, **details) -> DomainError:
    return DomainError("invalid_ssh_key", message, details=details)


def ssh_key_fingerprint(*, blob: bytes) -> str:
    """OpenSSH's SHA256 fingerprint of a public key blob."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def ssh_key_parse(*, public_key: str) -> ParsedSshKey:
    """Parse and check one OpenSSH public key line ("<type> <base64> [comment]")."""
    text = public_key.strip()
    if not text:
        raise _invalid_ssh_key("The public key is empty.")
    if len(text) > SSH_KEY_MAX_LENGTH:
        raise _invalid_ssh_key("The public key is too long.", max_length=SSH_KEY_MAX_LENGTH)
    if "\n" in text or "\r" in text:
        raise _invalid_ssh_key("Send one key, on one line.")
    if _SSH_CONTROL_CHARS.search(text):
        raise _invalid_ssh_key("The public key contains control characters.")
    parts = text.split(None, 2)
    accepted = list(SshKeyType.values)
    if parts[0] not in accepted:
        raise _invalid_ssh_key(
            "Unsupported key type; expected '<type> <base64> [comment]' with one of the accepted types.",
            accepted_types=accepted,
        )
    if len(parts) < 2:
        raise _invalid_ssh_key("The key data is missing; expected '<type> <base64> [comment]'.")
    key_type, encoded = parts[0], parts[1]
    comment = parts[2].strip() if len(parts) == 3 else ""
    if len(comment) > SSH_KEY_COMMENT_MAX_LENGTH:
        raise _invalid_ssh_key("The key comment is too long.", max_length=SSH_KEY_COMMENT_MAX_LENGTH)
    try:
        base64.b64decode(encoded, validate=True)
        key = serialization.load_ssh_public_key(f"{key_type} {encoded}".encode())
    except (binascii.Error, ValueError, UnsupportedAlgorithm) as exc:
        raise _invalid_ssh_key("The key data is not a valid key of the stated type.") from exc

    if isinstance(key, ed25519.Ed25519PublicKey):
        bits = 256
    elif isinstance(key, ec.EllipticCurvePublicKey):
        bits = key.curve.key_size
    elif isinstance(key, rsa.RSAPublicKey):
        bits = key.key_size
        if bits < SSH_RSA_MIN_BITS:
            raise _invalid_ssh_key(
                f"RSA keys need at least {SSH_RSA_MIN_BITS} bits; this one has {bits}.",
                bits=bits,
                min_bits=SSH_RSA_MIN_BITS,
            )
        if bits > SSH_RSA_MAX_BITS:
            raise _invalid_ssh_key(
                f"RSA keys may have at most {SSH_RSA_MAX_BITS} bits.", bits=bits, max_bits=SSH_RSA_MAX_BITS
            )
    else:  # pragma: no cover - the type check above admits nothing else
        raise _invalid_ssh_key("Unsupported key type.", accepted_types=accepted)

    # Re-encoded, so one key has one blob (and one fingerprint) however it was written.
    canonical = key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    canonical_type, canonical_b64 = canonical.split(" ", 1)
    if canonical_type != key_type:
        raise _invalid_ssh_key("The key data does not match the stated type.")
    return ParsedSshKey(
        key_type=key_type,
        bits=bits,
        fingerprint=ssh_key_fingerprint(blob=base64.b64decode(canonical_b64)),
        public_key=f"{canonical} {comment}" if comment else canonical,
        comment=comment,
    )


def ssh_key_add(*, account: Account, public_key: str, name: str = "") -> SshKey:
    """Store a public key for the account (409 `duplicate_ssh_key` when it has
    it, `ssh_key_limit_reached` when it holds SSH_KEYS_MAX_PER_ACCOUNT)."""
    parsed = ssh_key_parse(public_key=public_key)
    name = (name.strip() or parsed.comment or f"{parsed.key_type} key")[:100]
    with transaction.atomic():
        _account_lock(account=account)
        existing = SshKey.objects.filter(account=account, fingerprint=parsed.fingerprint).first()
        if existing is not None:
            raise Conflict("duplicate_ssh_key", "This key is already on the account.", details={"id": existing.pk})
        limit = settings.SSH_KEYS_MAX_PER_ACCOUNT
        if SshKey.objects.filter(account=account).count() >= limit:
            raise Conflict(
                "ssh_key_limit_reached",
                f"An account holds at most {limit} SSH keys: delete one you no longer use first.",
                details={"limit": limit},
            )
        try:
            with transaction.atomic():
                key = SshKey.objects.create(
                    account=account,
                    name=name,
                    key_type=parsed.key_type,
                    bits=parsed.bits,
                    fingerprint=parsed.fingerprint,
                    public_key=parsed.public_key,
                    comment=parsed.comment,
                )
        except IntegrityError as exc:  # added concurrently
            raise Conflict("duplicate_ssh_key", "This key is already on the account.") from exc
        audit_record(
            actor=account,
            action=AuditAction.SSH_KEY_ADD,
            obj=key,
            changes={"fingerprint": key.fingerprint, "type": key.key_type},
        )
    return key


def ssh_key_delete(*, account: Account, ssh_key_id: int) -> None:
    with transaction.atomic():
        key = locked_or_404(
            SshKey.objects.filter(account=account), pk=ssh_key_id, message="No such SSH key.", code="ssh_key_not_found"
        )
        audit_record(
            actor=account, action=AuditAction.SSH_KEY_DELETE, obj=key, changes={"fingerprint": key.fingerprint}
        )
        key.delete()


# =============================================================================
# Staff sign-in and two-factor authentication (the admin)
# =============================================================================
# Staff log into the admin with their password and, once enrolled, a TOTP code
# from an authenticator app (django-otp's TOTP devices). Failures count against
# the same throttle as API logins (per username and per address), so a guesser
# gains nothing by switching doors. ADMIN_OTP_REQUIRED says who must enrol:
# "superusers" (production default), "staff", or "off".

OTP_REQUIRED_CHOICES = ("off", "superusers", "staff")


def staff_otp_required(*, account: Account) -> bool:
    """Whether the policy (ADMIN_OTP_REQUIRED) makes this staff account use a second factor."""
    policy = settings.ADMIN_OTP_REQUIRED
    return policy == "staff" or (policy == "superusers" and account.is_superuser)


def staff_otp_device(*, account: Account):
    """The account's confirmed authenticator (a TOTPDevice), or None."""
    from django_otp.plugins.otp_totp.models import TOTPDevice

    return TOTPDevice.objects.filter(user=account, confirmed=True).order_by("id").first()


@dataclass(frozen=True)
class StaffLogin:
    """A staff member who proved who they are. `device` is the authenticator
    whose code was checked (None when not enrolled); `must_enrol` says the
    policy wants one and there is none yet: such a session may only enrol."""

    account: Account
    device: object | None
    must_enrol: bool


def staff_login(*, username: str, password: str, otp_token: str, client_address: str) -> StaffLogin:
    """Check an admin login: the password of an active staff account, then the
    authenticator's code when the account has one. `throttled` (429) once the
    username or the address has used up its failures; `invalid_credentials`,
    `otp_required` or `otp_invalid` (401) otherwise, each counted as a failure
    (so a missing code reveals nothing a guesser can use for free)."""
    from django_otp import verify_token

    username = _login_username(username)
    counted = auth_attempt_begin(username=username, address=client_address)
    account = Account.objects.filter(username=username).first()
    if not _password_matches(account=account, password=password) or not account.is_staff:
        raise _invalid_credentials("Enter the username and password of a staff account.")
    device = staff_otp_device(account=account)
    if device is not None:
        token = "".join((otp_token or "").split())
        if not token:
            raise DomainError(
                "otp_required", "Enter the 6-digit code your authenticator app shows for this account.", status=401
            )
        if verify_token(account, device.persistent_id, token) is None:
            raise DomainError("otp_invalid", "The authentication code is wrong or has expired.", status=401)
    auth_attempt_succeeded(username=username, address=client_address, counted=counted)
    with transaction.atomic():
        account.last_login = timezone.now()
        account.save(update_fields=["last_login"])
        audit_record(
            actor=account,
            action=AuditAction.ACCOUNT_ADMIN_LOGIN,
            obj=account,
            changes={"second_factor": device is not None, "address": client_address},
        )
    return StaffLogin(account=account, device=device, must_enrol=device is None and staff_otp_required(account=account))


def staff_otp_enrolment_start(*, account: Account):
    """The authenticator being set up for a staff account: an unconfirmed
    TOTPDevice with a fresh secret, the same one on every call until it is
    confirmed (so reloading the page keeps the QR code the app scanned)."""
    from django_otp.plugins.otp_totp.models import TOTPDevice

    if staff_otp_device(account=account) is not None:
        raise Conflict("otp_enrolled", "Two-factor authentication is already on for this account.")
    with transaction.atomic():
        pending = TOTPDevice.objects.filter(user=account, confirmed=False).order_by("-id").first()
        if pending is None:
            pending = TOTPDevice.objects.create(user=account, name="Authenticator app", confirmed=False)
    return pending


def staff_otp_confirm(*, account: Account, otp_token: str):
    """Turn two-factor on: the code from the app proves it holds the secret
    shown at enrolment. Returns the confirmed device (the session that
    confirmed it counts as verified)."""
    from django_otp.plugins.otp_totp.models import TOTPDevice

    token = "".join((otp_token or "").split())
    with transaction.atomic():
        pending = TOTPDevice.objects.select_for_update().filter(user=account, confirmed=False).order_by("-id").first()
        # A wrong code is counted by the device's own throttle (it saves the
        # failure), so it must not be rolled back: decide here, raise after.
        confirmed = pending is not None and bool(token) and pending.verify_token(token)
        if confirmed:
            pending.confirmed = True
            pending.save(update_fields=["confirmed"])
            TOTPDevice.objects.filter(user=account, confirmed=False).delete()
            audit_record(
                actor=account, action=AuditAction.ACCOUNT_OTP_ENABLE, obj=account, changes={"device": pending.name}
            )
    if pending is None:
        raise DomainError("otp_not_started", "Start the set-up again: there is no authenticator waiting.")
    if not confirmed:
        raise DomainError("otp_invalid", "The authentication code is wrong or has expired.")
    return pending


def staff_otp_disable(*, account: Account, otp_token: str) -> None:
    """A staff member turns their own two-factor off, with a current code.
    Refused (`otp_required_by_policy`) when ADMIN_OTP_REQUIRED covers them."""
    from django_otp.plugins.otp_totp.models import TOTPDevice

    if staff_otp_required(account=account):
        raise DomainError(
            "otp_required_by_policy", "Two-factor authentication is required for this account and stays on."
        )
    device = staff_otp_device(account=account)
    if device is None:
        raise DomainError("otp_not_enrolled", "Two-factor authentication is not on for this account.")
    token = "".join((otp_token or "").split())
    with transaction.atomic():
        device = TOTPDevice.objects.select_for_update().get(pk=device.pk)
        verified = bool(token) and device.verify_token(token)  # a failure is saved by the device's throttle
        if verified:
            removed, _ = TOTPDevice.objects.filter(user=account).delete()
            audit_record(
                actor=account, action=AuditAction.ACCOUNT_OTP_DISABLE, obj=account, changes={"devices_removed": removed}
            )
    if not verified:
        raise DomainError("otp_invalid", "The authentication code is wrong or has expired.")


def staff_otp_reset(*, account_id: int, actor: Account, reason: str) -> int:
    """A superuser removes another staff member's authenticator (a lost or
    replaced phone): they log in with their password and enrol again. Returns
    how many devices were removed."""
    from django_otp.plugins.otp_totp.models import TOTPDevice

    if not actor.is_superuser:
        raise DomainError("forbidden", "Only superusers reset two-factor authentication.", status=403)
    if not reason.strip():
        raise DomainError("reason_required", "Say why the authenticator is being reset.")
    with transaction.atomic():
        account = locked_or_404(Account.objects.all(), pk=account_id)
        removed, _ = TOTPDevice.objects.filter(user=account).delete()
        audit_record(
            actor=actor,
            action=AuditAction.ACCOUNT_OTP_RESET,
            obj=account,
            changes={"devices_removed": removed},
            reason=reason,
        )
    return removed
