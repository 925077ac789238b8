"""Which currencies are enabled, and a fresh deposit destination for each invoice.

Each chain family knows its own destinations (billing.chains.<family>.family);
this module routes a currency to its family. A currency is enabled exactly
when its watch-only material is set in settings:

    BTC   BTC_XPUB (+ BTC_NETWORK, BTC_SCRIPT_TYPE)
    LTC   LTC_XPUB (+ LTC_NETWORK, LTC_SCRIPT_TYPE)
    ETH   ETH_XPUB (+ ETH_CHAIN_ID)
    USDT  ETH_XPUB and USDT_CONTRACT      (same addresses and index sequence as ETH)
    USDC  ETH_XPUB and USDC_CONTRACT
    XMR   XMR_ADDRESS and XMR_VIEW_KEY
    SOL   SOL_RECIPIENT (+ SOL_CLUSTER)

Settings are read at call time; parsed keys are cached per setting values, so
deriving index i costs one public child derivation, not a re-parse.
`chain_config_validate()` runs at start-up (`BillingConfig.ready`) and refuses
any key that can spend, and any malformed public material.
"""

from __future__ import annotations

from functools import cache
from importlib import import_module

from django.core.exceptions import ImproperlyConfigured

from billing.chains import keys, spec
from billing.chains.interface import ChainFamily, Destination, setting_value
from billing.currencies import CURRENCIES
from core.errors import DomainError

__all__ = [
    "MATERIAL_SETTINGS",
    "Destination",
    "chain_config_validate",
    "currency_enabled_code",
    "derivation_first_index",
    "derivation_keyset",
    "destination_derive",
    "enabled_currencies",
    "families",
    "family_of",
    "manual_position",
    "manual_txid",
    "network_name",
    "payment_uri",
]


@cache
def families() -> tuple[ChainFamily, ...]:
    """The family object of every package in billing.chains.spec.FAMILY_PACKAGES."""
    found = tuple(import_module(f"{package}.family").FAMILY for package in spec.FAMILY_PACKAGES)
    served = [code for family in found for code in family.currencies]
    if sorted(served) != sorted(CURRENCIES) or len(served) != len(set(served)):
        raise ImproperlyConfigured(f"chain families serve {served}; every currency must have exactly one")
    return found


def family_of(currency: str) -> ChainFamily:
    code = _currency_code(currency)
    return next(f for f in families() if code in f.currencies)


# Every setting that holds watch-only material, checked for secrets at start-up
# whether or not its currency is enabled.
MATERIAL_SETTINGS = tuple(
    s for package in spec.FAMILY_PACKAGES for s in import_module(f"{package}.family").FAMILY.material_settings
)


def _currency_code(currency: str) -> str:
    code = str(currency).upper()
    if code not in CURRENCIES:
        raise DomainError(
            "unknown_currency",
            f"{currency!r} is not a pay currency; use one of {', '.join(CURRENCIES)}.",
            details={"currency": str(currency), "currencies": list(CURRENCIES)},
        )
    return code


def currency_enabled_code(currency: str) -> str:
    """The code of an enabled currency, or DomainError unknown_currency / currency_unavailable."""
    code = _currency_code(currency)
    if not family_of(code).enabled(code):
        raise DomainError(
            "currency_unavailable",
            f"{code} payments are not enabled on this server.",
            details={"currency": code, "enabled": enabled_currencies()},
        )
    return code


def enabled_currencies() -> list[str]:
    """Codes whose watch-only material is set, in CURRENCIES order."""
    return [code for code in CURRENCIES if family_of(code).enabled(code)]


def destination_derive(*, currency: str, index: int) -> Destination:
    """The deposit destination number `index` of `currency`'s key material.

    Deterministic for every currency but SOL, whose reference is fresh random on
    each call (the caller stores it). ETH, USDT and USDC share one index sequence
    (`derivation_keyset`). XMR index i is subaddress (0, i), so its sequence
    starts at 1: (0, 0) is the wallet's primary address.
    """
    code = currency_enabled_code(currency)
    if isinstance(index, bool) or not isinstance(index, int):
        raise TypeError(f"index must be an int, not {type(index).__name__}")
    if index < 0:
        raise ValueError(f"index must not be negative, got {index}")
    return family_of(code).destination(code, index)


def derivation_keyset(*, currency: str) -> str:
    """A stable id of the key material behind `currency`'s index sequence.

    It depends on the public key material only (not on the network, script type
    or chain id), so an index is never handed out twice for the same keys. ETH,
    USDT and USDC return the same keyset.
    """
    code = currency_enabled_code(currency)
    return family_of(code).keyset(code)


def derivation_first_index(*, currency: str) -> int:
    """The first index of `currency`'s sequence: 1 for XMR (subaddress (0, 0) is
    the wallet's primary address, which is not a fresh destination), else 0."""
    code = _currency_code(currency)
    return family_of(code).first_index(code)


def payment_uri(*, destination: Destination, amount: int, label: str = "", message: str = "") -> str:
    """The URI a wallet opens to pay `amount` base units to `destination`.

    EIP-681 has no label or message: ETH, USDT and USDC URIs leave them out.
    """
    family = family_of(destination.currency)
    return family.payment_uri(destination=destination, amount=amount, label=label, message=message)


def network_name(*, currency: str) -> str:
    """The chain and network payments of `currency` live on, e.g. "bitcoin-mainnet",
    "litecoin-regtest", "ethereum-1", "monero-stagenet", "solana-mainnet-beta"."""
    code = _currency_code(currency)
    return family_of(code).network(code)


def manual_position(*, currency: str, index: int) -> str:
    """The position of a payment staff record by hand, from the output or log
    index they give: the one the watcher gives the same transfer."""
    code = _currency_code(currency)
    return family_of(code).manual_position(code, index)


def manual_txid(*, currency: str, txid: str) -> str:
    """A transaction id staff typed, written as `currency`'s watcher writes it."""
    code = _currency_code(currency)
    return family_of(code).manual_txid(code, txid)


def chain_config_validate() -> None:
    """Refuse spending keys and malformed public material in the chain settings.

    Raises ImproperlyConfigured naming every setting at fault (never quoting a
    value). Runs at start-up from `BillingConfig.ready()`.
    """
    problems: list[str] = []
    secret_settings: set[str] = set()
    for family in families():
        for setting in family.material_settings:
            kind = keys.secret_material_kind(
                setting_value(setting), hex32_is_secret=setting not in family.view_key_settings
            )
            if kind:
                secret_settings.add(setting)
                problems.append(
                    f"{setting} holds {kind}, which can spend. This server takes watch-only material only "
                    "(extended public keys, a Monero view key, a Solana address): remove it and rotate that key."
                )
    enabled = enabled_currencies()
    for family in families():
        for setting, check in family.checks(enabled):
            if setting in secret_settings:
                continue  # already refused, with the clearer message
            try:
                check()
            except ImproperlyConfigured as exc:
                message = str(exc)
                if not any(message.startswith(s) for s in secret_settings):
                    problems.append(message)
    if problems:
        raise ImproperlyConfigured("Chain settings refused:\n- " + "\n- ".join(problems))
