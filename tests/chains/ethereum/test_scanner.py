"""The Ethereum scanner against a real anvil node: what it finds in blocks, in each
detection mode, and how it reads ranges, checks the node and follows forks."""

from __future__ import annotations

import itertools

import pytest
from web3 import Web3

from billing.chains.blocks import BlockRef, fork_find
from billing.chains.errors import ChainUnavailable, NodeMismatch
from billing.chains.ethereum.abi import MULTICALL3_ADDRESS
from billing.chains.ethereum.rpc import EthRpc
from billing.chains.ethereum.scanner import BALANCE_MODE, EvmScanner
from billing.chains.ethereum.traces import DEBUG_TRACE, TRACE_BLOCK
from tests.chains.ethereum.rpc_proxy import logs_span_limit, method_missing, trace_fails

pytestmark = pytest.mark.chain

MODES = [TRACE_BLOCK, DEBUG_TRACE, BALANCE_MODE]
ETHER = 10**18


def cs(address: str) -> str:
    return Web3.to_checksum_address(address)


def read_block(scanner: EvmScanner, node, watched, *, height: int | None = None):
    """Scan one block (the newest by default) with `watched` as the open set."""
    height = node.height() if height is None else height
    base = BlockRef(height - 1, node.block_hash(height - 1))
    scans = scanner.blocks_read(heights=[height], watched=set(watched), base=base, balance_watched=sorted(watched))
    assert [s.block.height for s in scans] == [height]
    return scans[0]


def summary(scan) -> list[tuple]:
    return sorted((t.kind, t.to, t.amount, t.position, t.asset) for t in scan.transfers)


def test_ether_from_an_account(evm, node, rpc):
    to, bystander = evm.address(), evm.address()
    txid = node.send_eth(to, 3 * ETHER)
    node.send_eth(bystander, ETHER)
    node.mine()
    scan = read_block(EvmScanner(rpc, internal=TRACE_BLOCK), node, {to})
    [transfer] = scan.transfers
    assert (transfer.txid, transfer.position, transfer.kind) == (txid, "tx", "native")
    assert (transfer.to, transfer.amount, transfer.asset) == (to, 3 * ETHER, "")
    assert transfer.sender == node.payer.lower()
    assert (transfer.block_height, transfer.block_hash) == (scan.block.height, scan.block.hash)
    assert scan.tx_count == 2


@pytest.mark.parametrize("mode", MODES)
def test_ether_through_a_contract(evm, node, rpc, mode):
    to = evm.address()
    txid = node.transact(evm.forwarder, "forward", cs(to), value=2 * ETHER)
    node.mine()
    scan = read_block(EvmScanner(rpc, internal=mode), node, {to})
    [transfer] = scan.transfers
    assert (transfer.to, transfer.amount) == (to, 2 * ETHER)
    if mode == BALANCE_MODE:
        # No trace: the block, not the transaction, is what the node can name.
        assert (transfer.kind, transfer.txid, transfer.position) == ("balance", scan.block.hash, f"balance:{to}")
    else:
        assert (transfer.kind, transfer.txid, transfer.position) == ("internal", txid, "call:0")
        assert transfer.sender == evm.forwarder.lower()


@pytest.mark.parametrize("mode", MODES)
def test_one_call_paying_two_addresses(evm, node, rpc, mode):
    first, second = evm.address(), evm.address()
    txid = node.transact(evm.forwarder, "split", [cs(first), cs(second)], [5 * 10**15, 7 * 10**15], value=12 * 10**15)
    node.mine()
    scan = read_block(EvmScanner(rpc, internal=mode), node, {first, second})
    amounts = {t.to: t.amount for t in scan.transfers}
    assert amounts == {first: 5 * 10**15, second: 7 * 10**15}
    if mode != BALANCE_MODE:
        assert {(t.txid, t.position) for t in scan.transfers} == {(txid, "call:0"), (txid, "call:1")}


@pytest.mark.parametrize("mode", [TRACE_BLOCK, DEBUG_TRACE])
def test_transfer_two_calls_deep(evm, node, rpc, mode):
    to = evm.address()
    txid = node.transact(evm.relay, "forwardVia", evm.forwarder, cs(to), value=ETHER)
    node.mine()
    [transfer] = read_block(EvmScanner(rpc, internal=mode), node, {to}).transfers
    assert (transfer.txid, transfer.position, transfer.amount) == (txid, "call:0.0", ETHER)
    assert transfer.sender == evm.forwarder.lower()


@pytest.mark.parametrize("mode", MODES)
def test_reverted_transaction_pays_nothing(evm, node, rpc, mode):
    to = evm.address()
    txid = node.transact(evm.forwarder, "forwardThenRevert", cs(to), value=ETHER)
    node.mine()
    assert node.receipt(txid)["status"] == "0x0"
    scan = read_block(EvmScanner(rpc, internal=mode), node, {to})
    assert scan.transfers == ()
    assert scan.tx_count == 1


@pytest.mark.parametrize("mode", MODES)
def test_reverted_inner_call_pays_nothing_but_its_sibling_pays(evm, node, rpc, mode):
    good, bad = evm.address(), evm.address()
    txid = node.transact(evm.forwarder, "forwardWithFailedInner", cs(good), cs(bad), value=4 * 10**15)
    node.mine()
    assert node.receipt(txid)["status"] == "0x1"
    scan = read_block(EvmScanner(rpc, internal=mode), node, {good, bad})
    assert [(t.to, t.amount) for t in scan.transfers] == [(good, 2 * 10**15)]


def test_failed_plain_transaction_to_a_watched_contract_is_not_counted(evm, node, rpc):
    # A watched address with code that refuses ether: the transaction is mined with status 0.
    txid = node.send({"to": evm.usdt, "value": hex(ETHER), "gas": hex(100_000)})
    node.mine()
    assert node.receipt(txid)["status"] == "0x0"
    assert read_block(EvmScanner(rpc, internal=TRACE_BLOCK), node, {evm.usdt.lower()}).transfers == ()


@pytest.mark.parametrize("mode", [TRACE_BLOCK, DEBUG_TRACE])
def test_selfdestruct_pays_its_beneficiary(evm, node, rpc, mode):
    to = evm.address()
    doomed = node.deploy("Forwarder")
    txid = node.transact(doomed, "destroyTo", cs(to), value=3 * 10**15)
    node.mine()
    [transfer] = read_block(EvmScanner(rpc, internal=mode), node, {to}).transfers
    assert (transfer.txid, transfer.position, transfer.amount) == (txid, "call:0", 3 * 10**15)


def test_tokens_by_log_index_and_contract(evm, node, rpc):
    first, second, stray = evm.address(), evm.address(), evm.address()
    t1 = node.token_transfer(evm.usdt, first, 25_000_000)
    t2 = node.transact(evm.usdc, "transferMany", [cs(first), cs(second)], [1_000_000, 2_000_000])
    t3 = node.token_transfer(evm.other, stray, 5 * ETHER)
    node.token_transfer(evm.usdt, evm.address(), 999)  # not watched
    node.mine()
    scan = read_block(EvmScanner(rpc, internal=TRACE_BLOCK), node, {first, second, stray})
    by_tx = {}
    for t in scan.transfers:
        assert t.kind == "token" and t.position.startswith("log:")
        by_tx.setdefault(t.txid, []).append((t.to, t.amount, t.asset))
    assert by_tx == {
        t1: [(first, 25_000_000, evm.usdt.lower())],
        t2: [(first, 1_000_000, evm.usdc.lower()), (second, 2_000_000, evm.usdc.lower())],
        t3: [(stray, 5 * ETHER, evm.other.lower())],
    }
    positions = [t.position for t in scan.transfers]
    assert len(set(positions)) == len(positions)  # log indexes are block-wide


def test_reverted_token_transfer_leaves_no_log(evm, node, rpc):
    to = evm.address()
    empty = node.accounts[5]
    txid = node.token_transfer(evm.usdt, to, 10**6, sender=empty)  # holds no USDT
    node.mine()
    assert node.receipt(txid)["status"] == "0x0"
    assert read_block(EvmScanner(rpc, internal=TRACE_BLOCK), node, {to}).transfers == ()


def test_only_configured_contracts_when_asked(evm, node, rpc):
    to = evm.address()
    node.token_transfer(evm.usdt, to, 7)
    node.token_transfer(evm.other, to, 8)
    node.mine()
    scanner = EvmScanner(rpc, internal=TRACE_BLOCK, token_contracts=[evm.usdt, evm.usdc])
    assert [(t.asset, t.amount) for t in read_block(scanner, node, {to}).transfers] == [(evm.usdt.lower(), 7)]


@pytest.mark.parametrize("multicall", [MULTICALL3_ADDRESS, None], ids=["multicall3", "eth_getBalance"])
def test_balance_mode_reads_either_way(evm, node, rpc, multicall):
    paid, idle = evm.address(), evm.address()
    node.transact(evm.forwarder, "forward", cs(paid), value=123)
    node.mine()
    scanner = EvmScanner(rpc, internal=BALANCE_MODE, multicall=multicall, balances_per_call=1)
    scan = read_block(scanner, node, {paid, idle})
    assert [(t.to, t.amount) for t in scan.transfers] == [(paid, 123)]
    assert scanner.balances.method == ("multicall3" if multicall else "eth_getBalance")


def test_balance_mode_sees_through_the_address_own_spending(evm, node, rpc):
    # The watched address pays gas and value in the same block it is paid by a
    # contract: only the contract's payment is unexplained, and found.
    watched = node.accounts[3]
    node.send_eth(evm.address(), 10**15, sender=watched)
    node.send_eth(watched, 4 * 10**15)  # a plain payment: native, not balance-found
    node.transact(evm.forwarder, "forward", watched, value=6 * 10**15)
    node.mine()
    scan = read_block(EvmScanner(rpc, internal=BALANCE_MODE), node, {watched.lower()})
    assert summary(scan) == [
        ("balance", watched.lower(), 6 * 10**15, f"balance:{watched.lower()}", ""),
        ("native", watched.lower(), 4 * 10**15, "tx", ""),
    ]


def test_balance_mode_follows_consecutive_blocks_with_one_read_each(evm, node, rpc):
    to = evm.address()
    node.transact(evm.forwarder, "forward", cs(to), value=10)
    first = node.mine()
    node.transact(evm.forwarder, "forward", cs(to), value=20)
    node.mine()
    node.mine()
    scanner = EvmScanner(rpc, internal=BALANCE_MODE, multicall=None)
    base = BlockRef(first - 1, node.block_hash(first - 1))
    scans = scanner.blocks_read(heights=[first, first + 1, first + 2], watched={to}, base=base, balance_watched=[to])
    assert [[(t.amount, t.txid) for t in s.transfers] for s in scans] == [
        [(10, scans[0].block.hash)],
        [(20, scans[1].block.hash)],
        [],
    ]
    before = rpc.calls
    node.mine()
    [scan] = scanner.blocks_read(heights=[first + 3], watched={to}, base=scans[-1].block, balance_watched=[to])
    assert scan.transfers == ()
    # The block, the logs, and one balance (the one before it is remembered).
    assert rpc.calls - before == 3


def test_range_read_groups_by_block(evm, node, rpc):
    to = evm.address()
    start = node.height() + 1
    node.send_eth(to, 1)
    node.mine()
    node.mine()
    node.token_transfer(evm.usdc, to, 2)
    node.transact(evm.forwarder, "forward", cs(to), value=3)
    node.mine()
    scanner = EvmScanner(rpc, internal=DEBUG_TRACE, blocks_per_request=2)
    base = BlockRef(start - 1, node.block_hash(start - 1))
    scans = scanner.blocks_read(heights=[start, start + 1, start + 2], watched={to}, base=base)
    assert [s.block.height for s in scans] == [start, start + 1, start + 2]
    assert [sorted((t.kind, t.amount) for t in s.transfers) for s in scans] == [
        [("native", 1)],
        [],
        [("internal", 3), ("token", 2)],
    ]
    assert all(s.parent_hash == p.block.hash for p, s in itertools.pairwise(scans))


def test_blocks_that_do_not_link_onto_the_cursor_are_not_read(evm, node, rpc):
    height = node.mine()
    scanner = EvmScanner(rpc, internal=TRACE_BLOCK)
    wrong = BlockRef(height - 1, "0x" + "ab" * 32)
    assert scanner.blocks_read(heights=[height], watched=set(), base=wrong) == []
    assert scanner.blocks_read(heights=[height + 5], watched=set(), base=None) == []  # above the tip


def test_wide_log_ranges_are_split_when_refused(evm, node, proxy):
    proxy.rules.append(logs_span_limit(2))
    to = evm.address()
    start = node.height() + 1
    for amount in (1, 2, 3, 4, 5):
        node.token_transfer(evm.usdt, to, amount)
        node.mine()
    with EthRpc(proxy.url) as client:
        scanner = EvmScanner(client, internal=TRACE_BLOCK, log_span=1000)
        base = BlockRef(start - 1, node.block_hash(start - 1))
        scans = scanner.blocks_read(heights=list(range(start, start + 5)), watched={to}, base=base)
    assert [[t.amount for t in s.transfers] for s in scans] == [[1], [2], [3], [4], [5]]
    assert scanner.logs.splits >= 1
    assert scanner.logs.span <= 2  # remembered for the next ranges


def logs_lagging_from(height: int):
    """A provider whose range answers come from a node that has no block from
    `height` on: it returns the logs it has and nothing for the rest, no error."""

    def rewrite(call: dict, answer: dict) -> dict:
        if call.get("method") == "eth_getLogs" and "fromBlock" in call["params"][0] and answer.get("result"):
            return answer | {"result": [e for e in answer["result"] if int(e["blockNumber"], 16) < height]}
        return answer

    return rewrite


def unknown_by_hash(*hashes: str, message: str = "unknown block", code: int = -32000):
    """eth_getLogs by block hash (EIP-234) for `hashes` answers as a node that has not seen them."""

    def rule(call: dict) -> dict | None:
        if call.get("method") == "eth_getLogs" and call["params"][0].get("blockHash") in hashes:
            return {"code": code, "message": message}
        return None

    return rule


@pytest.mark.parametrize(
    ("message", "code"),
    [
        ("invalid params: blockHash", -32602),
        ("the method eth_getLogs does not exist/is not available", -32000),
        ("block not found", -32601),  # a method the node lacks, whatever its words
    ],
)
def test_a_log_read_by_hash_refused_for_another_reason_is_a_node_fault(evm, node, proxy, message, code):
    """Refused for something else than an unknown block (a parameter the node
    does not take, a method it lacks): blind, and said so, not a scan cut short
    there for good."""
    to = evm.address()
    start = node.height() + 1
    node.token_transfer(evm.usdt, to, 31)
    node.mine()
    proxy.rewrites.append(logs_lagging_from(start))
    proxy.rules.append(unknown_by_hash(node.block_hash(start), message=message, code=code))
    with EthRpc(proxy.url) as client:
        scanner = EvmScanner(client, internal=TRACE_BLOCK)
        with pytest.raises(ChainUnavailable, match="refused eth_getLogs by block hash"):
            scanner.blocks_read(heights=[start], watched={to}, base=BlockRef(start - 1, node.block_hash(start - 1)))


@pytest.mark.parametrize("contracts", ["every", "configured"])
def test_logs_a_lagging_provider_leaves_out_are_read_by_block_hash(evm, node, proxy, contracts):
    """The range answer lacks the newest blocks' logs; each block's bloom says a
    Transfer of the contract may be there, so it is asked again by its hash."""
    to = evm.address()
    start = node.height() + 1
    for amount in (11, 12, 13):
        node.token_transfer(evm.usdt, to, amount)
        node.mine()
    node.mine()  # a block with no transfer: its bloom does not match, it is not asked about
    proxy.rewrites.append(logs_lagging_from(start + 1))
    with EthRpc(proxy.url) as client:
        scanner = EvmScanner(
            client, internal=TRACE_BLOCK, token_contracts=[evm.usdt] if contracts == "configured" else None
        )
        base = BlockRef(start - 1, node.block_hash(start - 1))
        proxy.seen.clear()
        scans = scanner.blocks_read(heights=list(range(start, start + 4)), watched={to}, base=base)
    assert [[t.amount for t in s.transfers] for s in scans] == [[11], [12], [13], []]
    assert scanner.logs.missed_logs == 2
    assert proxy.seen.count("eth_getLogs") == 3  # the range, then the two blocks it lacked


def test_a_block_the_logs_node_does_not_know_ends_the_scan_below_it(evm, node, proxy):
    """Asked by hash, the lagging node says it has not seen the block: the scan
    stops below it (nothing recorded past what is known) and the next pass,
    once the node has caught up, finds the transfer."""
    to = evm.address()
    start = node.height() + 1
    for amount in (21, 22):
        node.token_transfer(evm.usdt, to, amount)
        node.mine()
    proxy.rewrites.append(logs_lagging_from(start + 1))
    proxy.rules.append(unknown_by_hash(node.block_hash(start + 1)))
    base = BlockRef(start - 1, node.block_hash(start - 1))
    with EthRpc(proxy.url) as client:
        scanner = EvmScanner(client, internal=TRACE_BLOCK)
        scans = scanner.blocks_read(heights=[start, start + 1], watched={to}, base=base)
        assert [[t.amount for t in s.transfers] for s in scans] == [[21]]
        proxy.rewrites.clear()
        proxy.rules.clear()
        after = scanner.blocks_read(heights=[start + 1], watched={to}, base=scans[-1].block)
    assert [[t.amount for t in s.transfers] for s in after] == [[22]]


def test_a_single_block_refused_is_an_error(evm, node, proxy):
    proxy.rules.append(logs_span_limit(0))
    node.mine()
    with EthRpc(proxy.url) as client:
        scanner = EvmScanner(client, internal=TRACE_BLOCK)
        with pytest.raises(Exception, match="max block range"):
            read_block(scanner, node, set())


def test_mode_is_probed_once(evm, node, proxy):
    node.mine()
    with EthRpc(node.url) as client:
        assert EvmScanner(client).internal_mode(probe_height=node.height()) == TRACE_BLOCK
    proxy.rules.append(method_missing("trace_block"))
    with EthRpc(proxy.url) as client:
        scanner = EvmScanner(client)
        assert scanner.internal_mode(probe_height=node.height()) == DEBUG_TRACE
        proxy.rules.append(method_missing("debug_traceBlockByNumber"))
        assert scanner.internal_mode(probe_height=node.height()) == DEBUG_TRACE  # remembered
    with EthRpc(proxy.url) as client:
        assert EvmScanner(client).internal_mode(probe_height=node.height()) == BALANCE_MODE


def test_auto_mode_without_a_trace_api_still_finds_internal_transfers(evm, node, proxy):
    proxy.rules.append(method_missing("trace_block", "debug_traceBlockByNumber"))
    to = evm.address()
    node.transact(evm.forwarder, "forward", cs(to), value=77)
    node.mine()
    with EthRpc(proxy.url) as client:
        scan = read_block(EvmScanner(client), node, {to})
    assert [(t.kind, t.amount) for t in scan.transfers] == [("balance", 77)]


def test_node_checks(evm, node, rpc):
    scanner = EvmScanner(rpc)
    scanner.chain_id_check(expected=node.chain_id)
    with pytest.raises(NodeMismatch, match="chain id 31337, but ETH_CHAIN_ID is 1"):
        scanner.chain_id_check(expected=1)
    scanner.sync_check()
    scanner.decimals_check({evm.usdt: ("USDT_CONTRACT", 6), evm.usdc: ("USDC_CONTRACT", 6)})
    with pytest.raises(ChainUnavailable, match="USDT_CONTRACT .* has 18 decimals; expected 6") as refused:
        scanner.decimals_check({evm.other: ("USDT_CONTRACT", 6)})
    assert refused.value.reason == "misconfigured"
    with pytest.raises(ChainUnavailable, match="has no decimals"):
        scanner.decimals_check({evm.address(): ("USDC_CONTRACT", 6)})


def test_tip_and_finalized(evm, node, rpc):
    height = node.mine(6)
    tip = EvmScanner(rpc).tip(finalized=True)
    assert (tip.height, tip.hash) == (height, node.block_hash(height))
    # Two epochs of two slots below the newest block.
    assert tip.finalized == height - 4
    assert EvmScanner(rpc).tip().finalized is None


def test_height_at_time(evm, node, rpc):
    node.mine()
    scanner = EvmScanner(rpc)
    tip = node.height()
    middle = tip // 2
    at = int(node.block(middle)["timestamp"], 16)
    found = scanner.height_at_time(at=at, tip_height=tip)
    assert int(node.block(found)["timestamp"], 16) >= at
    assert found == 0 or int(node.block(found - 1)["timestamp"], 16) < at
    assert scanner.height_at_time(at=at + 10**9, tip_height=tip) == tip


def test_fork_found_after_a_reorg(evm, node, rpc):
    node.mine(3)
    tip = node.height()
    stored = [BlockRef(h, node.block_hash(h)) for h in range(tip - 3, tip + 1)]
    scanner = EvmScanner(rpc)
    assert fork_find(scanner, recent=stored) is None
    node.reorg(2, [({"from": node.payer, "to": evm.address(), "value": hex(1)}, 0)])  # a branch unlike the old one
    fork = fork_find(scanner, recent=stored)
    assert fork is not None
    assert fork.common == stored[1]
    assert fork.orphaned == tuple(stored[2:])


def test_a_transaction_the_node_cannot_trace_leaves_the_chain_blind_not_crashing(evm, node, proxy):
    """debug_traceBlockByNumber answers a transaction it could not trace (a
    tracer's timeout) with an error beside its hash: the scan stops as a node
    fault (ChainUnavailable: health and back-off say so), not a crash that the
    next run meets again."""
    proxy.rules.append(method_missing("trace_block"))

    proxy.rewrites.append(trace_fails())
    to = evm.address()
    node.transact(evm.forwarder, "forward", cs(to), value=77)
    node.mine()
    with EthRpc(proxy.url) as client:
        scanner = EvmScanner(client, internal=DEBUG_TRACE)
        with pytest.raises(ChainUnavailable, match="execution timeout"):
            read_block(scanner, node, {to})


def test_a_block_the_node_never_traces_is_read_from_balances_after_a_few_runs(evm, node, proxy):
    """Run after run the node cannot trace a transaction of the block the scan
    is at: blind for the first runs (it may be the node's load), then that
    block's ether moved by contracts is read from balances (known by the
    block's hash, as the balance mode does) and the scan goes on past it,
    tracing again from the next block."""
    from billing.chains.ethereum.scanner import UNTRACEABLE_RUNS

    proxy.rules.append(method_missing("trace_block"))
    to, later = evm.address(), evm.address()
    node.transact(evm.forwarder, "forward", cs(to), value=77)
    stuck = node.mine()
    stuck_hash = node.block_hash(stuck)

    proxy.rewrites.append(trace_fails(stuck))
    node.transact(evm.forwarder, "forward", cs(later), value=88)
    node.mine()
    base = BlockRef(stuck - 1, node.block_hash(stuck - 1))
    watched = {to, later}
    with EthRpc(proxy.url) as client:
        scanner = EvmScanner(client, internal=DEBUG_TRACE)
        for _ in range(UNTRACEABLE_RUNS - 1):
            with pytest.raises(ChainUnavailable, match="execution timeout"):
                scanner.blocks_read(heights=[stuck, stuck + 1], watched=watched, base=base, balance_watched=watched)
        [scan] = scanner.blocks_read(heights=[stuck, stuck + 1], watched=watched, base=base, balance_watched=watched)
        [after] = scanner.blocks_read(heights=[stuck + 1], watched=watched, base=scan.block, balance_watched=watched)
    assert summary(scan) == [("balance", to, 77, f"balance:{to}", "")]
    assert [t.txid for t in scan.transfers] == [stuck_hash]
    assert [(t.kind, t.to, t.amount) for t in after.transfers] == [("internal", later, 88)]  # traced again


def test_a_block_behind_an_untraceable_one_is_read_up_to_it(evm, node, proxy):
    """An untraceable block after others in the step: those below it are read,
    and the next step starts at it."""
    proxy.rules.append(method_missing("trace_block"))
    to = evm.address()
    node.transact(evm.forwarder, "forward", cs(to), value=55)
    good = node.mine()
    node.transact(evm.forwarder, "forward", cs(to), value=66)
    stuck = node.mine()

    proxy.rewrites.append(trace_fails(stuck))
    base = BlockRef(good - 1, node.block_hash(good - 1))
    with EthRpc(proxy.url) as client:
        scanner = EvmScanner(client, internal=DEBUG_TRACE)
        scans = scanner.blocks_read(heights=[good, stuck], watched={to}, base=base, balance_watched=[to])
    assert [s.block.height for s in scans] == [good]
    assert [t.amount for t in scans[0].transfers] == [55]


def test_a_call_path_too_long_for_its_column_is_named_by_its_hash():
    """A contract that calls itself thirty levels deep to pay: `call:0.0...` would
    not fit the position column (64), and the block's transaction failed on every
    run. Named by the path's hash instead: short, stable, one per path."""
    from billing.chains.ethereum.traces import call_traces_parse
    from billing.chains.ethereum.transfers import POSITION_MAX, trace_position

    assert trace_position((0, 2, 1)) == "call:0.2.1"
    deep, deeper = (0,) * 31, (0,) * 32
    assert len(trace_position(deep)) == POSITION_MAX and trace_position(deep).startswith("call#")
    assert trace_position(deep) == trace_position(list(deep)) != trace_position(deeper)
    watched = "0x" + "ab" * 20
    frame: dict = {"type": "CALL", "to": watched, "value": hex(5)}
    for _ in range(31):
        frame = {"type": "CALL", "to": "0x" + "cd" * 20, "value": "0x0", "calls": [frame]}
    [found] = call_traces_parse(
        [{"txHash": "0x" + "ee" * 32, "result": frame}],
        txids=["0x" + "ee" * 32],
        watched={watched},
        height=1,
        block_hash="0x" + "11" * 32,
    )
    assert found.amount == 5 and len(found.position) <= POSITION_MAX and found.position == trace_position(deep)


def test_a_call_tree_as_deep_as_the_evm_allows_is_walked_whatever_the_recursion_limit():
    """The EVM lets a call nest 1,024 deep; walked by recursion, such a trace
    stopped the scan on Python's default limit of 1,000 (web3's dependencies
    raise it on import, which nothing here should lean on). Sibling calls keep
    their order."""
    import sys

    from billing.chains.ethereum.traces import call_traces_parse

    watched = "0x" + "ab" * 20
    frame: dict = {"type": "CALL", "to": watched, "value": hex(7)}
    for _ in range(1023):
        frame = {"type": "CALL", "to": "0x" + "cd" * 20, "value": "0x0", "calls": [frame]}
    top = {"type": "CALL", "calls": [{"type": "CALL", "to": watched, "value": hex(3)}, frame]}
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    try:
        found = call_traces_parse(
            [{"txHash": "0x" + "ee" * 32, "result": top}],
            txids=["0x" + "ee" * 32],
            watched={watched},
            height=1,
            block_hash="0x" + "11" * 32,
        )
    finally:
        sys.setrecursionlimit(limit)
    assert (found[0].amount, found[0].position) == (3, "call:0")
    assert [t.amount for t in found] == [3, 7]
