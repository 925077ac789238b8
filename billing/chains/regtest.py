"""A private regtest node on this machine, for the tests, the benchmark and the sandbox.

Debian ships Litecoin Core (`litecoind`) and not Bitcoin Core; both share the
RPC and block format, so one node proves both adapters. `RegtestNode.start()`
runs `litecoind -regtest` in a temporary directory on free loopback ports with
credentials generated for the run, creates a wallet, mines the first blocks,
and `stop()` shuts it down and removes the directory. The process is tied to
ours (it is sent SIGTERM if we die), so no node outlives the run.

The helpers (mine, send, bump, replace, invalidate...) are what the tests and
`sandbox_pay` do to a node. `watch_only_account_generate()` makes a fresh
BIP84 account and keeps only its public half, as the server is configured in
production.

Nothing here runs in production: the sandbox starts it only when DEBUG is on.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

import coincurve
from bip_utils import (
    Base58Decoder,
    Base58Encoder,
    Bip39MnemonicGenerator,
    Bip39SeedGenerator,
    Bip39WordsNum,
    Bip44Changes,
    Bip84,
    Bip84Coins,
    Hash160,
    P2WPKHAddrEncoder,
    SegwitBech32Decoder,
    SegwitBech32Encoder,
)

from billing.chains.bitcoind import BitcoinRpc, ChainUnavailable, RpcError

log = logging.getLogger(__name__)

INSTALL_HINT = (
    "litecoind and litecoin-cli are needed for the chain tests and the sandbox: run "
    "`bash tests/ensure-chain-nodes.sh` (as root it installs the Debian package litecoind), "
    "or install Litecoin Core yourself and put it on PATH."
)

# Bech32 prefixes of the regtest networks, by daemon.
REGTEST_HRP = {"litecoind": "rltc", "bitcoind": "bcrt"}
# BIP32 version bytes of account public keys: tpub and vpub (BIP84) on the
# test networks, xpub and zpub (BIP84) on mainnet.
TPUB_VERSION = bytes.fromhex("043587cf")
VPUB_VERSION = bytes.fromhex("045f1cf6")
XPUB_VERSION = bytes.fromhex("0488b21e")
ZPUB_VERSION = bytes.fromhex("04b24746")


class NodeNotInstalled(RuntimeError):
    pass


class NodeStartError(RuntimeError):
    pass


def node_binaries(daemon: str = "litecoind") -> tuple[str, str]:
    """Paths of the daemon and its CLI, or `NodeNotInstalled` saying how to get them."""
    cli = daemon.removesuffix("d") + "-cli"
    found = shutil.which(daemon), shutil.which(cli)
    if not all(found):
        raise NodeNotInstalled(INSTALL_HINT)
    return found  # type: ignore[return-value]


def free_port() -> int:
    """A TCP port nobody listens on right now on loopback."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _die_with_parent() -> None:  # runs in the child between fork and exec
    # Linux: the node gets SIGTERM (a clean shutdown) when the process that
    # started it dies, however it dies. Elsewhere stop() and atexit do it.
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _kill(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def base_units_to_coins(amount: int) -> Decimal:
    """Base units to the exact coin amount the node takes (sent as a string)."""
    return Decimal(int(amount)).scaleb(-8).quantize(Decimal("0.00000001"))


def script_to_address(script_hex: str, *, hrp: str) -> str:
    """A segwit scriptPubKey (v0 or v1+) as a bech32/bech32m address for `hrp`.

    Lets one node pay a script derived for another chain: the BTC adapter's
    scripts are paid through the Litecoin node as `rltc` addresses.
    """
    script = bytes.fromhex(script_hex)
    opcode, length = script[0], script[1]
    if opcode == 0:
        version = 0
    elif 0x51 <= opcode <= 0x60:
        version = opcode - 0x50
    else:
        raise ValueError("not a segwit output script")
    if length != len(script) - 2:
        raise ValueError("malformed segwit output script")
    return SegwitBech32Encoder.Encode(hrp, version, script[2:])


def address_to_script(address: str, *, hrp: str) -> str:
    """The scriptPubKey hex of a segwit address."""
    version, program = SegwitBech32Decoder.Decode(hrp, address)
    opcode = 0 if version == 0 else 0x50 + version
    return bytes([opcode, len(program)]).hex() + program.hex()


# --- a watch-only account ------------------------------------------------------------


@dataclass(frozen=True)
class WatchOnlyAccount:
    """A BIP84 account public key (m/84'/1'/0' when generated) and its addresses.

    Only the public half exists: whatever is paid to these addresses on
    regtest can be seen, never spent, exactly like the server's keys.
    """

    vpub: str
    tpub: str
    hrp: str
    _account: Bip84 = field(repr=False, compare=False)

    def public_key(self, index: int, *, change: bool = False) -> bytes:
        chain = Bip44Changes.CHAIN_INT if change else Bip44Changes.CHAIN_EXT
        return self._account.Change(chain).AddressIndex(index).PublicKey().RawCompressed().ToBytes()

    def address(self, index: int, *, hrp: str | None = None, change: bool = False) -> str:
        return P2WPKHAddrEncoder.EncodeKey(self.public_key(index, change=change), hrp=hrp or self.hrp)

    def script_hex(self, index: int, *, change: bool = False) -> str:
        return "0014" + Hash160.QuickDigest(self.public_key(index, change=change)).hex()


def watch_only_account_from_key(key: str, *, hrp: str) -> WatchOnlyAccount:
    """The account behind an extended public key (vpub/tpub for test networks, zpub/xpub for mainnet)."""
    payload = Base58Decoder.CheckDecode(key)
    version, body = payload[:4], payload[4:]
    if version in (VPUB_VERSION, TPUB_VERSION):
        vpub = Base58Encoder.CheckEncode(VPUB_VERSION + body)
        public = Bip84.FromExtendedKey(vpub, Bip84Coins.BITCOIN_TESTNET)
    elif version in (ZPUB_VERSION, XPUB_VERSION):
        vpub = Base58Encoder.CheckEncode(VPUB_VERSION + body)
        public = Bip84.FromExtendedKey(Base58Encoder.CheckEncode(ZPUB_VERSION + body), Bip84Coins.BITCOIN)
    else:
        raise ValueError("not an extended public key (vpub, tpub, zpub or xpub)")
    if not public.IsPublicOnly():
        raise ValueError("extended private key given where a public one is expected")
    tpub = Base58Encoder.CheckEncode(TPUB_VERSION + body)
    return WatchOnlyAccount(vpub=vpub, tpub=tpub, hrp=hrp, _account=public)


def watch_only_account_generate(*, hrp: str = "rltc") -> WatchOnlyAccount:
    """A fresh random account; the mnemonic and private keys are discarded here."""
    mnemonic = Bip39MnemonicGenerator().FromWordsNumber(Bip39WordsNum.WORDS_NUM_24)
    seed = Bip39SeedGenerator(mnemonic).Generate()
    account = Bip84.FromSeed(seed, Bip84Coins.BITCOIN_TESTNET).Purpose().Coin().Account(0)
    vpub = account.PublicKey().ToExtended()
    del mnemonic, seed, account
    return watch_only_account_from_key(vpub, hrp=hrp)


# --- the node ------------------------------------------------------------------------------


def _sha256d(data: bytes) -> bytes:
    return hashlib.sha256(hashlib.sha256(data).digest()).digest()


def _varint(n: int) -> bytes:
    if n < 0xFD:
        return n.to_bytes(1, "little")
    if n <= 0xFFFF:
        return b"\xfd" + n.to_bytes(2, "little")
    return b"\xfe" + n.to_bytes(4, "little")


_RBF_SEQUENCE = (0xFFFFFFFD).to_bytes(4, "little")


def _outpoint(txid: str, vout: int) -> bytes:
    return bytes.fromhex(txid)[::-1] + vout.to_bytes(4, "little")


def _outputs_bytes(outputs: Sequence[tuple[str, int]]) -> bytes:
    raw = bytearray(_varint(len(outputs)))
    for script_hex, amount in outputs:
        script = bytes.fromhex(script_hex)
        raw += int(amount).to_bytes(8, "little") + _varint(len(script)) + script
    return bytes(raw)


def _unsigned_tx(inputs: Sequence[tuple[str, int]], outputs: Sequence[tuple[str, int]]) -> str:
    """Serialise a version-2 transaction (no witness yet) with RBF-signalling inputs."""
    raw = bytearray((2).to_bytes(4, "little"))
    raw += _varint(len(inputs))
    for txid, vout in inputs:
        raw += _outpoint(txid, vout) + b"\x00" + _RBF_SEQUENCE
    raw += _outputs_bytes(outputs) + (0).to_bytes(4, "little")
    return raw.hex()


class _FundingKey:
    """A throwaway P2WPKH key that signs the helpers' bulk transactions locally.

    Asking the node to sign thousands of transactions one call at a time is
    the slow part of building a big block; signing here is a BIP143 digest
    and one ECDSA signature each.
    """

    def __init__(self) -> None:
        self._key = coincurve.PrivateKey()
        self.public = self._key.public_key.format(compressed=True)
        self.pubkey_hash = Hash160.QuickDigest(self.public)
        self.script_hex = "0014" + self.pubkey_hash.hex()

    def _sign(self, digest: bytes) -> bytes:
        # libsecp256k1 signs deterministically (RFC 6979) with a low S, as relay policy wants.
        return self._key.sign(digest, hasher=None) + b"\x01"  # SIGHASH_ALL

    def spend(self, txid: str, vout: int, amount: int, outputs: Sequence[tuple[str, int]]) -> str:
        """A signed transaction spending one output of ours (`amount` base units)."""
        outpoint = _outpoint(txid, vout)
        outs = _outputs_bytes(outputs)
        version, locktime = (2).to_bytes(4, "little"), (0).to_bytes(4, "little")
        script_code = b"\x19\x76\xa9\x14" + self.pubkey_hash + b"\x88\xac"
        preimage = (
            version
            + _sha256d(outpoint)
            + _sha256d(_RBF_SEQUENCE)
            + outpoint
            + script_code
            + int(amount).to_bytes(8, "little")
            + _RBF_SEQUENCE
            + _sha256d(outs[len(_varint(len(outputs))) :])
            + locktime
            + (1).to_bytes(4, "little")
        )
        signature = self._sign(_sha256d(preimage))
        witness = b"\x02" + _varint(len(signature)) + signature + _varint(len(self.public)) + self.public
        raw = version + b"\x00\x01" + b"\x01" + outpoint + b"\x00" + _RBF_SEQUENCE + outs + witness + locktime
        return raw.hex()


@dataclass
class RegtestNode:
    """A running regtest node; `start()` makes one, `stop()` ends it."""

    daemon: str
    datadir: Path
    rpc_port: int
    p2p_port: int
    rpc_user: str
    rpc_password: str = field(repr=False)
    wallet: str
    process: subprocess.Popen = field(repr=False)
    owns_datadir: bool = True
    _rpc: BitcoinRpc | None = field(default=None, repr=False)
    _wallet_rpc: BitcoinRpc | None = field(default=None, repr=False)
    _finalizer: weakref.finalize | None = field(default=None, repr=False)

    # --- life -----------------------------------------------------------------

    @classmethod
    def start(
        cls,
        *,
        daemon: str = "litecoind",
        datadir: Path | str | None = None,
        wallet: str = "harness",
        mine: int = 101,
        extra_args: Iterable[str] = (),
        startup_timeout: float = 60.0,
        attempts: int = 3,
    ) -> RegtestNode:
        """Start a node, wait for its RPC, create `wallet` and mine `mine` blocks to it.

        Ports are picked free on loopback just before the start; if another
        process grabs one in between, the start is retried with new ports.
        """
        binary, _cli = node_binaries(daemon)
        owns = datadir is None
        root = Path(tempfile.mkdtemp(prefix=f"{daemon}-regtest-")) if owns else Path(datadir)
        root.mkdir(parents=True, exist_ok=True)
        extra = list(extra_args)
        last_error: Exception | None = None
        for _ in range(max(1, attempts)):
            node = cls._launch(daemon, binary, root, wallet, extra, owns)
            try:
                node._wait_ready(startup_timeout)
            except NodeStartError as exc:
                last_error = exc
                node.stop(remove=False)
                if "bind" in str(exc).lower():
                    continue  # a port was taken between picking and binding: new ports
                break
            try:
                node._prepare_wallet(mine)
            except BaseException:
                node.stop()
                raise
            log.info("%s regtest node up: RPC 127.0.0.1:%d, data in %s", daemon, node.rpc_port, root)
            return node
        if owns:
            shutil.rmtree(root, ignore_errors=True)
        raise NodeStartError(str(last_error))

    @classmethod
    def _launch(cls, daemon: str, binary: str, root: Path, wallet: str, extra: list[str], owns: bool) -> RegtestNode:
        rpc_port, p2p_port = free_port(), free_port()
        while p2p_port == rpc_port:
            p2p_port = free_port()
        user, password = f"u{secrets.token_hex(6)}", secrets.token_urlsafe(24)
        lines = [
            "regtest=1",
            "server=1",
            "[regtest]",
            f"rpcuser={user}",
            f"rpcpassword={password}",
            f"rpcport={rpc_port}",
            "rpcbind=127.0.0.1",
            "rpcallowip=127.0.0.1",
            f"port={p2p_port}",
            f"bind=127.0.0.1:{p2p_port}",
            "listen=1",
            "discover=0",
            "dnsseed=0",
            "upnp=0",
            "printtoconsole=0",
            "fallbackfee=0.0002",
            "walletrbf=1",  # wallet payments signal BIP125, so tests can replace them
            "keypool=20",
            "rpcworkqueue=64",
            "rpcthreads=4",
        ]
        if daemon == "litecoind":
            lines += [
                # Litecoin Core refuses replacements in its mempool by default.
                "mempoolreplacement=1",
                # Keep MWEB from activating at height 432: its first block needs
                # a peg-in, and the wallet would then spend MWEB coins, whose
                # canonical outputs appear only once mined.
                "vbparams=mweb:-2:0",
            ]
        conf = root / f"{daemon.removesuffix('d')}.conf"
        # Credentials go in a file only we can read, never on the command line.
        fd = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write("\n".join(lines) + "\n")
        stderr = open(root / "stderr.log", "ab")  # noqa: SIM115 - owned by the child
        try:
            process = subprocess.Popen(
                [binary, f"-datadir={root}", f"-conf={conf}", *extra],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                start_new_session=True,  # a Ctrl-C in the terminal reaches us, and we stop it
                preexec_fn=_die_with_parent,
            )
        finally:
            stderr.close()
        node = cls(
            daemon=daemon,
            datadir=root,
            rpc_port=rpc_port,
            p2p_port=p2p_port,
            rpc_user=user,
            rpc_password=password,
            wallet=wallet,
            process=process,
            owns_datadir=owns,
        )
        node._finalizer = weakref.finalize(node, _kill, process)
        return node

    def _log_tail(self, lines: int = 15) -> str:
        text = []
        for path in (self.datadir / "stderr.log", self.datadir / "regtest" / "debug.log"):
            with contextlib.suppress(OSError):
                text.extend(path.read_text(errors="replace").splitlines()[-lines:])
        return "\n".join(text)

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        rpc = BitcoinRpc(self.url, timeout=5, retries=0)
        try:
            while True:
                if self.process.poll() is not None:
                    raise NodeStartError(
                        f"{self.daemon} exited with status {self.process.returncode}:\n{self._log_tail()}"
                    )
                try:
                    rpc.call("getblockchaininfo")
                    return
                except ChainUnavailable:
                    if time.monotonic() > deadline:
                        raise NodeStartError(
                            f"{self.daemon} RPC not ready after {timeout:g}s:\n{self._log_tail()}"
                        ) from None
                    time.sleep(0.1)
        finally:
            rpc.close()

    def _prepare_wallet(self, mine: int) -> None:
        try:
            self.rpc.call("createwallet", self.wallet)
        except RpcError as exc:
            if "already exists" not in exc.message:
                raise
            with contextlib.suppress(RpcError):
                self.rpc.call("loadwallet", self.wallet)
        if mine:
            self.mine(mine)

    def stop(self, *, timeout: float = 30.0, remove: bool = True) -> None:
        """Shut the node down cleanly (killing it if it does not stop) and clean up."""
        for client in (self._rpc, self._wallet_rpc):
            if client is not None:
                client.close()
        self._rpc = self._wallet_rpc = None
        if self.process.poll() is None:
            try:
                with BitcoinRpc(self.url, timeout=10, retries=0) as rpc:
                    rpc.call("stop")
                self.process.wait(timeout=timeout)
            except (ChainUnavailable, RpcError, subprocess.TimeoutExpired):
                _kill(self.process)
        if self._finalizer is not None:
            self._finalizer.detach()
        if remove and self.owns_datadir:
            shutil.rmtree(self.datadir, ignore_errors=True)

    def __enter__(self) -> RegtestNode:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- access ---------------------------------------------------------------

    @property
    def url(self) -> str:
        """The RPC URL with credentials, as the `*_RPC_URL` settings take it."""
        return f"http://{self.rpc_user}:{self.rpc_password}@127.0.0.1:{self.rpc_port}"

    @property
    def hrp(self) -> str:
        return REGTEST_HRP[self.daemon]

    @property
    def rpc(self) -> BitcoinRpc:
        """The node's RPC (chain calls)."""
        if self._rpc is None:
            self._rpc = BitcoinRpc(self.url)
        return self._rpc

    @property
    def wallet_rpc(self) -> BitcoinRpc:
        """The node's RPC bound to the harness wallet (sending, bumping)."""
        if self._wallet_rpc is None:
            self._wallet_rpc = BitcoinRpc(self.url, wallet=self.wallet)
        return self._wallet_rpc

    # --- chain helpers ----------------------------------------------------------

    def height(self) -> int:
        return int(self.rpc.call("getblockcount"))

    def tip(self) -> tuple[int, str]:
        height, best = self.rpc.batch([("getblockcount", ()), ("getbestblockhash", ())])
        return int(height), best

    def new_address(self) -> str:
        """A fresh bech32 address of the node's own wallet."""
        return self.wallet_rpc.call("getnewaddress", "", "bech32")

    def mine(self, blocks: int = 1, *, address: str | None = None) -> list[str]:
        """Mine `blocks` blocks (to the wallet unless `address`); their hashes."""
        return self.rpc.call("generatetoaddress", blocks, address or self.new_address())

    def send(self, address: str, amount: int) -> str:
        """Pay `amount` base units to `address` from the wallet (BIP125 replaceable)."""
        return self.wallet_rpc.call("sendtoaddress", address, base_units_to_coins(amount))

    def send_to_script(self, script_hex: str, amount: int) -> str:
        """Pay a segwit scriptPubKey, whichever chain it was derived for."""
        return self.send(script_to_address(script_hex, hrp=self.hrp), amount)

    def bumpfee(self, txid: str) -> str:
        """Replace a wallet payment with the same one at a higher fee (BIP125); the new txid."""
        return self.wallet_rpc.call("bumpfee", txid)["txid"]

    def replace(self, txid: str, *, address: str, extra_fee: int = 10_000) -> str:
        """Double-spend a mempool payment's inputs to `address` instead (BIP125).

        The replacement sends everything the original spent, less the
        original fee plus `extra_fee`, to `address`: none of the original
        outputs survives. Returns the replacement's txid.
        """
        tx = self.rpc.call("getrawtransaction", txid, True)
        total_out = sum(int(Decimal(o["value"]).scaleb(8)) for o in tx["vout"])
        inputs = [(i["txid"], int(i["vout"])) for i in tx["vin"]]
        # Same inputs, outputs extra_fee smaller: the fee grows by extra_fee,
        # which satisfies BIP125's "pay more, and for your own relay" rules.
        outputs = [(address_to_script(address, hrp=self.hrp), total_out - extra_fee)]
        signed = self.wallet_rpc.call("signrawtransactionwithwallet", _unsigned_tx(inputs, outputs))
        if not signed.get("complete"):
            raise RpcError(0, f"could not sign the replacement: {signed.get('errors')}", method="replace")
        return self.rpc.call("sendrawtransaction", signed["hex"])

    def invalidate(self, block_hash: str) -> None:
        self.rpc.call("invalidateblock", block_hash)

    def reconsider(self, block_hash: str) -> None:
        self.rpc.call("reconsiderblock", block_hash)

    def mempool(self) -> list[str]:
        return self.rpc.call("getrawmempool")

    def send_many_transactions(
        self,
        count: int,
        *,
        payees: Sequence[tuple[str, int]] = (),
        amount: int = 100_000,
        fee: int = 2_000,
    ) -> list[str]:
        """Put `count` transactions in the mempool quickly; their txids.

        Builds a fan-out transaction with `count` outputs to a throwaway key and
        mines it (one block), then `count` one-input transactions spending those
        outputs, signed here and sent to the node in one batch. The
        first `len(payees)` of them also pay `payees[i]` = (script hex, base
        units); every transaction pays the rest back to the throwaway key.
        Mine a block afterwards to get one block holding them all.
        """
        key = _FundingKey()
        per_output = amount + fee + max((a for _, a in payees), default=0)
        fanout = _unsigned_tx([], [(key.script_hex, per_output)] * count)
        funded = self.wallet_rpc.call("fundrawtransaction", fanout, {"changePosition": count})
        signed = self.wallet_rpc.call("signrawtransactionwithwallet", funded["hex"])
        fanout_txid = self.rpc.call("sendrawtransaction", signed["hex"])
        self.mine(1)
        raws = []
        for index in range(count):
            paid = payees[index][1] if index < len(payees) else 0
            outputs = [(key.script_hex, per_output - fee - paid)]
            if index < len(payees):
                outputs.insert(0, payees[index])
            raws.append(key.spend(fanout_txid, index, per_output, outputs))
        return self.rpc.batch([("sendrawtransaction", (raw,)) for raw in raws])


# --- the sandbox of `make run` ------------------------------------------------------------

SANDBOX_WALLET = "sandbox"
# Blocks the sandbox chain starts with: 200 mature coinbases (8,750 regtest LTC),
# enough to pay invoices of any size.
SANDBOX_MIN_HEIGHT = 300
# The LTC rate quoted in the sandbox when MANUAL_RATES_USD does not name one.
SANDBOX_LTC_USD = "90"


def regtest_wallet_pay(
    *, url: str, wallet: str, address: str, amount: int, mine: int = 0, max_top_ups: int = 5
) -> tuple[str, list[str]]:
    """Pay `amount` base units to `address` from a regtest node's wallet, then mine
    `mine` blocks; (txid, block hashes). Refuses any node that is not on regtest."""
    with BitcoinRpc(url) as rpc, BitcoinRpc(url, wallet=wallet) as wallet_rpc:
        chain = rpc.call("getblockchaininfo")["chain"]
        if chain != "regtest":
            raise RpcError(0, f"the node is on {chain!r}, not regtest: refusing to pay from it", method="sandbox")
        for _ in range(max_top_ups):
            balance = Decimal(wallet_rpc.call("getbalance"))
            if balance.scaleb(8) > amount + 1_000_000:
                break
            # Coinbases mature after 100 blocks: mine 101 to make the wallet richer.
            rpc.call("generatetoaddress", 101, wallet_rpc.call("getnewaddress", "", "bech32"))
        txid = wallet_rpc.call("sendtoaddress", address, base_units_to_coins(amount))
        hashes: list[str] = []
        if mine:
            hashes = rpc.call("generatetoaddress", mine, wallet_rpc.call("getnewaddress", "", "bech32"))
        return txid, hashes


@dataclass
class Sandbox:
    """A regtest Litecoin node kept in the data folder, and the settings that point LTC at it."""

    node: RegtestNode
    vpub: str
    env: dict[str, str]
    env_file: Path

    def stop(self) -> None:
        """Stop the node (its chain stays in the data folder) and retract the settings."""
        with contextlib.suppress(OSError):
            self.env_file.unlink()
        self.node.stop(remove=False)


def _sandbox_key(path: Path) -> str:
    """The sandbox's watch-only account key, made once and kept (only the vpub:
    the mnemonic and private keys are discarded when it is generated)."""
    if path.is_file():
        vpub = path.read_text().strip()
        watch_only_account_from_key(vpub, hrp=REGTEST_HRP["litecoind"])  # refuses anything else
        return vpub
    vpub = watch_only_account_generate(hrp=REGTEST_HRP["litecoind"]).vpub
    path.write_text(vpub + "\n")
    return vpub


def _with_ltc_rate(rates: str) -> str:
    entries = [e.strip() for e in (rates or "").split(",") if e.strip()]
    if any(e.split("=", 1)[0].strip().upper() == "LTC" for e in entries):
        return ",".join(entries)
    return ",".join([*entries, f"LTC={SANDBOX_LTC_USD}"])


def sandbox_start(*, folder: Path, manual_rates: str = "") -> Sandbox:
    """Start (or restart) the sandbox node in `folder` and write its settings.

    The node's chain, wallet and the watch-only key persist in `folder`
    across runs; ports and RPC credentials are new each time. `env` holds
    the settings for the processes that must see the sandbox (LTC_XPUB,
    LTC_NETWORK=regtest, LTC_RPC_URL, MANUAL_RATES_USD with an LTC rate,
    SANDBOX=1), also written to `folder/sandbox.env` (mode 0600) for commands
    run from another shell.
    """
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    vpub = _sandbox_key(folder / "ltc-vpub")
    node = RegtestNode.start(datadir=folder / "litecoind", wallet=SANDBOX_WALLET, mine=0)
    try:
        height = node.height()
        if height < SANDBOX_MIN_HEIGHT:
            node.mine(SANDBOX_MIN_HEIGHT - height)
        env = {
            "LTC_XPUB": vpub,
            "LTC_NETWORK": "regtest",
            "LTC_RPC_URL": node.url,
            "MANUAL_RATES_USD": _with_ltc_rate(manual_rates),
            "SANDBOX": "1",
        }
        env_file = folder / "sandbox.env"
        fd = os.open(env_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write("# Written by the sandbox while `make run` runs; removed when it stops.\n")
            handle.writelines(f"{key}='{value}'\n" for key, value in env.items())
    except BaseException:
        node.stop(remove=False)
        raise
    return Sandbox(node=node, vpub=vpub, env=env, env_file=env_file)
