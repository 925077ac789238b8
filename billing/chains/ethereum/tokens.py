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

A provider behind a load balancer may answer a range from a node a block or
two behind the one that served the blocks: it returns the logs it has and
nothing for the rest, without an error. `LogReader.missed` checks the answer
against each block's `logsBloom` (a bloom filter has no false negatives: a
block that holds a Transfer log of a contract has both in its bloom) and asks
again, by block hash (EIP-234), for each block whose bloom says it may hold a
log the range answer lacks. A node that does not know that hash answers with
an error (EIP-234: "an error if the block hash was not found"), and the scan
stops below that block until the next pass; a block the bloom only seemed to
match answers with no log.

ERC-721 transfers share the event signature but index the token id (four
topics): they are not token amounts and are left alone.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Container, Iterable, Mapping, Sequence
from typing import Any

from eth_bloom import BloomFilter

from billing.chains.errors import ChainUnavailable, RpcError
from billing.chains.ethereum.abi import DECIMALS_CALL, TRANSFER_TOPIC, hex_int, topic_address, uint256_decode
from billing.chains.ethereum.rpc import EthRpc
from billing.chains.ethereum.transfers import TOKEN, Transfer, log_position

log = logging.getLogger(__name__)

_TRANSFER_TOPIC_BYTES = bytes.fromhex(TRANSFER_TOPIC[2:])
# How nodes say they do not know a block hash: geth "unknown block", reth and others
# "block not found" or "header not found", Nethermind "block ... could not be found". A
# method the node lacks (-32601, "the method ... does not exist") is not one of them.
_UNKNOWN_BLOCK = re.compile(r"unknown block|(block|header)\b.*\b(not found|could not be found)", re.IGNORECASE)
METHOD_NOT_FOUND = -32601


class LogReader:
    """Reads Transfer logs of block ranges, halving ranges the node refuses.

    Keep one per node for the life of the process: `span` (the widest range
    asked in one call) shrinks to what the provider accepts and stays there.
    """

    def __init__(self, rpc: EthRpc, *, span: int = 1000) -> None:
        self.rpc = rpc
        self.span = max(1, span)
        self.splits = 0  # ranges refused and split, for logs and tests
        self.missed_logs = 0  # logs a range answer lacked and a block's bloom caught (`missed`)

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

    def missed(
        self,
        *,
        blocks: Sequence[Mapping[str, Any]],
        logs: Sequence[Mapping[str, Any]],
        contracts: Sequence[str] | None = None,
    ) -> tuple[list[dict[str, Any]], int | None]:
        """The Transfer logs of `blocks` that a range answer (`logs`, asked
        with the same `contracts`) left out, and the index in `blocks` of the
        first block the node did not know when asked by hash (None when it knew
        every block asked about); see the module docstring. A block is asked
        about when its bloom holds the Transfer topic and, with `contracts`,
        one of them that the answer has no log of in that block, or, without,
        when the answer has no log of that block at all."""
        have = {(hex_int(entry["blockNumber"]), str(entry.get("address") or "").lower()) for entry in logs}
        heights = {height for height, _ in have}
        asked: list[int] = []
        for index, block in enumerate(blocks):
            if not block.get("logsBloom"):
                continue
            bloom = BloomFilter(int(block["logsBloom"], 16))
            if _TRANSFER_TOPIC_BYTES not in bloom:
                continue
            height = hex_int(block["number"])
            if contracts is None:
                lacking = height not in heights
            else:
                lacking = any(bytes.fromhex(c[2:]) in bloom and (height, c) not in have for c in contracts)
            if lacking:
                asked.append(index)
        if not asked:
            return [], None
        query: dict[str, Any] = {"topics": [TRANSFER_TOPIC]}
        if contracts is not None:
            query["address"] = list(contracts)
        answers = self.rpc.batch(
            [("eth_getLogs", ({**query, "blockHash": blocks[i]["hash"]},)) for i in asked], return_errors=True
        )
        found: list[dict[str, Any]] = []
        for index, answer in zip(asked, answers, strict=True):
            height = hex_int(blocks[index]["number"])
            if isinstance(answer, RpcError):
                if answer.code == METHOD_NOT_FOUND or not _UNKNOWN_BLOCK.search(answer.message):
                    # Not "no such block" (a parameter it does not take, a limit): blind, and
                    # said so in health, rather than a scan cut short at that block for good.
                    raise ChainUnavailable(
                        f"{self.rpc.endpoint} refused eth_getLogs by block hash for block {height}: {answer}",
                        reason="bad_response",
                    )
                log.warning(
                    "%s does not know block %d (%s) by its hash (%s): its logs lag its blocks; scanning up to it",
                    self.rpc.endpoint,
                    height,
                    blocks[index]["hash"],
                    answer,
                )
                return found, index
            new = [e for e in answer if (height, str(e.get("address") or "").lower()) not in have]
            if new:
                self.missed_logs += len(new)
                log.warning(
                    "%s left %d Transfer log(s) of block %d out of a range answer; read by the block's hash",
                    self.rpc.endpoint,
                    len(new),
                    height,
                )
            found.extend(new)
        return found, None


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
