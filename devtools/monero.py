"""A private Monero regtest network for the tests, the benchmark and the sandbox.

`MoneroRegtest.start()` runs, in a temporary directory on free loopback ports:

- `monerod --regtest --offline --fixed-difficulty 1`: a one-node chain that
  mines on request (`generateblocks`);
- a payer `monero-wallet-rpc` holding a wallet with full keys, mined to:
  coinbase outputs unlock after 60 blocks, and a transfer needs 16 unlocked
  outputs for its ring, so `start` mines past both;
- the merchant's `monero-wallet-rpc` holding a **view-only** wallet made from
  a primary address and private view key generated for this run (the spend
  key is dropped at once), as a server holds it. The wallet file is written by
  `monero-wallet-cli --generate-from-view-key` because only it can store a
  subaddress lookahead in the wallet (wallet-rpc 0.18 cannot set one).

Wallet-rpc runs without `--regtest`: regtest keeps mainnet address formats.
Every process is tied to ours (SIGTERM if we die); `stop()` ends them and
removes the directory.

Nothing here runs in production.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import tempfile
import threading
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from devtools.processes import die_with_parent, free_port

log = logging.getLogger(__name__)

INSTALL_HINT = (
    "monerod, monero-wallet-rpc and monero-wallet-cli are needed for the Monero tests and sandbox: run "
    "`bash tests/ensure-chain-nodes.sh` as root (it installs Debian's `monero` package), or put them on PATH."
)
START_TIMEOUT = 120.0
COINBASE_UNLOCK = 60  # blocks before a mined output can be spent
RING_OUTPUTS = 16  # unlocked outputs a transfer's ring needs on the chain
DEFAULT_LOOKAHEAD = 200  # Monero's own minor subaddress lookahead
NO_DAEMON_CONNECTION = -38
REORG_BLOCKS = 12  # blocks mined past a fork point (see MoneroRegtest.reorg)


class NodeNotInstalled(RuntimeError):
    pass


class NodeStartError(RuntimeError):
    pass


class MoneroRpcError(RuntimeError):
    def __init__(self, method: str, error: dict) -> None:
        super().__init__(f"{method}: {error.get('message')} (code {error.get('code')})")
        self.code = error.get("code")
        self.message = error.get("message", "")


def monero_binaries() -> dict[str, str]:
    found = {name: shutil.which(name) for name in ("monerod", "monero-wallet-rpc", "monero-wallet-cli")}
    if not all(found.values()):
        raise NodeNotInstalled(INSTALL_HINT)
    return {name: str(path) for name, path in found.items()}


def monero_installed() -> bool:
    try:
        monero_binaries()
    except NodeNotInstalled:
        return False
    return True


def _kill(process: subprocess.Popen | None) -> None:
    if process is not None and process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def view_only_keys_generate() -> tuple[str, str]:
    """A fresh mainnet-format primary address and its private view key; the spend key is dropped."""
    from monero.seed import Seed

    seed = Seed()
    return str(seed.public_address()), seed.secret_view_key()


class Rpc:
    """JSON-RPC to one daemon or wallet-rpc on loopback (no login)."""

    def __init__(self, port: int, *, timeout: float = 300.0) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.http = httpx.Client(timeout=timeout)

    def call(self, method: str, **params: Any) -> dict:
        answer = self.http.post(
            f"{self.url}/json_rpc", json={"jsonrpc": "2.0", "id": "0", "method": method, "params": params}
        ).json()
        if "error" in answer:
            raise MoneroRpcError(method, answer["error"])
        return answer["result"]

    def other(self, path: str, **payload: Any) -> dict:
        """A daemon's non-JSON-RPC endpoint (/pop_blocks, ...)."""
        return self.http.post(f"{self.url}/{path}", json=payload).json()

    def answers(self) -> bool:
        try:
            self.http.post(
                f"{self.url}/json_rpc", json={"jsonrpc": "2.0", "id": "0", "method": "get_version"}, timeout=2.0
            )
        except httpx.HTTPError:
            return False
        return True


def pool_hashes(daemon: Rpc) -> set[str]:
    """The transactions in a daemon's pool."""
    return set(daemon.other("get_transaction_pool_hashes").get("tx_hashes") or [])


def mine_past_pool(daemon: Rpc, *, blocks: int, address: str, tries: int = 20) -> int:
    """Mine so that what the pool holds now ends up with `blocks` confirmations; the blocks mined.

    monerod mines a transaction only once it has left the Dandelion++ embargo a local
    submission starts in (`tx_memory_pool::fill_block_template` skips what does not match
    `relay_category::legacy`); on an offline daemon that takes a moment, so a block mined
    right after a transfer can miss it: mine one block at a time until the pool's
    transactions are in one, then the confirmations on top of it."""
    waiting = pool_hashes(daemon)
    daemon.call("generateblocks", amount_of_blocks=1, wallet_address=address)
    mined = 1
    while waiting & pool_hashes(daemon) and mined <= tries:
        time.sleep(0.1)
        daemon.call("generateblocks", amount_of_blocks=1, wallet_address=address)
        mined += 1
    if blocks > 1:
        daemon.call("generateblocks", amount_of_blocks=blocks - 1, wallet_address=address)
        mined += blocks - 1
    return mined


@dataclass
class WalletProcess:
    """One monero-wallet-rpc process; `restart()` reopens its wallet file on the same port."""

    args: list[str]
    port: int
    log_path: Path
    process: subprocess.Popen | None = None
    rpc: Rpc = field(init=False)

    def __post_init__(self) -> None:
        self.rpc = Rpc(self.port)

    def spawn(self) -> WalletProcess:
        """Start the process (from the thread that lives as long as it: it dies with that thread)."""
        out = open(self.log_path, "ab")  # noqa: SIM115 - the child writes to it until it ends
        self.process = subprocess.Popen(
            self.args,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent,
            cwd=self.log_path.parent,
            env=_ENV,
        )
        out.close()
        return self

    def ready_wait(self) -> WalletProcess:
        assert self.process is not None
        _wait(lambda: self.rpc.answers(), self.process, self.log_path, "monero-wallet-rpc")
        return self

    def start(self) -> WalletProcess:
        return self.spawn().ready_wait()

    def stop(self) -> None:
        _kill(self.process)

    @property
    def url(self) -> str:
        return self.rpc.url


def _wait(ready, process: subprocess.Popen, log_path: Path, what: str) -> None:
    give_up = time.monotonic() + START_TIMEOUT
    while not ready():
        if process.poll() is not None:
            tail = log_path.read_text(errors="replace")[-2000:] if log_path.exists() else ""
            raise NodeStartError(f"{what} exited with {process.returncode}:\n{tail}")
        if time.monotonic() > give_up:
            _kill(process)
            raise NodeStartError(f"{what} did not answer within {START_TIMEOUT:.0f}s")
        time.sleep(0.1)


class _Processes(list):
    """The processes of one network (a list that a finalizer can watch)."""


def _stop_all(processes: Sequence[Any], directory: Path | None) -> None:
    for p in processes:
        _kill(p)
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)


# The daemon and wallets only need a few threads; RandomX large pages are refused in
# containers, and the failed attempt logs a stack trace per block: mask them off.
_ENV = {**os.environ, "MONERO_RANDOMX_UMASK": "1"}


@dataclass
class MoneroRegtest:
    directory: Path
    daemon_process: subprocess.Popen | None
    daemon_port: int
    payer: WalletProcess
    merchant: WalletProcess
    address: str  # the merchant's primary address (XMR_ADDRESS)
    view_key: str  # the merchant's private view key (XMR_VIEW_KEY)
    lookahead: int  # the merchant wallet's minor subaddress lookahead
    payer_address: str = ""
    zmq_url: str = ""  # monerod's ZMQ publisher (tcp://127.0.0.1:port)
    daemon: Rpc = field(init=False)
    _finalizer: Any = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self.daemon = Rpc(self.daemon_port)

    # --- start and stop ------------------------------------------------------------

    @classmethod
    def start(
        cls,
        *,
        mine: int = COINBASE_UNLOCK
        + RING_OUTPUTS * 3,  # wallet2 can loop picking a ring among too few unlocked outputs,
        lookahead: int = DEFAULT_LOOKAHEAD,
        directory: Path | None = None,
        tx_notify: str = "",
    ) -> MoneroRegtest:
        """Start the daemon and both wallets; mine to the payer until the chain has `mine` blocks.

        `tx_notify`: the merchant wallet-rpc's `--tx-notify` (a program and its arguments, `%s`
        the transaction hash; it runs with an empty environment: billing/chains/monero/notify.py).

        `lookahead`: the merchant wallet's minor subaddress lookahead (how far
        past its last created subaddress it recognises payments). `directory`:
        keep everything there (the sandbox); a temporary one otherwise.
        """
        bins = monero_binaries()
        temporary = directory is None
        directory = Path(tempfile.mkdtemp(prefix="monero-")) if directory is None else directory
        directory.mkdir(parents=True, exist_ok=True)
        wallets = directory / "wallets"
        wallets.mkdir(exist_ok=True)
        daemon_port = free_port()
        zmq_url = f"tcp://127.0.0.1:{free_port()}"
        daemon_log = directory / "monerod.out"
        daemon_args = [
            bins["monerod"],
            "--regtest",
            "--keep-fakechain",  # a restart (or the sandbox's next run) keeps the chain
            "--offline",
            "--fixed-difficulty",
            "1",
            "--data-dir",
            str(directory / "chain"),
            "--rpc-bind-ip",
            "127.0.0.1",
            "--rpc-bind-port",
            str(daemon_port),
            "--p2p-bind-ip",
            "127.0.0.1",
            "--p2p-bind-port",
            str(free_port()),
            # ZMQ: the RPC on its own port and the publisher the watcher's listener follows
            # (`manage.py listen_chain XMR`, XMR_ZMQ_URL).
            "--zmq-rpc-bind-ip",
            "127.0.0.1",
            "--zmq-rpc-bind-port",
            str(free_port()),
            "--zmq-pub",
            zmq_url,
            "--no-igd",
            "--non-interactive",
            "--db-sync-mode",
            "fastest:async:1000000000",
            "--max-concurrency",
            "2",
            "--log-file",
            str(directory / "monerod.log"),
        ]
        daemon = _daemon_spawn(daemon_args, daemon_log)
        processes = _Processes([daemon])
        finalizer = weakref.finalize(processes, _stop_all, processes, directory if temporary else None)
        try:
            merchant_file = wallets / "merchant"
            address, view_key = _merchant_keys(directory)
            # The view-only wallet file is written offline while the daemon starts.
            maker = threading.Thread(
                target=_view_only_wallet_write,
                args=(bins["monero-wallet-cli"], merchant_file, address, view_key, lookahead),
            )
            if not merchant_file.with_suffix(".keys").exists():
                maker.start()
            rpc = Rpc(daemon_port)
            _wait(rpc.answers, daemon, daemon_log, "monerod")

            def wallet_rpc(name: str, *extra: str) -> WalletProcess:
                port = free_port()
                args = [
                    bins["monero-wallet-rpc"],
                    "--daemon-address",
                    f"127.0.0.1:{daemon_port}",
                    "--trusted-daemon",
                    "--rpc-bind-ip",
                    "127.0.0.1",
                    "--rpc-bind-port",
                    str(port),
                    "--disable-rpc-login",
                    "--non-interactive",
                    "--max-concurrency",
                    "2",
                    "--log-file",
                    str(directory / f"{name}.log"),
                    *extra,
                ]
                return WalletProcess(args, port, directory / f"{name}.out")

            payer_file = wallets / "payer"
            payer = wallet_rpc("payer", "--wallet-dir", str(wallets))
            payer.spawn()
            processes.append(payer.process)
            payer.ready_wait()
            if maker.ident is not None:
                maker.join()
            if not merchant_file.with_suffix(".keys").exists():
                raise NodeStartError("monero-wallet-cli did not write the view-only wallet (see merchant-cli.log)")
            # The merchant's wallet-rpc opens its file (slow: key derivation, the
            # subaddress table) while the payer's wallet is made and mined to.
            merchant = wallet_rpc(
                "merchant",
                "--wallet-file",
                str(merchant_file),
                "--password",
                "",
                *(["--tx-notify", tx_notify] if tx_notify else []),
            )
            merchant.spawn()
            processes.append(merchant.process)
            if payer_file.with_suffix(".keys").exists():
                payer.rpc.call("open_wallet", filename="payer", password="")
            else:
                payer.rpc.call("create_wallet", filename="payer", password="", language="English")
            payer_address = payer.rpc.call("get_address")["address"]
            height = int(rpc.call("get_info")["height"])
            if mine > height:  # a kept chain (the sandbox) is mined only once
                rpc.call("generateblocks", amount_of_blocks=mine - height, wallet_address=payer_address)
            merchant.ready_wait()
        except BaseException:
            finalizer()
            raise
        node = cls(
            directory=directory,
            daemon_process=daemon,
            daemon_port=daemon_port,
            payer=payer,
            merchant=merchant,
            address=address,
            view_key=view_key,
            lookahead=lookahead,
            payer_address=payer_address,
            zmq_url=zmq_url,
        )
        node._finalizer = finalizer
        node._processes = processes
        return node

    def stop(self) -> None:
        self.merchant.stop()
        self.payer.stop()
        if self._finalizer is not None:
            self._finalizer()

    @property
    def running(self) -> bool:
        return self.daemon_process is not None and self.daemon_process.poll() is None

    @property
    def daemon_url(self) -> str:
        return self.daemon.url

    @property
    def wallet_url(self) -> str:
        return self.merchant.url

    def merchant_restart(self) -> None:
        """Stop the merchant's wallet-rpc (it saves the wallet) and start it again on the same port."""
        old = self.merchant.process
        self.merchant.stop()
        self.merchant.spawn()
        self._processes[:] = [p for p in self._processes if p is not old] + [self.merchant.process]
        self.merchant.ready_wait()

    def merchant_lookahead_set(self, minor: int) -> None:
        """Stop the merchant's wallet-rpc (it saves the wallet), store `1:minor` as its wallet file's
        subaddress lookahead (monero-wallet-cli `set subaddress-lookahead`), and start it again.
        The subaddresses the wallet knows already stay known (the bench warms a wallet this way)."""
        old = self.merchant.process
        self.merchant.stop()
        path = self.directory / "wallets" / "merchant"
        done = subprocess.run(
            [
                monero_binaries()["monero-wallet-cli"],
                "--wallet-file",
                str(path),
                "--password",
                "",
                "--offline",
                "--log-file",
                f"{path}-cli.log",
                "--command",
                "set",
                "subaddress-lookahead",
                f"1:{minor}",
            ],
            input="\n\n",
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
            env=_ENV,
        )
        if done.returncode != 0:
            raise NodeStartError(f"monero-wallet-cli could not set the lookahead: {done.stdout[-1000:]}")
        self.lookahead = minor
        self.merchant.spawn()
        self._processes[:] = [p for p in self._processes if p is not old] + [self.merchant.process]
        self.merchant.ready_wait()

    def wallet_copy_offline(self) -> WalletProcess:
        """A second wallet-rpc on a copy of the merchant's wallet that never talks to the daemon:
        a wallet left behind its daemon. The caller stops it."""
        self.merchant.rpc.call("refresh")
        self.merchant.rpc.call("store")
        bins = monero_binaries()
        copy = self.directory / "wallets" / f"behind-{free_port()}"
        for suffix in ("", ".keys"):
            shutil.copy(self.directory / "wallets" / f"merchant{suffix}", f"{copy}{suffix}")
        port = free_port()
        wallet = WalletProcess(
            [
                bins["monero-wallet-rpc"],
                "--offline",
                "--wallet-file",
                str(copy),
                "--password",
                "",
                "--rpc-bind-ip",
                "127.0.0.1",
                "--rpc-bind-port",
                str(port),
                "--disable-rpc-login",
                "--non-interactive",
                "--log-file",
                f"{copy}.log",
            ],
            port,
            Path(f"{copy}.out"),
        )
        wallet.spawn()
        self._processes.append(wallet.process)
        wallet.ready_wait()
        return wallet

    def view_only_wallet_start(self, *, lookahead: int, tx_notify: str = "") -> WalletProcess:
        """Another wallet-rpc on a new view-only wallet of the merchant's keys, with its own
        lookahead, following the daemon from its current height. The caller stops it.

        `tx_notify`: wallet-rpc's `--tx-notify` (a program and its arguments, `%s` the
        transaction hash; it runs with an empty environment)."""
        bins = monero_binaries()
        path = self.directory / "wallets" / f"merchant-{lookahead}-{free_port()}"
        _view_only_wallet_write(
            bins["monero-wallet-cli"], path, self.address, self.view_key, lookahead, max(0, self.height() - 1)
        )
        port = free_port()
        wallet = WalletProcess(
            [
                bins["monero-wallet-rpc"],
                "--daemon-address",
                f"127.0.0.1:{self.daemon_port}",
                "--trusted-daemon",
                "--wallet-file",
                str(path),
                "--password",
                "",
                "--rpc-bind-ip",
                "127.0.0.1",
                "--rpc-bind-port",
                str(port),
                "--disable-rpc-login",
                "--non-interactive",
                "--log-file",
                f"{path}.log",
                *(["--tx-notify", tx_notify] if tx_notify else []),
            ],
            port,
            Path(f"{path}.out"),
        )
        wallet.spawn()
        self._processes.append(wallet.process)
        wallet.ready_wait()
        return wallet

    # --- the chain -----------------------------------------------------------------

    def height(self) -> int:
        """The daemon's height: the number of blocks (the top block is height - 1)."""
        return int(self.daemon.call("get_info")["height"])

    def mine(self, blocks: int = 1, *, to: str | None = None) -> int:
        """Mine `blocks` blocks to `to` (the payer), so that what the pool holds now ends up with `blocks`
        confirmations; the new height."""
        mine_past_pool(self.daemon, blocks=blocks, address=to or self.payer_address)
        return self.height()

    def pool(self) -> list[str]:
        return sorted(pool_hashes(self.daemon))

    def pool_flush(self) -> None:
        """Drop every pool transaction (a double spend won elsewhere, or a node that forgot it)."""
        self.daemon.call("flush_txpool")
        self.payer_resync()

    def pop_blocks(self, blocks: int) -> int:
        """Remove the top `blocks` blocks (their transactions go back to the pool); the new height."""
        answer = self.daemon.other("pop_blocks", nblocks=blocks)
        assert answer.get("status") == "OK", answer
        return self.height()

    def reorg(self, depth: int) -> int:
        """Replace the top `depth` blocks with other, empty ones; what they carried is
        dropped, not mined again. The new height.

        REORG_BLOCKS new blocks are mined: monerod 0.18 answers a stale output
        distribution until the block ten below the top is past the fork (a wallet
        building a transaction then never finishes picking its ring)."""
        self.pop_blocks(depth)
        self.daemon.call("flush_txpool")
        height = self.mine(max(depth + 1, REORG_BLOCKS))
        self.payer_resync()
        return height

    def payer_resync(self) -> None:
        """The payer forgets outputs it spent in transactions that left the chain and the pool."""
        for _ in range(20):
            try:
                self.payer.rpc.call("refresh")
                break
            except MoneroRpcError as exc:
                if exc.code != NO_DAEMON_CONNECTION:
                    raise
                time.sleep(0.5)
        with contextlib.suppress(MoneroRpcError):
            self.payer.rpc.call("rescan_spent")

    def pay(self, destinations: Sequence[tuple[str, int]], *, unlock_time: int = 0, mine: bool = False) -> str:
        """One transaction from the payer paying each (address, piconero); its txid."""
        with self._lock:
            for attempt in range(20):
                try:
                    self.payer.rpc.call("refresh")
                    answer = self.payer.rpc.call(
                        "transfer",
                        destinations=[{"address": a, "amount": int(n)} for a, n in destinations],
                        unlock_time=unlock_time,
                        priority=0,
                    )
                    break
                except MoneroRpcError as exc:
                    # The wallet may not have (re)connected to a daemon that was just (re)started.
                    if exc.code != NO_DAEMON_CONNECTION or attempt == 19:
                        raise
                    time.sleep(0.5)
        if mine:
            self.mine(1)
        return answer["tx_hash"]

    def merchant_height(self) -> int:
        return int(self.merchant.rpc.call("get_height")["height"])


def _daemon_spawn(args: list[str], log_path: Path) -> subprocess.Popen:
    out = open(log_path, "ab")  # noqa: SIM115 - the child writes to it until it ends
    process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, preexec_fn=die_with_parent, env=_ENV)
    out.close()
    return process


def _merchant_keys(directory: Path) -> tuple[str, str]:
    """The merchant's address and view key: kept beside the wallet (a sandbox restarts with them)."""
    path = directory / "merchant.watch-only"
    if path.exists():
        address, view_key = path.read_text().split()
        return address, view_key
    address, view_key = view_only_keys_generate()
    path.write_text(f"{address} {view_key}\n")
    return address, view_key


def _view_only_wallet_write(
    cli: str, path: Path, address: str, view_key: str, lookahead: int, restore_height: int = 0
) -> None:
    """Write a view-only wallet file from an address and view key, with a minor subaddress
    lookahead of `lookahead` stored in it (monero-wallet-cli, offline: no daemon needed)."""
    answers = f"{address}\n{view_key}\n{restore_height}\n"  # address, view key, restore height
    done = subprocess.run(
        [
            cli,
            "--generate-from-view-key",
            str(path),
            "--password",
            "",
            "--offline",
            "--subaddress-lookahead",
            f"1:{lookahead}",
            "--use-english-language-names",
            "--log-file",
            f"{path}-cli.log",
            "--command",
            "version",
        ],
        input=answers,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=_ENV,
    )
    if not path.with_suffix(".keys").exists():
        raise NodeStartError(f"monero-wallet-cli could not write the view-only wallet: {done.stdout[-1000:]}")
