"""The pay currencies and their units, as the chain families declare them
(each family's `CURRENCIES`, billing/chains/spec.py): adding a family adds its
currencies here, with no migration. Amounts on chains are integers in base
units; `decimals` says how many base units make one coin."""

from __future__ import annotations

from billing.chains.spec import Currency, family_currencies

__all__ = [
    "CURRENCIES",
    "CURRENCY_CHOICES",
    "CURRENCY_CODES",
    "Currency",
    "amount_label",
    "currency_get",
]

# The order they are listed in everywhere (the API, the checkout page, errors): the
# project's order (DESIGN.md); a currency a later family declares follows them.
LISTING_ORDER = ("BTC", "ETH", "USDT", "USDC", "XMR", "SOL", "LTC")
CURRENCIES: dict[str, Currency] = {
    c.code: c
    for c in sorted(
        family_currencies(),
        key=lambda c: LISTING_ORDER.index(c.code) if c.code in LISTING_ORDER else len(LISTING_ORDER),
    )
}
CURRENCY_CHOICES = [(code, code) for code in CURRENCIES]  # for forms; the models take any code
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
