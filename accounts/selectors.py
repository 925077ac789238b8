"""Reads for accounts.

Sections: accounts; API tokens; SSH keys.
"""

from __future__ import annotations

from decimal import Decimal

from django.db.models import QuerySet
from rest_framework.exceptions import NotAuthenticated
from rest_framework.request import Request

from accounts.models import Account, ApiToken, RecoveryCode, SshKey
from billing import selectors as billing_selectors

# =============================================================================
# Accounts
# =============================================================================


def account_credit_usd(account: Account) -> Decimal:
    """The account's credit balance in USD, from billing's credit ledger."""
    return billing_selectors.credit_balance_usd(account=account)


def recovery_codes_remaining(*, account: Account) -> int:
    return RecoveryCode.objects.filter(account=account, used_at__isnull=True).count()


# =============================================================================
# API tokens
# =============================================================================


def token_list(*, account: Account) -> QuerySet[ApiToken]:
    """The account's tokens that still work, newest first."""
    return ApiToken.objects.filter(account=account, revoked_at__isnull=True).order_by("-created_at", "-id")


# =============================================================================
# SSH keys
# =============================================================================


def ssh_key_list(*, account: Account) -> QuerySet[SshKey]:
    return SshKey.objects.filter(account=account).order_by("created_at", "id")


def ssh_key_get(*, account: Account, ssh_key_id: int) -> SshKey | None:
    return SshKey.objects.filter(account=account, pk=ssh_key_id).first()


def request_account(request: Request) -> Account:
    """The account an API request is signed in as. The API's views sit behind IsAuthenticated (the
    default permission), so they only ever see one; anything else is refused as not signed in."""
    user = request.user
    if not isinstance(user, Account):
        raise NotAuthenticated()
    return user
