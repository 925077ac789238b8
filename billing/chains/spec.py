"""The registry of chain families, as plain declarations.

A chain family is a package under billing/chains/ (utxo, ethereum, monero,
solana). Its `__init__.py` declares, without importing Django or any model,
the currencies it is paid in (`CURRENCIES`: a tuple of `Currency`: code, unit,
decimals, default confirmations, each rate provider's symbol, colour) and the
chains it watches (`CHAINS`: a tuple of `ChainSpec`); its `family` module
holds the runtime object (`FAMILY`) that knows its destinations and builds
its watchers. `FAMILY_PACKAGES` below lists the families: adding one is one
line here and a package of its own, and touches no file of another family.
A family may also name the sandbox `make run` starts for it (`SANDBOX`: the
dotted path of a development module, a string, never imported here:
production code does not import devtools; devtools/sandboxes.py reads it).

These declarations are all config/settings.py needs to build the beat
schedule (one scan task per watched chain), which is why this module and the
families' `__init__` modules must stay importable before Django is set up.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from importlib import import_module
from typing import Any

FAMILY_PACKAGES: tuple[str, ...] = (
    "billing.chains.utxo",
    "billing.chains.ethereum",
    "billing.chains.monero",
    "billing.chains.solana",
)


@dataclass(frozen=True)
class Currency:
    """A pay currency, as its family declares it.

    `chain`: the ledger its payments live on (payments are unique per chain,
    txid and position); `unit`: the name of its base unit, `decimals` of them
    to a coin; `confirmations`: the default of CONFIRMATIONS_<code> (with
    `confirmations_setting` False the count is fixed: a finality tag decides);
    `rate_symbols`: what each rate provider (billing/rates.py) calls it, by
    provider name; `colour`: its colour in staff charts."""

    code: str
    name: str
    decimals: int
    chain: str
    unit: str
    confirmations: int
    rate_symbols: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    colour: str = "#9e9e9e"
    stable: bool = False  # pegged to USD
    confirmations_setting: bool = True

    @property
    def scale(self) -> int:
        return int(10**self.decimals)  # int ** int is typed Any: a negative exponent gives a float

    def to_coins(self, base_units: int) -> Decimal:
        return Decimal(base_units).scaleb(-self.decimals)

    def coins_str(self, base_units: int) -> str:
        """Whole coins, exact, without trailing zeros beyond what the unit needs."""
        return f"{self.to_coins(int(base_units)):.{self.decimals}f}"

    def coins_short(self, base_units: int) -> str:
        """Whole coins, exact, as people write them: at most the trailing zeros of
        8 places (2 for stablecoins), so `0.49 ETH` reads `0.49000000`, not 18 places."""
        whole, _, frac = self.coins_str(base_units).partition(".")
        keep = 2 if self.stable else min(self.decimals, 8)
        frac = frac.rstrip("0").ljust(keep, "0")
        return f"{whole}.{frac}" if frac else whole


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


def chain_specs(families: Sequence[str] | None = None) -> list[ChainSpec]:
    """Every chain of every family (FAMILY_PACKAGES, read when called), in family order."""
    specs: list[ChainSpec] = []
    for package in FAMILY_PACKAGES if families is None else families:
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


def family_currencies(families: Sequence[str] | None = None) -> list[Currency]:
    """Every currency of every family (FAMILY_PACKAGES, read when called), in family
    order; a code declared twice is an error."""
    found: dict[str, Currency] = {}
    for package in FAMILY_PACKAGES if families is None else families:
        for currency in getattr(import_module(package), "CURRENCIES", ()):
            if currency.code in found:
                raise ValueError(f"{package} declares {currency.code}, which another family declares")
            found[currency.code] = currency
    return list(found.values())


def family_package_of(code: str, families: Sequence[str] | None = None) -> str | None:
    """The package of the family that declares currency `code`, or None."""
    for package in FAMILY_PACKAGES if families is None else families:
        if any(currency.code == code for currency in getattr(import_module(package), "CURRENCIES", ())):
            return package
    return None


def family_sandboxes(families: Sequence[str] | None = None) -> list[str]:
    """The sandbox modules the families name (`SANDBOX`, a dotted path), in family order."""
    found: list[str] = []
    for package in FAMILY_PACKAGES if families is None else families:
        sandbox = getattr(import_module(package), "SANDBOX", "")
        if sandbox:
            found.append(sandbox)
    return found
