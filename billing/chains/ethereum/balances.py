"""The balance-check mode: internal transfers found without a trace API.

A node without `trace_block` or `debug_traceBlockByNumber` (most hosted
providers' cheaper plans, pruned nodes) cannot say which calls inside a
transaction moved ether. What it can say is every watched address's balance
at every block. If an address holds more after block N than before it, and
the block's own transactions to it (receipt status 1) do not explain the
difference, the rest came by internal calls:

    internal = balance(N) - balance(N-1) - paid to it by top-level transactions
               + what it spent itself (value sent + gas), when it sent anything

which is recorded as one transfer per address and block (txid = the block's
hash, position "balance:<address>"): the node cannot tell which transaction
carried it, nor two internal payments in one block apart.

Balances are read at block hashes, so the node must still hold the state of
the blocks being scanned: a full node keeps about the last 128 blocks, an
archive node all of them. Two ways to ask, chosen once per node:

- Multicall3's `aggregate3` over `getEthBalance`: one `eth_call` per
  `per_call` addresses (default 500), sent in one JSON-RPC batch;
- `eth_getBalance` per address, in JSON-RPC batches, where Multicall3 is not
  deployed (a private chain).

Balances read at one block are kept for the next (the parent of block N+1 is
block N), so following the chain costs one read per address per block.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence

from billing.chains.blocks import BlockRef
from billing.chains.ethereum.abi import (
    MULTICALL3_ADDRESS,
    aggregate3_balances_decode,
    aggregate3_balances_encode,
    hex_int,
)
from billing.chains.ethereum.rpc import EthRpc
from billing.chains.ethereum.transfers import BALANCE, Transfer, balance_position

log = logging.getLogger(__name__)


class BalanceReader:
    """Reads ether balances of many addresses at a block, and remembers the last ones read."""

    def __init__(self, rpc: EthRpc, *, multicall: str | None = MULTICALL3_ADDRESS, per_call: int = 500) -> None:
        self.rpc = rpc
        self.multicall = multicall.lower() if multicall else None
        self.per_call = max(1, per_call)
        self._multicall_present: bool | None = None
        # address -> (hash of the block it was read at, balance)
        self._known: dict[str, tuple[str, int]] = {}

    @property
    def method(self) -> str:
        """ "multicall3" or "eth_getBalance": how balances are read on this node."""
        return "multicall3" if self._use_multicall() else "eth_getBalance"

    def _use_multicall(self) -> bool:
        if self.multicall is None:
            return False
        if self._multicall_present is None:
            code = self.rpc.call("eth_getCode", self.multicall, "latest")
            self._multicall_present = bool(code and code != "0x")
            if not self._multicall_present:
                log.info("%s has no Multicall3 at %s: balances are read one by one", self.rpc.endpoint, self.multicall)
        return self._multicall_present

    def read(self, addresses: Sequence[str], *, block: BlockRef) -> dict[str, int]:
        """Balances (wei) of `addresses` after `block`, named by its hash (EIP-1898),
        so a reorg between reading the block and its balances cannot mix two blocks."""
        if not addresses:
            return {}
        tag = {"blockHash": block.hash}
        multicall = self.multicall
        if multicall is not None and self._use_multicall():
            chunks = [addresses[i : i + self.per_call] for i in range(0, len(addresses), self.per_call)]
            calls = [
                ("eth_call", ({"to": multicall, "data": aggregate3_balances_encode(multicall, c)}, tag)) for c in chunks
            ]
            balances: list[int] = []
            for chunk, data in zip(chunks, self.rpc.batch(calls), strict=True):
                balances.extend(aggregate3_balances_decode(data, len(chunk)))
        else:
            balances = [hex_int(b) for b in self.rpc.batch([("eth_getBalance", (a, tag)) for a in addresses])]
        return dict(zip(addresses, balances, strict=True))

    def before(self, addresses: Sequence[str], *, parent: BlockRef) -> dict[str, int]:
        """Balances at `parent`, from memory where the last read was at that block."""
        found: dict[str, int] = {}
        missing: list[str] = []
        for address in addresses:
            known = self._known.get(address)
            if known is not None and known[0] == parent.hash:
                found[address] = known[1]
            else:
                missing.append(address)
        found.update(self.read(missing, block=parent))
        return found

    def remember(self, balances: Mapping[str, int], *, block: BlockRef) -> None:
        for address, balance in balances.items():
            self._known[address] = (block.hash, balance)

    def forget(self, keep: Collection[str] = ()) -> None:
        """Drop what is remembered (all of it, or all but `keep`)."""
        self._known = {a: v for a, v in self._known.items() if a in keep}


def balance_transfers(
    *,
    block: BlockRef,
    before: Mapping[str, int],
    after: Mapping[str, int],
    received: Mapping[str, int],
    spent: Mapping[str, int],
) -> list[Transfer]:
    """Balance rises that the block's transactions do not explain.

    `received`: wei paid to each address by the block's successful top-level
    transactions; `spent`: wei each address paid itself (value of its
    successful transactions plus the fees of all of them).
    """
    found: list[Transfer] = []
    for address, balance in after.items():
        unexplained = balance - before.get(address, balance) - received.get(address, 0) + spent.get(address, 0)
        if unexplained > 0:
            found.append(
                Transfer(
                    txid=block.hash,
                    position=balance_position(address),
                    kind=BALANCE,
                    to=address,
                    amount=unexplained,
                    block_height=block.height,
                    block_hash=block.hash,
                )
            )
        elif unexplained < 0:
            log.warning(
                "%s lost %d wei in block %d that its own transactions do not explain",
                address,
                -unexplained,
                block.height,
            )
    return found
