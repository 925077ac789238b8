"""A loopback Solana JSON-RPC node for tests, benchmarks and local runs.

No Solana validator can be installed from the package registries this project
reaches, so the Solana watcher is proven against this server instead. What it
holds is real; only the cluster around it is small:

- Transactions are built and signed with `solders` (real keypairs, real
  signatures, legacy and version 0 messages), executed by LiteSVM
  (`solders.litesvm`, the Solana runtime in a library), and their balances
  before and after are read from it: a transfer that fails really fails (its
  fee is still charged), a lookup table is created and extended by the real
  Address Lookup Table program and its addresses are really loaded.
- The answers have the exact shapes of a cluster's (keys sorted as the
  node's JSON is): `getSignaturesForAddress` (`before`, `until`, `limit` up to
  1,000), `getTransaction` (`json`, `jsonParsed`, `base64`, `base58`;
  `maxSupportedTransactionVersion`, `loadedAddresses` for version 0),
  `getGenesisHash`, `getSlot`, `getBlockHeight`, `getLatestBlockhash`,
  `isBlockhashValid`, `getSignatureStatuses`, `getBalance`, `getHealth`,
  `getVersion`, JSON-RPC batches, and the node's error codes and messages.
- What a wallet calls to build and send a transfer (`@solana/pay`'s
  `createTransfer`, `@solana/web3.js`'s `sendAndConfirmTransaction`):
  `getAccountInfo`, `getMinimumBalanceForRentExemption`, `getFeeForMessage`,
  `simulateTransaction`, `sendTransaction`, `getBlock`, and `requestAirdrop`
  (a real transfer from a faucet account) to fund a new wallet.
- The PubSub websocket on the RPC port + 1, as a validator serves it
  (`SolanaPubSub`): `logsSubscribe`, `accountSubscribe`, `signatureSubscribe`,
  `slotSubscribe` and their unsubscribe methods, notifications shaped as
  Solana's RPC documents them.
  tests/chains/solana/fixtures holds recorded answers of real clusters, each
  naming its source, and the tests compare these shapes against them.
- Commitment is explicit: a transaction is `confirmed` once its block is made,
  `finalized` when `finalize()` says so; `drop()` abandons a confirmed
  transaction with its fork (its balances are put back), `advance()` makes
  empty blocks so blockhashes expire (150 blocks).
- Rate limiting on demand: `rate_limit(n)` answers the next `n` HTTP requests
  with 429 (optionally a `Retry-After`, or a JSON-RPC error in a 200 answer,
  as some providers do). `stats` counts HTTP requests and calls per method.

Never imported by production code. `python -m devtools.solana_rpc` runs one
on a port for a local try-out.
"""

from __future__ import annotations

import argparse
import base64
import itertools
import json
import logging
import os
import queue
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from bip_utils import Base58Decoder, Base58Encoder
from solders.account import Account
from solders.address_lookup_table_account import (
    ID as LOOKUP_TABLE_PROGRAM,
)
from solders.address_lookup_table_account import (
    AddressLookupTable,
    AddressLookupTableAccount,
    derive_lookup_table_address,
)
from solders.hash import Hash
from solders.instruction import AccountMeta, Instruction
from solders.keypair import Keypair
from solders.litesvm import LiteSVM
from solders.message import Message, MessageV0, from_bytes_versioned
from solders.pubkey import Pubkey
from solders.signature import Signature
from solders.system_program import ID as SYSTEM_PROGRAM
from solders.system_program import TransferParams, transfer
from solders.transaction import VersionedTransaction
from solders.transaction_metadata import FailedTransactionMetadata

from billing.chains.solana.cluster import GENESIS_HASHES, MAX_PROCESSING_AGE

LAMPORTS_PER_SOL = 1_000_000_000
MEMO_PROGRAM = Pubkey.from_string("MemoSq4gqABAXKb96qnH8TysNcWxMyWCqXgDLGmfcHr")
MEMO_PROGRAM_V1 = Pubkey.from_string("Memo1UhkJRfHyvLMcVucJwxXeuD728EqVDDwQDxFMNo")
API_VERSION = "2.2.7"
FEATURE_SET = 3294202862
MAX_SIGNATURES_LIMIT = 1000
_SYSVAR_PREFIX = "Sysvar"

# Error codes and messages of the Solana JSON-RPC (agave rpc-client-api custom errors).
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS = -32700, -32600, -32601, -32602
UNSUPPORTED_TRANSACTION_VERSION = -32015
BLOCK_NOT_AVAILABLE, SLOT_SKIPPED = -32004, -32007
LAMPORTS_PER_SIGNATURE = 5000
SEND_TRANSACTION_PREFLIGHT_FAILURE = -32002


class RpcFault(Exception):
    """A JSON-RPC error answer."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code, self.message, self.data = code, message, data

    def as_json(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


class TransactionRejected(Exception):
    """The cluster refused the transaction before executing it (bad blockhash,
    unknown fee payer...): it is in no block and has no history."""


def _b58(data: bytes) -> str:
    return Base58Encoder.Encode(data) if data else ""


def _enum_name(value: Any) -> str:
    return str(value).rsplit(".", 1)[-1]


def _instruction_error_json(err: Any) -> Any:
    name = type(err).__name__
    if name == "InstructionErrorCustom":
        return {"Custom": err.code}
    if name == "InstructionErrorBorshIO":
        return {"BorshIoError": err.value}
    return _enum_name(err)


def transaction_error_json(err: Any) -> Any:
    """A solders TransactionError as the node writes it in JSON."""
    name = type(err).__name__
    if name == "TransactionErrorInstructionError":
        return {"InstructionError": [err.index, _instruction_error_json(err.err)]}
    if name == "TransactionErrorInsufficientFundsForRent":
        return {"InsufficientFundsForRent": {"account_index": err.account_index}}
    if name == "TransactionErrorProgramExecutionTemporarilyRestricted":
        return {"ProgramExecutionTemporarilyRestricted": {"account_index": err.account_index}}
    if name == "TransactionErrorDuplicateInstruction":
        return {"DuplicateInstruction": err.index}
    return _enum_name(err)


@dataclass
class LedgerTx:
    """One transaction in a block, with what the node keeps about it."""

    signature: str
    sequence: int
    slot: int
    block_time: int
    tx: VersionedTransaction
    static_keys: list[Pubkey]
    loaded_writable: list[Pubkey]
    loaded_readonly: list[Pubkey]
    pre_balances: list[int]
    post_balances: list[int]
    fee: int
    err: Any  # JSON of the error, or None
    logs: list[str]
    inner: list[list[tuple[Any, int | None]]]  # per instruction: (CompiledInstruction, stack height)
    compute_units: int
    dropped: bool = False

    @property
    def version(self) -> str | int:
        return 0 if isinstance(self.tx.message, MessageV0) else "legacy"

    @property
    def account_keys(self) -> list[Pubkey]:
        return self.static_keys + self.loaded_writable + self.loaded_readonly

    def memo(self) -> str | None:
        """The `memo` field of getSignaturesForAddress: "[len] text" per memo instruction."""
        keys = self.account_keys
        memos = []
        for ix in self.tx.message.instructions:
            if keys[ix.program_id_index] in (MEMO_PROGRAM, MEMO_PROGRAM_V1):
                text = bytes(ix.data).decode("utf-8", errors="replace")
                memos.append(f"[{len(ix.data)}] {text}")
        return "; ".join(memos) if memos else None


@dataclass
class Block:
    slot: int
    height: int
    blockhash: str
    block_time: int


@dataclass
class SolanaLedger:
    """A small cluster: LiteSVM for execution, plus the history an RPC node keeps."""

    genesis_hash: str = ""
    block_time_start: int = 0
    svm: LiteSVM = field(default_factory=LiteSVM)

    def __post_init__(self) -> None:
        self.genesis_hash = self.genesis_hash or str(Hash(os.urandom(32)))
        self.block_time_start = self.block_time_start or int(time.time())
        self._lock = threading.RLock()
        self._sequence = itertools.count()
        self._txs: dict[str, LedgerTx] = {}
        self._by_address: dict[str, list[str]] = {}
        self._by_slot: dict[int, list[str]] = {}
        self._order: list[str] = []  # signatures in the order they landed
        self._final_told = 0  # how many of `_order` were announced finalized to the observers
        self._observers: list[Callable[[str, Any], None]] = []
        self._faucet: Keypair | None = None
        self.slot = int(self.svm.get_clock().slot)  # the slot the next transaction lands in
        first_height = self.slot - 20_000_000  # block height trails the slot (skipped slots)
        self._blocks: dict[int, Block] = {
            self.slot - 1: Block(self.slot - 1, first_height, str(self.svm.latest_blockhash()), self.block_time_start)
        }
        self._height_of: dict[str, int] = {str(self.svm.latest_blockhash()): first_height}
        self.confirmed_slot = self.slot - 1
        self.finalized_slot = self.slot - 1

    # --- blocks and commitment ---------------------------------------------------

    @classmethod
    def posing_as(cls, cluster: str) -> SolanaLedger:
        """A ledger that answers the genesis hash of a public cluster."""
        return cls(genesis_hash=GENESIS_HASHES[cluster])

    def _block_make(self) -> Block:
        """Close the open slot as a block; the next transactions land in the next slot."""
        last = self._blocks[self.confirmed_slot]
        self.svm.warp_to_slot(self.slot + 1)
        self.svm.expire_blockhash()
        block = Block(
            slot=self.slot,
            height=last.height + 1,
            blockhash=str(self.svm.latest_blockhash()),
            block_time=self.block_time_start + (self.slot - self._first_slot) * 2 // 5,
        )
        self._blocks[self.slot] = block
        self._height_of[block.blockhash] = block.height
        self.confirmed_slot = self.slot
        self.slot += 1
        self._emit("block", block)
        return block

    @property
    def _first_slot(self) -> int:
        return min(self._blocks)

    def advance(self, blocks: int = 1) -> None:
        """Make `blocks` empty blocks (time passes, blockhashes age)."""
        with self._lock:
            for _ in range(blocks):
                self._block_make()

    def finalize(self, slot: int | None = None) -> int:
        """Root everything up to `slot` (default: the newest confirmed block)."""
        with self._lock:
            target = self.confirmed_slot if slot is None else min(slot, self.confirmed_slot)
            self.finalized_slot = max(self.finalized_slot, target)
            while self._final_told < len(self._order):
                record = self._txs[self._order[self._final_told]]
                if record.slot > self.finalized_slot:
                    break
                self._final_told += 1
                if not record.dropped:
                    self._emit("finalized", record)
            return self.finalized_slot

    # --- what the node tells its subscribers (devtools.solana_rpc.SolanaPubSub) ----------------

    def observe(self, observer: Callable[[str, Any], None]) -> None:
        """Call `observer(event, subject)` on each `block` (a Block made), `confirmed`
        (a LedgerTx in a block just made) and `finalized` (a LedgerTx rooted), with
        the ledger's lock held: an observer must only queue what it is told."""
        with self._lock:
            self._observers.append(observer)

    def unobserve(self, observer: Callable[[str, Any], None]) -> None:
        with self._lock:
            if observer in self._observers:
                self._observers.remove(observer)

    def _emit(self, event: str, subject: Any) -> None:
        for observer in self._observers:
            observer(event, subject)

    def block_height(self, commitment: str = "finalized") -> int:
        return self._blocks[self._slot_at(commitment)].height

    def _slot_at(self, commitment: str) -> int:
        return self.finalized_slot if commitment == "finalized" else self.confirmed_slot

    @property
    def latest_blockhash(self) -> Hash:
        return self.svm.latest_blockhash()

    def blockhash_valid(self, blockhash: str, commitment: str = "finalized") -> bool:
        height = self._height_of.get(blockhash)
        return height is not None and self.block_height(commitment) <= height + MAX_PROCESSING_AGE

    def blockhash_known_valid(self, blockhash: str, commitment: str = "finalized") -> bool:
        """As a node's `isBlockhashValid` answers: the bank at `commitment` must
        hold the blockhash (a block newer than that bank is not in its queue) and
        it must not have expired."""
        height = self._height_of.get(blockhash)
        return (
            height is not None
            and height <= self.block_height(commitment)
            and self.blockhash_valid(blockhash, commitment)
        )

    # --- accounts -------------------------------------------------------------------

    def fund(self, pubkey: Pubkey, lamports: int) -> None:
        """Give an account lamports out of nothing (a genesis allocation: no transaction)."""
        with self._lock:
            current = self.svm.get_account(pubkey)
            if current is None:
                self.svm.set_account(pubkey, Account(lamports, b"", SYSTEM_PROGRAM, False, 0))
            else:
                self.svm.set_account(
                    pubkey,
                    Account(current.lamports + lamports, current.data, current.owner, current.executable, 0),
                )

    def keypair_funded(self, lamports: int = 10 * LAMPORTS_PER_SOL) -> Keypair:
        keypair = Keypair()
        self.fund(keypair.pubkey(), lamports)
        return keypair

    def balance(self, pubkey: Pubkey | str) -> int:
        key = Pubkey.from_string(pubkey) if isinstance(pubkey, str) else pubkey
        return self.svm.get_balance(key) or 0

    def _balance_set(self, pubkey: Pubkey, lamports: int) -> None:
        current = self.svm.get_account(pubkey)
        if current is None:
            current = Account(0, b"", SYSTEM_PROGRAM, False, 0)
        self.svm.set_account(pubkey, Account(lamports, current.data, current.owner, current.executable, 0))

    # --- building transactions -----------------------------------------------------------

    @staticmethod
    def payment_instructions(
        *,
        payer: Pubkey,
        recipient: Pubkey | str,
        lamports: int,
        references: Iterable[Pubkey | str] = (),
        memo: str | None = None,
    ) -> list[Instruction]:
        """A Solana Pay transfer: an optional memo, then a System Program transfer
        carrying each reference as a read-only, non-signer account."""
        to = Pubkey.from_string(recipient) if isinstance(recipient, str) else recipient
        instructions = []
        if memo is not None:
            instructions.append(Instruction(MEMO_PROGRAM, memo.encode(), []))
        ix = transfer(TransferParams(from_pubkey=payer, to_pubkey=to, lamports=lamports))
        extra = [AccountMeta(Pubkey.from_string(r) if isinstance(r, str) else r, False, False) for r in references]
        instructions.append(Instruction(ix.program_id, ix.data, [*ix.accounts, *extra]))
        return instructions

    def build(
        self,
        payer: Keypair,
        instructions: Sequence[Instruction],
        *,
        version: str | int = "legacy",
        lookup_tables: Sequence[AddressLookupTableAccount] = (),
        signers: Sequence[Keypair] = (),
    ) -> VersionedTransaction:
        """A signed transaction with the ledger's latest blockhash."""
        blockhash = self.latest_blockhash
        if version == "legacy":
            message: Message | MessageV0 = Message.new_with_blockhash(list(instructions), payer.pubkey(), blockhash)
        else:
            message = MessageV0.try_compile(payer.pubkey(), list(instructions), list(lookup_tables), blockhash)
        return VersionedTransaction(message, [payer, *signers])

    def pay(
        self,
        payer: Keypair,
        recipient: Pubkey | str,
        lamports: int,
        *,
        references: Iterable[Pubkey | str] = (),
        memo: str | None = None,
        version: str | int = "legacy",
        lookup_tables: Sequence[AddressLookupTableAccount] = (),
    ) -> str:
        """Build, sign and submit a Solana Pay transfer; its signature."""
        instructions = self.payment_instructions(
            payer=payer.pubkey(), recipient=recipient, lamports=lamports, references=references, memo=memo
        )
        return self.submit(self.build(payer, instructions, version=version, lookup_tables=lookup_tables))

    def lookup_table_create(self, authority: Keypair, addresses: Sequence[Pubkey]) -> AddressLookupTableAccount:
        """Create and extend an address lookup table with the real program, then
        make a block so its addresses can be loaded (they are usable from the
        slot after the one that added them)."""
        with self._lock:
            recent_slot = max(s for s, _ in self.svm.get_slot_hashes())
            table, bump = derive_lookup_table_address(authority.pubkey(), recent_slot)
            metas = [
                AccountMeta(table, False, True),
                AccountMeta(authority.pubkey(), True, False),
                AccountMeta(authority.pubkey(), True, True),
                AccountMeta(SYSTEM_PROGRAM, False, False),
            ]
            create = Instruction(LOOKUP_TABLE_PROGRAM, struct.pack("<IQB", 0, recent_slot, bump), metas)
            extend = Instruction(
                LOOKUP_TABLE_PROGRAM,
                struct.pack("<IQ", 2, len(addresses)) + b"".join(bytes(a) for a in addresses),
                metas,
            )
            self.submit(self.build(authority, [create, extend]))
            return AddressLookupTableAccount(table, list(addresses))

    # --- executing ----------------------------------------------------------------------------

    def _lookups_resolve(self, message: MessageV0) -> tuple[list[Pubkey], list[Pubkey]]:
        writable: list[Pubkey] = []
        readonly: list[Pubkey] = []
        for lookup in message.address_table_lookups:
            account = self.svm.get_account(lookup.account_key)
            if account is None:
                raise TransactionRejected(f"AddressLookupTableNotFound: {lookup.account_key}")
            addresses = AddressLookupTable.deserialize(bytes(account.data)).addresses
            try:
                writable += [addresses[i] for i in lookup.writable_indexes]
                readonly += [addresses[i] for i in lookup.readonly_indexes]
            except IndexError:
                raise TransactionRejected("InvalidAddressLookupTableIndex") from None
        return writable, readonly

    def submit(self, tx: VersionedTransaction) -> str:
        """Execute `tx` in the open slot, keep it in history, make its block.
        A transaction the runtime refuses outright raises `TransactionRejected`;
        one that fails while executing is kept, with its error (its fee was paid)."""
        with self._lock:
            message = tx.message
            static = list(message.account_keys)
            writable, readonly = self._lookups_resolve(message) if isinstance(message, MessageV0) else ([], [])
            keys = static + writable + readonly
            pre = [self.svm.get_balance(k) or 0 for k in keys]
            result = self.svm.send_transaction(tx)
            post = [self.svm.get_balance(k) or 0 for k in keys]
            if isinstance(result, FailedTransactionMetadata):
                meta, err = result.meta(), transaction_error_json(result.err())
                if pre == post:  # nothing charged: never made it into a block
                    raise TransactionRejected(json.dumps(err))
            else:
                meta, err = result, None
            signature = str(tx.signatures[0])
            record = LedgerTx(
                signature=signature,
                sequence=next(self._sequence),
                slot=self.slot,
                block_time=0,
                tx=tx,
                static_keys=static,
                loaded_writable=writable,
                loaded_readonly=readonly,
                pre_balances=pre,
                post_balances=post,
                fee=int(meta.fee()),
                err=err,
                logs=list(meta.logs()),
                inner=[[(i.instruction, i.stack_height) for i in group] for group in meta.inner_instructions()],
                compute_units=int(meta.compute_units_consumed()),
            )
            block = self._block_make()
            record.block_time = block.block_time
            self._txs[signature] = record
            self._order.append(signature)
            self._by_slot.setdefault(record.slot, []).append(signature)
            for key in dict.fromkeys(str(k) for k in keys):
                self._by_address.setdefault(key, []).append(signature)
            self._emit("confirmed", record)
            return signature

    def airdrop(self, pubkey: Pubkey | str, lamports: int) -> str:
        """`requestAirdrop`: a real transfer from the ledger's faucet (funded out of
        nothing as it needs), so the airdrop has a signature, a block and history."""
        to = Pubkey.from_string(pubkey) if isinstance(pubkey, str) else pubkey
        with self._lock:
            if self._faucet is None:
                self._faucet = Keypair()
            self.fund(self._faucet.pubkey(), lamports + LAMPORTS_PER_SOL)
            ix = transfer(TransferParams(from_pubkey=self._faucet.pubkey(), to_pubkey=to, lamports=lamports))
            return self.submit(self.build(self._faucet, [ix]))

    def block_transactions(self, slot: int) -> list[LedgerTx]:
        """The transactions of the block at `slot` (those of an abandoned fork left out)."""
        return [self._txs[s] for s in self._by_slot.get(slot, []) if not self._txs[s].dropped]

    def drop(self, signature: str) -> None:
        """The fork holding `signature` is abandoned: the transaction leaves the
        history and its balance changes are undone. Refused once finalized."""
        with self._lock:
            record = self._txs[signature]
            if record.slot <= self.finalized_slot:
                raise ValueError(f"{signature} is finalized: no fork can remove it")
            record.dropped = True
            for key, pre, post in zip(record.account_keys, record.pre_balances, record.post_balances, strict=True):
                if post != pre:
                    self._balance_set(key, self.balance(key) - (post - pre))

    def transaction(self, signature: str) -> LedgerTx | None:
        return self._txs.get(signature)

    # --- what the RPC sees ------------------------------------------------------------------------

    def _visible(self, record: LedgerTx | None, commitment: str) -> bool:
        return record is not None and not record.dropped and record.slot <= self._slot_at(commitment)

    def status(self, record: LedgerTx) -> str:
        return "finalized" if record.slot <= self.finalized_slot else "confirmed"

    def signatures_for_address(
        self, address: str, *, before: str | None, until: str | None, limit: int, commitment: str
    ) -> list[dict[str, Any]]:
        with self._lock:
            visible = [
                self._txs[s] for s in self._by_address.get(address, []) if self._visible(self._txs[s], commitment)
            ]
            visible.sort(key=lambda r: (r.slot, r.sequence), reverse=True)
            start = 0
            if before is not None:
                index = next((i for i, r in enumerate(visible) if r.signature == before), None)
                if index is None:
                    return []  # as the node: an unknown `before` finds nothing
                start = index + 1
            out = []
            for record in visible[start:]:
                if record.signature == until or len(out) >= limit:
                    break
                out.append(
                    {
                        "blockTime": record.block_time,
                        "confirmationStatus": self.status(record),
                        "err": record.err,
                        "memo": record.memo(),
                        "signature": record.signature,
                        "slot": record.slot,
                    }
                )
            return out

    def visible_transaction(self, signature: str, commitment: str) -> LedgerTx | None:
        record = self._txs.get(signature)
        return record if self._visible(record, commitment) else None


# --- Rendering transactions as the node does ---------------------------------------------------


def _header_json(message: Message | MessageV0) -> dict[str, int]:
    header = message.header
    return {
        "numReadonlySignedAccounts": header.num_readonly_signed_accounts,
        "numReadonlyUnsignedAccounts": header.num_readonly_unsigned_accounts,
        "numRequiredSignatures": header.num_required_signatures,
    }


def _lookups_json(message: Message | MessageV0) -> list[dict[str, Any]] | None:
    if not isinstance(message, MessageV0):
        return None
    return [
        {
            "accountKey": str(lookup.account_key),
            "readonlyIndexes": list(lookup.readonly_indexes),
            "writableIndexes": list(lookup.writable_indexes),
        }
        for lookup in message.address_table_lookups
    ]


def _compiled_json(ix: Any, stack_height: int | None) -> dict[str, Any]:
    return {
        "accounts": list(ix.accounts),
        "data": _b58(bytes(ix.data)),
        "programIdIndex": ix.program_id_index,
        "stackHeight": stack_height,
    }


def _inner_json(record: LedgerTx, render) -> list[dict[str, Any]]:
    return [
        {"index": index, "instructions": [render(ix, height) for ix, height in group]}
        for index, group in enumerate(record.inner)
        if group
    ]


def _writable(record: LedgerTx, index: int) -> bool:
    message = record.tx.message
    header = message.header
    static = len(record.static_keys)
    if index >= static:
        return index < static + len(record.loaded_writable)
    key = record.static_keys[index]
    signed = header.num_required_signatures
    if index < signed:
        writable = index < signed - header.num_readonly_signed_accounts
    else:
        writable = index < static - header.num_readonly_unsigned_accounts
    # As the runtime: programs called and reserved accounts are demoted to read-only.
    called = any(ix.program_id_index == index for ix in message.instructions)
    reserved = key == SYSTEM_PROGRAM or str(key).startswith(_SYSVAR_PREFIX)
    return writable and not called and not reserved


def _parsed_instruction(record: LedgerTx, ix: Any, stack_height: int | None) -> dict[str, Any]:
    keys = record.account_keys
    program = keys[ix.program_id_index]
    accounts = [str(keys[i]) for i in ix.accounts]
    data = bytes(ix.data)
    base = {"programId": str(program), "stackHeight": stack_height}
    if program == SYSTEM_PROGRAM and len(data) >= 12 and struct.unpack_from("<I", data)[0] == 2:
        (lamports,) = struct.unpack_from("<Q", data, 4)
        info = {"destination": accounts[1], "lamports": lamports, "source": accounts[0]}
        return {**base, "parsed": {"info": info, "type": "transfer"}, "program": "system"}
    if program in (MEMO_PROGRAM, MEMO_PROGRAM_V1):
        return {**base, "parsed": data.decode("utf-8", errors="replace"), "program": "spl-memo"}
    return {**base, "accounts": accounts, "data": _b58(data)}


def transaction_json(record: LedgerTx, *, encoding: str, with_version: bool) -> dict[str, Any]:
    """The `getTransaction` result for `record` in `encoding`."""
    tx, message = record.tx, record.tx.message
    meta: dict[str, Any] = {
        "computeUnitsConsumed": record.compute_units,
        "err": record.err,
        "fee": record.fee,
        "logMessages": record.logs,
        "postBalances": record.post_balances,
        "postTokenBalances": [],
        "preBalances": record.pre_balances,
        "preTokenBalances": [],
        "rewards": [],
        "status": {"Ok": None} if record.err is None else {"Err": record.err},
    }
    if encoding == "jsonParsed":
        meta["innerInstructions"] = _inner_json(record, lambda ix, h: _parsed_instruction(record, ix, h))
        source = ["transaction"] * len(record.static_keys) + ["lookupTable"] * (
            len(record.loaded_writable) + len(record.loaded_readonly)
        )
        body: dict[str, Any] = {
            "accountKeys": [
                {
                    "pubkey": str(key),
                    "signer": i < message.header.num_required_signatures,
                    "source": source[i],
                    "writable": _writable(record, i),
                }
                for i, key in enumerate(record.account_keys)
            ],
            "instructions": [_parsed_instruction(record, ix, None) for ix in message.instructions],
            "recentBlockhash": str(message.recent_blockhash),
        }
        lookups = _lookups_json(message)
        if lookups is not None:
            body["addressTableLookups"] = lookups
        transaction: Any = {"message": body, "signatures": [str(s) for s in tx.signatures]}
    else:
        meta["innerInstructions"] = _inner_json(record, _compiled_json)
        meta["loadedAddresses"] = {
            "readonly": [str(k) for k in record.loaded_readonly],
            "writable": [str(k) for k in record.loaded_writable],
        }
        if encoding == "json":
            body = {
                "accountKeys": [str(k) for k in record.static_keys],
                "header": _header_json(message),
                "instructions": [_compiled_json(ix, None) for ix in message.instructions],
                "recentBlockhash": str(message.recent_blockhash),
            }
            lookups = _lookups_json(message)
            if lookups is not None:
                body["addressTableLookups"] = lookups
            transaction = {"message": body, "signatures": [str(s) for s in tx.signatures]}
        elif encoding == "base64":
            transaction = [base64.b64encode(bytes(tx)).decode(), "base64"]
        else:
            transaction = [_b58(bytes(tx)), "base58"]
    result = {"blockTime": record.block_time, "meta": meta, "slot": record.slot, "transaction": transaction}
    if with_version:
        result["version"] = record.version
    return result


# --- JSON-RPC methods -------------------------------------------------------------------------------


def _config(params: list[Any], index: int) -> dict[str, Any]:
    value = params[index] if len(params) > index else None
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise RpcFault(INVALID_PARAMS, "Invalid params: invalid type: expected a map.")
    return value


def _commitment(config: dict[str, Any], *, minimum_confirmed: bool = False) -> str:
    commitment = config.get("commitment", "finalized")
    if commitment not in ("processed", "confirmed", "finalized"):
        raise RpcFault(INVALID_PARAMS, f"Invalid params: unknown variant `{commitment}`.")
    if minimum_confirmed and commitment == "processed":
        raise RpcFault(INVALID_PARAMS, "Method does not support commitment below `confirmed`")
    return commitment


def _pubkey(value: Any) -> str:
    try:
        return str(Pubkey.from_string(str(value)))
    except ValueError:
        raise RpcFault(INVALID_PARAMS, "Invalid param: WrongSize") from None


def _signature(value: Any) -> str:
    try:
        return str(Signature.from_string(str(value)))
    except ValueError:
        raise RpcFault(INVALID_PARAMS, "Invalid param: WrongSize") from None


def _transaction_decode(params: list[Any], encoding: str) -> VersionedTransaction:
    """A wallet's serialized transaction (the first parameter) in `encoding`."""
    if not params or not isinstance(params[0], str):
        raise RpcFault(INVALID_PARAMS, "Invalid params: invalid length 0, expected at least 1 element.")
    try:
        if encoding == "base64":
            raw = base64.b64decode(params[0], validate=True)
        elif encoding == "base58":
            raw = Base58Decoder.Decode(params[0])
        else:
            raise RpcFault(INVALID_PARAMS, f"unsupported encoding: {encoding}. Supported encodings: base58, base64")
        return VersionedTransaction.from_bytes(raw)
    except (ValueError, TypeError):
        raise RpcFault(
            INVALID_PARAMS,
            f"failed to deserialize solana_transaction::versioned::VersionedTransaction: invalid {encoding}",
        ) from None


def _with_blockhash(message: Message | MessageV0, blockhash: Hash) -> Message | MessageV0:
    """The same message with another recent blockhash (simulateTransaction's `replaceRecentBlockhash`)."""
    if isinstance(message, MessageV0):
        return MessageV0(
            message.header,
            list(message.account_keys),
            blockhash,
            list(message.instructions),
            list(message.address_table_lookups),
        )
    header = message.header
    return Message.new_with_compiled_instructions(
        header.num_required_signatures,
        header.num_readonly_signed_accounts,
        header.num_readonly_unsigned_accounts,
        list(message.account_keys),
        blockhash,
        list(message.instructions),
    )


def account_json(account: Account, *, encoding: str) -> dict[str, Any]:
    """An account as `getAccountInfo` and `accountNotification` write it. `jsonParsed`
    falls back to base64, as the node does for data no parser knows (a wallet's is empty)."""
    data = bytes(account.data)
    if encoding == "base58":
        if len(data) > 128:
            raise RpcFault(
                INVALID_PARAMS,
                "Encoded binary (base 58) data should be less than 128 bytes, please use Base64 encoding.",
            )
        encoded: list[str] = [_b58(data), "base58"]
    elif encoding in ("base64", "jsonParsed"):
        encoded = [base64.b64encode(data).decode(), "base64"]
    else:
        raise RpcFault(INVALID_PARAMS, f"Invalid params: unknown variant `{encoding}`.")
    return {
        "data": encoded,
        "executable": account.executable,
        "lamports": account.lamports,
        "owner": str(account.owner),
        "rentEpoch": account.rent_epoch,
        "space": len(data),
    }


def _preflight_failure(what: str, err: Any, logs: list[str]) -> RpcFault:
    return RpcFault(
        SEND_TRANSACTION_PREFLIGHT_FAILURE,
        f"Transaction simulation failed: {what}",
        {"accounts": None, "err": err, "innerInstructions": None, "logs": logs, "returnData": None, "unitsConsumed": 0},
    )


class SolanaRpcHandler:
    """The JSON-RPC methods over one ledger."""

    def __init__(self, ledger: SolanaLedger) -> None:
        self.ledger = ledger

    def _context(self, commitment: str = "finalized") -> dict[str, Any]:
        return {"apiVersion": API_VERSION, "slot": self.ledger._slot_at(commitment)}

    def dispatch(self, method: str, params: list[Any]) -> Any:
        handler = getattr(self, f"rpc_{method}", None)
        if handler is None:
            raise RpcFault(METHOD_NOT_FOUND, "Method not found")
        with self.ledger._lock:
            return handler(params)

    def rpc_getGenesisHash(self, params: list[Any]) -> str:
        return self.ledger.genesis_hash

    def rpc_getHealth(self, params: list[Any]) -> str:
        return "ok"

    def rpc_getVersion(self, params: list[Any]) -> dict[str, Any]:
        return {"feature-set": FEATURE_SET, "solana-core": API_VERSION}

    def rpc_getSlot(self, params: list[Any]) -> int:
        return self.ledger._slot_at(_commitment(_config(params, 0)))

    def rpc_getBlockHeight(self, params: list[Any]) -> int:
        return self.ledger.block_height(_commitment(_config(params, 0)))

    def rpc_getLatestBlockhash(self, params: list[Any]) -> dict[str, Any]:
        commitment = _commitment(_config(params, 0))
        block = self.ledger._blocks[self.ledger._slot_at(commitment)]
        return {
            "context": self._context(commitment),
            "value": {"blockhash": block.blockhash, "lastValidBlockHeight": block.height + MAX_PROCESSING_AGE},
        }

    def rpc_isBlockhashValid(self, params: list[Any]) -> dict[str, Any]:
        if not params:
            raise RpcFault(INVALID_PARAMS, "Invalid params: invalid length 0, expected at least 1 element.")
        try:
            blockhash = str(Hash.from_string(str(params[0])))
        except ValueError:
            raise RpcFault(INVALID_PARAMS, "Invalid param: WrongSize") from None
        commitment = _commitment(_config(params, 1))
        return {
            "context": self._context(commitment),
            "value": self.ledger.blockhash_known_valid(blockhash, commitment),
        }

    def rpc_getBalance(self, params: list[Any]) -> dict[str, Any]:
        if not params:
            raise RpcFault(INVALID_PARAMS, "Invalid params: invalid length 0, expected at least 1 element.")
        commitment = _commitment(_config(params, 1))
        return {"context": self._context(commitment), "value": self.ledger.balance(_pubkey(params[0]))}

    def rpc_getSignatureStatuses(self, params: list[Any]) -> dict[str, Any]:
        if not params or not isinstance(params[0], list):
            raise RpcFault(INVALID_PARAMS, "Invalid params: invalid type: expected a sequence.")
        if len(params[0]) > 256:
            raise RpcFault(INVALID_PARAMS, "Too many inputs provided; max 256")
        values = []
        for value in params[0]:
            record = self.ledger.visible_transaction(_signature(value), "confirmed")
            if record is None:
                values.append(None)
                continue
            status = self.ledger.status(record)
            values.append(
                {
                    "confirmationStatus": status,
                    "confirmations": None if status == "finalized" else self.ledger.confirmed_slot - record.slot,
                    "err": record.err,
                    "slot": record.slot,
                    "status": {"Ok": None} if record.err is None else {"Err": record.err},
                }
            )
        return {"context": self._context("confirmed"), "value": values}

    def rpc_getSignaturesForAddress(self, params: list[Any]) -> list[dict[str, Any]]:
        if not params:
            raise RpcFault(INVALID_PARAMS, "Invalid params: invalid length 0, expected at least 1 element.")
        address = _pubkey(params[0])
        config = _config(params, 1)
        limit = config.get("limit", MAX_SIGNATURES_LIMIT)
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_SIGNATURES_LIMIT:
            raise RpcFault(INVALID_PARAMS, f"Invalid limit; max {MAX_SIGNATURES_LIMIT}")
        before = _signature(config["before"]) if config.get("before") is not None else None
        until = _signature(config["until"]) if config.get("until") is not None else None
        commitment = _commitment(config, minimum_confirmed=True)
        return self.ledger.signatures_for_address(
            address, before=before, until=until, limit=limit, commitment=commitment
        )

    def rpc_sendTransaction(self, params: list[Any]) -> str:
        """A signed transaction from a wallet (`base64`, or the default `base58`),
        checked as a node's preflight does (a blockhash of the last 150 blocks at
        the preflight commitment, then a simulation unless `skipPreflight`), then
        executed; its signature."""
        if not params or not isinstance(params[0], str):
            raise RpcFault(INVALID_PARAMS, "Invalid params: invalid length 0, expected at least 1 element.")
        config = _config(params, 1)
        tx = _transaction_decode(params, config.get("encoding", "base58"))
        preflight = _commitment({"commitment": config.get("preflightCommitment", "finalized")})
        if not self.ledger.blockhash_valid(str(tx.message.recent_blockhash), preflight):
            raise _preflight_failure("Blockhash not found", "BlockhashNotFound", [])
        if not config.get("skipPreflight", False):
            simulated = self.ledger.svm.simulate_transaction(tx)
            if isinstance(simulated, FailedTransactionMetadata):
                err = transaction_error_json(simulated.err())
                raise _preflight_failure(json.dumps(err), err, list(simulated.meta().logs()))
        try:
            return self.ledger.submit(tx)
        except TransactionRejected as exc:
            raise _preflight_failure(str(exc), json.loads(str(exc)), []) from None

    def rpc_getTransaction(self, params: list[Any]) -> dict[str, Any] | None:
        if not params:
            raise RpcFault(INVALID_PARAMS, "Invalid params: invalid length 0, expected at least 1 element.")
        signature = _signature(params[0])
        config = {"encoding": params[1]} if len(params) > 1 and isinstance(params[1], str) else _config(params, 1)
        encoding = config.get("encoding") or "json"
        if encoding not in ("json", "jsonParsed", "base64", "base58", "binary"):
            raise RpcFault(INVALID_PARAMS, f"Invalid params: unknown variant `{encoding}`.")
        commitment = _commitment(config, minimum_confirmed=True)
        max_version = config.get("maxSupportedTransactionVersion")
        record = self.ledger.visible_transaction(signature, commitment)
        if record is None:
            return None
        if record.version == 0 and (max_version is None or max_version < 0):
            raise RpcFault(
                UNSUPPORTED_TRANSACTION_VERSION,
                "Transaction version (0) is not supported by the requesting client. Please try the request "
                'again with the following configuration parameter: "maxSupportedTransactionVersion": 0',
            )
        return transaction_json(
            record, encoding="base58" if encoding == "binary" else encoding, with_version=max_version is not None
        )

    # --- what a wallet calls to build, check and send a transfer ---------------------------------

    def rpc_getAccountInfo(self, params: list[Any]) -> dict[str, Any]:
        if not params:
            raise RpcFault(INVALID_PARAMS, "Invalid params: invalid length 0, expected at least 1 element.")
        config = _config(params, 1)
        commitment = _commitment(config)
        account = self.ledger.svm.get_account(Pubkey.from_string(_pubkey(params[0])))
        value = (
            None
            if account is None or (account.lamports == 0 and not account.data)
            else account_json(account, encoding=config.get("encoding") or "base58")
        )
        return {"context": self._context(commitment), "value": value}

    def rpc_getMinimumBalanceForRentExemption(self, params: list[Any]) -> int:
        size = params[0] if params else 0
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise RpcFault(INVALID_PARAMS, "Invalid params: invalid type: expected usize.")
        return int(self.ledger.svm.minimum_balance_for_rent_exemption(size))

    def rpc_getFeeForMessage(self, params: list[Any]) -> dict[str, Any]:
        """The fee of a message (base64): 5,000 lamports per signature (the loopback
        node charges no priority fee), or null when its blockhash has expired."""
        if not params or not isinstance(params[0], str):
            raise RpcFault(INVALID_PARAMS, "Invalid params: invalid length 0, expected at least 1 element.")
        commitment = _commitment(_config(params, 1))
        try:
            message = from_bytes_versioned(base64.b64decode(params[0], validate=True))
        except ValueError:
            raise RpcFault(INVALID_PARAMS, "invalid base64 encoding: failed to deserialize the message") from None
        valid = self.ledger.blockhash_valid(str(message.recent_blockhash), commitment)
        fee = LAMPORTS_PER_SIGNATURE * message.header.num_required_signatures
        return {"context": self._context(commitment), "value": fee if valid else None}

    def rpc_simulateTransaction(self, params: list[Any]) -> dict[str, Any]:
        """Execute without keeping anything: `sigVerify` (default false) and
        `replaceRecentBlockhash` (the latest one put in, reported back) as the node's."""
        config = _config(params, 1)
        tx = _transaction_decode(params, config.get("encoding", "base58"))
        sig_verify = bool(config.get("sigVerify", False))
        replace = bool(config.get("replaceRecentBlockhash", False))
        if sig_verify and replace:
            raise RpcFault(INVALID_PARAMS, "sigVerify may not be used with replaceRecentBlockhash")
        commitment = _commitment(config)
        replacement = None
        if replace:
            block = self.ledger._blocks[self.ledger.confirmed_slot]
            tx = VersionedTransaction.populate(_with_blockhash(tx.message, self.ledger.latest_blockhash), tx.signatures)
            replacement = {
                "blockhash": str(self.ledger.latest_blockhash),
                "lastValidBlockHeight": block.height + MAX_PROCESSING_AGE,
            }
        svm = self.ledger.svm
        verifying = svm.get_sigverify()
        svm.with_sigverify(sig_verify)
        try:
            simulated = svm.simulate_transaction(tx)
        finally:
            svm.with_sigverify(verifying)
        failed = isinstance(simulated, FailedTransactionMetadata)
        meta = simulated.meta()
        return {
            "context": self._context(commitment),
            "value": {
                "accounts": None,
                "err": transaction_error_json(simulated.err()) if failed else None,
                "innerInstructions": None,
                "logs": list(meta.logs()),
                "replacementBlockhash": replacement,
                "returnData": None,
                "unitsConsumed": int(meta.compute_units_consumed()),
            },
        }

    def rpc_requestAirdrop(self, params: list[Any]) -> str:
        if len(params) < 2 or not isinstance(params[1], int) or isinstance(params[1], bool) or params[1] <= 0:
            raise RpcFault(INVALID_PARAMS, "Invalid params: invalid length 1, expected at least 2 elements.")
        return self.ledger.airdrop(_pubkey(params[0]), params[1])

    def rpc_getBlock(self, params: list[Any]) -> dict[str, Any]:
        if not params or not isinstance(params[0], int) or isinstance(params[0], bool):
            raise RpcFault(INVALID_PARAMS, "Invalid params: invalid length 0, expected at least 1 element.")
        slot = params[0]
        config = {"encoding": params[1]} if len(params) > 1 and isinstance(params[1], str) else _config(params, 1)
        encoding = config.get("encoding") or "json"
        if encoding not in ("json", "jsonParsed", "base64", "base58"):
            raise RpcFault(INVALID_PARAMS, f"Invalid params: unknown variant `{encoding}`.")
        details = config.get("transactionDetails") or "full"
        if details not in ("full", "signatures", "none"):
            raise RpcFault(INVALID_PARAMS, f"Invalid params: unknown variant `{details}`.")
        commitment = _commitment(config, minimum_confirmed=True)
        max_version = config.get("maxSupportedTransactionVersion")
        ledger = self.ledger
        if slot > ledger._slot_at(commitment):
            raise RpcFault(BLOCK_NOT_AVAILABLE, f"Block not available for slot {slot}")
        block = ledger._blocks.get(slot)
        if block is None:
            raise RpcFault(SLOT_SKIPPED, f"Slot {slot} was skipped, or missing due to ledger jump to recent snapshot")
        parent = max((s for s in ledger._blocks if s < slot), default=slot)
        records = ledger.block_transactions(slot)
        result: dict[str, Any] = {
            "blockHeight": block.height,
            "blockTime": block.block_time,
            "blockhash": block.blockhash,
            "parentSlot": parent,
            "previousBlockhash": ledger._blocks[parent].blockhash if parent != slot else block.blockhash,
        }
        if details == "full":
            transactions = []
            for record in records:
                if record.version == 0 and (max_version is None or max_version < 0):
                    raise RpcFault(
                        UNSUPPORTED_TRANSACTION_VERSION,
                        "Transaction version (0) is not supported by the requesting client. Please try the "
                        'request again with the following configuration parameter: "maxSupportedTransactionVersion": 0',
                    )
                one = transaction_json(record, encoding=encoding, with_version=max_version is not None)
                del one["blockTime"], one["slot"]
                transactions.append(one)
            result["transactions"] = transactions
        elif details == "signatures":
            result["signatures"] = [r.signature for r in records]
        if config.get("rewards", True):
            result["rewards"] = []
        return result


# --- HTTP -------------------------------------------------------------------------------------------------


@dataclass
class ServerStats:
    http_requests: int = 0
    rate_limited: int = 0
    calls: Counter = field(default_factory=Counter)

    @property
    def total_calls(self) -> int:
        return sum(self.calls.values())


# --- PubSub (websocket) -----------------------------------------------------------------------------------

_PUBSUB_LOG = logging.getLogger("devtools.solana_rpc.pubsub")
_PUBSUB_LOG.setLevel(logging.WARNING)  # not every connection opened and closed

SUBSCRIPTION_KINDS = {  # subscribe method: (unsubscribe method, notification method)
    "accountSubscribe": ("accountUnsubscribe", "accountNotification"),
    "logsSubscribe": ("logsUnsubscribe", "logsNotification"),
    "signatureSubscribe": ("signatureUnsubscribe", "signatureNotification"),
    "slotSubscribe": ("slotUnsubscribe", "slotNotification"),
}
_UNSUBSCRIBE = {unsubscribe: kind for kind, (unsubscribe, _) in SUBSCRIPTION_KINDS.items()}


@dataclass
class Subscription:
    id: int
    kind: str  # a key of SUBSCRIPTION_KINDS
    connection: Any
    commitment: str = "finalized"
    key: str = ""  # the account (accountSubscribe, logsSubscribe mentions) or the signature
    encoding: str = "base58"
    received: bool = False  # signatureSubscribe's enableReceivedNotification


class _Connection:
    """One websocket client; sends are serialized (replies and notifications)."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.lock = threading.Lock()

    def send(self, message: dict[str, Any]) -> None:
        with self.lock:
            self.ws.send(json.dumps(message, sort_keys=True, separators=(",", ":")))


class SolanaPubSub:
    """The node's websocket PubSub API over the ledger: `accountSubscribe`,
    `logsSubscribe` (`all`, `allWithVotes`, or `mentions` of one address),
    `signatureSubscribe` and `slotSubscribe`, with their unsubscribe methods.

    A subscribe call is answered with the subscription id; each notification is
    `{"jsonrpc": "2.0", "method": "<kind>Notification", "params": {"result":
    {"context": {"slot": n}, "value": ...}, "subscription": id}}` (slot
    notifications carry `{parent, root, slot}` with no context), as Solana's RPC
    documents them (solana.com/docs/rpc/websocket). Commitment: `processed` and
    `confirmed` are told when the transaction's block is made, `finalized` (the
    default) when `finalize()` roots it. A signature subscription ends with its
    notification; one for a signature already there at its commitment is told at once.

    The ledger tells (`SolanaLedger.observe`) under its lock; a dispatcher thread
    matches the events against the subscriptions and sends.
    """

    def __init__(
        self,
        ledger: SolanaLedger,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        count: Callable[[str], None] | None = None,
    ) -> None:
        from websockets.sync.server import serve

        self.ledger = ledger
        self.count = count
        self._ids = itertools.count(1)
        self._subs: dict[int, Subscription] = {}
        self._subs_lock = threading.Lock()
        self._events: queue.Queue[tuple[str, Any] | None] = queue.Queue()
        self._server = serve(self._serve, host, port, compression=None, max_size=2**20, logger=_PUBSUB_LOG)
        self._threads: list[threading.Thread] = []

    @property
    def port(self) -> int:
        return int(self._server.socket.getsockname()[1])

    def start(self) -> SolanaPubSub:
        self.ledger.observe(self._observe)
        self._threads = [
            threading.Thread(target=self._server.serve_forever, name="solana-pubsub", daemon=True),
            threading.Thread(target=self._dispatch, name="solana-pubsub-dispatch", daemon=True),
        ]
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self.ledger.unobserve(self._observe)
        if not self._threads:  # never started: only the listening socket to close
            self._server.socket.close()
            return
        self._server.shutdown()  # closes the listening socket and every connection
        self._events.put(None)
        for thread in self._threads:
            thread.join()

    @property
    def subscriptions(self) -> list[Subscription]:
        with self._subs_lock:
            return list(self._subs.values())

    # --- requests ----------------------------------------------------------------------------------

    def _serve(self, ws: Any) -> None:
        from websockets.exceptions import ConnectionClosed

        connection = _Connection(ws)
        try:
            for raw in ws:
                self._request(connection, raw)
        except ConnectionClosed:
            pass
        finally:
            with self._subs_lock:
                for sid in [sid for sid, sub in self._subs.items() if sub.connection is connection]:
                    del self._subs[sid]

    def _request(self, connection: _Connection, raw: Any) -> None:
        try:
            request = json.loads(raw)
        except ValueError:
            connection.send({"error": {"code": PARSE_ERROR, "message": "Parse error"}, "id": None, "jsonrpc": "2.0"})
            return
        if not isinstance(request, dict) or "method" not in request:
            connection.send(
                {"error": RpcFault(INVALID_REQUEST, "Invalid request").as_json(), "id": None, "jsonrpc": "2.0"}
            )
            return
        if "id" not in request:
            return  # a notification (web3.js sends `ping` every few seconds): never answered
        method, params, rid = str(request["method"]), request.get("params") or [], request["id"]
        if self.count is not None:
            self.count(method)
        try:
            if not isinstance(params, list):
                raise RpcFault(INVALID_PARAMS, "Invalid params: invalid type: map, expected a sequence.")
            if method in SUBSCRIPTION_KINDS:
                sub = self._subscription(method, params, connection)
                with connection.lock, self._subs_lock:  # the id goes out before any notification
                    self._subs[sub.id] = sub
                    connection.ws.send(json.dumps({"id": rid, "jsonrpc": "2.0", "result": sub.id}))
                if sub.kind == "signatureSubscribe":
                    with self.ledger._lock:
                        record = self.ledger.visible_transaction(sub.key, "confirmed")
                        if record is not None and (
                            sub.commitment != "finalized" or self.ledger.status(record) == "finalized"
                        ):
                            self._events.put(("told", (sub.id, record)))
                return
            if method in _UNSUBSCRIBE:
                if not params or not isinstance(params[0], int):
                    raise RpcFault(INVALID_PARAMS, "Invalid params: invalid type: expected u64.")
                with self._subs_lock:
                    sub = self._subs.get(params[0])
                    if sub is None or sub.kind != _UNSUBSCRIBE[method] or sub.connection is not connection:
                        raise RpcFault(INVALID_PARAMS, "Invalid subscription id.")
                    del self._subs[params[0]]
                connection.send({"id": rid, "jsonrpc": "2.0", "result": True})
                return
            raise RpcFault(METHOD_NOT_FOUND, "Method not found")
        except RpcFault as fault:
            connection.send({"error": fault.as_json(), "id": rid, "jsonrpc": "2.0"})

    def _subscription(self, method: str, params: list[Any], connection: _Connection) -> Subscription:
        sub = Subscription(id=next(self._ids), kind=method, connection=connection)
        if method == "slotSubscribe":
            return sub
        if not params:
            raise RpcFault(INVALID_PARAMS, "Invalid params: invalid length 0, expected at least 1 element.")
        config = _config(params, 1)
        sub.commitment = _commitment(config)
        if method == "accountSubscribe":
            sub.key = _pubkey(params[0])
            sub.encoding = config.get("encoding") or "base58"
            account_json(Account(0, b"", SYSTEM_PROGRAM, False, 0), encoding=sub.encoding)  # refuses a bad encoding
        elif method == "signatureSubscribe":
            sub.key = _signature(params[0])
            sub.received = bool(config.get("enableReceivedNotification", False))
        else:  # logsSubscribe
            what = params[0]
            if isinstance(what, dict) and isinstance(what.get("mentions"), list):
                if len(what["mentions"]) != 1:
                    raise RpcFault(INVALID_PARAMS, "Invalid Request: Only 1 address supported")
                sub.key = _pubkey(what["mentions"][0])
            elif what not in ("all", "allWithVotes"):
                raise RpcFault(INVALID_PARAMS, "Invalid params: unknown variant.")
        return sub

    # --- notifications -----------------------------------------------------------------------------

    def _observe(self, event: str, subject: Any) -> None:
        self._events.put((event, subject))

    def _dispatch(self) -> None:
        while True:
            item = self._events.get()
            if item is None:
                return
            event, subject = item
            for sub, message in self._notifications(event, subject):
                try:
                    sub.connection.send(message)
                except Exception:  # the client went away: its subscriptions go with its connection
                    continue

    def _notifications(self, event: str, subject: Any) -> list[tuple[Subscription, dict[str, Any]]]:
        out: list[tuple[Subscription, dict[str, Any]]] = []
        if event == "told":  # a signature subscribed after its transaction landed
            sid, record = subject
            with self._subs_lock:
                sub = self._subs.pop(sid, None)
            if sub is not None:
                out.append((sub, self._message(sub, record.slot, {"err": record.err})))
            return out
        with self._subs_lock:
            subs = list(self._subs.values())
        if event == "block":
            for sub in subs:
                if sub.kind == "slotSubscribe":
                    value = {"parent": subject.slot - 1, "root": self.ledger.finalized_slot, "slot": subject.slot}
                    out.append(
                        (
                            sub,
                            {
                                "jsonrpc": "2.0",
                                "method": "slotNotification",
                                "params": {"result": value, "subscription": sub.id},
                            },
                        )
                    )
            return out
        record: LedgerTx = subject
        keys = [str(k) for k in record.account_keys]
        for sub in subs:
            if (sub.commitment == "finalized") != (event == "finalized"):
                continue
            if sub.kind == "logsSubscribe" and (not sub.key or sub.key in keys):
                value = {"err": record.err, "logs": record.logs, "signature": record.signature}
                out.append((sub, self._message(sub, record.slot, value)))
            elif sub.kind == "signatureSubscribe" and sub.key == record.signature:
                with self._subs_lock:
                    if self._subs.pop(sub.id, None) is None:
                        continue  # told already
                if sub.received:
                    out.append((sub, self._message(sub, record.slot, "receivedSignature")))
                out.append((sub, self._message(sub, record.slot, {"err": record.err})))
            elif sub.kind == "accountSubscribe" and sub.key in keys:
                index = keys.index(sub.key)
                if not _writable(record, index):
                    continue
                with self.ledger._lock:
                    account = self.ledger.svm.get_account(record.account_keys[index])
                if account is not None:
                    out.append((sub, self._message(sub, record.slot, account_json(account, encoding=sub.encoding))))
        return out

    @staticmethod
    def _message(sub: Subscription, slot: int, value: Any) -> dict[str, Any]:
        method = SUBSCRIPTION_KINDS[sub.kind][1]
        result = {"context": {"slot": slot}, "value": value}
        return {"jsonrpc": "2.0", "method": method, "params": {"result": result, "subscription": sub.id}}


class SolanaRpcServer:
    """The ledger's JSON-RPC over HTTP on a loopback port, and its PubSub websocket
    on the next port (as a validator serves them: `--rpc-port` and the port after
    it), each in background threads. `pubsub=False`: HTTP alone."""

    def __init__(
        self, ledger: SolanaLedger | None = None, *, host: str = "127.0.0.1", port: int = 0, pubsub: bool = True
    ) -> None:
        self.ledger = ledger or SolanaLedger()
        self.handler = SolanaRpcHandler(self.ledger)
        self.stats = ServerStats()
        self._limits: list[tuple[float | None, str]] = []
        self._stats_lock = threading.Lock()
        self.pubsub: SolanaPubSub | None = None
        for attempt in range(20):  # a free port whose next one is free too
            self._httpd = ThreadingHTTPServer((host, port), self._request_handler())
            self._httpd.daemon_threads = True
            if not pubsub:
                break
            try:
                self.pubsub = SolanaPubSub(
                    self.ledger, host=host, port=self._httpd.server_address[1] + 1, count=self._count
                )
                break
            except OSError:
                self._httpd.server_close()
                if port or attempt == 19:
                    raise
        self._thread: threading.Thread | None = None
        self._clock: threading.Thread | None = None
        self._clock_stop = threading.Event()

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def ws_url(self) -> str:
        """The PubSub websocket (`SOL_WS_URL`): ws://host:<RPC port + 1>."""
        if self.pubsub is None:
            raise RuntimeError("this node serves no PubSub websocket (pubsub=False)")
        host = self._httpd.server_address[0]
        return f"ws://{host}:{self.pubsub.port}"

    def _count(self, method: str) -> None:
        with self._stats_lock:
            self.stats.calls[method] += 1

    def start(self) -> SolanaRpcServer:
        if self.pubsub is not None:
            self.pubsub.start()
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="solana-rpc", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._clock_stop.set()
        if self._clock is not None:
            self._clock.join()
        if self.pubsub is not None:
            self.pubsub.stop()
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> SolanaRpcServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def clock_start(self, *, slot_seconds: float = 0.4, finality_depth: int = 32) -> None:
        """Make a block every `slot_seconds` and finalize the blocks `finality_depth`
        slots behind the newest, as a cluster does (about 13 s at the defaults):
        for the sandbox of `make run`, where nobody finalizes by hand."""
        self._clock_stop.clear()

        def tick() -> None:
            while not self._clock_stop.wait(slot_seconds):
                with self.ledger._lock:
                    self.ledger.advance(1)
                    self.ledger.finalize(self.ledger.confirmed_slot - finality_depth)

        self._clock = threading.Thread(target=tick, name="solana-clock", daemon=True)
        self._clock.start()

    def rate_limit(self, requests: int = 1, *, retry_after: float | None = None, style: str = "http") -> None:
        """Answer the next `requests` HTTP requests as a provider over its limit:
        HTTP 429 (`style="http"`, with `Retry-After` when given) or a JSON-RPC
        error 429 in a 200 answer (`style="jsonrpc"`)."""
        with self._stats_lock:
            self._limits.extend([(retry_after, style)] * requests)

    def stats_reset(self) -> ServerStats:
        with self._stats_lock:
            stats, self.stats = self.stats, ServerStats()
        return stats

    def _limited(self) -> tuple[float | None, str] | None:
        with self._stats_lock:
            self.stats.http_requests += 1
            if self._limits:
                self.stats.rate_limited += 1
                return self._limits.pop(0)
            return None

    def _answer(self, request: Any) -> dict[str, Any] | None:
        if not isinstance(request, dict) or request.get("jsonrpc") != "2.0" or "method" not in request:
            return {"error": RpcFault(INVALID_REQUEST, "Invalid request").as_json(), "id": None, "jsonrpc": "2.0"}
        method, params, rid = request["method"], request.get("params") or [], request.get("id")
        with self._stats_lock:
            self.stats.calls[str(method)] += 1
        try:
            if not isinstance(params, list):
                raise RpcFault(INVALID_PARAMS, "Invalid params: invalid type: map, expected a sequence.")
            return {"id": rid, "jsonrpc": "2.0", "result": self.handler.dispatch(str(method), params)}
        except RpcFault as fault:
            return {"error": fault.as_json(), "id": rid, "jsonrpc": "2.0"}

    def _request_handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # answers go out at once, not after a delayed ACK

            def log_message(self, format: str, *args: Any) -> None:  # quiet: tests read stats instead
                return

            def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
                data = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))
                limit = server._limited()
                if limit is not None:
                    retry_after, style = limit
                    error = {"code": 429, "message": "Too many requests for a specific RPC call"}
                    body = {"error": error, "id": None, "jsonrpc": "2.0"}
                    if style == "jsonrpc":
                        self._send(200, body)
                    else:
                        headers = {"Retry-After": f"{retry_after:g}"} if retry_after is not None else {}
                        self._send(429, body, headers)
                    return
                try:
                    request = json.loads(raw)
                except ValueError:
                    self._send(
                        200, {"error": {"code": PARSE_ERROR, "message": "Parse error"}, "id": None, "jsonrpc": "2.0"}
                    )
                    return
                if isinstance(request, list):
                    if not request:
                        self._send(200, server._answer(None))
                        return
                    self._send(200, [server._answer(item) for item in request])
                else:
                    self._send(200, server._answer(request))

        return Handler


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Run a loopback Solana JSON-RPC node (LiteSVM inside).")
    parser.add_argument("--port", type=int, default=8899)
    parser.add_argument("--cluster", choices=["localnet", *GENESIS_HASHES], default="localnet")
    args = parser.parse_args(argv)
    ledger = SolanaLedger.posing_as(args.cluster) if args.cluster != "localnet" else SolanaLedger()
    server = SolanaRpcServer(ledger, port=args.port).start()
    print(
        f"Solana loopback RPC at {server.url}, PubSub at {server.ws_url} "
        f"(genesis hash {ledger.genesis_hash}); Ctrl-C stops it."
    )
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
