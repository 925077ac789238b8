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
        return 10**self.decimals

    def to_coins(self, base_units: int) -> Decimal:
        return Decimal(base_units).scaleb(-self.decimals)

    def coins_str(self, base_units: int) -> str:
        """Whole coins, exact, without trailing zeros beyond what the unit needs."""
        return f"{self.to_coins(int(base_units)):.{self.decimals}f}"


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
