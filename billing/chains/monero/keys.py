"""Monero key material: a wallet's primary address and its private *view* key,
checked to belong together, and the subaddresses derived from them offline.
Pure, as billing.chains.keys is; errors are its `KeyMaterialError`."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from monero import address as monero_address
from monero import ed25519 as monero_ed25519
from monero.backends.offline import OfflineWallet
from monero.wallet import Wallet as MoneroWallet

from billing.chains.keys import KeyMaterialError, material_fingerprint, secret_material_kind

MONERO_NETWORKS = {"main": "mainnet", "stage": "stagenet", "test": "testnet"}
_ED25519_L = 2**252 + 27742317777372353535851937790883648493  # order of the base point


@dataclass(frozen=True)
class MoneroAccount:
    address: str  # the primary address
    network: str  # mainnet / stagenet / testnet
    fingerprint: str
    wallet: Any = field(repr=False, compare=False)  # a view-only monero.wallet.Wallet, offline

    def subaddress(self, *, major: int, minor: int) -> str:
        if (major, minor) == (0, 0):
            raise ValueError("subaddress (0, 0) is the primary address, not a fresh destination")
        return str(self.wallet.get_address(major, minor))


def monero_address_parse(value: str) -> monero_address.Address:
    text = value.strip()
    kind = secret_material_kind(text)
    if kind:
        raise KeyMaterialError(f"holds {kind}, which can spend. Put the wallet's primary address here.", private=True)
    try:
        parsed = monero_address.address(text)
    except ValueError:
        raise KeyMaterialError("is not a Monero address (bad length, network byte or checksum).") from None
    if isinstance(parsed, monero_address.IntegratedAddress):
        raise KeyMaterialError(
            "is an integrated address; put the wallet's primary address here (it starts with 4, 5 or 9)."
        )
    if isinstance(parsed, monero_address.SubAddress):
        raise KeyMaterialError("is a subaddress; put the wallet's primary address here (it starts with 4, 5 or 9).")
    return parsed


def monero_account_parse(*, address: str, view_key: str) -> MoneroAccount:
    """The primary address and its private view key, checked to belong together.

    Raises KeyMaterialError with `private=True` when the "view key" is the
    wallet's spend key (or a seed), so a misplaced spend key never goes further.
    """
    primary = monero_address_parse(address)
    text = view_key.strip()
    kind = secret_material_kind(text, hex32_is_secret=False)
    if kind:
        raise KeyMaterialError(f"holds {kind}, which can spend. Put the private view key here.", private=True)
    if not re.fullmatch(r"[0-9a-fA-F]{64}", text):
        raise KeyMaterialError("is not a Monero private view key (64 hex digits).")
    text = text.lower()
    if int.from_bytes(bytes.fromhex(text), "little") >= _ED25519_L:
        raise KeyMaterialError("is not a Monero private key (not a reduced scalar).")
    if primary.check_private_spend_key(text):
        raise KeyMaterialError(
            "holds the wallet's private SPEND key, which can spend. Put the private view key here.",
            private=True,
        )
    if not primary.check_private_view_key(text):
        raise KeyMaterialError("does not belong to XMR_ADDRESS (its public view key does not match).")
    wallet = MoneroWallet(OfflineWallet(str(primary), view_key=text))
    return MoneroAccount(
        address=str(primary),
        network=MONERO_NETWORKS[primary.net],
        fingerprint=material_fingerprint(bytes.fromhex(primary.spend_key()), bytes.fromhex(primary.view_key())),
        wallet=wallet,
    )


def monero_public_key(secret_hex: str) -> str:
    """The public key of a Monero secret scalar (hex); for tests and diagnostics."""
    public: str = monero_ed25519.public_from_secret_hex(secret_hex)
    return public
