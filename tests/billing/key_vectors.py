"""Key material for the key tests, derived from the public BIP39 test mnemonic
("abandon" x 11 + "about"): full (private) accounts, their public and private
serialisations in every prefix, and the public vectors of that mnemonic.

Shared by tests/billing/test_keys.py and tests/billing/test_chain_config.py.
The private keys exist only to prove that each of their forms is refused.
"""

from __future__ import annotations

import bitcoin
from bip_utils import (
    Bip32KeyNetVersions,
    Bip32PublicKeySerializer,
    Bip39SeedGenerator,
    Bip44Changes,
)
from bip_utils.bip.bip32.bip32_key_ser import Bip32PrivateKeySerializer
from bitcoin.wallet import CBitcoinAddress

MNEMONIC = " ".join(["abandon"] * 11 + ["about"])
SEED = Bip39SeedGenerator(MNEMONIC).Generate()

# Public vectors for the mnemonic above: BIP84 and BIP86 first receive
# addresses, and the first BIP44 Ethereum address.
BIP84_FIRST = "bc1qcr8te4kr609gcawutmrza0j4xv80jy8z306fyu"
BIP86_FIRST = "bc1p5cyxnuxmeuwuvkwfem96lqzszd02n6xdcjrs20cac6yqjjwudpxqkedrcr"
ETH_FIRST = "0x9858EfFD232B4033E47d90003D41EC34EcaEda94"

VERSIONS = {
    "xpub": ("0488b21e", "0488ade4"),
    "ypub": ("049d7cb2", "049d7878"),
    "zpub": ("04b24746", "04b2430c"),
    "tpub": ("043587cf", "04358394"),
    "upub": ("044a5262", "044a4e28"),
    "vpub": ("045f1cf6", "045f18bc"),
    "Ltub": ("019da462", "019d9cfe"),
    "Mtub": ("01b26ef6", "01b26792"),
    "ttub": ("0436f6e1", "0436ef7d"),
}


def account(bip_cls, coin, number: int = 0):
    """The full (private) account node m/purpose'/coin'/number'."""
    return bip_cls.FromSeed(SEED, coin).Purpose().Coin().Account(number)


def account_public(acc, form: str) -> str:
    """The account's extended public key serialised with the `form` prefix."""
    pub, priv = VERSIONS[form]
    node = acc.Bip32Object().PublicKey()
    return Bip32PublicKeySerializer.Serialize(
        node.KeyObject(), node.Data(), Bip32KeyNetVersions(bytes.fromhex(pub), bytes.fromhex(priv))
    )


def account_private(acc, form: str) -> str:
    """The account's extended private key with the private version of `form`."""
    pub, priv = VERSIONS[form]
    node = acc.Bip32Object().PrivateKey()
    return Bip32PrivateKeySerializer.Serialize(
        node.KeyObject(), node.Data(), Bip32KeyNetVersions(bytes.fromhex(pub), bytes.fromhex(priv))
    )


def full_node(acc, index: int):
    return acc.Change(Bip44Changes.CHAIN_EXT).AddressIndex(index)


def full_address(acc, index: int) -> str:
    return full_node(acc, index).PublicKey().ToAddress()


def full_pubkey(acc, index: int) -> bytes:
    return full_node(acc, index).PublicKey().RawCompressed().ToBytes()


def script_via_bitcoinlib(address: str, params: str) -> str:
    """The scriptPubKey python-bitcoinlib computes for `address` on `params`."""
    bitcoin.SelectParams(params)
    try:
        return CBitcoinAddress(address).to_scriptPubKey().hex()
    finally:
        bitcoin.SelectParams("mainnet")
