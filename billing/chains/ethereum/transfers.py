"""What the Ethereum watcher finds in a block: transfers to watched addresses.

A `Transfer` is one arrival of value at a watched address, in one of four ways:

    kind       how it was found                              position
    native     a transaction's own value (`to` is ours)       "tx"
    internal   a call inside a transaction (trace API)        "call:<trace address>", e.g. "call:0.1"
    token      an ERC-20 Transfer log                         "log:<log index in the block>"
    balance    a balance rise no transaction explains         "balance:<address>"

(txid, position) is unique on the chain, which is what makes recording a
payment idempotent: one contract call paying two invoices is two transfers,
"call:0" and "call:1" of the same txid. A balance-found transfer has no
transaction of its own: its txid is the block's hash.

`asset` is "" for ether and the token contract (lowercase) for tokens; the
watcher maps contracts to USDT/USDC, and records any other one for staff.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from billing.chains.blocks import BlockRef

NATIVE = "native"
INTERNAL = "internal"
TOKEN = "token"
BALANCE = "balance"
ETHER = ""  # the asset of native, internal and balance transfers


@dataclass(frozen=True, slots=True)
class Transfer:
    txid: str
    position: str
    kind: str
    to: str  # lowercase 0x address
    amount: int  # wei, or token units
    asset: str = ETHER
    sender: str = ""  # lowercase, when known
    block_height: int | None = None
    block_hash: str | None = None

    @property
    def is_ether(self) -> bool:
        return self.asset == ETHER


POSITION_MAX = 64  # Payment.position and StrayTransfer.position: max_length=64


def trace_position(trace_address: tuple[int, ...] | list[int]) -> str:
    """`call:0.2.1`, a call's path in its transaction; a path too long for the
    position column (a contract calling itself some thirty levels deep to pay)
    is named by its hash, stable from one scan to the next: `call#<hex>`. Stored
    as it came, the payment failed its block's transaction, and the chain's
    watcher stopped on that block for good."""
    position = "call:" + ".".join(str(int(i)) for i in trace_address)
    if len(position) <= POSITION_MAX:
        return position
    return "call#" + hashlib.sha256(position.encode()).hexdigest()[: POSITION_MAX - len("call#")]


def log_position(log_index: int) -> str:
    return f"log:{int(log_index)}"


def balance_position(address: str) -> str:
    return f"balance:{address.lower()}"


@dataclass(frozen=True)
class EvmBlockScan:
    """What one block carried for the watcher.

    `transfers` are in block order (transactions, then their internal calls;
    token logs by log index; balance-found ones last). `tx_count` is what
    was read, for progress lines and the benchmark.
    """

    block: BlockRef
    parent_hash: str
    time: int  # block timestamp, seconds since the epoch (UTC)
    tx_count: int
    transfers: tuple[Transfer, ...]

    @property
    def previous_hash(self) -> str:
        return self.parent_hash
