"""The Monero watcher: XMR to subaddresses, seen through a view-only wallet.

Monero hides amounts and recipients: only a wallet holding the private view
key can tell which outputs are ours. The server runs `monero-wallet-rpc` with a
**view-only** wallet made from XMR_ADDRESS and XMR_VIEW_KEY (no spend key
anywhere), as BTCPay's Monero plugin and MoneroPay do, and each run:

1. checks the wallet (`node_check`): it cannot spend (`query_key spend_key`
   must fail as watch-only, or be zero) and it is XMR_ADDRESS's wallet;
2. `refresh`es it (the wallet reads new blocks and the pool from its daemon);
3. keeps the wallet's subaddress table ahead of the highest issued index
   (a wallet recognises payments only to subaddresses it created plus its
   lookahead; see `subaddresses_ensure`);
4. reads `get_transfers` (in + pool) for every subaddress of every account
   (`all_accounts`), from the stored height minus XMR_SCAN_MARGIN_BLOCKS (and
   from below any payment still pending), and records each transfer to a
   watched subaddress in one transaction (a transfer in a block to the primary
   address or to a subaddress never issued is a stray for staff): `processing`
   on sight in the pool, settled at CONFIRMATIONS_XMR. A transfer with a
   non-zero `unlock_time` is flagged for staff and not settled before it
   unlocks. A payment recorded earlier that the wallet no longer holds (a pool
   transaction that vanished: double spend or dropped; a block the wallet
   detached in a reorg) is un-counted;
5. compares the wallet's height with the daemon's (XMR_DAEMON_URL): a wallet
   more than XMR_WALLET_MAX_LAG_BLOCKS behind makes the run fail as `syncing`
   after recording what it saw, so /readyz shows it (`blocks_behind`).

A payment is (chain, txid, "major/minor"): one transaction paying two
subaddresses is two payments, and a rerun, a wallet restart or a rescan
credits nothing twice.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from billing import services
from billing.chains.blocks import BlockRef
from billing.chains.errors import ChainUnavailable, NodeMismatch, RpcError
from billing.chains.interface import PushSource, Watcher, setting_value
from billing.chains.machinery import ScanRun, cursor_store_at
from billing.chains.monero import family
from billing.chains.monero.rpc import ADDRESS_INDEX_OUT_OF_BOUND, WATCH_ONLY, DaemonRpc, WalletRpc
from billing.chains.spec import ChainSpec
from core.errors import DomainError

log = logging.getLogger(__name__)

MAX_BLOCK_NUMBER = 500_000_000  # an unlock_time below this is a height, above it a Unix time
CREATE_BATCH = 64  # create_address makes at most 64 subaddresses a call
LOOKAHEAD_MARGIN = 1000  # how far past the highest issued index the wallet must recognise payments, at most


def _setting_int(name: str, default: int) -> int:
    value = getattr(settings, name, default)
    return default if value in (None, "") else int(value)


def lookahead() -> int:
    """The merchant wallet's minor subaddress lookahead (Monero's default is 200)."""
    return max(1, _setting_int("XMR_SUBADDRESS_LOOKAHEAD", 200))


PUSH_SETTING = "XMR_ZMQ_URL"
# monerod's publisher topics (src/rpc/zmq_pub.cpp): one frame each, "<topic>:<json>".
PUSH_TOPICS = ("json-minimal-chain_main", "json-minimal-txpool_add")
PRIMARY = f"{family.XMR_ACCOUNT}/0"  # the wallet's primary address: never an invoice's (indices start at 1)
STRAY_PRIMARY = "primary_address"
STRAY_UNISSUED = "unissued_subaddress"


def _key(entry: dict[str, Any]) -> str:
    """A transfer's destination as a match key: "major/minor" of the subaddress."""
    index = entry.get("subaddr_index") or {}
    return f"{index.get('major', 0)}/{index.get('minor', 0)}"


@dataclass(frozen=True)
class _Strays:
    recorded: set[tuple[str, str]]  # recorded for staff in an earlier run
    new: set[tuple[str, str]]  # to record in this one


@dataclass
class MoneroClients:
    wallet: WalletRpc
    daemon: DaemonRpc | None


def unlocked(*, unlock_time: int, wallet_height: int, now: float) -> bool:
    """Whether a transfer's `unlock_time` has passed, as Monero judges it: a block
    height below 500,000,000 (spendable once the chain has that many blocks), else
    a Unix time."""
    if unlock_time == 0:
        return True
    if unlock_time < MAX_BLOCK_NUMBER:
        return wallet_height >= unlock_time
    return now >= unlock_time


class MoneroWatcher(Watcher):
    chain_family = family.FAMILY

    def __init__(self, spec: ChainSpec) -> None:
        self.spec = spec

    # --- the wallet ------------------------------------------------------------------------

    @contextlib.contextmanager
    def connect(self) -> Iterator[MoneroClients]:
        timeout = float(getattr(settings, "XMR_RPC_TIMEOUT_SECONDS", 120.0) or 120.0)
        wallet = WalletRpc(
            self.rpc_url(),
            user=setting_value("XMR_WALLET_RPC_USER"),
            password=setting_value("XMR_WALLET_RPC_PASSWORD"),
            timeout=timeout,
        )
        daemon_url = setting_value("XMR_DAEMON_URL")
        daemon = DaemonRpc(daemon_url, timeout=timeout) if daemon_url else None
        try:
            yield MoneroClients(wallet, daemon)
        finally:
            wallet.close()
            if daemon is not None:
                daemon.close()

    def node_check(self, run: ScanRun) -> None:
        wallet_view_only_check(run.client.wallet)
        primary = run.client.wallet.call("get_address", account_index=0, address_index=[0])
        if primary.get("address") != setting_value("XMR_ADDRESS"):
            raise NodeMismatch("XMR_WALLET_RPC_URL serves another wallet than XMR_ADDRESS's")
        wallet_refresh_period_set(run.client.wallet)

    def subaddresses_ensure(self, wallet: WalletRpc, *, highest: int, renew: Callable[[], object] | None = None) -> int:
        """Grow the wallet's subaddress table ahead of `highest`, the highest issued index.

        A wallet recognises payments to the subaddresses it created plus its
        lookahead (XMR_SUBADDRESS_LOOKAHEAD past the last created). The table
        is kept so that the lookahead reaches half a lookahead (at most
        LOOKAHEAD_MARGIN) past `highest`: invoices issued before the next run
        are covered too. Each subaddress created costs the wallet a pass over
        its lookahead, so a wallet made with a lookahead past the indices it
        will see rarely needs this. Returns how many subaddresses were created
        (0 when the table reached far enough already)."""
        ahead = lookahead()
        need = highest + min(ahead // 2, LOOKAHEAD_MARGIN) - ahead  # the subaddress that must exist
        if need <= 0:
            return 0
        try:
            found = wallet.call("get_address", account_index=0, address_index=[need])
        except RpcError as exc:
            if exc.code != ADDRESS_INDEX_OUT_OF_BOUND:
                raise
        else:
            self._subaddress_check(found["addresses"][0]["address"], need)
            return 0
        created, last, count = 0, -1, 1  # the first call says where the table ends
        while last < need:
            made = wallet.call("create_address", account_index=0, count=count)
            indices = made.get("address_indices") or [made["address_index"]]
            created += len(indices)
            last = max(indices)
            count = max(1, min(CREATE_BATCH, need - last))
            if renew is not None:
                renew()
        self._subaddress_check(made.get("addresses", [made.get("address")])[-1], last)
        wallet.call("store")
        log.info("monero: the wallet's subaddress table now ends at (0, %d) (%d created)", last, created)
        return created

    @staticmethod
    def _subaddress_check(address: str, index: int) -> None:
        expected = family.monero_account().subaddress(major=family.XMR_ACCOUNT, minor=index)
        if address != expected:
            raise NodeMismatch(f"the wallet's subaddress (0, {index}) is not XMR_ADDRESS's: another wallet")

    def push_source(self, url: str = "") -> PushSource | None:
        """monerod's ZMQ publisher (`--zmq-pub tcp://...`): a message on
        `json-minimal-chain_main` (a block joined the main chain) or
        `json-minimal-txpool_add` (transactions entered the pool) triggers a scan."""
        url = url or setting_value(PUSH_SETTING)
        return PushSource(url=url, topics=PUSH_TOPICS, setting=PUSH_SETTING) if url else None

    # --- one run ---------------------------------------------------------------------------

    def scan(self, run: ScanRun) -> None:
        clients: MoneroClients = run.client
        wallet = clients.wallet
        report = run.report
        refreshed = wallet.call("refresh")
        wallet_height = int(wallet.call("get_height")["height"])
        daemon_height = clients.daemon.height() if clients.daemon is not None else None
        report.tip_height = (daemon_height if daemon_height is not None else wallet_height) - 1
        report.height = wallet_height - 1
        report.blocks = int(refreshed.get("blocks_fetched") or 0)

        highest = run.highest_issued_index(self.currency)
        if highest is not None:
            self.subaddresses_ensure(wallet, highest=highest, renew=run.renew)
        counted = run.counted()
        cursor = run.state().height
        min_height: int | None = None
        if cursor is not None:
            min_height = max(0, cursor - _setting_int("XMR_SCAN_MARGIN_BLOCKS", 20))
            pending = [p.block_height for p in counted if not p.confirmed and p.block_height is not None]
            if pending:
                min_height = max(0, min(min_height, min(pending) - 1))
        # Every subaddress of every account (`all_accounts` clears `subaddr_indices`:
        # wallet_rpc_server.cpp, on_get_transfers): what reaches the primary address or
        # a subaddress never issued is seen too, and recorded for staff.
        params: dict[str, Any] = {"in": True, "pool": True, "all_accounts": True}
        if min_height is not None:
            params.update(filter_by_height=True, min_height=min_height)
        try:
            answer = wallet.call("get_transfers", **params)
        except RpcError:
            # A wallet far behind its daemon (or cut off from it) is reported as such.
            lagging = _lagging(wallet_height=wallet_height, daemon_height=daemon_height)
            if lagging is None:
                raise
            with run.atomic() as rec:  # the heights /readyz compares (blocks_behind)
                rec.state.height, rec.state.tip_height = report.height, report.tip_height
                rec.state.save(update_fields=["height", "tip_height"])
            raise lagging from None
        entries = list(answer.get("in") or []) + list(answer.get("pool") or [])
        # Only the subaddresses the wallet's transfers name are looked up (one array
        # parameter), not every watched one: a run costs the same with 200,000 open
        # invoices as with ten. Read after the wallet, so an invoice issued meanwhile is in.
        watched = run.watched_among({_key(e) for e in entries})
        strays = self._strays(run, entries, watched)
        run.renew()

        required = services.confirmations_required(currency="XMR")
        now = time.time()
        recorded = {(p.txid, p.position): p for p in counted}
        with run.atomic() as rec:
            seen: set[tuple[str, str]] = set()
            for entry in entries:
                index = entry.get("subaddr_index") or {}
                key = f"{index.get('major', 0)}/{index.get('minor', 0)}"
                txid, in_pool = entry["txid"], entry.get("type") == "pool"
                if (txid, key) in strays.recorded:
                    continue  # reached it before it was issued: staff's, never an invoice's
                if (txid, key) in strays.new:
                    rec.stray(
                        txid=txid,
                        position=key,
                        kind=STRAY_PRIMARY if key == PRIMARY else STRAY_UNISSUED,
                        address=key,
                        amount=int(entry["amount"]),
                        asset="XMR",
                        currency="XMR",
                        block_height=int(entry["height"]),
                        note=(
                            "XMR sent to the wallet's primary address, which no invoice uses"
                            if key == PRIMARY
                            else f"XMR sent to subaddress ({key.replace('/', ', ')}), which no invoice was given"
                        ),
                    )
                    continue
                if key not in watched:
                    continue
                if in_pool and entry.get("double_spend_seen"):
                    log.warning("monero %s: a double spend of it was seen; not counted", txid)
                    continue
                known = recorded.get((txid, key))
                if known is not None and known.confirmed and not in_pool and known.block_height == entry["height"]:
                    seen.add((txid, key))  # settled in this very block already: nothing changes
                    continue
                confirmations = 0 if in_pool else int(entry.get("confirmations") or 0)
                unlock_time = int(entry.get("unlock_time") or 0)
                final = None
                if unlock_time:
                    final = confirmations >= required and unlocked(
                        unlock_time=unlock_time, wallet_height=wallet_height, now=now
                    )
                payment = rec.observe(
                    services.Observation(
                        currency="XMR",
                        txid=txid,
                        output_index=int(index.get("minor", 0)),
                        position=key,
                        match_key=key,
                        amount=int(entry["amount"]),
                        confirmations=confirmations,
                        block_height=None if in_pool else int(entry["height"]),
                        final=final,
                    )
                )
                seen.add((txid, key))
                if payment is not None and in_pool:
                    report.unconfirmed += 1
                if unlock_time and payment is not None:
                    rec.flag(
                        txid=txid,
                        position=key,
                        reason=f"locked by unlock_time {unlock_time}: not settled before it unlocks",
                    )
            for p in counted:
                if (p.txid, p.position) in seen:
                    continue
                if p.block_height is None:
                    reason = "left the pool: double spent or dropped"
                elif min_height is None or p.block_height > min_height:
                    reason = f"reorg: its block {p.block_height} left the wallet's chain"
                else:
                    continue  # below the window read: settled and deep
                rec.uncount(txid=p.txid, position=p.position, reason=reason)
            state = rec.state
            state.height, state.tip_height = report.height, report.tip_height
            state.save(update_fields=["height", "tip_height"])
        report.recorded += rec.recorded
        behind = (daemon_height - wallet_height) if daemon_height is not None else 0
        report.caught_up = behind <= 0
        if entries or rec.uncounted:
            run.line(
                f"XMR: wallet at {report.height} (daemon {report.tip_height}); {len(entries)} transfer(s), "
                f"{rec.recorded} recorded, {rec.uncounted} un-counted"
            )
        lagging = _lagging(wallet_height=wallet_height, daemon_height=daemon_height)
        if lagging is not None:
            raise lagging

    @staticmethod
    def _strays(run: ScanRun, entries: list[dict[str, Any]], watched: frozenset[str]) -> _Strays:
        """Which entries reached a destination no invoice was ever given (the
        primary address, a subaddress not issued yet): recorded for staff once in a
        block (a pool transaction may still vanish), and never credited, even to
        the invoice that is given that subaddress later."""
        keys = {(e["txid"], _key(e)) for e in entries}
        recorded = run.strays_recorded({txid for txid, _ in keys}) & keys if keys else set()
        outside = {key for _, key in keys if key not in watched}
        issued = run.issued(outside) if outside else frozenset()
        new = {
            (e["txid"], _key(e))
            for e in entries
            if e.get("type") == "in" and _key(e) in outside and _key(e) not in issued and int(e.get("amount") or 0) > 0
        }
        return _Strays(recorded=recorded, new=new - recorded)

    # --- operators -------------------------------------------------------------------------

    def cursor_set(self, *, height: int) -> BlockRef:
        """Put the cursor at `height`: the next run reads transfers from
        `height - XMR_SCAN_MARGIN_BLOCKS` (recording is idempotent). The wallet
        itself keeps its own scan height: to rebuild what it knows, rescan it
        (`rescan_blockchain`, see docs/chains/monero.md)."""
        if not self.rpc_url():
            raise DomainError("chain_not_watched", f"{self.rpc_url_setting} is not set.")
        if height < 0:
            raise DomainError("invalid", "A height is 0 or more.", details={"height": height})
        block_hash = ""
        try:
            with self.connect() as clients:
                top = int(clients.wallet.call("get_height")["height"]) - 1
                if clients.daemon is not None:
                    header = clients.daemon.call("get_block_header_by_height", height=height)
                    block_hash = header["block_header"]["hash"]
        except (ChainUnavailable, RpcError) as exc:
            raise DomainError("chain_unavailable", f"The wallet or daemon did not answer: {exc}") from None
        if height > top:
            raise DomainError("invalid", f"The wallet has no block at height {height}.", details={"height": height})
        ref = BlockRef(height, block_hash)
        cursor_store_at(chain=self.chain, block=ref)
        return ref


def _lagging(*, wallet_height: int, daemon_height: int | None) -> ChainUnavailable | None:
    """The `syncing` failure of a wallet more than XMR_WALLET_MAX_LAG_BLOCKS behind its daemon, or None."""
    behind = (daemon_height - wallet_height) if daemon_height is not None else 0
    if behind <= _setting_int("XMR_WALLET_MAX_LAG_BLOCKS", 5):
        return None
    return ChainUnavailable(
        f"the wallet is {behind} block(s) behind its daemon (wallet at {wallet_height}, daemon at {daemon_height})",
        reason="syncing",
    )


def wallet_refresh_period_set(wallet: WalletRpc) -> None:
    """Make the wallet read its daemon every XMR_WALLET_REFRESH_SECONDS on its own (0: leave it).

    wallet-rpc refreshes in the background every 20 seconds by default
    (src/wallet/wallet_rpc_server.cpp, DEFAULT_AUTO_REFRESH_PERIOD; the `auto_refresh`
    method sets the period, and a restart forgets it: it is set on every run). Its
    `--tx-notify` fires when such a refresh finds an incoming transaction in the pool,
    so this period bounds how soon a pool payment is pushed (docs/chains/push.md)."""
    period = _setting_int("XMR_WALLET_REFRESH_SECONDS", 0)
    if period > 0:
        wallet.call("auto_refresh", enable=True, period=period)


def wallet_view_only_check(wallet: WalletRpc) -> None:
    """Refuse a wallet that can spend: `query_key spend_key` must fail as
    watch-only, or answer zero."""
    try:
        key = str(wallet.call("query_key", key_type="spend_key").get("key") or "")
    except RpcError as exc:
        if exc.code == WATCH_ONLY:
            return
        raise
    if key.strip("0"):
        raise NodeMismatch(
            "XMR_WALLET_RPC_URL serves a wallet that can spend (it has a spend key): the server must hold a "
            "view-only wallet made from XMR_ADDRESS and XMR_VIEW_KEY"
        )
