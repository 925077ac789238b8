"""One pass of the Solana watcher (billing.chains.solana.scan) against the
loopback node: references and the recipient listed and paged, transactions
validated, commitment followed from confirmed to finalized, dropped
transactions found once their blockhash expired, cursors that never skip
what was not handled. The database side comes later (the watcher); here
`Remembered` keeps between passes what the watcher keeps in the database."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from solders.keypair import Keypair

from billing.chains.solana.cluster import MAX_PROCESSING_AGE, WrongCluster, cluster_check
from billing.chains.solana.rpc import SolanaRpc
from billing.chains.solana.scan import AddressCursor, FinalMemory, PendingTx, ScanOutcome, solana_scan
from devtools.solana_rpc import UNSUPPORTED_TRANSACTION_VERSION, RpcFault, SolanaLedger, SolanaRpcServer


@dataclass
class Remembered:
    """What the watcher keeps between passes: cursors, pending transactions,
    the references billing knows and the signatures recorded as final."""

    recipient: str
    references: set[str] = field(default_factory=set)
    cursors: dict[str, AddressCursor] = field(default_factory=dict)
    pending: dict[str, PendingTx] = field(default_factory=dict)
    final: set[str] = field(default_factory=set)
    memory: FinalMemory = field(default_factory=FinalMemory)

    def reference(self) -> str:
        reference = str(Keypair().pubkey())
        self.references.add(reference)
        return reference

    def scan(self, rpc: SolanaRpc, **kwargs) -> ScanOutcome:
        outcome = solana_scan(
            rpc,
            recipient=self.recipient,
            references=sorted(self.references),
            cursors=self.cursors,
            pending=self.pending,
            known_references=lambda keys: self.references.intersection(keys),
            known_final=lambda sigs: self.final.intersection(sigs),
            memory=self.memory,
            **kwargs,
        )
        self.cursors, self.pending = outcome.cursors, outcome.pending
        self.final |= {s.signature for s in outcome.sightings + outcome.unmatched if s.finalized}
        return outcome


@pytest.fixture
def watcher(merchant) -> Remembered:
    return Remembered(recipient=str(merchant.pubkey()))


def seen(outcome: ScanOutcome) -> list[tuple]:
    return [(s.signature, s.reference, s.amount, s.finalized) for s in outcome.sightings]


def test_confirmed_then_finalized_then_quiet(sol_ledger, sol_node, sol_rpc, watcher, payer, merchant):
    reference = watcher.reference()
    sig = sol_ledger.pay(payer, merchant.pubkey(), 2_500_000, references=[reference])

    first = watcher.scan(sol_rpc)
    assert seen(first) == [(sig, reference, 2_500_000, False)]
    keys = [str(k) for k in sol_ledger.transaction(sig).account_keys]
    assert first.sightings[0].position == keys.index(reference)
    assert set(watcher.pending) == {sig} and watcher.pending[sig].slot == sol_ledger.transaction(sig).slot
    assert watcher.cursors[reference].until is None and watcher.cursors[reference].newest == sig
    assert (first.confirmed_slot, first.finalized_slot) == (sol_ledger.confirmed_slot, sol_ledger.finalized_slot)

    sol_node.stats_reset()
    again = watcher.scan(sol_rpc)
    assert again.sightings == [] and set(watcher.pending) == {sig}
    assert sol_node.stats.calls["getTransaction"] == 0  # still confirmed, already recorded

    sol_ledger.finalize()
    final = watcher.scan(sol_rpc)
    assert seen(final) == [(sig, reference, 2_500_000, True)]
    assert watcher.pending == {} and final.gone == []
    assert watcher.cursors[reference].until == sig and watcher.cursors[watcher.recipient].until == sig

    sol_node.stats_reset()
    quiet = watcher.scan(sol_rpc)
    assert quiet.sightings == quiet.unmatched == [] and quiet.caught_up
    assert dict(sol_node.stats.calls) == {"getSlot": 2, "getSignaturesForAddress": 2}
    assert sol_node.stats.http_requests == 2  # one batch of slots, one batch of listings


def test_recipient_listing_starts_at_its_newest_final_transaction(sol_ledger, sol_rpc, watcher, payer, merchant):
    earlier = sol_ledger.pay(payer, merchant.pubkey(), 11_000)
    sol_ledger.finalize()
    assert watcher.scan(sol_rpc).unmatched == []
    assert watcher.cursors[watcher.recipient].until == earlier
    plain = sol_ledger.pay(payer, merchant.pubkey(), 12_000)
    sol_ledger.finalize()
    outcome = watcher.scan(sol_rpc)
    assert [(u.signature, u.reference, u.amount, u.finalized) for u in outcome.unmatched] == [(plain, "", 12_000, True)]
    assert outcome.unmatched[0].position == sol_ledger.transaction(plain).account_keys.index(merchant.pubkey())


def test_two_invoices_paid_by_one_transaction(sol_ledger, sol_rpc, watcher, payer, merchant):
    first, second = watcher.reference(), watcher.reference()
    instructions = [
        *sol_ledger.payment_instructions(
            payer=payer.pubkey(), recipient=merchant.pubkey(), lamports=4000, references=[first]
        ),
        *sol_ledger.payment_instructions(
            payer=payer.pubkey(), recipient=merchant.pubkey(), lamports=6000, references=[second]
        ),
    ]
    sig = sol_ledger.submit(sol_ledger.build(payer, instructions))
    sol_ledger.finalize()
    outcome = watcher.scan(sol_rpc)
    assert sorted(seen(outcome)) == sorted([(sig, first, 4000, True), (sig, second, 6000, True)])
    assert outcome.fetched == 1  # listed for the recipient and both references, fetched once


def test_failed_payment_counts_nothing_and_is_passed_once_final(sol_ledger, sol_rpc, watcher, merchant):
    reference = watcher.reference()
    poor = sol_ledger.keypair_funded(3_000_000)
    sig = sol_ledger.pay(poor, merchant.pubkey(), 9_000_000, references=[reference])
    assert watcher.scan(sol_rpc).sightings == []
    assert watcher.cursors[reference].until is None  # not final yet
    sol_ledger.finalize()
    outcome = watcher.scan(sol_rpc)
    assert outcome.sightings == [] and outcome.fetched == 0  # the listing's err says enough
    assert watcher.cursors[reference].until == sig


@pytest.mark.slow  # makes over a thousand transactions
def test_more_than_a_thousand_signatures_on_one_reference(sol_ledger, sol_node, sol_rpc, watcher, payer, merchant):
    reference = watcher.reference()
    paid = sol_ledger.pay(payer, merchant.pubkey(), 70_000, references=[reference])
    bystander = sol_ledger.keypair_funded(10**9)
    noise = [sol_ledger.pay(payer, bystander.pubkey(), 1, references=[reference]) for _ in range(1100)]
    sol_ledger.finalize()
    sol_node.stats_reset()
    outcome = watcher.scan(sol_rpc, max_pages=5)
    assert seen(outcome) == [(paid, reference, 70_000, True)] and outcome.caught_up
    assert outcome.fetched == 1101
    # the recipient's starting point and listing, and two pages of the reference
    assert sol_node.stats.calls["getSignaturesForAddress"] == 4
    assert watcher.cursors[reference].until == noise[-1] and watcher.cursors[reference].newest == noise[-1]
    sol_node.stats_reset()
    assert watcher.scan(sol_rpc).fetched == 0 and sol_node.stats.calls["getSignaturesForAddress"] == 2


@pytest.mark.slow  # makes over a thousand transactions
def test_a_listing_cut_by_the_page_budget_goes_on_at_the_next_pass(
    sol_ledger, sol_node, sol_rpc, watcher, payer, merchant
):
    reference = watcher.reference()
    paid = sol_ledger.pay(payer, merchant.pubkey(), 80_000, references=[reference])
    bystander = sol_ledger.keypair_funded(10**9)
    noise = [sol_ledger.pay(payer, bystander.pubkey(), 1, references=[reference]) for _ in range(1000)]
    sol_ledger.finalize()
    cut = watcher.scan(sol_rpc, max_pages=1)
    assert cut.sightings == [] and not cut.caught_up
    cursor = watcher.cursors[reference]
    assert (cursor.until, cursor.before, cursor.top) == (None, noise[0], noise[-1])
    resumed = watcher.scan(sol_rpc, max_pages=1)
    assert seen(resumed) == [(paid, reference, 80_000, True)] and resumed.caught_up
    assert watcher.cursors[reference].until == noise[-1] and watcher.cursors[reference].before is None
    sol_node.stats_reset()
    quiet = watcher.scan(sol_rpc, max_pages=1)
    assert quiet.listed == 0 and sol_node.stats.calls["getTransaction"] == 0


def test_the_fetch_budget_never_lets_the_cursor_pass_what_was_not_fetched(
    sol_ledger, sol_rpc, watcher, payer, merchant
):
    reference = watcher.reference()
    sig = sol_ledger.pay(payer, merchant.pubkey(), 5_000, references=[reference])
    sol_ledger.finalize()
    starved = watcher.scan(sol_rpc, max_fetches=0)
    assert starved.sightings == [] and not starved.caught_up
    assert watcher.cursors[reference].until is None
    assert seen(watcher.scan(sol_rpc)) == [(sig, reference, 5_000, True)]


def test_confirmed_payment_dropped_with_its_fork_is_gone_once_its_blockhash_expired(
    sol_ledger, sol_rpc, watcher, payer, merchant
):
    reference = watcher.reference()
    sig = sol_ledger.pay(payer, merchant.pubkey(), 1_000_000, references=[reference])
    assert seen(watcher.scan(sol_rpc)) == [(sig, reference, 1_000_000, False)]
    blockhash = watcher.pending[sig].blockhash
    sol_ledger.drop(sig)
    sol_ledger.advance(10)
    sol_ledger.finalize()
    waiting = watcher.scan(sol_rpc)
    assert waiting.gone == [] and set(watcher.pending) == {sig}  # it could still land
    assert sol_ledger.blockhash_valid(blockhash)
    sol_ledger.advance(MAX_PROCESSING_AGE)
    sol_ledger.finalize()
    gone = watcher.scan(sol_rpc)
    assert [g.signature for g in gone.gone] == [sig] and gone.gone[0].reason.startswith("dropped")
    assert blockhash in gone.gone[0].reason and watcher.pending == {}


def test_confirmed_payment_finalized_after_its_blockhash_expired_still_counts(
    sol_ledger, sol_rpc, watcher, payer, merchant
):
    reference = watcher.reference()
    sig = sol_ledger.pay(payer, merchant.pubkey(), 1_500_000, references=[reference])
    watcher.scan(sol_rpc)
    sol_ledger.advance(MAX_PROCESSING_AGE + 5)
    sol_ledger.finalize()
    outcome = watcher.scan(sol_rpc)
    assert outcome.gone == [] and seen(outcome) == [(sig, reference, 1_500_000, True)]


def test_rate_limiting_mid_pass_is_waited_out(sol_ledger, sol_node, sol_rpc, waits, watcher, payer, merchant):
    reference = watcher.reference()
    sig = sol_ledger.pay(payer, merchant.pubkey(), 31_000, references=[reference])
    sol_ledger.finalize()
    sol_node.rate_limit(3, retry_after=1)
    assert seen(watcher.scan(sol_rpc)) == [(sig, reference, 31_000, True)]
    assert waits == [1, 1, 1] and sol_rpc.stats.rate_limited == 3


def test_node_on_another_cluster_is_refused():
    with SolanaRpcServer(SolanaLedger.posing_as("mainnet-beta")) as node, SolanaRpc(node.url) as rpc:
        assert cluster_check(rpc, cluster="mainnet-beta") == "5eykt4UsFv8P8NJdTREpY1vzqKqZKvdpKuc147dw2N9d"
        with pytest.raises(WrongCluster) as wrong:
            cluster_check(rpc, cluster="devnet")
        assert wrong.value.reason == "wrong_cluster"
        assert "follows mainnet-beta" in str(wrong.value) and "SOL_CLUSTER=devnet" in str(wrong.value)
    with SolanaRpcServer(SolanaLedger()) as node, SolanaRpc(node.url) as rpc:
        genesis = node.ledger.genesis_hash
        assert cluster_check(rpc, cluster="localnet") == genesis  # a test validator: any hash
        assert cluster_check(rpc, cluster="localnet", pinned=genesis) == genesis
        with pytest.raises(WrongCluster, match="SOL_GENESIS_HASH"):
            cluster_check(rpc, cluster="localnet", pinned="5eykt4UsFv8P8NJdTREpY1vzqKqZKvdpKuc147dw2N9d")


def test_a_transaction_the_provider_cannot_serve_this_pass_is_read_at_the_next(
    sol_ledger, sol_node, sol_rpc, watcher, payer, merchant, monkeypatch
):
    # Providers answer getTransaction for a finalized slot with -32009 ("missing in
    # long-term storage") or -32004 ("block not available") while their storage
    # catches up: the payment must not be passed over with the cursor.
    reference = watcher.reference()
    sig = sol_ledger.pay(payer, merchant.pubkey(), 4_200_000, references=[reference])
    sol_ledger.finalize()
    served = sol_node.handler.rpc_getTransaction
    refusals = [
        RpcFault(-32009, f"Slot {sol_ledger.transaction(sig).slot} was skipped, or missing in long-term storage")
    ]

    def flaky(params):
        if refusals and params and params[0] == sig:
            raise refusals.pop()
        return served(params)

    monkeypatch.setattr(sol_node.handler, "rpc_getTransaction", flaky)
    first = watcher.scan(sol_rpc)
    assert first.sightings == [] and refusals == []
    assert watcher.cursors[reference].until is None  # the cursor waits for it
    again = watcher.scan(sol_rpc)
    assert seen(again) == [(sig, reference, 4_200_000, True)]
    assert watcher.cursors[reference].until == sig


def test_a_transaction_of_an_unsupported_version_is_passed_over_once_final(
    sol_ledger, sol_node, sol_rpc, watcher, payer, merchant, monkeypatch
):
    reference = watcher.reference()
    sig = sol_ledger.pay(payer, merchant.pubkey(), 1_100_000, references=[reference])
    sol_ledger.finalize()

    def newer_version(params):
        raise RpcFault(
            UNSUPPORTED_TRANSACTION_VERSION, "Transaction version (1) is not supported by the requesting client"
        )

    monkeypatch.setattr(sol_node.handler, "rpc_getTransaction", newer_version)
    outcome = watcher.scan(sol_rpc)
    assert outcome.sightings == [] and watcher.cursors[reference].until == sig


def test_a_confirmed_payment_a_lagging_node_does_not_show_is_not_taken_for_dropped(
    sol_ledger, sol_node, sol_rpc, watcher, payer, merchant, monkeypatch
):
    # Behind a provider's load balancer one pass may reach a node that has not
    # seen the transaction yet; its finalized bank does not hold the (newer)
    # blockhash either, so isBlockhashValid says false. That is no proof of a
    # dropped fork while the transaction's slot is above the finalized one.
    reference = watcher.reference()
    sol_ledger.advance(3)  # the newest blockhash is above the finalized bank
    sig = sol_ledger.pay(payer, merchant.pubkey(), 2_000_000, references=[reference])
    assert seen(watcher.scan(sol_rpc)) == [(sig, reference, 2_000_000, False)]
    assert not sol_ledger.blockhash_known_valid(watcher.pending[sig].blockhash)
    listed, served = sol_node.handler.rpc_getSignaturesForAddress, sol_node.handler.rpc_getTransaction
    monkeypatch.setattr(
        sol_node.handler, "rpc_getSignaturesForAddress", lambda p: [e for e in listed(p) if e["signature"] != sig]
    )
    monkeypatch.setattr(sol_node.handler, "rpc_getTransaction", lambda p: None if p[0] == sig else served(p))
    lagging = watcher.scan(sol_rpc)
    assert lagging.gone == [] and set(watcher.pending) == {sig}
    monkeypatch.undo()
    sol_ledger.finalize()
    assert seen(watcher.scan(sol_rpc)) == [(sig, reference, 2_000_000, True)]
