"""The Ethereum watcher: ETH, USDT and USDC on one EVM chain, one scan for all three.

It follows the node block by block on the shared block walk
(billing.chains.machinery.BlockWatcher); `EvmScanner` reads each step's
blocks and finds the transfers to watched addresses (transactions, internal
calls, token logs). Each transfer is then, inside its block's transaction:

- an ETH payment when it is ether to an ETH invoice's address,
- a USDT or USDC payment when it is that token's configured contract paying a
  USDT or USDC invoice's address,
- otherwise a stray, recorded for staff and never credited: a token of any
  other contract, or ether sent to a token invoice's address (or the reverse).

There is no mempool watching on EVM chains (no 0-conf): a payment is
`processing` once in a block, and settled per `ETH_FINALITY`: at
CONFIRMATIONS_<currency> blocks (`confirmations`) or once its block is at or
below the node's `finalized` block (`finalized`). A block that leaves the
canonical chain un-counts what it carried (the machinery's fork walk), and a
transaction replaced by another with the same nonce simply never appears in
a block the watcher records.

Before every run the node must be on ETH_CHAIN_ID, not syncing, and each
enabled token's contract must answer `decimals()` with 6; otherwise the
watcher is blind and says why in /readyz.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings

from billing import services
from billing.chains import blocks
from billing.chains.blocks import BlockRef, ChainStep
from billing.chains.errors import ChainUnavailable, RpcError
from billing.chains.ethereum import family
from billing.chains.ethereum.transfers import BALANCE, EvmBlockScan, Transfer
from billing.chains.interface import PushSource, setting_value
from billing.chains.machinery import BlockWatcher, Recorder, ScanRun, cursor_store_at
from billing.chains.spec import ChainSpec
from billing.currencies import CURRENCIES
from core.errors import DomainError

if TYPE_CHECKING:
    # web3 and eth-abi (about 50 MB and most of a second of CPU) load when this
    # process first talks to the node, not in every process that registers the
    # watcher at start-up (web workers, commands).
    from billing.chains.ethereum.rpc import EthRpc
    from billing.chains.ethereum.scanner import EvmScanner, EvmTip

log = logging.getLogger(__name__)

# A first run (no cursor) starts at the first block this much older than the
# oldest watched destination: block timestamps may run a little ahead of the clock.
FIRST_SCAN_MARGIN = timedelta(minutes=15)
TOKENS = ("USDT", "USDC")

_lock = threading.Lock()
# Per process: the scanner of each endpoint (it remembers the trace mode, the
# log span the provider accepts and the last balances read) and the node
# checks passed. Both are caches, dropped after any failure.
_scanners: dict[tuple[Any, ...], EvmScanner] = {}
_checked: set[tuple[Any, ...]] = set()


def _settings_int(name: str, default: int) -> int:
    return int(getattr(settings, name, default) or default)


class EthereumWatcher(BlockWatcher):
    step_blocks = 25
    chain_family = family.FAMILY

    def __init__(self, spec: ChainSpec) -> None:
        self.spec = spec

    # --- the node ------------------------------------------------------------------------

    @contextlib.contextmanager
    def connect(self) -> Iterator[EthRpc]:
        from billing.chains.ethereum.rpc import EthRpc

        with EthRpc(
            self.rpc_url(),
            timeout=float(getattr(settings, "ETH_RPC_TIMEOUT_SECONDS", 30.0)),
            batch_size=_settings_int("ETH_RPC_BATCH_SIZE", 100),
        ) as rpc:
            yield rpc

    def scanner(self, rpc: EthRpc) -> EvmScanner:
        """This process's scanner of the node, talking through `rpc` for this run."""
        from billing.chains.ethereum.scanner import EvmScanner

        multicall = family.multicall_address()
        stray_tokens = bool(getattr(settings, "ETH_STRAY_TOKENS", True))
        contracts = None if stray_tokens else [family.token_contract(c) for c in self._tokens_enabled()]
        key = (rpc.endpoint, family.internal_mode(), multicall, tuple(contracts) if contracts is not None else None)
        with _lock:
            scanner = _scanners.get(key)
            if scanner is None:
                scanner = _scanners[key] = EvmScanner(
                    rpc,
                    internal=family.internal_mode(),
                    log_span=_settings_int("ETH_LOG_BLOCK_RANGE", 1000),
                    token_contracts=contracts,
                    multicall=multicall,
                )
            scanner.use(rpc)
            return scanner

    def process_state_clear(self) -> None:
        with _lock:
            _scanners.clear()
            _checked.clear()

    def push_source(self, url: str = "") -> PushSource | None:
        """The node's JSON-RPC websocket (ETH_WS_URL, ws:// or wss://): each head
        announced by `eth_subscribe newHeads` triggers a scan (payments count from
        their block on: the pool is not watched)."""
        url = url or setting_value("ETH_WS_URL")
        return PushSource(url=url, topics=("newHeads",), setting="ETH_WS_URL") if url else None

    def _tokens_enabled(self) -> list[str]:
        return [code for code in TOKENS if self.chain_family.enabled(code)]

    def node_check(self, run: ScanRun) -> None:
        rpc: EthRpc = run.client
        scanner = self.scanner(rpc)
        expected = family.eth_chain_id()
        contracts = {
            family.token_contract(c): (family.TOKEN_SETTINGS[c], CURRENCIES[c].decimals) for c in self._tokens_enabled()
        }
        key = (rpc.endpoint, expected, tuple(sorted(contracts)))
        if key not in _checked:
            scanner.chain_id_check(expected=expected)
            scanner.decimals_check(contracts)
            _checked.add(key)
        scanner.sync_check()

    # --- the walk ------------------------------------------------------------------------

    def _final(self) -> bool:
        return family.finality_policy() == "finalized"

    def tip(self, run: ScanRun) -> EvmTip:
        tip = self.scanner(run.client).tip(finalized=self._final())
        run.data["tip"] = tip
        return tip

    def first_height(self, run: ScanRun, *, tip_height: int) -> int:
        oldest = run.oldest_watched_at()
        if oldest is None:
            return tip_height
        at = int((oldest - FIRST_SCAN_MARGIN).timestamp())
        return self.scanner(run.client).height_at_time(at=at, tip_height=tip_height)

    def _destinations(self, run: ScanRun) -> dict[str, frozenset[str]]:
        """The watched addresses of each enabled currency, topped up with those created since the last look."""
        known: dict[str, frozenset[str]] | None = run.data.get("destinations")
        if known is None:
            currencies = run.currencies()
            run.data["newest"] = run.newest_request_id(currencies)
            known = {code: run.watched([code]) for code in currencies}
        else:
            newest = run.newest_request_id(list(known))
            if newest > run.data["newest"]:
                known = {code: keys | run.created_since(run.data["newest"] + 1, [code]) for code, keys in known.items()}
                run.data["newest"] = newest
        run.data["destinations"] = known
        return known

    def advance(self, run: ScanRun, *, recent: list[BlockRef], start_height: int | None, max_blocks: int) -> ChainStep:
        scanner = self.scanner(run.client)
        tip = self.tip(run)
        top = max(recent) if recent else None
        if top is not None and top.hash == tip.hash:
            # The node's tip is the block the cursor stands on: nothing to read, no fork
            # below it (the hashes chain), and the watched set is not loaded (at 100,000
            # open invoices that read is most of an idle run).
            return ChainStep(tip=tip, fork=None, blocks=(), tip_scanned=top, caught_up=True)
        # Read after the tip: every destination a block up to the tip can pay is in it.
        destinations = self._destinations(run)
        watched = frozenset().union(*destinations.values())
        fork = blocks.fork_find(scanner, recent=recent)
        base, next_height = blocks.resume_point(
            fork=fork, recent=recent, tip_height=tip.height, start_height=start_height
        )
        stop = min(tip.height, next_height + max_blocks - 1)
        scans = scanner.blocks_read(
            heights=list(range(next_height, stop + 1)),
            watched=watched,
            base=base,
            balance_watched=destinations.get("ETH", frozenset()),
        )
        run.renew()
        tip_scanned = scans[-1].block if scans else base
        caught_up = tip_scanned is not None and tip_scanned.hash == tip.hash
        return ChainStep(tip=tip, fork=fork, blocks=tuple(scans), tip_scanned=tip_scanned, caught_up=caught_up)

    def block_txids(self, scan: EvmBlockScan) -> set[str]:
        return {t.txid for t in scan.transfers}

    def block_record(self, run: ScanRun, recorder: Recorder, scan: EvmBlockScan) -> None:
        tip: EvmTip = run.data["tip"]
        destinations = run.data["destinations"]
        contracts = {family.token_contract(code).lower(): code for code in TOKENS if code in destinations}
        confirmations = max(1, tip.height - scan.block.height + 1)
        final = scan.block.height <= tip.finalized if self._final() and tip.finalized is not None else None
        for transfer in scan.transfers:
            currency = "ETH" if transfer.is_ether else contracts.get(transfer.asset)
            if currency is not None and transfer.to in destinations.get(currency, ()):
                recorder.observe(
                    services.Observation(
                        currency=currency,
                        txid=transfer.txid,
                        output_index=_index(transfer),
                        position=transfer.position,
                        match_key=transfer.to,
                        amount=transfer.amount,
                        confirmations=confirmations,
                        block_height=scan.block.height,
                        block_hash=scan.block.hash,
                        final=final,
                        own_txid=transfer.kind != BALANCE,  # the balance mode knows the block, not the transaction
                    )
                )
            else:
                self._stray(recorder, transfer, currency=currency, destinations=destinations)

    def _stray(
        self, recorder: Recorder, transfer: Transfer, *, currency: str | None, destinations: dict[str, Any]
    ) -> None:
        paid = next((code for code, keys in destinations.items() if transfer.to in keys), "")
        if currency is None:
            note = f"a token nobody credits (contract {transfer.asset}) sent to a {paid or 'watched'} address"
            kind = "unknown_token"
        else:
            note = f"{currency} sent to a {paid} invoice's address"
            kind = "wrong_currency"
        log.warning("ethereum %s %s: %s", transfer.txid, transfer.position, note)
        recorder.stray(
            txid=transfer.txid,
            position=transfer.position,
            kind=kind,
            address=transfer.to,
            amount=transfer.amount,
            asset=transfer.asset or "ETH",
            currency=currency or "",
            paid_currency=paid,
            block_height=transfer.block_height,
            block_hash=transfer.block_hash or "",
            note=note,
        )

    def blocks_done(self, run: ScanRun, *, tip: Any, recent: list[BlockRef]) -> None:
        final = tip.finalized if self._final() else None
        run.confirmations_refresh(tip_height=tip.height, final_height=final)
        run.report.mode = self.scanner(run.client).mode

    # --- operators -------------------------------------------------------------------------

    def cursor_set(self, *, height: int) -> BlockRef:
        """Put the cursor on the node's block at `height`: the next run scans from
        `height + 1`. Going back rescans (recording is idempotent); going forward
        skips blocks. Clears the stored recent blocks."""
        if not self.rpc_url():
            raise DomainError("chain_not_watched", f"{self.rpc_url_setting} is not set.")
        if height < 0:
            raise DomainError("invalid", "A height is 0 or more.", details={"height": height})
        try:
            with self.connect() as rpc:
                block = rpc.call("eth_getBlockByNumber", hex(height), False)
        except (ChainUnavailable, RpcError) as exc:
            raise DomainError("chain_unavailable", f"The node did not answer: {exc}") from None
        if not block:
            raise DomainError("invalid", f"The node has no block at height {height}.", details={"height": height})
        from billing.chains.ethereum.abi import hex_int

        ref = BlockRef(hex_int(block["number"]), block["hash"])
        cursor_store_at(chain=self.chain, block=ref)
        self.process_state_clear()
        return ref


def _index(transfer: Transfer) -> int:
    """The output_index shown beside a payment: the log index of a token transfer, else -1."""
    if transfer.position.startswith("log:"):
        return int(transfer.position[4:])
    return -1
