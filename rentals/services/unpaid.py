"""What an account, and the address it orders from, may hold unpaid, and
letting it go.

An unpaid order holds its GPUs for as long as its invoice can be paid (the
rate lock). Without caps one fresh account, or many fresh accounts from one
address, could reserve a region's whole stock of a card and keep others from
it for free. So, counting the orders awaiting payment:

- an account holds at most UNPAID_ORDERS_MAX orders and UNPAID_GPUS_MAX GPUs
  (UNPAID_ORDERS_MAX_PAID and UNPAID_GPUS_MAX_PAID once it has paid for an
  order): beyond it 409 `unpaid_limit`;
- the client address an order comes from (an IPv4 address; an IPv6 /64, which
  one subscriber usually holds whole) holds, over all the accounts that order
  from it, no more than the ordering account may hold itself: beyond it 409
  `unpaid_limit_address`;
- no account and no address holds more than UNPAID_HOLD_SHARE_PCT percent of
  a card's stock in a region (its GPUs there that are free or held unpaid, on
  active hosts), and never less than one host's worth of that card, so a whole
  node can always be ordered: beyond it 409 `hold_share_exceeded`;
- that one-host allowance (a hold above the percentage, admitted only because
  one host is the least that can be ordered) is withheld from an account, and
  from an address, once UNPAID_HOLD_FLOOR_MISSES of its orders of that card in
  that region lapsed (expired unpaid, or cancelled after holding the GPUs ten
  minutes or more) within
  UNPAID_HOLD_FLOOR_COOLDOWN_HOURS, so the only host of a card cannot be held
  for free over and over, by one account or by fresh accounts from one address
  (409 `hold_share_exceeded`, with `floor_available_at`); a customer whose
  order lapsed may order it again. An account that has paid for an order of
  that card before keeps the allowance;
- once UNPAID_LAPSES_MAX orders of an account, or of an address, closed unpaid
  (cancelled or expired) within UNPAID_LAPSE_WINDOW_HOURS, its next order is
  refused (429 `throttled`) until the oldest leaves the window: every order
  leaves a deposit address watched for a month, and the caps above count only
  what is held now.

The refusals' details carry the numbers. The client address comes from
core.throttle.client_address (REMOTE_ADDR, or the entry of X-Forwarded-For the
TRUSTED_PROXY_COUNT proxies vouch for) and is stored on the order
(Order.client_network). A closed or deactivated account's unpaid orders are
cancelled at once, so their GPUs go back to stock.
"""

from __future__ import annotations

import hashlib
import logging
import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from accounts.models import Account
from catalog.models import Host, Slot, SlotStatus
from core.errors import Conflict, Throttled
from core.throttle import UNKNOWN_ADDRESS, address_bucket
from rentals.models import Order, OrderStatus

log = logging.getLogger(__name__)

# A cancelled order counts as a lapsed hold (UNPAID_HOLD_FLOOR_MISSES) when it held its GPUs this long.
UNPAID_HOLD_LAPSE_MIN = timedelta(minutes=10)


def client_network(address: str | None) -> str:
    """The group a client address is counted in: an IPv4 address itself (an
    IPv4-mapped IPv6 address as its IPv4 one), an IPv6 address's /64 (a
    subscriber is routed a whole /64 and may use any address in it). Empty for
    no address or one that does not parse (not counted per address): what
    core.throttle.address_bucket counts, but for those."""
    bucket = address_bucket((address or "").strip())
    return "" if bucket == UNKNOWN_ADDRESS else bucket


def _address_lock_key(network: str) -> int:
    """A PostgreSQL advisory lock key (signed 64 bits) for one client network."""
    digest = hashlib.blake2b(f"rentals.unpaid:{network}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


@dataclass(frozen=True)
class Held:
    """What is held unpaid now (the order being placed left out)."""

    account_orders: int
    account_gpus: int
    account_here: int  # the account's GPUs of this card in this region
    address_orders: int
    address_gpus: int
    address_here: int  # the address's GPUs of this card in this region
    paid_history: bool
    stock: int  # the card's GPUs in the region that are free or held unpaid (active hosts)
    account_lapsed: int = 0  # the account's orders closed unpaid since `lapsed_since`
    address_lapsed: int = 0  # the address's
    active: bool = True  # the account as its lock found it (read under the lock only)


def _held(
    *,
    account: Account,
    lock: bool,
    besides: int | None = None,
    network: str = "",
    region_id: int | None = None,
    gpu_id: int | None = None,
    lapsed_since: datetime | None = None,
) -> Held:
    """What the account and the address `network` hold unpaid, in all and of
    one card in one region, and that card's stock there.

    `lock`: the account's row is locked (FOR UPDATE), then the address's
    advisory lock is taken (PostgreSQL; SQLite has one writer at a time), in
    one statement and always in that order, so concurrent orders of one
    account, or from one address, are counted one after the other and never
    wait on each other crosswise. Two statements, not one: a statement that
    waited for a lock reads the orders as they were when it began, and would
    miss the order of the transaction it waited for.
    `besides`: an order not to count (the one being placed). `lapsed_since`:
    also count the orders of the account and of the address that closed
    unpaid (cancelled or expired) since then."""
    q = connection.ops.quote_name
    accounts, orders = q(Account._meta.db_table), q(Order._meta.db_table)
    hosts, slots = q(Host._meta.db_table), q(Slot._meta.db_table)
    network_param = network or None  # "" matches nothing: NULL is never equal
    active = True
    with connection.cursor() as cursor:
        if lock and connection.features.has_select_for_update:
            # The row as the lock finds it: a deactivation that committed while
            # this waited is seen (its unpaid orders were listed before this one).
            if network and connection.vendor == "postgresql":
                cursor.execute(
                    f"SELECT a.is_active, pg_advisory_xact_lock(%s) "
                    f"FROM (SELECT id, is_active FROM {accounts} WHERE id = %s FOR UPDATE) a",
                    [_address_lock_key(network), account.pk],
                )
            else:
                cursor.execute(f"SELECT is_active FROM {accounts} WHERE id = %s FOR UPDATE", [account.pk])
            found = cursor.fetchone()
            active = bool(found and found[0])
        elif lock:  # SQLite: one writer at a time, nothing to wait for
            cursor.execute(f"SELECT is_active FROM {accounts} WHERE id = %s", [account.pk])
            found = cursor.fetchone()
            active = bool(found and found[0])
        # The unpaid orders of the account (the (account, status) index) and of
        # the address (the (client_network, status) index): at most a cap's
        # worth each, never anyone's history of orders. The stock is the
        # hosts' free counts (kept by triggers) plus their reserved slots.
        here = "o.region_id = %s AND o.gpu_id = %s"
        cursor.execute(
            "SELECT "
            "COALESCE(SUM(CASE WHEN o.account_id = %s THEN 1 ELSE 0 END), 0), "
            "COALESCE(SUM(CASE WHEN o.account_id = %s THEN o.gpu_count ELSE 0 END), 0), "
            f"COALESCE(SUM(CASE WHEN o.account_id = %s AND {here} THEN o.gpu_count ELSE 0 END), 0), "
            "COALESCE(SUM(CASE WHEN o.client_network = %s THEN 1 ELSE 0 END), 0), "
            "COALESCE(SUM(CASE WHEN o.client_network = %s THEN o.gpu_count ELSE 0 END), 0), "
            f"COALESCE(SUM(CASE WHEN o.client_network = %s AND {here} THEN o.gpu_count ELSE 0 END), 0), "
            f"EXISTS (SELECT 1 FROM {orders} WHERE account_id = %s AND status IN (%s, %s)), "
            f"(SELECT COALESCE(SUM(h.free_slots), 0) FROM {hosts} h "
            "WHERE h.region_id = %s AND h.gpu_id = %s AND h.is_active) + "
            f"(SELECT COUNT(*) FROM {slots} s JOIN {hosts} h ON h.id = s.host_id "
            "WHERE h.region_id = %s AND h.gpu_id = %s AND h.is_active AND s.status = %s), "
            f"(SELECT COUNT(*) FROM {orders} WHERE account_id = %s AND status IN (%s, %s) AND closed_at >= %s), "
            f"(SELECT COUNT(*) FROM {orders} WHERE client_network = %s AND status IN (%s, %s) AND closed_at >= %s) "
            f"FROM {orders} o WHERE o.status = %s AND o.id <> %s AND (o.account_id = %s OR o.client_network = %s)",
            [
                account.pk,
                account.pk,
                account.pk,
                region_id,
                gpu_id,
                network_param,
                network_param,
                network_param,
                region_id,
                gpu_id,
                account.pk,
                OrderStatus.PAID,
                OrderStatus.UNFULFILLED,
                region_id,
                gpu_id,
                region_id,
                gpu_id,
                SlotStatus.RESERVED,
                account.pk,
                OrderStatus.CANCELLED,
                OrderStatus.EXPIRED,
                lapsed_since,  # NULL: nothing is since it
                network_param,
                OrderStatus.CANCELLED,
                OrderStatus.EXPIRED,
                lapsed_since,
                OrderStatus.AWAITING_PAYMENT,
                besides or 0,
                account.pk,
                network_param,
            ],
        )
        row = cursor.fetchone()
    account_orders, account_gpus, account_here, address_orders, address_gpus, address_here = (
        int(v or 0) for v in row[:6]
    )
    return Held(
        account_orders=account_orders,
        account_gpus=account_gpus,
        account_here=account_here,
        address_orders=address_orders,
        address_gpus=address_gpus,
        address_here=address_here,
        paid_history=bool(row[6]),
        stock=int(row[7] or 0),
        account_lapsed=int(row[8] or 0),
        address_lapsed=int(row[9] or 0),
        active=active,
    )


def _caps(paid_history: bool) -> tuple[int, int]:
    """(orders, GPUs) an account with or without a history of paying may hold unpaid."""
    if paid_history:
        return settings.UNPAID_ORDERS_MAX_PAID, settings.UNPAID_GPUS_MAX_PAID
    return settings.UNPAID_ORDERS_MAX, settings.UNPAID_GPUS_MAX


def unpaid_limits(*, account: Account, lock: bool = False, besides: int | None = None) -> dict[str, Any]:
    """The caps that apply to the account, and what it holds unpaid now (leaving
    out the order `besides`)."""
    held = _held(account=account, lock=lock, besides=besides)
    max_orders, max_gpus = _caps(held.paid_history)
    return {
        "unpaid_orders": held.account_orders,
        "unpaid_gpus": held.account_gpus,
        "max_unpaid_orders": max_orders,
        "max_unpaid_gpus": max_gpus,
        "paid_history": held.paid_history,
    }


def hold_share_max(*, stock: int, gpus_per_host: int) -> int | None:
    """The most GPUs of one card in one region one account or address may hold
    unpaid, when its stock there (free or held unpaid) is `stock`:
    UNPAID_HOLD_SHARE_PCT percent of it (rounded down), at least one host's
    worth. None: no share cap (100 percent or more)."""
    pct: int = settings.UNPAID_HOLD_SHARE_PCT
    if pct >= 100:
        return None
    return max(stock * pct // 100, gpus_per_host)


def _over(orders: int, gpus: int, gpu_count: int, max_orders: int, max_gpus: int) -> str | None:
    if orders + 1 > max_orders:
        return f"{max_orders} unpaid orders"
    if gpus + gpu_count > max_gpus:
        return f"{max_gpus} unpaid GPUs"
    return None


def unpaid_limit_check(
    *,
    account: Account,
    gpu_count: int,
    placing: int | None = None,
    network: str = "",
    region: Any = None,
    gpu: Any = None,
    lapses: bool = True,
) -> None:
    """Refuse an order of `gpu_count` GPUs of `gpu` in `region` that would take
    the account or its client `network` (client_network()) over what it may
    hold unpaid (`unpaid_limit`, `unpaid_limit_address`), or over its share of
    that card's stock in the region (`hold_share_exceeded`); all 409. Call
    inside the order's transaction: the account's and the address's locks are
    held to its end. `placing`: the order being placed, when it is already
    written (it is not counted twice); a caller that checks late holds the
    locks for less of its transaction. Without `region` and `gpu` the share is
    not checked; without `network`, nothing per address. Past UNPAID_LAPSES_MAX
    orders of the account or the address closed unpaid in the window, 429
    `throttled` (_lapses_check), unless `lapses` is False: a re-quote of a
    lapsed order places none."""
    lapses_max: int = settings.UNPAID_LAPSES_MAX if lapses else 0
    window = timedelta(hours=settings.UNPAID_LAPSE_WINDOW_HOURS)
    now = timezone.now()
    held = _held(
        account=account,
        lock=True,
        besides=placing,
        network=network,
        region_id=getattr(region, "pk", None),
        gpu_id=getattr(gpu, "pk", None),
        lapsed_since=now - window if lapses_max > 0 else None,
    )
    if not held.active:
        # Deactivated or closed while this order (or re-quote) waited on its lock,
        # or a lapsed order's checkout link used after: it holds nothing again.
        raise Conflict("account_inactive", "This account is closed or deactivated: it can hold no order.")
    if lapses_max > 0:
        _lapses_check(held=held, account=account, network=network, lapses_max=lapses_max, window=window, now=now)
    max_orders, max_gpus = _caps(held.paid_history)
    caps = {"max_unpaid_orders": max_orders, "max_unpaid_gpus": max_gpus, "paid_history": held.paid_history}
    what = _over(held.account_orders, held.account_gpus, gpu_count, max_orders, max_gpus)
    if what:
        raise Conflict(
            "unpaid_limit",
            f"An account may hold at most {what} at once: pay or cancel an open order first.",
            details={
                "unpaid_orders": held.account_orders,
                "unpaid_gpus": held.account_gpus,
                **caps,
                "requested_gpus": gpu_count,
            },
        )
    if network:
        what = _over(held.address_orders, held.address_gpus, gpu_count, max_orders, max_gpus)
        if what:
            raise Conflict(
                "unpaid_limit_address",
                f"Orders from your address (all accounts together) may hold at most {what} at once: "
                "pay or cancel an open order first.",
                details={
                    "client_network": network,
                    "unpaid_orders": held.address_orders,
                    "unpaid_gpus": held.address_gpus,
                    **caps,
                    "requested_gpus": gpu_count,
                },
            )
    if region is None or gpu is None:
        return
    share = hold_share_max(stock=held.stock, gpus_per_host=gpu.gpus_per_host)
    if share is None:
        return
    details = {
        "region": region.code,
        "gpu": gpu.slug,
        "requested_gpus": gpu_count,
        "max_held_gpus": share,
        "stock_gpus": held.stock,
        "share_pct": settings.UNPAID_HOLD_SHARE_PCT,
    }
    for holder, here in (("account", held.account_here), ("address", held.address_here if network else None)):
        if here is not None and here + gpu_count > share:
            raise Conflict(
                "hold_share_exceeded",
                f"One {holder} may hold at most {share} {gpu.name} in {region.code} unpaid at once "
                f"({settings.UNPAID_HOLD_SHARE_PCT}% of the {held.stock} there, at least one host's worth), "
                f"and {here} are held already: pay or cancel an open order first.",
                details={"holder": holder, "held_gpus": here, **details},
            )
    if (
        max(held.account_here, held.address_here if network else 0) + gpu_count
        <= held.stock * (settings.UNPAID_HOLD_SHARE_PCT) // 100
    ):
        return  # within the percentage: the one-host allowance is not used
    if Order.objects.filter(account=account, gpu=gpu, status=OrderStatus.PAID).exists():
        return  # a customer who has paid for this card keeps the one-host allowance
    spent = _floor_spent(account=account, network=network, region=region, gpu=gpu, besides=placing)
    if spent is not None:
        holder, available_at = spent
        raise Conflict(
            "hold_share_exceeded",
            f"Holding {gpu_count} {gpu.name} in {region.code} unpaid is more than "
            f"{settings.UNPAID_HOLD_SHARE_PCT}% of the {held.stock} there; that is allowed to one {holder} "
            f"until {settings.UNPAID_HOLD_FLOOR_MISSES} such orders closed unpaid within "
            f"{settings.UNPAID_HOLD_FLOOR_COOLDOWN_HOURS} hours, as they have from this {holder}: it can be "
            f"held again from {available_at:%Y-%m-%d %H:%M} UTC.",
            details={
                "holder": holder,
                "held_gpus": held.account_here if holder == "account" else held.address_here,
                **details,
                "floor_available_at": available_at.isoformat().replace("+00:00", "Z"),
            },
        )


def _lapses_check(
    *, held: Held, account: Account, network: str, lapses_max: int, window: timedelta, now: datetime
) -> None:
    """Every order leaves a deposit address watched for a month, whether paid or
    not, and the caps above count only what is held now: an account (or an
    address) that cancels what it orders could place orders without end. Once
    `lapses_max` of its orders closed unpaid (cancelled or expired) within
    `window`, the next is refused with 429 `throttled` until the oldest of them
    leaves the window."""
    holders = [("account", held.account_lapsed, Q(account=account))]
    if network:
        holders.append(("address", held.address_lapsed, Q(client_network=network)))
    for holder, lapsed, where in holders:
        if lapsed < lapses_max:
            continue
        closes = list(
            Order.objects.filter(
                where, status__in=(OrderStatus.CANCELLED, OrderStatus.EXPIRED), closed_at__gte=now - window
            )
            .order_by("-closed_at")
            .values_list("closed_at", flat=True)[:lapses_max]
        )
        oldest = closes[-1] if closes and closes[-1] is not None else now
        hours = settings.UNPAID_LAPSE_WINDOW_HOURS
        raise Throttled(
            retry_after=max(1, math.ceil((oldest + window - now).total_seconds())),
            message=f"{lapsed} orders from this {holder} closed unpaid (cancelled or expired) within "
            f"the last {hours} hour{'s' if hours != 1 else ''}, the most allowed.",
        )


def _floor_spent(
    *, account: Account, network: str, region: Any, gpu: Any, besides: int | None = None
) -> tuple[str, datetime] | None:
    """("account" or "address", when the one-host allowance comes back) if
    UNPAID_HOLD_FLOOR_MISSES orders of `gpu` in `region` from the account or
    the address closed unpaid within UNPAID_HOLD_FLOOR_COOLDOWN_HOURS; None
    when the allowance is there."""
    hours: int = settings.UNPAID_HOLD_FLOOR_COOLDOWN_HOURS
    misses: int = settings.UNPAID_HOLD_FLOOR_MISSES
    if hours <= 0 or misses <= 0:
        return None
    # A lapsed hold: expired unpaid, or cancelled after holding the GPUs a while (an order
    # cancelled at once, a wrong template, say, held nothing worth counting).
    closed = Order.objects.filter(
        Q(status=OrderStatus.EXPIRED)
        | Q(status=OrderStatus.CANCELLED, closed_at__gte=F("created_at") + UNPAID_HOLD_LAPSE_MIN),
        region=region,
        gpu=gpu,
        closed_at__gte=timezone.now() - timedelta(hours=hours),
    ).exclude(pk=besides or 0)  # an order re-quoted is not held against itself
    holders = {"account": Q(account=account)}
    if network:
        holders["address"] = Q(client_network=network)
    for holder, where in holders.items():
        # The allowance comes back when the oldest of the last `misses` closes leaves the window.
        times = list(closed.filter(where).order_by("-closed_at").values_list("closed_at", flat=True)[:misses])
        if len(times) >= misses and times[-1] is not None:
            return holder, times[-1] + timedelta(hours=hours)
    return None


def account_unpaid_orders_release(*, account: Account, reason: str, actor: Any = None) -> int:
    """Cancel the account's unpaid orders (their GPUs go back to stock, their
    invoices are voided). An order whose payment has been seen is left to
    become a rental. Returns how many were cancelled."""
    from rentals.services.orders import order_cancel

    cancelled = 0
    ids = list(Order.objects.filter(account=account, status=OrderStatus.AWAITING_PAYMENT).values_list("pk", flat=True))
    for order_id in ids:
        try:
            with transaction.atomic():
                order_cancel(order_id=order_id, actor=actor or account, reason=reason)
        except Conflict as exc:  # paid meanwhile: it will become a rental
            log.info("order %s of a closing account kept: %s", order_id, exc.code)
            continue
        cancelled += 1
    return cancelled
