"""Internal transfers out of a node's trace API, in either of its two dialects.

- `trace_block` (Erigon, Nethermind, Reth, anvil; the "parity" format): a flat
  list of frames, each with its `traceAddress` (the path of call indexes from
  the transaction's top call) and an `error` on the frame that failed.
- `debug_traceBlockByNumber` with the `callTracer` (Geth, and most others):
  one tree of call frames per transaction, `calls` nesting, `error` on the
  frame that failed.

Both give the same thing here: every frame below the top call (the top call
is the transaction's own value, which the watcher reads from the block) that
moves ether to a watched address (a CALL with value, or a SELFDESTRUCT's
balance), unless that frame or any frame above it failed: a reverted call
moves nothing, and a reverted transaction moves nothing at all. The trace
address is the frame's position ("call:0.1"), so two payments inside one
transaction are two transfers.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping, Sequence
from typing import Any

from billing.chains.ethereum.abi import hex_int
from billing.chains.ethereum.transfers import INTERNAL, Transfer, trace_position

TRACE_BLOCK = "trace_block"
DEBUG_TRACE = "debug_trace"

# callTracer frame types that move value to `to` (CALLCODE runs the callee's
# code in the caller's account: its value never leaves the caller).
_VALUE_FRAMES = frozenset({"CALL", "SELFDESTRUCT"})


def _failed_under(path: tuple[int, ...], failed: set[tuple[int, ...]]) -> bool:
    return any(path[:depth] in failed for depth in range(len(path) + 1))


def parity_traces_parse(
    traces: Iterable[Mapping[str, Any]], *, watched: Container[str], height: int, block_hash: str
) -> list[Transfer]:
    """Internal transfers to `watched` out of a `trace_block` result."""
    frames = [t for t in traces if t.get("transactionHash")]  # rewards carry none
    failed: dict[str, set[tuple[int, ...]]] = {}
    for frame in frames:
        if frame.get("error"):
            failed.setdefault(frame["transactionHash"], set()).add(tuple(frame.get("traceAddress") or ()))
    found: list[Transfer] = []
    for frame in frames:
        path = tuple(int(i) for i in frame.get("traceAddress") or ())
        if not path:
            continue  # the transaction's own value: read from the block
        action = frame.get("action") or {}
        kind = frame.get("type")
        if kind == "call" and action.get("callType", "call") == "call":
            to, value, sender = action.get("to"), hex_int(action.get("value")), action.get("from", "")
        elif kind in ("suicide", "selfdestruct"):
            to, value, sender = action.get("refundAddress"), hex_int(action.get("balance")), action.get("address", "")
        else:
            continue
        if not to or value <= 0:
            continue
        to = to.lower()
        txid = frame["transactionHash"]
        if to not in watched or _failed_under(path, failed.get(txid, set())):
            continue
        found.append(_internal(txid, path, to=to, amount=value, sender=sender, height=height, block_hash=block_hash))
    return found


def _internal(
    txid: str, path: tuple[int, ...], *, to: str, amount: int, sender: str | None, height: int, block_hash: str
) -> Transfer:
    """The internal transfer at call `path` of `txid` (either trace format)."""
    return Transfer(
        txid=txid,
        position=trace_position(path),
        kind=INTERNAL,
        to=to,
        amount=amount,
        sender=(sender or "").lower(),
        block_height=height,
        block_hash=block_hash,
    )


def _walk(
    frame: Mapping[str, Any],
    path: tuple[int, ...],
    *,
    txid: str,
    watched: Container[str],
    height: int,
    block_hash: str,
    found: list[Transfer],
) -> None:
    """Every value-moving call under `frame` (itself included when `path` is
    not empty) to a watched address, depth first. Walked with a list, not by
    recursion: a call tree is up to 1,024 calls deep (the EVM's limit), deeper
    than Python's default recursion limit."""
    pending: list[tuple[Mapping[str, Any], tuple[int, ...]]] = [(frame, path)]
    while pending:
        frame, path = pending.pop()
        if frame.get("error"):
            continue  # this call and everything under it reverted
        if path and str(frame.get("type", "")).upper() in _VALUE_FRAMES:
            to, value = (frame.get("to") or "").lower(), hex_int(frame.get("value"))
            if value > 0 and to in watched:
                found.append(
                    _internal(
                        txid, path, to=to, amount=value, sender=frame.get("from"), height=height, block_hash=block_hash
                    )
                )
        children = list(enumerate(frame.get("calls") or ()))
        pending.extend((child, (*path, index)) for index, child in reversed(children))


def call_traces_parse(
    traces: Sequence[Mapping[str, Any]],
    *,
    txids: Sequence[str],
    watched: Container[str],
    height: int,
    block_hash: str,
) -> list[Transfer]:
    """Internal transfers to `watched` out of a `debug_traceBlockByNumber` callTracer result.

    `txids` are the block's transactions in order, for nodes whose answer
    carries no `txHash` beside each trace.
    """
    if len(traces) != len(txids):
        raise ValueError(f"{len(traces)} traces for {len(txids)} transactions in block {height}")
    found: list[Transfer] = []
    for item, txid in zip(traces, txids, strict=True):
        frame = item.get("result", item)
        if item.get("error") and not item.get("result"):
            raise ValueError(f"the node could not trace {item.get('txHash', txid)}: {item['error']}")
        _walk(
            frame,
            (),
            txid=item.get("txHash") or txid,
            watched=watched,
            height=height,
            block_hash=block_hash,
            found=found,
        )
    return found
