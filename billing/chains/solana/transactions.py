"""A `getTransaction` answer, read into what validating a payment needs, and
the validation itself.

`SolanaTransaction.from_rpc` reads the `json` encoding of `getTransaction`
(asked with `maxSupportedTransactionVersion: 0`). Its account keys are the
message's static keys followed by the addresses loaded from lookup tables
(`meta.loadedAddresses`: writable, then read-only), which is the order
`preBalances` and `postBalances` are indexed in.

`transfer_validate` checks a transaction the way Solana Pay's
`validateTransfer` checks a SOL transfer, and goes one step further for
invoicing: it says how much each invoice's reference received.

- A transaction with `meta.err` pays nothing (its fee was charged, its
  transfers were not made).
- The recipient must be among the account keys; what it received is its own
  balance change, `postBalances[i] - preBalances[i]` at its index `i`
  (loaded addresses included). Never the sender's debit, never the fee.
- A reference counts when it is among the account keys, static or loaded
  from a lookup table.
- One known reference in the transaction: the whole amount received is its.
  Several (one transaction paying several invoices): each gets the System
  Program transfers to the recipient whose instruction carries it as an
  account (a transfer made by a program through a cross-program call counts
  for the references of the instruction that made the call). What cannot be
  told apart, and a transfer carrying no known reference at all, is
  `unmatched`: recorded for staff, never credited to an invoice.
"""

from __future__ import annotations

import struct
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from bip_utils import Base58Decoder

SYSTEM_PROGRAM = "11111111111111111111111111111111"
_TRANSFER = 2  # SystemInstruction::Transfer { lamports }: accounts [from, to]
_TRANSFER_WITH_SEED = 11  # SystemInstruction::TransferWithSeed { lamports, seed, owner }: accounts [from, base, to]


class MalformedTransaction(ValueError):
    """The node's answer lacks what validation needs, or contradicts itself."""


@dataclass(frozen=True)
class Instruction:
    program: str
    accounts: tuple[str, ...]
    data: bytes

    def system_transfer(self) -> tuple[str, int] | None:
        """(destination, lamports) when this is a System Program transfer."""
        if self.program != SYSTEM_PROGRAM or len(self.data) < 12:
            return None
        kind = struct.unpack_from("<I", self.data)[0]
        (lamports,) = struct.unpack_from("<Q", self.data, 4)
        if kind == _TRANSFER and len(self.accounts) >= 2:
            return self.accounts[1], lamports
        if kind == _TRANSFER_WITH_SEED and len(self.accounts) >= 3:
            return self.accounts[2], lamports
        return None


@dataclass(frozen=True)
class SolanaTransaction:
    signature: str
    slot: int
    block_time: int | None
    version: str  # "legacy" or "0"
    recent_blockhash: str
    err: Any  # None when the transaction succeeded
    fee: int
    account_keys: tuple[str, ...]  # static keys, then loaded writable, then loaded read-only
    static_keys: int
    pre_balances: tuple[int, ...]
    post_balances: tuple[int, ...]
    instructions: tuple[Instruction, ...]
    inner_instructions: tuple[tuple[int, Instruction], ...] = field(default=())  # (outer index, instruction)

    @property
    def failed(self) -> bool:
        return self.err is not None

    def key_index(self, address: str) -> int | None:
        try:
            return self.account_keys.index(address)
        except ValueError:
            return None

    def balance_change(self, address: str) -> int | None:
        """post - pre at `address`'s index, or None when it is not an account of the transaction."""
        index = self.key_index(address)
        if index is None:
            return None
        return self.post_balances[index] - self.pre_balances[index]

    @classmethod
    def from_rpc(cls, result: Mapping[str, Any], *, signature: str | None = None) -> SolanaTransaction:
        """Read a `getTransaction` result in the `json` encoding."""
        try:
            return cls._from_rpc(result, signature=signature)
        except MalformedTransaction:
            raise
        except (KeyError, TypeError, ValueError, IndexError, struct.error) as exc:
            raise MalformedTransaction(f"unreadable getTransaction answer ({exc.__class__.__name__}: {exc})") from None

    @classmethod
    def _from_rpc(cls, result: Mapping[str, Any], *, signature: str | None) -> SolanaTransaction:
        if not isinstance(result, Mapping):
            raise MalformedTransaction("getTransaction answered no transaction")
        transaction, meta = result["transaction"], result.get("meta")
        if not isinstance(transaction, Mapping):
            raise MalformedTransaction("the transaction is not in the json encoding")
        if not isinstance(meta, Mapping):
            raise MalformedTransaction("the transaction has no status metadata (meta)")
        message = transaction["message"]
        static = [str(k) for k in message["accountKeys"]]
        if any(isinstance(k, Mapping) for k in message["accountKeys"]):
            raise MalformedTransaction("jsonParsed account keys: ask for the json encoding")
        lookups = message.get("addressTableLookups") or []
        loaded = meta.get("loadedAddresses") or {}
        writable = [str(k) for k in loaded.get("writable", [])]
        readonly = [str(k) for k in loaded.get("readonly", [])]
        expected_loaded = sum(len(lu["writableIndexes"]) + len(lu["readonlyIndexes"]) for lu in lookups)
        if expected_loaded != len(writable) + len(readonly):
            raise MalformedTransaction(
                f"the message loads {expected_loaded} address(es) from lookup tables; "
                f"meta.loadedAddresses has {len(writable) + len(readonly)}"
            )
        keys = tuple(static + writable + readonly)
        pre = tuple(int(b) for b in meta["preBalances"])
        post = tuple(int(b) for b in meta["postBalances"])
        if len(pre) != len(keys) or len(post) != len(keys):
            raise MalformedTransaction(f"{len(keys)} account keys but {len(pre)} pre- and {len(post)} post-balances")
        signatures = transaction.get("signatures") or []
        sig = signature or (str(signatures[0]) if signatures else "")
        if signature and signatures and str(signatures[0]) != signature:
            raise MalformedTransaction(f"asked for {signature}, the node answered {signatures[0]}")

        def instruction(raw: Mapping[str, Any]) -> Instruction:
            return Instruction(
                program=keys[int(raw["programIdIndex"])],
                accounts=tuple(keys[int(i)] for i in raw["accounts"]),
                data=Base58Decoder.Decode(str(raw.get("data", ""))),
            )

        outer = tuple(instruction(raw) for raw in message["instructions"])
        inner: list[tuple[int, Instruction]] = []
        for group in meta.get("innerInstructions") or []:
            index = int(group["index"])
            if not 0 <= index < len(outer):
                raise MalformedTransaction(f"inner instructions of instruction {index}, which does not exist")
            inner.extend((index, instruction(raw)) for raw in group["instructions"])
        version = result.get("version", "legacy")
        return cls(
            signature=sig,
            slot=int(result["slot"]),
            block_time=None if result.get("blockTime") is None else int(result["blockTime"]),
            version=str(version),
            recent_blockhash=str(message["recentBlockhash"]),
            err=meta.get("err"),
            fee=int(meta.get("fee", 0)),
            account_keys=keys,
            static_keys=len(static),
            pre_balances=pre,
            post_balances=post,
            instructions=outer,
            inner_instructions=tuple(inner),
        )


@dataclass(frozen=True)
class Part:
    """What one invoice's reference received in a transaction. `position` is the
    reference's index among the transaction's account keys: with the
    signature, it names the payment (one transaction may pay several invoices)."""

    reference: str
    position: int
    amount: int


@dataclass(frozen=True)
class TransferCheck:
    """The verdict on one transaction for one recipient."""

    signature: str
    slot: int
    received: int  # the recipient's balance change (0 when it is not an account of the transaction)
    parts: tuple[Part, ...] = ()
    unmatched: int = 0  # received, but for no known reference: staff decide
    recipient_position: int | None = None
    references: tuple[str, ...] = ()  # known references among the account keys
    rejected: str = ""  # why nothing was received, if so

    @property
    def counts(self) -> bool:
        return bool(self.parts) or self.unmatched > 0


def _transfers_to(tx: SolanaTransaction, recipient: str) -> list[tuple[int, tuple[str, ...]]]:
    """System transfers to `recipient`: (lamports, accounts of the top-level
    instruction that made it), top-level and inner (cross-program) ones."""
    found = []
    for ix in tx.instructions:
        transfer = ix.system_transfer()
        if transfer is not None and transfer[0] == recipient:
            found.append((transfer[1], ix.accounts))
    for outer, ix in tx.inner_instructions:
        transfer = ix.system_transfer()
        if transfer is not None and transfer[0] == recipient:
            found.append((transfer[1], tx.instructions[outer].accounts))
    return found


def transfer_validate(tx: SolanaTransaction, *, recipient: str, references: Collection[str]) -> TransferCheck:
    """Validate `tx` as a SOL payment to `recipient` (see the module docstring).
    `references` are the invoice references known to billing (any superset of
    the transaction's account keys that are references will do)."""
    found = tuple(dict.fromkeys(k for k in tx.account_keys if k in references))
    check = partial(TransferCheck, signature=tx.signature, slot=tx.slot, references=found)
    if tx.failed:
        return check(received=0, rejected=f"failed: {tx.err}")
    index = tx.key_index(recipient)
    if index is None:
        return check(received=0, rejected="recipient not found")
    received = tx.post_balances[index] - tx.pre_balances[index]
    if received <= 0:
        return check(received=received, recipient_position=index, rejected="nothing received")
    if not found:
        return check(received=received, unmatched=received, recipient_position=index)
    positions = {ref: tx.account_keys.index(ref) for ref in found}
    if len(found) == 1:
        part = Part(found[0], positions[found[0]], received)
        return check(received=received, parts=(part,), recipient_position=index)
    attributed: dict[str, int] = {}
    for lamports, carriers in _transfers_to(tx, recipient):
        hits = [ref for ref in found if ref in carriers]
        if len(hits) == 1:
            attributed[hits[0]] = attributed.get(hits[0], 0) + lamports
    total = sum(attributed.values())
    if total > received:
        # The recipient also paid something out in this transaction: what each
        # invoice got cannot be told; staff decide.
        return check(received=received, unmatched=received, recipient_position=index)
    parts = tuple(Part(ref, positions[ref], amount) for ref, amount in attributed.items() if amount > 0)
    return check(received=received, parts=parts, unmatched=received - total, recipient_position=index)
