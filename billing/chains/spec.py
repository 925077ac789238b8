"""The registry of chain families, as plain declarations.

A chain family is a package under billing/chains/ (utxo, ethereum, monero,
solana). Its `__init__.py` declares, without importing Django or any model,
the chains it watches (`CHAINS`: a tuple of `ChainSpec`); its `family` module
holds the runtime object (`FAMILY`) that knows its destinations and builds
its watchers. `FAMILY_PACKAGES` below lists the families: adding one is one
line here and a package of its own, and touches no file of another family.

These declarations are all config/settings.py needs to build the beat
schedule (one scan task per watched chain), which is why this module and the
families' `__init__` modules must stay importable before Django is set up.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import import_module
from typing import Any

FAMILY_PACKAGES: tuple[str, ...] = (
    "billing.chains.utxo",
    "billing.chains.ethereum",
    "billing.chains.monero",
    "billing.chains.solana",
)


@dataclass(frozen=True)
class ChainSpec:
    """One chain a family watches.

    `currencies`: what its payments are in (the first names the watcher in
    reports and commands); `material_settings`: the watch-only settings that
    enable its first currency; `rpc_url_setting`: the node or service the
    watcher reads. The chain is watched when all of them are set.
    """

    chain: str
    currencies: tuple[str, ...]
    rpc_url_setting: str
    material_settings: tuple[str, ...]

    @property
    def currency(self) -> str:
        return self.currencies[0]

    def configured(self, values: Mapping[str, Any]) -> bool:
        """Whether `values` (settings, or the settings module's namespace) set everything it needs."""
        return all(str(values.get(name) or "").strip() for name in (*self.material_settings, self.rpc_url_setting))


def chain_specs(families: Sequence[str] = FAMILY_PACKAGES) -> list[ChainSpec]:
    """Every chain of every family, in family order."""
    specs: list[ChainSpec] = []
    for package in families:
        specs.extend(getattr(import_module(package), "CHAINS", ()))
    return specs


def chain_beat_schedule(*, values: Mapping[str, Any], seconds: float) -> dict[str, dict[str, Any]]:
    """CELERY_BEAT_SCHEDULE entries: a scan of each configured chain every `seconds`
    (expiring after as long, so a backlog never piles up behind a slow node)."""
    return {
        f"billing.chain_scan.{spec.currency}": {
            "task": "billing.chain_scan",
            "schedule": seconds,
            "args": (spec.currency,),
            "options": {"expires": seconds},
        }
        for spec in chain_specs()
        if spec.configured(values)
    }
