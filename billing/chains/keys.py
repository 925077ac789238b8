"""Watch-only key material: parse it, refuse anything that can spend, derive
receive destinations from it.

The server holds only public material: an account-level extended public key
for Bitcoin, Litecoin and Ethereum, a Monero primary address with its private
*view* key, a Solana recipient address. Everything here is pure (no settings,
no database); `billing.chains.config` reads the settings and caches the parsed
objects. Errors are `KeyMaterialError` with a message that completes a sentence
starting with the setting's name, and never quotes the refused value (a secret
pasted by mistake must not end up in a log).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from bip_utils import (
    Base58Decoder,
    Bip32KeyNetVersions,
    Bip32Slip10Secp256k1,
    EthAddrDecoder,
    EthAddrEncoder,
    Hash160,
    Kekkak256,
    P2PKHAddrEncoder,
    P2SHAddrEncoder,
    P2TRAddrDecoder,
    P2TRAddrEncoder,
    P2WPKHAddrEncoder,
)
from bitcoin.core.script import OP_0, OP_1, OP_CHECKSIG, OP_DUP, OP_EQUALVERIFY, OP_HASH160, CScript
from monero import address as monero_address
from monero import ed25519 as monero_ed25519
from monero.backends.offline import OfflineWallet
from monero.wallet import Wallet as MoneroWallet
from solders.keypair import Keypair
from solders.pubkey import Pubkey


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

SCRIPT_TYPES = ("p2wpkh", "p2sh-p2wpkh", "p2pkh", "p2tr")

_BASE58_TOKEN = re.compile(r"[1-9A-HJ-NP-Za-km-z]{32,120}")
_HEX32 = re.compile(r"(0x)?[0-9a-fA-F]{64}")
_WORD = re.compile(r"[a-z]+")
_WIF_VERSIONS = {0x80, 0xEF, 0xB0}  # Bitcoin mainnet, testnet/regtest (both chains), Litecoin mainnet


def _base58check(value: str) -> bytes | None:
    try:
        decoded: bytes = Base58Decoder.CheckDecode(value)
        return decoded
    except Exception:
        return None


def _base58(value: str) -> bytes | None:
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
        payload = _base58check(token)
        if payload is not None:
            name = _extended_private_name(payload)
            if name:
                return f"an extended private key ({name})"
            if (len(payload) == 33 or (len(payload) == 34 and payload[33] == 0x01)) and payload[0] in _WIF_VERSIONS:
                return "a WIF private key"
        elif len(token) in range(86, 90):
            raw = _base58(token)
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


def _fingerprint(*parts: bytes) -> str:
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
    payload = _base58check(text)
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
        fingerprint=_fingerprint(public.RawCompressed().ToBytes(), key.ChainCode().ToBytes()),
        receive_chain=key.ChildKey(RECEIVE_CHAIN),
    )


# --- Bitcoin and Litecoin ---------------------------------------------------


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


# --- Ethereum ---------------------------------------------------------------

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


# --- Monero -----------------------------------------------------------------

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
        fingerprint=_fingerprint(bytes.fromhex(primary.spend_key()), bytes.fromhex(primary.view_key())),
        wallet=wallet,
    )


def monero_public_key(secret_hex: str) -> str:
    """The public key of a Monero secret scalar (hex); for tests and diagnostics."""
    public: str = monero_ed25519.public_from_secret_hex(secret_hex)
    return public


# --- Solana -----------------------------------------------------------------


@dataclass(frozen=True)
class SolanaRecipient:
    address: str
    fingerprint: str


def solana_recipient_parse(*, value: str) -> SolanaRecipient:
    text = value.strip()
    kind = secret_material_kind(text)
    if kind:
        raise KeyMaterialError(f"holds {kind}, which can spend. Put the recipient's public address here.", private=True)
    raw = _base58(text)
    if raw is None or len(raw) != 32:
        raise KeyMaterialError("is not a Solana address (Base58 of 32 bytes).")
    pubkey = Pubkey.from_bytes(raw)
    return SolanaRecipient(address=str(pubkey), fingerprint=_fingerprint(bytes(pubkey)))


def solana_reference_new() -> str:
    """A fresh Solana Pay reference: the public key of a random keypair whose
    secret is dropped at once (a reference only has to be unique)."""
    return str(Keypair().pubkey())
