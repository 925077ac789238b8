"""Ethereum key material: the account extended public key at m/44'/60'/0'
(one address per index) and plain 0x addresses (token contracts) in their
EIP-55 form. Pure, as billing.chains.keys is; errors are its `KeyMaterialError`."""

from __future__ import annotations

import re
from dataclasses import dataclass

from bip_utils import EthAddrDecoder, EthAddrEncoder, Kekkak256

from billing.chains.keys import Bip32Account, KeyMaterialError, extended_public_key_parse

_ETH_ADDRESS = re.compile(r"0x[0-9a-fA-F]{40}")


def eip55(address: str) -> str:
    """The EIP-55 mixed-case checksum form of a 0x address."""
    body = address[2:].lower()
    digest = Kekkak256.QuickDigest(body.encode()).hex()
    return "0x" + "".join(c.upper() if int(digest[i], 16) >= 8 else c for i, c in enumerate(body))


def eth_address_parse(value: str) -> str:
    """A 0x address in its EIP-55 form. A mixed-case input must carry a valid checksum."""
    text = value.strip()
    if not _ETH_ADDRESS.fullmatch(text):
        raise KeyMaterialError("is not an Ethereum address (0x followed by 40 hex digits).")
    body = text[2:]
    mixed = body != body.lower() and body != body.upper()
    try:
        EthAddrDecoder.DecodeAddr(text, skip_chksum_enc=not mixed)
    except ValueError:
        raise KeyMaterialError("has an invalid EIP-55 checksum (a mistyped address?).") from None
    return eip55(text)


@dataclass(frozen=True)
class EthereumAccount:
    key: Bip32Account

    def address(self, index: int) -> str:
        address: str = EthAddrEncoder.EncodeKey(self.key.public_key(index))
        return address


def ethereum_account_parse(*, value: str) -> EthereumAccount:
    """The account xpub at m/44'/60'/0' (a tpub is accepted too: the version carries no network)."""
    text = value.strip()
    if _ETH_ADDRESS.fullmatch(text):
        raise KeyMaterialError(
            "holds an address; it needs the account extended public key (xpub at m/44'/60'/0') "
            "so that each invoice gets its own address."
        )
    return EthereumAccount(key=extended_public_key_parse(text, accepted=("xpub", "tpub"), testnet=None))
