"""ERC-20 transfers to watched addresses, from `eth_getLogs` over block ranges.

One `eth_getLogs` call asks for every `Transfer` event of a range of blocks;
the logs are matched on their `to` topic against the watched set in memory
(an address list of 100,000 destinations cannot go into a filter). Asking for
every contract, not only USDT and USDC, is what lets the watcher tell staff
about a token nobody can credit; `contracts` narrows the query to a list of
contracts instead.

Providers cap `eth_getLogs` (a block span, a result count, a response size)
and say so with an error: `LogReader` then splits the range in half, down to
single blocks, and remembers the span that worked for the next ranges.

ERC-721 transfers share the event signature but index the token id (four
topics): they are not token amounts and are left alone.
"""

from __future__ import annotations

import logging
from collections.abc import Container, Iterable, Mapping, Sequence
from typing import Any

from billing.chains.errors import ChainUnavailable, RpcError
from billing.chains.ethereum.abi import DECIMALS_CALL, TRANSFER_TOPIC, hex_int, topic_address, uint256_decode
from billing.chains.ethereum.rpc import EthRpc
from billing.chains.ethereum.transfers import TOKEN, Transfer, log_position

log = logging.getLogger(__name__)


class LogReader:
    """Reads Transfer logs of block ranges, halving ranges the node refuses.

    Keep one per node for the life of the process: `span` (the widest range
    asked in one call) shrinks to what the provider accepts and stays there.
    """

    def __init__(self, rpc: EthRpc, *, span: int = 1000) -> None:
        self.rpc = rpc
        self.span = max(1, span)
        self.splits = 0  # ranges refused and split, for logs and tests

    def logs(self, *, first: int, last: int, contracts: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """Every Transfer log of blocks first..last (inclusive), in block order."""
        found: list[dict[str, Any]] = []
        pending = [(a, min(a + self.span - 1, last)) for a in range(first, last + 1, self.span)]
        pending.reverse()
        while pending:
            low, high = pending.pop()
            query: dict[str, Any] = {"fromBlock": hex(low), "toBlock": hex(high), "topics": [TRANSFER_TOPIC]}
            if contracts is not None:
                query["address"] = list(contracts)
            try:
                found.extend(self.rpc.call("eth_getLogs", query))
            except (RpcError, ChainUnavailable) as exc:
                refused = isinstance(exc, RpcError) or exc.reason in ("timeout", "bad_response")
                if low == high or not refused:
                    raise
                middle = (low + high) // 2
                self.span = max(1, min(self.span, middle - low + 1))
                self.splits += 1
                log.info(
                    "%s refused eth_getLogs over %d blocks (%s); asking %d at a time",
                    self.rpc.endpoint,
                    high - low + 1,
                    exc,
                    self.span,
                )
                pending.extend([(middle + 1, high), (low, middle)])
        return found


def transfer_logs_parse(logs: Iterable[Mapping[str, Any]], *, watched: Container[str]) -> list[Transfer]:
    """ERC-20 Transfer logs whose `to` is watched, as token transfers (zero amounts and removed logs skipped)."""
    found: list[Transfer] = []
    for entry in logs:
        topics: Sequence[Any] = entry.get("topics") or ()
        if len(topics) != 3 or entry.get("removed") or str(topics[0]).lower() != TRANSFER_TOPIC:
            continue
        to = topic_address(topics[2])
        if to not in watched:
            continue
        amount = uint256_decode(entry.get("data") or "0x")
        if not amount:
            continue
        found.append(
            Transfer(
                txid=entry["transactionHash"],
                position=log_position(hex_int(entry["logIndex"])),
                kind=TOKEN,
                to=to,
                amount=amount,
                asset=str(entry["address"]).lower(),
                sender=topic_address(topics[1]),
                block_height=hex_int(entry["blockNumber"]),
                block_hash=entry["blockHash"],
            )
        )
    return found


def token_decimals(rpc: EthRpc, *, contract: str) -> int | None:
    """The token's `decimals()`, or None when the address answers nothing sensible (no contract there)."""
    try:
        result = rpc.call("eth_call", {"to": contract, "data": DECIMALS_CALL}, "latest")
    except RpcError:
        return None
    value = uint256_decode(result or "0x")
    return value if value is not None and value <= 255 else None
