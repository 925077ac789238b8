"""The seven pay currencies and their units. Amounts on chains are integers in
base units; `decimals` says how many base units make one coin."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal


@dataclass(frozen=True)
class Currency:
    code: str
    name: str
    decimals: int
    chain: str  # the ledger its payments live on; payments are unique per (chain, txid, index)
    unit: str  # name of the base unit
    stable: bool = False  # pegged to USD

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


CURRENCIES: dict[str, Currency] = {
    c.code: c
    for c in (
        Currency("BTC", "Bitcoin", 8, "bitcoin", "satoshi"),
        Currency("ETH", "Ether", 18, "ethereum", "wei"),
        Currency("USDT", "Tether USD (ERC-20)", 6, "ethereum", "token unit", stable=True),
        Currency("USDC", "USD Coin (ERC-20)", 6, "ethereum", "token unit", stable=True),
        Currency("XMR", "Monero", 12, "monero", "piconero"),
        Currency("SOL", "Solana", 9, "solana", "lamport"),
        Currency("LTC", "Litecoin", 8, "litecoin", "litoshi"),
    )
}
CURRENCY_CHOICES = [(code, code) for code in CURRENCIES]
CURRENCY_CODES = tuple(CURRENCIES)


def currency_get(code: str) -> Currency:
    return CURRENCIES[code.upper()]


# Base-unit names that take a plural "s" (satoshi, litoshi, wei and piconero do not).
_UNIT_PLURALS = {"lamport": "lamports", "token unit": "token units"}


def amount_label(code: str, base_units: int | str | None, *, with_base_units: bool = True) -> str:
    """An on-chain amount as staff read it: `19.05555556 LTC (1,905,555,556
    litoshi)`; with `with_base_units=False` only `19.05555556 LTC`."""
    if base_units is None or base_units == "":
        return "\u2013"
    currency = CURRENCIES.get(str(code).upper())
    if currency is None:
        return f"{int(base_units):,} base units"
    coins = f"{currency.coins_short(int(base_units))} {currency.code}"
    if not with_base_units:
        return coins
    return f"{coins} ({int(base_units):,} {_UNIT_PLURALS.get(currency.unit, currency.unit)})"
