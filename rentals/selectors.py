"""Reads for accounts and rentals.

Sections: accounts; API tokens; SSH keys; orders and rentals.
"""

from __future__ import annotations

from decimal import Decimal

from django.db.models import QuerySet

from billing import selectors as billing_selectors
from core.errors import NotFound
from rentals.models import Account, ApiToken, Order, RecoveryCode, Rental, SshKey

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


# --- Orders and rentals ------------------------------------------------------------


def orders_for(*, account) -> QuerySet[Order]:
    return (
        Order.objects.filter(account=account)
        .select_related("invoice", "rental")
        .prefetch_related("lines", *billing_selectors.invoice_prefetches("invoice__"))
        .order_by("-created_at", "-id")
    )


def order_get(*, account, order_id: int) -> Order:
    order = orders_for(account=account).filter(pk=order_id).first()
    if order is None:
        raise NotFound("No such order.")
    return order


def rentals_for(*, account) -> QuerySet[Rental]:
    return (
        Rental.objects.filter(account=account)
        .select_related("order")
        .prefetch_related("periods", "renewals__invoice")
        .order_by("-created_at", "-id")
    )


def rental_get(*, account, rental_id: int) -> Rental:
    rental = rentals_for(account=account).filter(pk=rental_id).first()
    if rental is None:
        raise NotFound("No such rental.")
    return rental
