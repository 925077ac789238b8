"""The scanner core against a real litecoind regtest node: mempool, blocks,
reorgs, replacements, conflicts, catching up, and a 2,000-transaction block."""

from __future__ import annotations

import secrets
from decimal import Decimal

import pytest

from billing.chains.utxo.scanner import (
    BlockRef,
    ChainStep,
    Conflict,
    GoneReason,
    GoneTx,
    MempoolWatcher,
    Observation,
    Outpoint,
    PaymentTx,
    chain_advance,
    coins_to_base_units,
    fork_find,
)
from devtools.litecoind import address_to_script

pytestmark = pytest.mark.chain


class Ledger:
    """The bookkeeping a watcher service does with the scanner's results, in
    memory: a cursor of recent blocks and the confirmed payments, keyed by
    (txid, vout) so that recording twice is harmless."""

    def __init__(self, node):
        self.rpc = node.rpc
        height, best = node.tip()
        self.recent: list[BlockRef] = [BlockRef(height, best)]
        self.confirmed: dict[tuple[str, int], Observation] = {}
        self.steps: list[ChainStep] = []

    @property
    def cursor(self) -> BlockRef:
        return self.recent[-1]

    def apply(self, step: ChainStep) -> None:
        if step.fork:
            orphaned = {b.hash for b in step.fork.orphaned}
            self.confirmed = {k: o for k, o in self.confirmed.items() if o.block_hash not in orphaned}
            self.recent = [b for b in self.recent if b.hash not in orphaned]
        for scan in step.blocks:
            for o in scan.observations:
                self.confirmed[(o.txid, o.vout)] = o
            self.recent.append(scan.block)
        self.steps.append(step)

    def follow(self, scripts, **kwargs) -> list[ChainStep]:
        steps = []
        while True:
            step = chain_advance(self.rpc, recent=self.recent, scripts=scripts, **kwargs)
            self.apply(step)
            steps.append(step)
            if step.caught_up:
                return steps

    def credited(self, script_hex: str) -> int:
        return sum(o.amount for o in self.confirmed.values() if o.script_hex == script_hex)


def _vout_paying(node, txid: str, script_hex: str) -> int:
    tx = node.rpc.call("getrawtransaction", txid, True)
    [vout] = [o["n"] for o in tx["vout"] if o["scriptPubKey"]["hex"] == script_hex]
    return vout


def test_coins_to_base_units_is_exact():
    assert coins_to_base_units(Decimal("0.00000001")) == 1
    assert coins_to_base_units(Decimal("1.50000000")) == 150_000_000
    assert coins_to_base_units("21000000") == 2_100_000_000_000_000
    assert coins_to_base_units(Decimal("0.000001"), decimals=6) == 1
    with pytest.raises(ValueError):
        coins_to_base_units(Decimal("0.000000001"))
    with pytest.raises(TypeError):
        coins_to_base_units(0.1)


def test_payment_seen_in_mempool_then_confirmed_in_its_block(node, destinations):
    d = destinations.new()
    scripts = {d.script_hex}
    ledger = Ledger(node)
    watcher = MempoolWatcher(node.rpc)
    txid = node.send(d.address, 150_000_000)
    vout = _vout_paying(node, txid, d.script_hex)

    pool = watcher.scan(scripts=scripts, scanned_tip=ledger.cursor.hash)
    assert pool.observations == (Observation(txid, vout, d.script_hex, 150_000_000),)
    assert pool.new[0].replaceable is True
    assert not pool.observations[0].confirmed
    assert pool.fetched >= 1 and pool.gone == ()
    # The next pass looks only at transactions it has not decoded yet.
    again = watcher.scan(scripts=scripts, scanned_tip=ledger.cursor.hash)
    assert again.new == () and again.fetched == 0 and again.gone == ()

    [block_hash] = node.mine(1)
    # The payment left the mempool, but our cursor is behind the node: the
    # watcher waits instead of calling it dropped.
    early = watcher.scan(scripts=scripts, scanned_tip=ledger.cursor.hash)
    assert early.deferred is True and early.gone == ()

    [step] = ledger.follow(scripts)
    assert step.fork is None and step.caught_up
    [scan] = step.blocks
    assert scan.block == BlockRef(ledger.recent[-2].height + 1, block_hash)
    assert node.rpc.call("getblockhash", scan.block.height) == block_hash
    assert scan.previous_hash == ledger.recent[-2].hash
    assert scan.observations == (Observation(txid, vout, d.script_hex, 150_000_000, scan.block.height, block_hash),)
    assert txid in scan.txids and scan.tx_count == len(scan.txids) >= 2
    assert watcher.blocks_applied(step.blocks) == [GoneTx(txid, GoneReason.MINED)]
    after = watcher.scan(scripts=scripts, scanned_tip=ledger.cursor.hash)
    assert after.gone == () and after.deferred is False

    observation = ledger.confirmed[(txid, vout)]
    assert observation.confirmations(tip_height=step.tip.height) == 1
    node.mine(5)
    [step] = ledger.follow(scripts)
    assert len(step.blocks) == 5 and all(s.observations == () for s in step.blocks)
    assert observation.confirmations(tip_height=step.tip.height) == 6
    assert ledger.credited(d.script_hex) == 150_000_000


def test_bitcoin_destination_is_matched_by_its_script(node, destinations):
    # A BTC regtest address (bcrt1...) and the Litecoin node share the script
    # format: the node pays the BTC script, and the same scanner finds it.
    d = destinations.new()
    btc_address = destinations.account.address(d.index, hrp="bcrt")
    assert btc_address.startswith("bcrt1q")
    script = address_to_script(btc_address, hrp="bcrt")
    ledger = Ledger(node)
    watcher = MempoolWatcher(node.rpc)
    txid = node.send_to_script(script, 42_000)
    assert [(o.txid, o.script_hex, o.amount) for o in watcher.scan(scripts={script}).observations] == [
        (txid, script, 42_000)
    ]
    [block_hash] = node.mine(1)
    ledger.follow({script})
    [observation] = ledger.confirmed.values()
    assert (observation.txid, observation.block_hash, observation.amount) == (txid, block_hash, 42_000)


def test_mined_payment_reported_as_mined_without_block_bookkeeping(node, destinations):
    # A restarted worker that lost its block history still tells mined from dropped.
    d = destinations.new()
    watcher = MempoolWatcher(node.rpc)
    txid = node.send(d.address, 10_000)
    assert [p.txid for p in watcher.scan(scripts={d.script_hex}).new] == [txid]
    [tip] = node.mine(1)
    pool = watcher.scan(scripts={d.script_hex}, scanned_tip=tip)
    assert pool.gone == (GoneTx(txid, GoneReason.MINED),)
    assert watcher.pending == ()


def test_reorg_invalidate_then_reconsider_counts_once(node, destinations):
    d = destinations.new()
    scripts = {d.script_hex}
    ledger = Ledger(node)
    watcher = MempoolWatcher(node.rpc)
    fork_base = ledger.cursor
    txid = node.send(d.address, 2_500_000)
    vout = _vout_paying(node, txid, d.script_hex)
    watcher.scan(scripts=scripts, scanned_tip=ledger.cursor.hash)
    mined = node.mine(3)
    for step in ledger.follow(scripts):
        watcher.blocks_applied(step.blocks)
    assert ledger.credited(d.script_hex) == 2_500_000
    assert ledger.confirmed[(txid, vout)].block_hash == mined[0]
    try:
        node.invalidate(mined[0])
        assert fork_find(node.rpc, recent=ledger.recent[-1:]) is not None
        [step] = ledger.follow(scripts)
        assert step.fork is not None
        assert step.fork.common == fork_base
        assert [b.hash for b in step.fork.orphaned] == mined
        assert [b.height for b in step.fork.orphaned] == [fork_base.height + i for i in (1, 2, 3)]
        assert step.blocks == () and step.tip_scanned == fork_base and step.caught_up
        assert ledger.credited(d.script_hex) == 0  # un-counted
        # The orphaned payment is back in the mempool: unconfirmed again.
        pool = watcher.scan(scripts=scripts, scanned_tip=ledger.cursor.hash)
        assert [o.txid for o in pool.observations] == [txid]
    finally:
        node.reconsider(mined[0])
    [step] = ledger.follow(scripts)
    assert step.fork is None
    assert [s.block.hash for s in step.blocks] == mined
    assert watcher.blocks_applied(step.blocks) == [GoneTx(txid, GoneReason.MINED)]
    assert ledger.credited(d.script_hex) == 2_500_000  # once, not twice
    assert ledger.confirmed[(txid, vout)].block_hash == mined[0]


def test_forget_makes_a_reorged_payment_new_again(node, destinations):
    # The watcher never saw the payment leave: mined and un-mined between two
    # passes. The service un-counts it from the orphaned block and says so.
    d = destinations.new()
    watcher = MempoolWatcher(node.rpc)
    txid = node.send(d.address, 8_000)
    assert [p.txid for p in watcher.scan(scripts={d.script_hex}).new] == [txid]
    [block] = node.mine(1)
    try:
        node.invalidate(block)
        assert txid in node.mempool()
        assert watcher.scan(scripts={d.script_hex}).new == ()
        watcher.forget([txid])
        assert [p.txid for p in watcher.scan(scripts={d.script_hex}).new] == [txid]
    finally:
        node.reconsider(block)


def test_reorg_to_a_competing_chain_and_back(node, destinations):
    d = destinations.new()
    scripts = {d.script_hex}
    ledger = Ledger(node)
    base = ledger.cursor
    txid = node.send(d.address, 7_000_000)
    first = node.mine(3)
    ledger.follow(scripts)
    try:
        node.invalidate(first[0])
        # Another miner's chain, two blocks, mines the same payment elsewhere.
        second = node.mine(2)
        [step] = ledger.follow(scripts)
        assert step.fork.common == base and [b.hash for b in step.fork.orphaned] == first
        assert [s.block.hash for s in step.blocks] == second
        [observation] = ledger.confirmed.values()
        assert (observation.txid, observation.block_hash) == (txid, second[0])
    finally:
        node.reconsider(first[0])
    # Three blocks of work beat two: the node goes back to the first chain.
    assert node.tip()[1] == first[-1]
    [step] = ledger.follow(scripts)
    assert step.fork.common == base and [b.hash for b in step.fork.orphaned] == second
    assert [s.block.hash for s in step.blocks] == first
    assert ledger.credited(d.script_hex) == 7_000_000
    assert [o.block_hash for o in ledger.confirmed.values()] == [first[0]]


def test_reorg_deeper_than_the_stored_window(node, destinations):
    d = destinations.new()
    node.mine(2)
    height, _ = node.tip()
    window = [BlockRef(h, node.rpc.call("getblockhash", h)) for h in (height - 1, height)]
    node.invalidate(window[0].hash)
    node.invalidate(node.rpc.call("getblockhash", height - 2))  # the fork is below the window
    replacement = node.mine(4)
    fork = fork_find(node.rpc, recent=window)
    assert fork.common is None and fork.orphaned == tuple(window)
    step = chain_advance(node.rpc, recent=window, scripts={d.script_hex})
    # Resumes at the lowest stored height; the caller widens its window next time.
    assert step.blocks[0].block.height == height - 1
    assert step.blocks[-1].block.hash == replacement[-1]


def test_rbf_bumpfee_reports_the_replaced_txid_gone(node, destinations):
    d = destinations.new()
    scripts = {d.script_hex}
    watcher = MempoolWatcher(node.rpc)
    tip = node.tip()[1]
    txid = node.send(d.address, 40_000_000)
    [original] = watcher.scan(scripts=scripts, scanned_tip=tip).new
    bumped = node.bumpfee(txid)
    pool = watcher.scan(scripts=scripts, scanned_tip=tip)
    assert pool.gone == (GoneTx(txid, GoneReason.CONFLICTED),)
    [replacement] = pool.new
    assert replacement.txid == bumped and replacement.amount == 40_000_000
    assert replacement.inputs == original.inputs
    assert [p.txid for p in watcher.pending] == [bumped]


def test_replacement_paying_elsewhere_uncounts_the_payment(node, destinations):
    d = destinations.new()
    scripts = {d.script_hex}
    watcher = MempoolWatcher(node.rpc)
    tip = node.tip()[1]
    txid = node.send(d.address, 40_000_000)
    watcher.scan(scripts=scripts, scanned_tip=tip)
    replacement = node.replace(txid, address=node.new_address())
    assert node.mempool().count(replacement) == 1 and txid not in node.mempool()
    pool = watcher.scan(scripts=scripts, scanned_tip=tip)
    assert pool.gone == (GoneTx(txid, GoneReason.CONFLICTED),)
    assert pool.new == () and watcher.pending == ()


def test_conflicting_transaction_that_confirms_kills_the_mempool_payment(node, destinations):
    d = destinations.new()
    scripts = {d.script_hex}
    ledger = Ledger(node)
    watcher = MempoolWatcher(node.rpc)
    txid = node.send(d.address, 3_000_000)
    [payment] = watcher.scan(scripts=scripts, scanned_tip=ledger.cursor.hash).new
    double_spend = node.replace(txid, address=node.new_address())
    node.mine(1)  # the conflicting transaction confirms before we look at the mempool again
    [step] = ledger.follow(scripts)
    [scan] = step.blocks
    assert double_spend in scan.txids and txid not in scan.txids
    assert scan.conflicts([payment]) == [Conflict(txid, by=double_spend, outpoint=payment.inputs[0])]
    assert watcher.blocks_applied(step.blocks) == [GoneTx(txid, GoneReason.CONFLICTED, by=double_spend)]
    assert ledger.credited(d.script_hex) == 0
    assert watcher.scan(scripts=scripts, scanned_tip=ledger.cursor.hash).gone == ()


def test_tracked_payments_from_a_previous_worker_are_classified(node, destinations):
    d = destinations.new()
    # A payment that was recorded unconfirmed, then vanished with its coin unspent: dropped.
    coin = node.wallet_rpc.call("listunspent", 1)[0]
    dropped = PaymentTx(
        txid="ab" * 32,
        inputs=(Outpoint(coin["txid"], coin["vout"]),),
        observations=(Observation("ab" * 32, 0, d.script_hex, 1_000),),
    )
    # One whose coin has since been spent by another transaction: conflicted. The wallet must not
    # spend the first coin for it (it picks any coin), so that one stays locked meanwhile.
    locked = [{"txid": coin["txid"], "vout": coin["vout"]}]
    node.wallet_rpc.call("lockunspent", False, locked)
    try:
        spender = node.send(node.new_address(), 5_000)
    finally:
        node.wallet_rpc.call("lockunspent", True, locked)
    spent_input = node.rpc.call("getrawtransaction", spender, True)["vin"][0]
    assert Outpoint(spent_input["txid"], spent_input["vout"]) != dropped.inputs[0]
    conflicted = PaymentTx(
        txid="cd" * 32,
        inputs=(Outpoint(spent_input["txid"], spent_input["vout"]),),
        observations=(Observation("cd" * 32, 0, d.script_hex, 1_000),),
    )
    watcher = MempoolWatcher(node.rpc)
    watcher.track([dropped, conflicted])
    pool = watcher.scan(scripts={d.script_hex}, scanned_tip=node.tip()[1])
    assert sorted(pool.gone, key=lambda g: g.txid) == [
        GoneTx("ab" * 32, GoneReason.DROPPED),
        GoneTx("cd" * 32, GoneReason.CONFLICTED),
    ]


def test_catch_up_after_downtime_in_bounded_steps(node, destinations):
    d = destinations.new()
    scripts = {d.script_hex}
    ledger = Ledger(node)
    start = ledger.cursor
    node.mine(9)
    txid = node.send(d.address, 1_234_567)
    node.mine(16)
    steps = ledger.follow(scripts, max_blocks=10)
    assert [len(s.blocks) for s in steps] == [10, 10, 5]
    assert [s.caught_up for s in steps] == [False, False, True]
    assert [b.height for b in ledger.recent] == list(range(start.height, start.height + 26))
    [observation] = ledger.confirmed.values()
    assert (observation.txid, observation.block_height) == (txid, start.height + 10)
    # A worker killed after recording but before storing its cursor scans the
    # same blocks again: the same (txid, vout) comes back, so it counts once.
    rerun = chain_advance(node.rpc, recent=[start], scripts=scripts, max_blocks=25)
    assert [o for s in rerun.blocks for o in s.observations] == [observation]
    # Nothing new: a step is cheap and changes nothing.
    [idle] = ledger.follow(scripts)
    assert idle.blocks == () and idle.fork is None and idle.caught_up


def test_first_run_without_cursor_starts_where_told(node, destinations):
    d = destinations.new()
    txid = node.send(d.address, 55_555)
    [mined] = node.mine(1)
    height, _ = node.tip()
    step = chain_advance(node.rpc, recent=[], scripts={d.script_hex}, start_height=height - 1)
    assert [s.block.height for s in step.blocks] == [height - 1, height]
    assert [(o.txid, o.block_hash) for o in step.blocks[1].observations] == [(txid, mined)]
    tip_only = chain_advance(node.rpc, recent=[], scripts={d.script_hex})
    assert [s.block.hash for s in tip_only.blocks] == [mined] and tip_only.caught_up


@pytest.mark.slow
def test_block_of_2000_transactions_against_100000_destinations(node, destinations):
    ours = destinations.many(3)
    amounts = [111_111, 222_222, 333_333]
    scripts = {"0014" + secrets.token_hex(20) for _ in range(100_000 - len(ours))}
    scripts.update(d.script_hex for d in ours)
    assert len(scripts) == 100_000
    txids = node.send_many_transactions(2000, payees=[(d.script_hex, a) for d, a in zip(ours, amounts, strict=True)])
    assert len(set(txids)) == 2000

    watcher = MempoolWatcher(node.rpc)
    ledger = Ledger(node)
    pool = watcher.scan(scripts=scripts, scanned_tip=ledger.cursor.hash)
    assert pool.fetched >= 2000 and pool.size >= 2000
    assert sorted(p.amount for p in pool.new) == amounts
    assert watcher.scan(scripts=scripts, scanned_tip=ledger.cursor.hash).fetched == 0

    [block_hash] = node.mine(1)
    [step] = ledger.follow(scripts)
    [scan] = step.blocks
    assert scan.block.hash == block_hash
    assert scan.tx_count >= 2001 and set(txids) <= scan.txids
    assert len(scan.spent) >= 2000  # every input but the coinbase's
    found = sorted((o.script_hex, o.amount) for o in scan.observations)
    assert found == sorted((d.script_hex, a) for d, a in zip(ours, amounts, strict=True))
    assert sorted(g.reason for g in watcher.blocks_applied(step.blocks)) == [GoneReason.MINED] * 3
    # How fast: bench/chain_scan.py measures this block against 100,000 destinations.
