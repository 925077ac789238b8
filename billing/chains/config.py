"""Which currencies are enabled, and a fresh deposit destination for each invoice.

A currency is enabled exactly when its watch-only material is set in settings:

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

from dataclasses import dataclass
from functools import lru_cache

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from billing.chains import keys, uris
from billing.currencies import CURRENCIES
from core.errors import DomainError


@dataclass(frozen=True)
class Destination:
    currency: str  # "BTC" ...
    address: str  # what the customer pays to (for SOL: the recipient)
    index: int  # derivation index (SOL: the sequence number; the reference is random)
    match_key: str  # what a watcher matches on: BTC/LTC scriptPubKey hex; ETH/USDT/USDC lowercase
    # 0x address; XMR "major/minor" of the subaddress; SOL the reference public key (Base58)
    reference: str = ""  # Solana Pay reference (SOL only)


ETHEREUM_FAMILY = ("ETH", "USDT", "USDC")
TOKEN_CONTRACT_SETTINGS = {"USDT": "USDT_CONTRACT", "USDC": "USDC_CONTRACT"}
UTXO_CHAINS = {"BTC": "bitcoin", "LTC": "litecoin"}
SOL_CLUSTERS = ("mainnet-beta", "devnet", "testnet", "localnet")
XMR_ACCOUNT = 0  # subaddresses (0, i) of the wallet's first account

# Every setting that holds watch-only material, checked for secrets at start-up
# whether or not its currency is enabled.
MATERIAL_SETTINGS = (
    "BTC_XPUB",
    "LTC_XPUB",
    "ETH_XPUB",
    "USDT_CONTRACT",
    "USDC_CONTRACT",
    "XMR_ADDRESS",
    "XMR_VIEW_KEY",
    "SOL_RECIPIENT",
)


def _setting(name: str, default: str = "") -> str:
    value = getattr(settings, name, default)
    return "" if value is None else str(value).strip()


def _refused(setting: str, exc: Exception, suffix: str = "") -> ImproperlyConfigured:
    return ImproperlyConfigured(f"{setting} {exc}{suffix}")


# --- Parsed material (cached by setting values) ------------------------------


@lru_cache(maxsize=16)
def _utxo_account_cached(chain: str, value: str, network: str, script_type: str) -> keys.UtxoAccount:
    return keys.utxo_account_parse(chain=chain, value=value, network=network, script_type=script_type)


@lru_cache(maxsize=8)
def _ethereum_account_cached(value: str) -> keys.EthereumAccount:
    return keys.ethereum_account_parse(value=value)


@lru_cache(maxsize=8)
def _monero_account_cached(address: str, view_key: str) -> keys.MoneroAccount:
    return keys.monero_account_parse(address=address, view_key=view_key)


@lru_cache(maxsize=8)
def _solana_recipient_cached(value: str) -> keys.SolanaRecipient:
    return keys.solana_recipient_parse(value=value)


def _utxo_network(code: str) -> str:
    setting = f"{code}_NETWORK"
    network = _setting(setting, "mainnet").lower()
    chain = UTXO_CHAINS[code]
    names = [n for c, n in keys.UTXO_NETWORKS if c == chain]
    if network not in names:
        raise ImproperlyConfigured(f"{setting} is {network!r}; expected one of {', '.join(names)}.")
    return network


def _utxo_account(code: str) -> keys.UtxoAccount:
    network = _utxo_network(code)
    script_setting = f"{code}_SCRIPT_TYPE"
    script_type = _setting(script_setting, "p2wpkh").lower()
    if script_type not in keys.SCRIPT_TYPES:
        raise ImproperlyConfigured(
            f"{script_setting} is {script_type!r}; expected one of {', '.join(keys.SCRIPT_TYPES)}."
        )
    setting = f"{code}_XPUB"
    try:
        return _utxo_account_cached(UTXO_CHAINS[code], _setting(setting), network, script_type)
    except keys.KeyMaterialError as exc:
        raise _refused(setting, exc, f" ({code}_NETWORK={network}, {script_setting}={script_type})") from None


def _ethereum_account() -> keys.EthereumAccount:
    try:
        return _ethereum_account_cached(_setting("ETH_XPUB"))
    except keys.KeyMaterialError as exc:
        raise _refused("ETH_XPUB", exc) from None


def _eth_chain_id() -> int:
    value = getattr(settings, "ETH_CHAIN_ID", 1)
    try:
        chain_id = int(value)
    except (TypeError, ValueError):
        chain_id = 0
    if isinstance(value, bool) or chain_id <= 0:
        raise ImproperlyConfigured(f"ETH_CHAIN_ID is {value!r}; expected a positive integer (1 is Ethereum mainnet).")
    return chain_id


def _token_contract(code: str) -> str:
    setting = TOKEN_CONTRACT_SETTINGS[code]
    try:
        return keys.eth_address_parse(_setting(setting))
    except keys.KeyMaterialError as exc:
        raise _refused(setting, exc) from None


def _monero_account() -> keys.MoneroAccount:
    address, view_key = _setting("XMR_ADDRESS"), _setting("XMR_VIEW_KEY")
    if not address or not view_key:
        missing = "XMR_VIEW_KEY" if address else "XMR_ADDRESS"
        raise ImproperlyConfigured(
            f"{missing} is not set: Monero needs both XMR_ADDRESS (primary address) and XMR_VIEW_KEY "
            "(private view key), or neither."
        )
    try:
        keys.monero_address_parse(address)
    except keys.KeyMaterialError as exc:
        raise _refused("XMR_ADDRESS", exc) from None
    try:
        return _monero_account_cached(address, view_key)
    except keys.KeyMaterialError as exc:
        raise _refused("XMR_VIEW_KEY", exc) from None


def _solana_recipient() -> keys.SolanaRecipient:
    try:
        return _solana_recipient_cached(_setting("SOL_RECIPIENT"))
    except keys.KeyMaterialError as exc:
        raise _refused("SOL_RECIPIENT", exc) from None


def _sol_cluster() -> str:
    cluster = _setting("SOL_CLUSTER", "mainnet-beta").lower()
    if cluster not in SOL_CLUSTERS:
        raise ImproperlyConfigured(f"SOL_CLUSTER is {cluster!r}; expected one of {', '.join(SOL_CLUSTERS)}.")
    return cluster


# --- Public interface --------------------------------------------------------


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
    if code not in enabled_currencies():
        raise DomainError(
            "currency_unavailable",
            f"{code} payments are not enabled on this server.",
            details={"currency": code, "enabled": enabled_currencies()},
        )
    return code


def enabled_currencies() -> list[str]:
    """Codes whose watch-only material is set, in CURRENCIES order."""
    eth = bool(_setting("ETH_XPUB"))
    present = {
        "BTC": bool(_setting("BTC_XPUB")),
        "LTC": bool(_setting("LTC_XPUB")),
        "ETH": eth,
        "USDT": eth and bool(_setting("USDT_CONTRACT")),
        "USDC": eth and bool(_setting("USDC_CONTRACT")),
        "XMR": bool(_setting("XMR_ADDRESS")) and bool(_setting("XMR_VIEW_KEY")),
        "SOL": bool(_setting("SOL_RECIPIENT")),
    }
    return [code for code in CURRENCIES if present[code]]


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
    if code in UTXO_CHAINS:
        address, script = _utxo_account(code).destination(index)
        return Destination(currency=code, address=address, index=index, match_key=script)
    if code in ETHEREUM_FAMILY:
        address = _ethereum_account().address(index)
        return Destination(currency=code, address=address, index=index, match_key=address.lower())
    if code == "XMR":
        if not 1 <= index < 2**32:
            raise ValueError(f"XMR index must be in 1..{2**32 - 1} (subaddress (0, index)), got {index}")
        address = _monero_account().subaddress(major=XMR_ACCOUNT, minor=index)
        return Destination(currency=code, address=address, index=index, match_key=f"{XMR_ACCOUNT}/{index}")
    # SOL: one recipient; the reference tells the payments apart.
    recipient = _solana_recipient().address
    reference = keys.solana_reference_new()
    return Destination(currency=code, address=recipient, index=index, match_key=reference, reference=reference)


def derivation_keyset(*, currency: str) -> str:
    """A stable id of the key material behind `currency`'s index sequence.

    It depends on the public key material only (not on the network, script type
    or chain id), so an index is never handed out twice for the same keys. ETH,
    USDT and USDC return the same keyset.
    """
    code = currency_enabled_code(currency)
    if code in UTXO_CHAINS:
        return f"{UTXO_CHAINS[code]}:{_utxo_account(code).key.fingerprint}"
    if code in ETHEREUM_FAMILY:
        return f"ethereum:{_ethereum_account().key.fingerprint}"
    if code == "XMR":
        return f"monero:{_monero_account().fingerprint}"
    return f"solana:{_solana_recipient().fingerprint}"


def derivation_first_index(*, currency: str) -> int:
    """The first index of `currency`'s sequence: 1 for XMR (subaddress (0, 0) is
    the wallet's primary address, which is not a fresh destination), else 0."""
    return 1 if _currency_code(currency) == "XMR" else 0


def payment_uri(*, destination: Destination, amount: int, label: str = "", message: str = "") -> str:
    """The URI a wallet opens to pay `amount` base units to `destination`.

    EIP-681 has no label or message: ETH, USDT and USDC URIs leave them out.
    """
    code = _currency_code(destination.currency)
    currency = CURRENCIES[code]
    if code in UTXO_CHAINS:
        return uris.bip21_uri(
            scheme=UTXO_CHAINS[code],
            address=destination.address,
            amount=amount,
            decimals=currency.decimals,
            label=label,
            message=message,
        )
    if code == "ETH":
        return uris.eip681_ether_uri(address=destination.address, chain_id=_eth_chain_id(), wei=amount)
    if code in TOKEN_CONTRACT_SETTINGS:
        return uris.eip681_token_transfer_uri(
            token=_token_contract(code),
            chain_id=_eth_chain_id(),
            recipient=destination.address,
            units=amount,
        )
    if code == "XMR":
        return uris.monero_uri(
            address=destination.address, amount=amount, decimals=currency.decimals, label=label, message=message
        )
    return uris.solana_pay_uri(
        recipient=destination.address,
        amount=amount,
        reference=destination.reference,
        decimals=currency.decimals,
        label=label,
        message=message,
    )


def network_name(*, currency: str) -> str:
    """The chain and network payments of `currency` live on, e.g. "bitcoin-mainnet",
    "litecoin-regtest", "ethereum-1", "monero-stagenet", "solana-mainnet-beta"."""
    code = _currency_code(currency)
    if code in UTXO_CHAINS:
        return f"{UTXO_CHAINS[code]}-{_utxo_network(code)}"
    if code in ETHEREUM_FAMILY:
        return f"ethereum-{_eth_chain_id()}"
    if code == "XMR":
        if _setting("XMR_ADDRESS"):
            try:
                return f"monero-{keys.MONERO_NETWORKS[keys.monero_address_parse(_setting('XMR_ADDRESS')).net]}"
            except keys.KeyMaterialError as exc:
                raise _refused("XMR_ADDRESS", exc) from None
        return "monero-mainnet"
    return f"solana-{_sol_cluster()}"


def chain_config_validate() -> None:
    """Refuse spending keys and malformed public material in the chain settings.

    Raises ImproperlyConfigured naming every setting at fault (never quoting a
    value). Runs at start-up from `BillingConfig.ready()`.
    """
    problems: list[str] = []
    secret_settings: set[str] = set()
    for setting in MATERIAL_SETTINGS:
        kind = keys.secret_material_kind(_setting(setting), hex32_is_secret=setting != "XMR_VIEW_KEY")
        if kind:
            secret_settings.add(setting)
            problems.append(
                f"{setting} holds {kind}, which can spend. This server takes watch-only material only "
                "(extended public keys, a Monero view key, a Solana address): remove it and rotate that key."
            )
    checks = []
    enabled = enabled_currencies()
    if "BTC" in enabled:
        checks.append(("BTC_XPUB", lambda: _utxo_account("BTC")))
    if "LTC" in enabled:
        checks.append(("LTC_XPUB", lambda: _utxo_account("LTC")))
    if "ETH" in enabled:
        checks.append(("ETH_XPUB", _ethereum_account))
        checks.append(("ETH_CHAIN_ID", _eth_chain_id))
    for code, setting in TOKEN_CONTRACT_SETTINGS.items():
        if code in enabled:
            checks.append((setting, lambda code=code: _token_contract(code)))
    if _setting("XMR_ADDRESS") or _setting("XMR_VIEW_KEY"):
        checks.append(("XMR_VIEW_KEY", _monero_account))
    if "SOL" in enabled:
        checks.append(("SOL_RECIPIENT", _solana_recipient))
        checks.append(("SOL_CLUSTER", _sol_cluster))
    for setting, check in checks:
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
