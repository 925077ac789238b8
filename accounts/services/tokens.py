"""API tokens: issuing, authenticating, revoking; a staff token's second factor."""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from accounts.models import Account, ApiToken
from accounts.services.passwords import _invalid_credentials, _password_attempt, _password_matches
from accounts.services.usernames import _login_username
from accounts.throttling import auth_attempt_succeeded, counts_give_back
from core.audit import AuditAction, audit_record
from core.db import columns, locked_or_404
from core.errors import Conflict, DomainError
from core.permissions import TokenScope

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
    counted, proofs = _password_attempt(username=username, address=client_address)
    account = Account.objects.filter(username=username).first()
    if not _password_matches(account=account, password=password) or account is None:
        counts_give_back(proofs)
        raise _invalid_credentials()
    if account.is_staff:
        _staff_token_second_factor(account=account, otp_token=otp_token)
    auth_attempt_succeeded(username=username, address=client_address, counted=counted)
    with transaction.atomic():
        account.last_login = timezone.now()
        account.save(update_fields=["last_login"])
        return _token_issue(account=account, name=name or "login", scope=scope or TokenScope.FULL)


def staff_otp_device(*, account: Account):
    """The account's confirmed authenticator (a TOTPDevice), or None."""
    from django_otp.plugins.otp_totp.models import TOTPDevice

    return TOTPDevice.objects.filter(user=account, confirmed=True).order_by("id").first()


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


# The token's columns an authenticated request reads (core.permissions: `scope`; the token
# list and "revoke the others": its id), in the model's field order, which Model.from_db takes
# its values in. The others (`digest`, the dates, so `is_active` too) load on access, one
# query each, as a deferred field does: read them per request and they belong here.
_TOKEN_READ = tuple(
    f.attname for f in ApiToken._meta.concrete_fields if f.attname in {"id", "account_id", "name", "prefix", "scope"}
)


@lru_cache(maxsize=4)
def _token_read_sql(using: str) -> str:
    quote = connections[using].ops.quote_name
    return (
        f"SELECT {columns(Account, 'a', using=using)}, "
        + ", ".join(f"t.{quote(name)} AS {quote('token_' + name)}" for name in _TOKEN_READ)
        + ", CASE WHEN t.last_used_at IS NULL OR t.last_used_at <= %s THEN 1 ELSE 0 END AS token_stale "
        f"FROM {quote(ApiToken._meta.db_table)} t JOIN {quote(Account._meta.db_table)} a ON a.id = t.account_id "
        "WHERE t.digest = %s AND t.revoked_at IS NULL"
    )


def _token_with_account(*, digest: str, stale: datetime, using: str = DEFAULT_DB_ALIAS) -> tuple[ApiToken, bool] | None:
    """The unrevoked token of this digest with its account, in one written-out
    read (every authenticated request makes it): the account through
    Manager.raw, which turns its columns into values as the ORM does on every
    database; the token from the same row by Model.from_db, its columns ints
    and strings on every database, and whether its last use is at or before
    `stale` (or never recorded) worked out by the query, so no date column
    crosses unconverted. Building the same read with select_related cost the
    web worker about three times what the read itself costs. `using`: the
    database alias (the tests read it on SQLite as on PostgreSQL)."""
    conn = connections[using]
    rows = Account.objects.db_manager(using).raw(
        _token_read_sql(using),
        # The bound as the column's own field writes it on this database (Field.get_db_prep_value).
        [ApiToken._meta.get_field("last_used_at").get_db_prep_value(stale, conn), digest],
    )
    account = next(iter(rows), None)
    if account is None:
        return None
    token = ApiToken.from_db(using, list(_TOKEN_READ), [getattr(account, f"token_{name}") for name in _TOKEN_READ])
    token.account = account
    return token, bool(getattr(account, "token_stale"))  # noqa: B009 - a column of the read, not a field


def token_authenticate(*, raw: str) -> tuple[Account, ApiToken] | None:
    """The (account, token) a bearer secret belongs to, or None when it is
    unknown, revoked or its account is inactive. Records the token's last use,
    writing at most once per TOKEN_LAST_USED_RESOLUTION."""
    if len(raw) != TOKEN_LENGTH or not raw.startswith(TOKEN_PREFIX) or not _TOKEN_CHARS.match(raw):
        return None
    now = timezone.now()
    stale = now - TOKEN_LAST_USED_RESOLUTION
    found = _token_with_account(digest=_sha256_hex(raw), stale=stale)
    if found is None or not found[0].account.is_active:
        return None
    token, used_long_ago = found
    if used_long_ago:
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
