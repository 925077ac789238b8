"""The chain watchers, one per chain, and the one entry point that runs them.

Every family (billing.chains.spec.FAMILY_PACKAGES) brings its watchers
(`ChainFamily.watchers()`); this registry holds them by chain. A chain may
carry several currencies (ethereum: ETH, USDT, USDC): any of them names its
watcher, and one scan serves them all.

`chain_scan(currency=...)` is what the periodic task (`billing.chain_scan`)
and `python manage.py scan_chain <currency>` call. It takes the chain's lease
(`core.lease.single_flight`), so however many workers run, one chain is
scanned by one of them at a time; the others return at once with
`skipped="busy"`. The run itself is the shared machinery's
(billing.chains.machinery.chain_run).

A chain is watched when the watch-only material of one of its currencies is
set (billing.chains.config) and its node's RPC URL is too. Each watched chain
reports its health to `/readyz` as a non-critical check named `chain:<chain>`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import datetime, timedelta

from billing.chains.config import families
from billing.chains.interface import ScanReport, Watcher
from billing.currencies import CURRENCIES
from core.errors import DomainError
from core.health import CheckResult, register_check
from core.lease import lease_renew, single_flight

# A run renews its lease after every block; a worker that dies loses it this long after.
LEASE_TTL = timedelta(minutes=2)

WATCHERS: dict[str, Watcher] = {}


def watcher_register(watcher: Watcher) -> None:
    WATCHERS[watcher.chain] = watcher


for _family in families():
    for _watcher in _family.watchers():
        watcher_register(_watcher)


def _names() -> list[str]:
    return [w.currency for w in WATCHERS.values()]


def watcher_for(*, currency: str) -> Watcher:
    """The watcher of a currency's chain (a currency code, or a chain name)."""
    value = str(currency).strip()
    code = value.upper()
    chain = CURRENCIES[code].chain if code in CURRENCIES else value.lower()
    watcher = WATCHERS.get(chain)
    if watcher is None:
        raise DomainError(
            "no_watcher",
            f"No chain watcher for {value!r}; there is one for {', '.join(_names())}.",
            details={"currency": value, "watchers": _names()},
        )
    return watcher


def watchers_enabled() -> list[Watcher]:
    return [w for w in WATCHERS.values() if w.watched()]


def chain_scan(
    *,
    currency: str,
    force: bool = False,
    max_blocks: int | None = None,
    progress: Callable[[str], None] | None = None,
    now: datetime | None = None,
) -> ScanReport:
    """Run the watcher of `currency`'s chain once, as a single flight."""
    from billing.chains.machinery import chain_run

    watcher = watcher_for(currency=currency)
    if not watcher.watched():
        return ScanReport(
            currency=watcher.currency, chain=watcher.chain, skipped="not_watched", currencies=list(watcher.currencies)
        )
    name = f"chain_scan:{watcher.chain}"
    with single_flight(name=name, ttl=LEASE_TTL) as owner:
        if owner is None:
            return ScanReport(
                currency=watcher.currency, chain=watcher.chain, skipped="busy", currencies=list(watcher.currencies)
            )
        return chain_run(
            watcher,
            force=force,
            max_blocks=max_blocks,
            progress=progress,
            now=now,
            renew=lambda: lease_renew(name=name, owner=owner, ttl=LEASE_TTL),
        )


def chain_readiness(*, chain: str) -> CheckResult:
    """The `/readyz` report of one chain's watcher: never critical (the API keeps
    serving while a node is away), not ok while the watcher is blind."""
    from billing.models import ChainState
    from billing.selectors import chain_health

    watcher = WATCHERS[chain]
    if not watcher.watched():
        return CheckResult(True, {"watched": False}, critical=False)
    health = chain_health(chain=chain)
    state = ChainState.objects.filter(chain=chain).first()
    detail = {
        "currency": watcher.currency,
        "currencies": watcher.watched_currencies(),
        **health.as_dict(),
        "consecutive_failures": state.consecutive_failures if state else 0,
        "blocks_behind": (
            state.tip_height - state.height
            if state and state.tip_height is not None and state.height is not None
            else None
        ),
    }
    if state is None:
        detail["error"] = "no scan yet"
    return CheckResult(health.ok and state is not None, detail, critical=False)


def readiness_checks_register() -> None:
    """Register `chain:<chain>` in /readyz for every watched chain (at start-up)."""
    for watcher in watchers_enabled():
        register_check(f"chain:{watcher.chain}", functools.partial(chain_readiness, chain=watcher.chain))
