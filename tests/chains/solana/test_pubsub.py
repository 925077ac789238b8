"""The loopback node's PubSub websocket (the RPC port + 1) and the methods a
wallet calls to build and send a transfer. Every answer and notification is
read back with solders' parsers of the node's own response types
(solders.rpc.responses: `parse_websocket_message`, `GetAccountInfoResp`...),
so a shape the node would not send fails here."""

from __future__ import annotations

import base64
import json

import pytest
from solders.hash import Hash
from solders.keypair import Keypair
from solders.message import Message
from solders.rpc.responses import (
    AccountNotification,
    GetAccountInfoResp,
    GetBlockResp,
    GetFeeForMessageResp,
    GetMinimumBalanceForRentExemptionResp,
    LogsNotification,
    RequestAirdropResp,
    SignatureNotification,
    SimulateTransactionResp,
    SlotNotification,
    SubscriptionResult,
    parse_websocket_message,
)
from solders.system_program import TransferParams, transfer
from solders.transaction import VersionedTransaction
from websockets.sync.client import connect

from billing.chains.solana.cluster import MAX_PROCESSING_AGE
from devtools.solana_rpc import LAMPORTS_PER_SOL, SolanaRpcServer


@pytest.fixture
def post(sol_node, sol_http):
    def call(method: str, params: list | None = None) -> str:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or []}
        response = sol_http.post(sol_node.url, json=body)
        assert response.status_code == 200
        return response.text

    return call


class Socket:
    """A websocket client speaking JSON-RPC to the node."""

    def __init__(self, ws) -> None:
        self.ws, self.ids = ws, 0

    def call(self, method: str, params: list) -> dict:
        self.ids += 1
        self.ws.send(json.dumps({"jsonrpc": "2.0", "id": self.ids, "method": method, "params": params}))
        return json.loads(self.ws.recv(timeout=5))

    def subscribe(self, method: str, params: list) -> int:
        answer = self.call(method, params)
        [parsed] = parse_websocket_message(json.dumps(answer))
        assert isinstance(parsed, SubscriptionResult), answer
        return parsed.result

    def next(self):
        [parsed] = parse_websocket_message(self.ws.recv(timeout=5))
        return parsed

    def quiet(self, seconds: float = 0.2) -> bool:
        try:
            self.ws.recv(timeout=seconds)
        except TimeoutError:
            return True
        return False


@pytest.fixture
def socket(sol_node):
    with connect(sol_node.ws_url) as ws:
        yield Socket(ws)


def test_the_websocket_is_on_the_next_port(sol_node):
    assert int(sol_node.ws_url.rsplit(":", 1)[1]) == int(sol_node.url.rsplit(":", 1)[1]) + 1
    bare = SolanaRpcServer(pubsub=False)
    assert bare.pubsub is None
    with pytest.raises(RuntimeError):
        _ = bare.ws_url


def test_logs_mentioning_an_address_at_each_commitment(sol_ledger, socket, payer, merchant):
    confirmed = socket.subscribe("logsSubscribe", [{"mentions": [str(merchant.pubkey())]}, {"commitment": "confirmed"}])
    finalized = socket.subscribe("logsSubscribe", [{"mentions": [str(merchant.pubkey())]}])  # default: finalized
    signature = sol_ledger.pay(payer, merchant.pubkey(), 1_000_000)
    told = socket.next()
    assert isinstance(told, LogsNotification) and told.subscription == confirmed
    assert (str(told.result.value.signature), told.result.value.err) == (signature, None)
    assert told.result.context.slot == sol_ledger.transaction(signature).slot
    assert socket.quiet()  # not finalized yet
    sol_ledger.finalize()
    told = socket.next()
    assert isinstance(told, LogsNotification) and told.subscription == finalized
    assert str(told.result.value.signature) == signature


def test_logs_of_other_addresses_are_not_told_and_all_is(sol_ledger, socket, payer, merchant):
    socket.subscribe("logsSubscribe", [{"mentions": [str(Keypair().pubkey())]}, {"commitment": "confirmed"}])
    everything = socket.subscribe("logsSubscribe", ["all", {"commitment": "confirmed"}])
    sol_ledger.pay(payer, merchant.pubkey(), 1_000_000)
    told = socket.next()
    assert told.subscription == everything
    assert socket.quiet()


def test_mentions_takes_one_address(socket):
    answer = socket.call("logsSubscribe", [{"mentions": [str(Keypair().pubkey()), str(Keypair().pubkey())]}])
    assert answer["error"] == {"code": -32602, "message": "Invalid Request: Only 1 address supported"}


def test_account_and_signature_and_slot_subscriptions(sol_ledger, socket, payer, merchant):
    account = socket.subscribe(
        "accountSubscribe", [str(merchant.pubkey()), {"commitment": "confirmed", "encoding": "base64"}]
    )
    slot = socket.subscribe("slotSubscribe", [])
    message = Message.new_with_blockhash(
        [transfer(TransferParams(from_pubkey=payer.pubkey(), to_pubkey=merchant.pubkey(), lamports=7))],
        payer.pubkey(),
        sol_ledger.latest_blockhash,
    )
    tx = VersionedTransaction(message, [payer])
    signature = socket.subscribe("signatureSubscribe", [str(tx.signatures[0]), {"commitment": "confirmed"}])
    before = sol_ledger.balance(merchant.pubkey())
    sol_ledger.submit(tx)
    told = {type(n): n for n in (socket.next(), socket.next(), socket.next())}
    assert told[SlotNotification].subscription == slot
    assert told[AccountNotification].subscription == account
    assert told[AccountNotification].result.value.lamports == before + 7
    assert told[SignatureNotification].subscription == signature
    assert told[SignatureNotification].result.value.err is None
    answer = socket.call("signatureUnsubscribe", [signature])  # ended with its notification
    assert answer["error"]["code"] == -32602
    assert socket.call("slotUnsubscribe", [slot])["result"] is True
    assert socket.call("accountUnsubscribe", [account])["result"] is True
    sol_ledger.advance(1)
    assert socket.quiet()


def test_a_signature_already_there_is_told_at_once(sol_ledger, socket, payer, merchant):
    landed = sol_ledger.pay(payer, merchant.pubkey(), 1_000_000)
    sid = socket.subscribe("signatureSubscribe", [landed, {"commitment": "confirmed"}])
    told = socket.next()
    assert isinstance(told, SignatureNotification) and told.subscription == sid


def test_notifications_and_bad_requests_are_answered_as_the_node_does(socket):
    socket.ws.send(json.dumps({"jsonrpc": "2.0", "method": "ping"}))  # web3.js's keep-alive: no answer
    assert socket.quiet()
    socket.ws.send("{")
    assert json.loads(socket.ws.recv(timeout=5))["error"]["code"] == -32700
    assert socket.call("nosuchSubscribe", [])["error"]["code"] == -32601


# --- what a wallet calls -------------------------------------------------------------------------


def test_get_account_info(post, merchant):
    parsed = GetAccountInfoResp.from_json(post("getAccountInfo", [str(merchant.pubkey()), {"encoding": "base64"}]))
    assert parsed.value.lamports == LAMPORTS_PER_SOL
    assert str(parsed.value.owner) == "11111111111111111111111111111111"
    assert GetAccountInfoResp.from_json(post("getAccountInfo", [str(Keypair().pubkey())])).value is None


def test_rent_and_fee(post, sol_ledger, payer, merchant):
    assert (
        GetMinimumBalanceForRentExemptionResp.from_json(post("getMinimumBalanceForRentExemption", [0])).value == 890_880
    )
    ix = transfer(TransferParams(from_pubkey=payer.pubkey(), to_pubkey=merchant.pubkey(), lamports=1))
    fresh = Message.new_with_blockhash([ix], payer.pubkey(), sol_ledger.latest_blockhash)
    encoded = base64.b64encode(bytes(fresh)).decode()
    sol_ledger.finalize()
    assert GetFeeForMessageResp.from_json(post("getFeeForMessage", [encoded])).value == 5000
    stale = Message.new_with_blockhash([ix], payer.pubkey(), Hash.new_unique())
    answer = post("getFeeForMessage", [base64.b64encode(bytes(stale)).decode()])
    assert GetFeeForMessageResp.from_json(answer).value is None  # unknown or expired blockhash


def test_simulate_transaction(post, sol_ledger, payer, merchant):
    def simulated(lamports: int, **config):
        ix = transfer(TransferParams(from_pubkey=payer.pubkey(), to_pubkey=merchant.pubkey(), lamports=lamports))
        tx = VersionedTransaction(
            Message.new_with_blockhash([ix], payer.pubkey(), sol_ledger.latest_blockhash), [payer]
        )
        answer = post("simulateTransaction", [base64.b64encode(bytes(tx)).decode(), {"encoding": "base64", **config}])
        resp = SimulateTransactionResp.from_json(answer)
        assert isinstance(resp, SimulateTransactionResp), resp  # not an error answer
        return resp.value

    ok = simulated(1_000, sigVerify=True)
    assert ok.err is None and ok.units_consumed > 0 and ok.logs
    too_much = simulated(10**15)
    assert too_much.err is not None
    replaced = simulated(1_000, replaceRecentBlockhash=True)
    assert str(replaced.replacement_blockhash.blockhash) == str(sol_ledger.latest_blockhash)
    assert sol_ledger.balance(merchant.pubkey()) == LAMPORTS_PER_SOL  # nothing kept


def test_request_airdrop_and_get_block(post, sol_ledger):
    wallet = Keypair().pubkey()
    signature = str(RequestAirdropResp.from_json(post("requestAirdrop", [str(wallet), 2 * LAMPORTS_PER_SOL])).value)
    assert sol_ledger.balance(wallet) == 2 * LAMPORTS_PER_SOL
    slot = sol_ledger.transaction(signature).slot
    config = {"commitment": "confirmed", "maxSupportedTransactionVersion": 0}
    block = GetBlockResp.from_json(post("getBlock", [slot, config])).value
    assert [str(t.transaction.signatures[0]) for t in block.transactions] == [signature]
    assert block.parent_slot == slot - 1
    assert block.block_height == sol_ledger._blocks[slot].height
    signatures = json.loads(post("getBlock", [slot, {**config, "transactionDetails": "signatures"}]))["result"]
    assert signatures["signatures"] == [signature]
    assert json.loads(post("getBlock", [slot]))["error"]["code"] == -32004  # not finalized yet
    assert json.loads(post("getBlock", [slot + MAX_PROCESSING_AGE]))["error"]["code"] == -32004
