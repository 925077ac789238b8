"""Accounts: sign-up, staff accounts, password changes, deactivation and deletion."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import IntegrityError, models, transaction
from django.db.models import ProtectedError, RestrictedError

from accounts.models import Account, ApiToken, RecoveryCode, SshKey
from accounts.services.passwords import _password_confirm, _password_validate
from accounts.services.recovery import _recovery_codes_replace
from accounts.services.tokens import IssuedToken, _token_issue, _tokens_revoke
from accounts.services.usernames import username_normalize
from accounts.signals import account_closing, account_deactivated
from accounts.throttling import (
    address_remember,
    signup_attempt_count,
)
from billing.services import account_closing_check
from core.audit import AuditAction, audit_record
from core.errors import Conflict


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
        # Billing's own rule, asked before any app settles its rows: an account
        # holding credit cannot close (409 account_has_credit).
        account_closing_check(account_id=account.pk)
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
