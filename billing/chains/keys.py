"""Watch-only key material: what every chain family shares.

The server holds only public material; each family parses its own
(billing/chains/<family>/keys.py: account keys, addresses, view keys) on top
of what is here: `KeyMaterialError`, the refusal of anything that can spend
(`secret_material_kind`, run over every family's material settings at
start-up), Base58 decoding, a fingerprint of public material, and BIP32
account extended public keys (`extended_public_key_parse`, used by the UTXO
and Ethereum families). Everything here is pure (no settings, no database);
`billing.chains.config` and the families read the settings and cache the
parsed objects. Errors are `KeyMaterialError` with a message that completes a
sentence starting with the setting's name, and never quotes the refused value
(a secret pasted by mistake must not end up in a log).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from bip_utils import Base58Decoder, Bip32KeyNetVersions, Bip32Slip10Secp256k1


class KeyMaterialError(ValueError):
    """Key material refused. `private` is True when it is (or looks like) a secret."""

    def __init__(self, message: str, *, private: bool = False) -> None:
        super().__init__(message)
        self.private = private


# --- Extended keys ----------------------------------------------------------

EXTENDED_KEY_LEN = 78  # version 4, depth 1, parent fingerprint 4, index 4, chain code 32, key 33
ACCOUNT_DEPTH = 3  # m / purpose' / coin' / account'
RECEIVE_CHAIN = 0  # m / ... / 0 / i
MAX_CHILD_INDEX = 2**31 - 1  # non-hardened indexes only: public derivation cannot go further
HARDENED = 2**31


@dataclass(frozen=True)
class ExtendedKeyVersion:
    prefix: str  # how the Base58 string starts
    testnet: bool  # testnet / signet / regtest key
    script_type: str | None  # the script the prefix implies; None: the setting states it
    litecoin_only: bool = False


# The public versions accepted. xpub/tpub (and Litecoin's Ltub/ttub) say nothing
# about the script, so the *_SCRIPT_TYPE setting states it; the SLIP-132 ones do.
PUBLIC_VERSIONS: dict[bytes, ExtendedKeyVersion] = {
    bytes.fromhex("0488b21e"): ExtendedKeyVersion("xpub", False, None),
    bytes.fromhex("049d7cb2"): ExtendedKeyVersion("ypub", False, "p2sh-p2wpkh"),
    bytes.fromhex("04b24746"): ExtendedKeyVersion("zpub", False, "p2wpkh"),
    bytes.fromhex("043587cf"): ExtendedKeyVersion("tpub", True, None),
    bytes.fromhex("044a5262"): ExtendedKeyVersion("upub", True, "p2sh-p2wpkh"),
    bytes.fromhex("045f1cf6"): ExtendedKeyVersion("vpub", True, "p2wpkh"),
    bytes.fromhex("019da462"): ExtendedKeyVersion("Ltub", False, None, litecoin_only=True),
    bytes.fromhex("01b26ef6"): ExtendedKeyVersion("Mtub", False, "p2sh-p2wpkh", litecoin_only=True),
    bytes.fromhex("0436f6e1"): ExtendedKeyVersion("ttub", True, None, litecoin_only=True),
}

# Known private versions, for naming them in the refusal. Any other extended key
# whose key data starts with 0x00 is private too (BIP32 serialises a private key
# as 0x00 || k, a public one as 0x02/0x03 || x).
PRIVATE_VERSIONS: dict[bytes, str] = {
    bytes.fromhex(v): name
    for v, name in (
        ("0488ade4", "xprv"),
        ("049d7878", "yprv"),
        ("04b2430c", "zprv"),
        ("04358394", "tprv"),
        ("044a4e28", "uprv"),
        ("045f18bc", "vprv"),
        ("0295b005", "Yprv"),
        ("02aa7a99", "Zprv"),
        ("02419970", "Uprv"),
        ("02575048", "Vprv"),
        ("019d9cfe", "Ltpv"),
        ("01b26792", "Mtpv"),
        ("0436ef7d", "ttpv"),
    )
}

MULTISIG_PUBLIC_VERSIONS: dict[bytes, str] = {
    bytes.fromhex(v): name
    for v, name in (("0295b43f", "Ypub"), ("02aa7ed3", "Zpub"), ("024289ef", "Upub"), ("02575483", "Vpub"))
}

_BASE58_TOKEN = re.compile(r"[1-9A-HJ-NP-Za-km-z]{32,120}")
_HEX32 = re.compile(r"(0x)?[0-9a-fA-F]{64}")
_WORD = re.compile(r"[a-z]+")
_WIF_VERSIONS = {0x80, 0xEF, 0xB0}  # Bitcoin mainnet, testnet/regtest (both chains), Litecoin mainnet


def base58check_decode(value: str) -> bytes | None:
    try:
        decoded: bytes = Base58Decoder.CheckDecode(value)
        return decoded
    except Exception:
        return None


def base58_decode(value: str) -> bytes | None:
    try:
        decoded: bytes = Base58Decoder.Decode(value)
        return decoded
    except Exception:
        return None


def _extended_private_name(payload: bytes) -> str | None:
    """The name of an extended private key, or None if `payload` is not one."""
    if len(payload) != EXTENDED_KEY_LEN:
        return None
    version = payload[:4]
    if version in PRIVATE_VERSIONS:
        return PRIVATE_VERSIONS[version]
    if payload[45] == 0x00:  # whatever its version says
        return f"version 0x{version.hex()}"
    return None


def secret_material_kind(value: str, *, hex32_is_secret: bool = True) -> str | None:
    """What kind of spending secret `value` is or contains, or None.

    Recognises extended private keys of any version (also inside a descriptor),
    WIF private keys, seed phrases (BIP39, Electrum, Monero), Solana keypairs
    (Base58 or the JSON array a keypair file holds), and, unless
    `hex32_is_secret` is False, a bare 32-byte hex string (how raw private keys
    are written).
    """
    text = value.strip()
    if not text:
        return None
    for token in _BASE58_TOKEN.findall(text):
        payload = base58check_decode(token)
        if payload is not None:
            name = _extended_private_name(payload)
            if name:
                return f"an extended private key ({name})"
            if (len(payload) == 33 or (len(payload) == 34 and payload[33] == 0x01)) and payload[0] in _WIF_VERSIONS:
                return "a WIF private key"
        elif len(token) in range(86, 90):
            raw = base58_decode(token)
            if raw is not None and len(raw) == 64:
                return "a Solana keypair (secret key and public key)"
    words = text.split()
    if len(words) >= 12 and all(_WORD.fullmatch(w) for w in words):
        return f"a seed phrase ({len(words)} words)"
    if text.startswith("["):
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
        if isinstance(parsed, list) and len(parsed) == 64 and all(isinstance(b, int) and 0 <= b <= 255 for b in parsed):
            return "a Solana keypair file (64-byte secret key)"
    if hex32_is_secret and _HEX32.fullmatch(text):
        return "a raw 32-byte hex key, the form private keys take"
    return None


def material_fingerprint(*parts: bytes) -> str:
    """A stable id of public key material (not the BIP32 4-byte fingerprint: too short)."""
    return hashlib.sha256(b"".join(parts)).hexdigest()[:32]


@dataclass(frozen=True)
class Bip32Account:
    """An account-level extended public key, with its receive chain derived once."""

    version: ExtendedKeyVersion
    fingerprint: str
    receive_chain: Any = field(repr=False, compare=False)  # Bip32Slip10Secp256k1 at m/.../0

    def public_key(self, index: int) -> Any:
        """The public key object of receive address `index` (m/.../0/index)."""
        if not 0 <= index <= MAX_CHILD_INDEX:
            raise ValueError(f"derivation index {index} is outside 0..{MAX_CHILD_INDEX}")
        return self.receive_chain.ChildKey(index).PublicKey().KeyObject()


def extended_public_key_parse(value: str, *, accepted: tuple[str, ...], testnet: bool | None) -> Bip32Account:
    """Parse an account extended public key whose prefix is one of `accepted`.

    `testnet` True/False insists on a testnet or mainnet key; None accepts either
    (Ethereum keys carry no network). Refuses private keys first, then anything
    that is not an account-level (depth 3, hardened) public key.
    """
    text = value.strip()
    kind = secret_material_kind(text)
    if kind:
        raise KeyMaterialError(
            f"holds {kind}, which can spend. Put the account's extended public key here "
            f"({'/'.join(accepted)}): this server must never hold a key that can spend.",
            private=True,
        )
    payload = base58check_decode(text)
    if payload is None or len(payload) != EXTENDED_KEY_LEN:
        raise KeyMaterialError(
            f"is not an extended public key (expected a Base58Check {'/'.join(accepted)} string "
            f"of {EXTENDED_KEY_LEN} bytes)."
        )
    version_bytes = payload[:4]
    if version_bytes in MULTISIG_PUBLIC_VERSIONS:
        raise KeyMaterialError(
            f"is a multisig extended public key ({MULTISIG_PUBLIC_VERSIONS[version_bytes]}); "
            f"only single-key accounts ({'/'.join(accepted)}) are supported."
        )
    version = PUBLIC_VERSIONS.get(version_bytes)
    if version is None or version.prefix not in accepted:
        got = version.prefix if version else f"version 0x{version_bytes.hex()}"
        raise KeyMaterialError(f"has an extended key of the wrong kind ({got}); expected {'/'.join(accepted)}.")
    if testnet is not None and version.testnet != testnet:
        raise KeyMaterialError(
            f"holds a {'testnet' if version.testnet else 'mainnet'} key ({version.prefix}) but the network is "
            f"{'a test network' if testnet else 'mainnet'}."
        )
    depth, child = payload[4], int.from_bytes(payload[9:13], "big")
    if depth != ACCOUNT_DEPTH or child < HARDENED:
        raise KeyMaterialError(
            f"is not an account-level key (depth {depth}, expected {ACCOUNT_DEPTH}: the key at "
            f"m/purpose'/coin'/account', as wallets export it)."
        )
    try:
        # Bip32KeyNetVersions needs a private version too; this one never matches a
        # public key, and a private key was refused above.
        key = Bip32Slip10Secp256k1.FromExtendedKey(text, Bip32KeyNetVersions(version_bytes, b"\xff\xff\xff\xff"))
    except Exception as exc:
        raise KeyMaterialError(f"is not a valid extended public key ({exc}).") from None
    if not key.IsPublicOnly():  # pragma: no cover - refused above already
        raise KeyMaterialError("holds an extended private key.", private=True)
    public = key.PublicKey()
    return Bip32Account(
        version=version,
        fingerprint=material_fingerprint(public.RawCompressed().ToBytes(), key.ChainCode().ToBytes()),
        receive_chain=key.ChildKey(RECEIVE_CHAIN),
    )
