"""A private litecoind (or bitcoind) regtest node on this machine, for the tests,
the benchmark and the sandbox of `make run`.

Debian ships Litecoin Core (`litecoind`) and not Bitcoin Core; both share the
RPC and block format, so one node proves both adapters. `RegtestNode.start()`
runs `litecoind -regtest` in a temporary directory on free loopback ports with
credentials generated for the run, creates a wallet, mines the first blocks,
and `stop()` shuts it down and removes the directory. The process is tied to
ours (it is sent SIGTERM if we die), so no node outlives the run.
`regtest_node_start()` is the same start for test harnesses: a missing
litecoind fails the run with the fix instead of skipping.

The helpers (mine, send, bump, replace, invalidate...) are what the tests and
`sandbox_pay` do to a node. Transactions the helpers build themselves are
made with python-bitcoinlib (serialisation, BIP143 signature hashes, scripts)
and signed with libsecp256k1 (coincurve). `watch_only_account_generate()`
makes a fresh BIP84 account and keeps only its public half, as the server is
configured in production.

Development and tests only: nothing in production imports devtools.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
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
from bitcoin.core import CMutableTransaction, CMutableTxIn, CMutableTxOut, COutPoint, CTxInWitness, CTxWitness, lx
from bitcoin.core.script import (
    OP_0,
    OP_CHECKSIG,
    OP_DUP,
    OP_EQUALVERIFY,
    OP_HASH160,
    SIGHASH_ALL,
    SIGVERSION_WITNESS_V0,
    CScript,
    CScriptOp,
    CScriptWitness,
    SignatureHash,
)

from billing.chains.utxo.rpc import BitcoinRpc, ChainUnavailable, RpcError
from devtools.processes import die_with_parent, free_port

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
    script = CScript(bytes.fromhex(script_hex))
    if not script.is_witness_scriptpubkey():
        raise ValueError("not a segwit output script")
    return SegwitBech32Encoder.Encode(hrp, CScriptOp(script[0]).decode_op_n(), bytes(script[2:]))


def address_to_script(address: str, *, hrp: str) -> str:
    """The scriptPubKey hex of a segwit address."""
    version, program = SegwitBech32Decoder.Decode(hrp, address)
    return CScript([CScriptOp.encode_op_n(version), program]).hex()


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


# BIP125: inputs with a sequence below 0xfffffffe signal that they may be replaced.
RBF_SEQUENCE = 0xFFFFFFFD


def transaction_unsigned(inputs: Sequence[tuple[str, int]], outputs: Sequence[tuple[str, int]]) -> str:
    """A version-2 transaction (hex, no witness yet) spending `inputs` (txid, vout)
    with BIP125-signalling sequences, paying `outputs` (script hex, base units)."""
    tx = CMutableTransaction(
        [CMutableTxIn(COutPoint(lx(txid), vout), nSequence=RBF_SEQUENCE) for txid, vout in inputs],
        [CMutableTxOut(int(amount), CScript(bytes.fromhex(script))) for script, amount in outputs],
        nVersion=2,
    )
    return tx.serialize().hex()


class FundingKey:
    """A throwaway P2WPKH key that signs the helpers' bulk transactions locally.

    Asking the node to sign thousands of transactions one call at a time is
    the slow part of building a big block; signing here is a BIP143 digest
    (python-bitcoinlib) and one ECDSA signature (libsecp256k1) each.
    """

    def __init__(self) -> None:
        self._key = coincurve.PrivateKey()
        self.public = self._key.public_key.format(compressed=True)
        self.pubkey_hash = Hash160.QuickDigest(self.public)
        self.script = CScript([OP_0, self.pubkey_hash])
        self.script_hex = self.script.hex()
        # BIP143: a P2WPKH input is signed over the P2PKH script of its key.
        self._script_code = CScript([OP_DUP, OP_HASH160, self.pubkey_hash, OP_EQUALVERIFY, OP_CHECKSIG])

    def spend(self, txid: str, vout: int, amount: int, outputs: Sequence[tuple[str, int]]) -> str:
        """A signed transaction (hex) spending one output of ours worth `amount` base units."""
        tx = CMutableTransaction(
            [CMutableTxIn(COutPoint(lx(txid), vout), nSequence=RBF_SEQUENCE)],
            [CMutableTxOut(int(value), CScript(bytes.fromhex(script))) for script, value in outputs],
            nVersion=2,
        )
        digest = SignatureHash(
            self._script_code, tx, 0, SIGHASH_ALL, amount=int(amount), sigversion=SIGVERSION_WITNESS_V0
        )
        # libsecp256k1 signs deterministically (RFC 6979) with a low S, as relay policy wants.
        signature = self._key.sign(digest, hasher=None) + bytes([SIGHASH_ALL])
        tx.wit = CTxWitness([CTxInWitness(CScriptWitness([signature, self.public]))])
        return tx.serialize().hex()


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
            # A listener on the P2P port (LTC_P2P_PEER) hears of pool transactions at once, not
            # after the random delay a node keeps for inbound peers.
            "whitelist=noban@127.0.0.1",
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
                preexec_fn=die_with_parent,
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
        signed = self.wallet_rpc.call("signrawtransactionwithwallet", transaction_unsigned(inputs, outputs))
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
        key = FundingKey()
        per_output = amount + fee + max((a for _, a in payees), default=0)
        fanout = transaction_unsigned([], [(key.script_hex, per_output)] * count)
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


def regtest_node_start(**kwargs) -> RegtestNode:
    """`RegtestNode.start(**kwargs)` for test harnesses: a missing litecoind fails
    the pytest run with the command that installs it; a chain test never skips."""
    import pytest

    try:
        return RegtestNode.start(**kwargs)
    except NodeNotInstalled as exc:
        pytest.fail(str(exc), pytrace=False)
