"""Bitcoin and Litecoin key material: an account extended public key, its
network and script type, and the receive addresses (with their scriptPubKey)
derived from it. Pure, as billing.chains.keys is; errors are its
`KeyMaterialError`."""

from __future__ import annotations

from dataclasses import dataclass

from bip_utils import (
    Hash160,
    P2PKHAddrEncoder,
    P2SHAddrEncoder,
    P2TRAddrDecoder,
    P2TRAddrEncoder,
    P2WPKHAddrEncoder,
)
from bitcoin.core.script import OP_0, OP_1, OP_CHECKSIG, OP_DUP, OP_EQUALVERIFY, OP_HASH160, CScript

from billing.chains.keys import Bip32Account, KeyMaterialError, extended_public_key_parse

SCRIPT_TYPES = ("p2wpkh", "p2sh-p2wpkh", "p2pkh", "p2tr")


@dataclass(frozen=True)
class UtxoNetwork:
    chain: str  # "bitcoin" / "litecoin"
    name: str  # "mainnet" / "testnet" / "regtest" / "signet"
    hrp: str  # bech32 human-readable part
    p2pkh: bytes  # Base58 version byte of P2PKH addresses
    p2sh: bytes  # Base58 version byte of P2SH addresses

    @property
    def testnet(self) -> bool:
        return self.name != "mainnet"


UTXO_NETWORKS: dict[tuple[str, str], UtxoNetwork] = {
    (n.chain, n.name): n
    for n in (
        UtxoNetwork("bitcoin", "mainnet", "bc", b"\x00", b"\x05"),
        UtxoNetwork("bitcoin", "testnet", "tb", b"\x6f", b"\xc4"),
        UtxoNetwork("bitcoin", "signet", "tb", b"\x6f", b"\xc4"),
        UtxoNetwork("bitcoin", "regtest", "bcrt", b"\x6f", b"\xc4"),
        UtxoNetwork("litecoin", "mainnet", "ltc", b"\x30", b"\x32"),
        UtxoNetwork("litecoin", "testnet", "tltc", b"\x6f", b"\x3a"),
        UtxoNetwork("litecoin", "regtest", "rltc", b"\x6f", b"\x3a"),
    )
}


def utxo_network_get(*, chain: str, name: str) -> UtxoNetwork:
    try:
        return UTXO_NETWORKS[(chain, name)]
    except KeyError:
        names = ", ".join(n for c, n in UTXO_NETWORKS if c == chain)
        raise KeyMaterialError(f"is {name!r}, not a {chain} network ({names}).") from None


@dataclass(frozen=True)
class UtxoAccount:
    """A Bitcoin or Litecoin receive account: key, network and script type."""

    key: Bip32Account
    network: UtxoNetwork
    script_type: str

    def destination(self, index: int) -> tuple[str, str]:
        """(address, scriptPubKey hex) of receive address `index`."""
        pub = self.key.public_key(index)
        h160 = Hash160.QuickDigest(pub.RawCompressed().ToBytes())
        if self.script_type == "p2wpkh":
            address = P2WPKHAddrEncoder.EncodeKey(pub, hrp=self.network.hrp)
            script = CScript([OP_0, h160])
        elif self.script_type == "p2sh-p2wpkh":
            address = P2SHAddrEncoder.EncodeKey(pub, net_ver=self.network.p2sh)
            script = CScript([OP_0, h160]).to_p2sh_scriptPubKey()  # the P2WPKH program as redeem script
        elif self.script_type == "p2pkh":
            address = P2PKHAddrEncoder.EncodeKey(pub, net_ver=self.network.p2pkh)
            script = CScript([OP_DUP, OP_HASH160, h160, OP_EQUALVERIFY, OP_CHECKSIG])
        else:  # p2tr (BIP86 key-path only: the output key is the tweaked internal key)
            address = P2TRAddrEncoder.EncodeKey(pub, hrp=self.network.hrp)
            script = CScript([OP_1, P2TRAddrDecoder.DecodeAddr(address, hrp=self.network.hrp)])
        return address, script.hex()


_UTXO_ACCEPTED = {
    "bitcoin": ("xpub", "ypub", "zpub", "tpub", "upub", "vpub"),
    "litecoin": ("xpub", "ypub", "zpub", "tpub", "upub", "vpub", "Ltub", "Mtub", "ttub"),
}


def utxo_account_parse(*, chain: str, value: str, network: str, script_type: str) -> UtxoAccount:
    """Parse a Bitcoin/Litecoin account key for `network` and the stated script type.

    A prefix that implies a script (zpub/vpub: p2wpkh; ypub/upub/Mtub:
    p2sh-p2wpkh) must agree with `script_type`, so a wallet's addresses and ours
    are the same ones.
    """
    net = utxo_network_get(chain=chain, name=network)
    if script_type not in SCRIPT_TYPES:
        raise KeyMaterialError(f"script type {script_type!r} is not one of {', '.join(SCRIPT_TYPES)}.")
    key = extended_public_key_parse(value, accepted=_UTXO_ACCEPTED[chain], testnet=net.testnet)
    implied = key.version.script_type
    if implied is not None and implied != script_type:
        raise KeyMaterialError(
            f"holds a {key.version.prefix}, which is a {implied} key, but the script type setting says "
            f"{script_type}: set it to {implied} (or export the key as an xpub/tpub)."
        )
    return UtxoAccount(key=key, network=net, script_type=script_type)
