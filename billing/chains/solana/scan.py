"""One pass of the Solana watcher: what happened to the recipient and to the
references of open invoices since the last pass. No database here: the caller
passes what it remembers (cursors, pending transactions, which references and
signatures it knows) and records what comes back.

1. Listing. For the recipient and each reference, `getSignaturesForAddress`
   at `confirmed`, newest first, down to the address's cursor (`until`),
   following `before` past each page of 1,000, all addresses of a round in one
   batch. A listing longer than `max_pages` pages is cut and continued at the
   next pass from where it stopped (`before`), so a flood of transactions
   naming one reference cannot stall the others.
2. Pending payments. A payment recorded at `confirmed` whose transaction no
   longer shows up is checked once the finalized slot has passed its own: once
   its blockhash has expired at `finalized` (`isBlockhashValid`), and the
   transaction is not found even then, it was on
   a fork the cluster abandoned and can never land: it is reported `gone` and
   the caller un-counts it.
3. Fetching. Each new signature (not failed, not already known final) is
   fetched once with `getTransaction` (`json` encoding,
   `maxSupportedTransactionVersion: 0`) at its commitment: `finalized` when
   the listing says so, else `confirmed`.
4. Validation (billing.chains.solana.transactions): the parts each known
   reference received, and what the recipient received for no reference
   (`unmatched`, for staff).
5. Cursors. An address's `until` moves up over the oldest entries that are
   finalized and fully handled, never past one that is not: a transaction still
   at `confirmed` is listed again at the next pass until it is final (or gone),
   and `until` only ever names a finalized transaction, which no fork can
   remove. A listing cut by the page budget keeps, besides `before`, how far
   down from its newest entry everything was handled (`top`), so once the rest
   is listed `until` jumps there instead of listing it all again. `newest`
   remembers the newest signature seen per address.

The recipient's first pass starts at its newest finalized transaction when
references are listed (they find every payment made to an invoice, before and
after that; the recipient's own listing catches transfers that carry no known
reference), and at its newest finalized transaction older than the oldest
watched invoice when they are not (the recipient's listing is then all there
is: references are matched locally in the transactions it lists).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from billing.chains.solana.rpc import UNSUPPORTED_TRANSACTION_VERSION, SolanaRpc, SolanaRpcError, SolanaUnavailable
from billing.chains.solana.transactions import MalformedTransaction, SolanaTransaction, transfer_validate

log = logging.getLogger(__name__)

PAGE_LIMIT = 1000  # the most getSignaturesForAddress returns at once
CONFIRMED, FINALIZED = "confirmed", "finalized"


@dataclass
class AddressCursor:
    """How far an address's transactions have been handled.

    `until`: every transaction up to and including it is finalized and was
    handled (the next listing stops there). `before`: where a listing cut
    short by the page budget goes on. `top`: while a cut listing is being
    continued, the newest signature such that everything from it down to
    `before` was handled (so `until` can jump there once the rest is done).
    `newest`: the newest signature seen.
    """

    until: str | None = None
    before: str | None = None
    top: str | None = None
    newest: str | None = None
    newest_slot: int | None = None

    def as_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> AddressCursor:
        data = data or {}
        return cls(
            until=data.get("until"),
            before=data.get("before"),
            top=data.get("top"),
            newest=data.get("newest"),
            newest_slot=data.get("newest_slot"),
        )


@dataclass(frozen=True)
class SignatureInfo:
    """One entry of `getSignaturesForAddress`."""

    signature: str
    slot: int
    err: Any
    finalized: bool
    block_time: int | None = None
    memo: str | None = None

    @classmethod
    def from_rpc(cls, item: Mapping[str, Any]) -> SignatureInfo:
        try:
            return cls(
                signature=str(item["signature"]),
                slot=int(item["slot"]),
                err=item.get("err"),
                finalized=item.get("confirmationStatus") == FINALIZED,
                block_time=None if item.get("blockTime") is None else int(item["blockTime"]),
                memo=item.get("memo"),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise SolanaUnavailable(
                f"unreadable getSignaturesForAddress entry ({exc})", reason="bad_response"
            ) from None


@dataclass
class Listing:
    address: str
    entries: list[SignatureInfo] = field(default_factory=list)  # newest first
    complete: bool = False  # reached the cursor (or the address's first transaction)
    resumed: bool = False  # continued from the cursor's `before`
    pages: int = 0


@dataclass
class PendingTx:
    """A transaction whose payment was recorded at `confirmed`, not yet finalized."""

    signature: str
    blockhash: str
    slot: int

    def as_json(self) -> dict[str, Any]:
        return {"blockhash": self.blockhash, "slot": self.slot}

    @classmethod
    def from_json(cls, signature: str, data: Mapping[str, Any]) -> PendingTx:
        return cls(signature=signature, blockhash=str(data.get("blockhash", "")), slot=int(data.get("slot", 0)))


@dataclass(frozen=True)
class Sighting:
    """A part of a transaction that reached the recipient: for an invoice's
    reference, or (`reference == ""`) for none known."""

    signature: str
    reference: str
    position: int  # the reference's (or, unmatched, the recipient's) index among the account keys
    amount: int  # lamports
    slot: int
    finalized: bool
    block_time: int | None = None


@dataclass(frozen=True)
class Gone:
    """A pending transaction that will never count: failed, or dropped with its fork."""

    signature: str
    reason: str


@dataclass
class ScanOutcome:
    confirmed_slot: int
    finalized_slot: int
    sightings: list[Sighting] = field(default_factory=list)
    unmatched: list[Sighting] = field(default_factory=list)
    gone: list[Gone] = field(default_factory=list)
    cursors: dict[str, AddressCursor] = field(default_factory=dict)
    pending: dict[str, PendingTx] = field(default_factory=dict)
    addresses: int = 0
    listed: int = 0  # signature entries listed (an entry listed for two addresses counts twice)
    fetched: int = 0  # transactions fetched
    caught_up: bool = True  # False when a listing or the fetch budget was cut short


class FinalMemory:
    """Signatures seen finalized that paid nothing, so a listing that shows them
    again (above a transaction still at `confirmed`) does not fetch them again.
    Bounded: forgetting one only costs a fetch."""

    def __init__(self, size: int = 50_000) -> None:
        self.size = size
        self._seen: OrderedDict[str, None] = OrderedDict()

    def add(self, signature: str) -> None:
        self._seen[signature] = None
        self._seen.move_to_end(signature)
        while len(self._seen) > self.size:
            self._seen.popitem(last=False)

    def __contains__(self, signature: object) -> bool:
        return signature in self._seen

    def clear(self) -> None:
        self._seen.clear()


# --- Listing -------------------------------------------------------------------


def _listing_params(address: str, cursor: AddressCursor, before: str | None, limit: int) -> list[Any]:
    config: dict[str, Any] = {"commitment": CONFIRMED, "limit": limit}
    if cursor.until:
        config["until"] = cursor.until
    if before:
        config["before"] = before
    return [address, config]


def signatures_list(
    rpc: SolanaRpc, cursors: Mapping[str, AddressCursor], *, max_pages: int, page_limit: int = PAGE_LIMIT
) -> dict[str, Listing]:
    """The new signatures of every address in `cursors`, newest first, paged
    with `before` past `page_limit`, one batch per round of pages."""
    listings = {address: Listing(address, resumed=bool(c.before)) for address, c in cursors.items()}
    going = {address: cursors[address].before for address in cursors}
    while going:
        order = list(going)
        pages = rpc.batch(
            ("getSignaturesForAddress", _listing_params(a, cursors[a], going[a], page_limit)) for a in order
        )
        for address, page in zip(order, pages, strict=True):
            listing = listings[address]
            if not isinstance(page, list):
                raise SolanaUnavailable(
                    f"getSignaturesForAddress answered {type(page).__name__}, not a list", reason="bad_response"
                )
            entries = [SignatureInfo.from_rpc(item) for item in page]
            listing.entries.extend(entries)
            listing.pages += 1
            if len(entries) < page_limit:
                listing.complete = True
                del going[address]
            elif listing.pages >= max_pages:
                del going[address]
            else:
                going[address] = entries[-1].signature
    return listings


def _done_run(entries: Sequence[SignatureInfo], done: Callable[[SignatureInfo], bool]) -> tuple[str | None, bool]:
    """Walking `entries` (newest first) from the oldest up while they are done:
    the newest signature of that run (or None), and whether all were done."""
    last = None
    for entry in reversed(entries):
        if not done(entry):
            return last, False
        last = entry.signature
    return last, True


def cursor_advance(cursor: AddressCursor, listing: Listing, *, done: Callable[[SignatureInfo], bool]) -> AddressCursor:
    """The cursor after `listing` was handled (see the module docstring)."""
    newest, newest_slot = cursor.newest, cursor.newest_slot
    if listing.entries and not listing.resumed:
        newest, newest_slot = listing.entries[0].signature, listing.entries[0].slot
    run, all_done = _done_run(listing.entries, done)
    oldest = listing.entries[-1].signature if listing.entries else cursor.before
    if not listing.resumed:
        if listing.complete:
            return AddressCursor(until=run or cursor.until, newest=newest, newest_slot=newest_slot)
        return AddressCursor(until=cursor.until, before=oldest, top=run, newest=newest, newest_slot=newest_slot)
    # A continuation of a cut listing: these entries lie between `until` and `before`.
    if listing.complete:
        until = (cursor.top or run or cursor.until) if all_done else (run or cursor.until)
        return AddressCursor(until=until, newest=newest, newest_slot=newest_slot)
    top = (cursor.top or run) if all_done else run
    return AddressCursor(until=cursor.until, before=oldest, top=top, newest=newest, newest_slot=newest_slot)


def _recipient_start(rpc: SolanaRpc, recipient: str, *, since: int | None = None, max_pages: int = 5) -> AddressCursor:
    """The recipient's first cursor.

    Without `since`: its newest finalized transaction (each reference's own
    listing finds what was paid before). With `since` (a Unix time: when the
    oldest watched invoice was made): the newest finalized transaction older
    than it, found by walking back its finalized signatures a page of 1,000 at
    a time, so that the first listing reads every payment a watched invoice can
    have received; past `max_pages` pages the oldest one reached, with a
    warning (what is older is left to staff). No transaction older than
    `since`: no cursor, the whole history is listed."""
    pages = max_pages if since is not None else 1
    before: str | None = None
    oldest: SignatureInfo | None = None
    for _ in range(max(1, pages)):
        params: dict[str, Any] = {"commitment": FINALIZED, "limit": 1 if since is None else PAGE_LIMIT}
        if before is not None:
            params["before"] = before
        page = rpc.call("getSignaturesForAddress", recipient, params)
        if not isinstance(page, list):
            raise SolanaUnavailable("getSignaturesForAddress answered no list", reason="bad_response")
        entries = [SignatureInfo.from_rpc(item) for item in page]
        if not entries:
            return AddressCursor()  # nothing older than `since`: list it all
        for entry in entries:
            if since is None or (entry.block_time is not None and entry.block_time < since):
                return AddressCursor(until=entry.signature, newest=entry.signature, newest_slot=entry.slot)
        oldest = entries[-1]
        if len(entries) < PAGE_LIMIT:
            return AddressCursor()  # the first transaction reached: list it all
        before = oldest.signature
    assert oldest is not None
    log.warning(
        "SOL: the recipient's first listing starts at %s (%d pages back), not as far back as the oldest "
        "watched invoice: a payment older than it is not seen",
        oldest.signature,
        pages,
    )
    return AddressCursor(until=oldest.signature, newest=oldest.signature, newest_slot=oldest.slot)


# --- The pass ----------------------------------------------------------------------


def _transaction_params(signature: str, commitment: str) -> list[Any]:
    return [signature, {"encoding": "json", "commitment": commitment, "maxSupportedTransactionVersion": 0}]


def _expired_pending(rpc: SolanaRpc, candidates: Sequence[PendingTx]) -> list[PendingTx]:
    """The candidates whose blockhash can no longer be used at `finalized`."""
    if not candidates:
        return []
    answers = rpc.batch(("isBlockhashValid", [p.blockhash, {"commitment": FINALIZED}]) for p in candidates)
    expired = []
    for pending, answer in zip(candidates, answers, strict=True):
        value = answer.get("value") if isinstance(answer, Mapping) else None
        if not isinstance(value, bool):
            raise SolanaUnavailable("isBlockhashValid answered no boolean", reason="bad_response")
        if not value:
            expired.append(pending)
    return expired


def solana_scan(
    rpc: SolanaRpc,
    *,
    recipient: str,
    references: Iterable[str],
    cursors: Mapping[str, AddressCursor],
    pending: Mapping[str, PendingTx],
    known_references: Callable[[Collection[str]], Collection[str]],
    known_final: Callable[[Collection[str]], Collection[str]] = lambda signatures: (),
    memory: FinalMemory | None = None,
    max_pages: int = 5,
    max_fetches: int = 2000,
    recipient_since: int | None = None,
) -> ScanOutcome:
    """One pass (see the module docstring).

    `cursors` and `pending` are what the last pass returned; an address missing
    from `cursors` has never been listed. `known_references(keys)` returns
    which of `keys` are invoice references billing knows (open or not);
    `known_final(signatures)` which signatures were already recorded at
    `finalized`, so they are not fetched again. `recipient_since`: a Unix time
    the recipient's first listing reaches back to (the oldest watched invoice,
    when no reference is listed); None: it starts at its newest finalized
    transaction.
    """
    memory = memory if memory is not None else FinalMemory()
    confirmed_slot, finalized_slot = (
        int(slot)
        for slot in rpc.batch([("getSlot", [{"commitment": CONFIRMED}]), ("getSlot", [{"commitment": FINALIZED}])])
    )
    outcome = ScanOutcome(confirmed_slot=confirmed_slot, finalized_slot=finalized_slot)
    addresses = list(dict.fromkeys([recipient, *references]))
    start = {a: cursors[a] for a in addresses if a in cursors}
    if recipient not in start:
        start[recipient] = _recipient_start(rpc, recipient, since=recipient_since, max_pages=max_pages)
    for address in addresses:
        start.setdefault(address, AddressCursor())
    listings = signatures_list(rpc, start, max_pages=max_pages)
    outcome.addresses = len(listings)

    # One entry per signature: the most final status any listing showed.
    entries: dict[str, SignatureInfo] = {}
    for listing in listings.values():
        outcome.listed += len(listing.entries)
        outcome.caught_up &= listing.complete
        for entry in listing.entries:
            seen = entries.get(entry.signature)
            if seen is None or (entry.finalized and not seen.finalized):
                entries[entry.signature] = entry

    still_pending = dict(pending)
    done: set[str] = set()
    gone: dict[str, str] = {}
    final_known = set(known_final(list(entries))) if entries else set()
    wanted: dict[str, tuple[str, int]] = {}  # signature -> (commitment, slot)
    for sig, entry in entries.items():
        if entry.err is not None:
            if sig in still_pending:
                gone[sig] = f"failed: {entry.err}"
            if entry.finalized:
                done.add(sig)
        elif sig in final_known or sig in memory:
            done.add(sig)
            still_pending.pop(sig, None)
        elif entry.finalized:
            wanted[sig] = (FINALIZED, entry.slot)
        elif sig not in still_pending:
            wanted[sig] = (CONFIRMED, entry.slot)

    # Pending transactions no listing showed: dropped, once their blockhash expired.
    # Only once the finalized slot has passed theirs: before, the finalized bank
    # does not hold a blockhash that new, and isBlockhashValid answers false for
    # it whether or not the transaction can still land (a node behind its peers
    # shows neither the transaction nor its blockhash).
    missing = [
        p for sig, p in still_pending.items() if sig not in entries and sig not in gone and p.slot <= finalized_slot
    ]
    expired = _expired_pending(rpc, missing)
    if expired:
        answers = rpc.batch(
            (("getTransaction", _transaction_params(p.signature, CONFIRMED)) for p in expired), return_errors=True
        )
        for p, answer in zip(expired, answers, strict=True):
            if isinstance(answer, SolanaRpcError):
                log.warning("getTransaction %s: %s", p.signature, answer)
            elif answer is None:
                gone[p.signature] = (
                    f"dropped: seen confirmed in slot {p.slot}, gone before finalized; "
                    f"its blockhash {p.blockhash} has expired"
                )
            else:
                wanted[p.signature] = (FINALIZED, p.slot)

    # Oldest first, within the budget: a cursor never moves past what was not fetched.
    order = sorted(wanted, key=lambda s: wanted[s][1])
    if len(order) > max_fetches:
        order, outcome.caught_up = order[:max_fetches], False
    answers = rpc.batch(
        (("getTransaction", _transaction_params(sig, wanted[sig][0])) for sig in order), return_errors=True
    )
    fetched: list[tuple[SolanaTransaction, bool]] = []
    for sig, answer in zip(order, answers, strict=True):
        if isinstance(answer, SolanaRpcError):
            if answer.code == UNSUPPORTED_TRANSACTION_VERSION and wanted[sig][0] == FINALIZED:
                # A transaction version newer than 0 can never be read: once final
                # it is passed over (staff see the log line), so it cannot hold
                # the cursor back for ever.
                log.error("SOL transaction %s cannot be read, check it by hand: %s", sig, answer)
                done.add(sig)
            else:
                # Anything else (a slot missing from the provider's long-term
                # storage, a block not available yet...) may answer next time:
                # the cursor waits for it rather than pass a payment unread.
                log.warning("SOL transaction %s not read this pass: %s", sig, answer)
            continue
        if answer is None:
            continue  # not (or no longer) at that commitment: the next pass sees where it went
        try:
            tx = SolanaTransaction.from_rpc(answer, signature=sig)
        except MalformedTransaction as exc:
            raise SolanaUnavailable(f"getTransaction {sig}: {exc}", reason="bad_response") from None
        fetched.append((tx, wanted[sig][0] == FINALIZED))
    outcome.fetched = len(fetched)

    known = set(known_references({k for tx, _ in fetched for k in tx.account_keys})) if fetched else set()
    for tx, final in fetched:
        check = transfer_validate(tx, recipient=recipient, references=known)
        sig = tx.signature
        for part in check.parts:
            outcome.sightings.append(
                Sighting(sig, part.reference, part.position, part.amount, tx.slot, final, tx.block_time)
            )
        if check.unmatched > 0:
            outcome.unmatched.append(
                Sighting(sig, "", int(check.recipient_position or 0), check.unmatched, tx.slot, final, tx.block_time)
            )
        if final:
            done.add(sig)
            if sig in still_pending and not check.counts:
                gone[sig] = f"finalized paying nothing ({check.rejected or 'no transfer'})"
            still_pending.pop(sig, None)
            if not check.counts:
                memory.add(sig)
        elif check.counts:
            still_pending[sig] = PendingTx(sig, tx.recent_blockhash, tx.slot)
        elif tx.failed and sig in still_pending:
            gone[sig] = f"failed: {tx.err}"

    for sig, reason in gone.items():
        still_pending.pop(sig, None)
        outcome.gone.append(Gone(sig, reason))
    outcome.pending = still_pending
    for address, listing in listings.items():
        outcome.cursors[address] = cursor_advance(
            start[address], listing, done=lambda e: e.finalized and e.signature in done
        )
    return outcome
