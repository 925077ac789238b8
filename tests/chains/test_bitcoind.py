"""The JSON-RPC client, against the regtest node (and a scripted transport for
the failures a healthy node never produces)."""

from __future__ import annotations

import base64
import json
import logging
from decimal import Decimal

import httpx
import pytest

from billing.chains.utxo.rpc import BitcoinRpc, ChainUnavailable, RpcError
from devtools.litecoind import free_port

pytestmark = pytest.mark.chain


def test_call_returns_exact_amounts(node):
    info = node.rpc.call("getblockchaininfo")
    assert info["chain"] == "regtest"
    assert info["blocks"] >= 101
    balance = node.wallet_rpc.call("getbalance")
    assert isinstance(balance, Decimal)
    assert balance > 0
    # A coinbase output of a fresh regtest chain is exactly 50 coins.
    block = node.rpc.call("getblock", node.rpc.call("getblockhash", 1), 2)
    value = block["tx"][0]["vout"][0]["value"]
    assert isinstance(value, Decimal) and value == Decimal("50")


def test_wallet_endpoint(node):
    assert node.wallet_rpc.call("getwalletinfo")["walletname"] == node.wallet
    other = node.rpc.for_wallet("no-such-wallet")
    with pytest.raises(RpcError) as caught:
        other.call("getwalletinfo")
    assert caught.value.code == -18  # RPC_WALLET_NOT_FOUND
    other.close()


def test_decimal_parameters_travel_exactly(node):
    address = node.new_address()
    txid = node.wallet_rpc.call("sendtoaddress", address, Decimal("0.12345678"))
    tx = node.rpc.call("getrawtransaction", txid, True)
    paid = [o["value"] for o in tx["vout"] if o["scriptPubKey"].get("addresses") == [address]]
    assert paid == [Decimal("0.12345678")]


def test_batch_keeps_order_and_matches_single_calls(node):
    heights = list(range(0, 12))
    batched = node.rpc.batch([("getblockhash", (h,)) for h in heights])
    assert batched == [node.rpc.call("getblockhash", h) for h in heights]
    assert node.rpc.batch([]) == []


def test_batch_errors_raise_or_stand_in_place(node):
    calls = [("getblockcount", ()), ("getblockhash", (10**7,)), ("getbestblockhash", ())]
    with pytest.raises(RpcError) as caught:
        node.rpc.batch(calls)
    assert caught.value.code == -8 and caught.value.method == "getblockhash"
    count, error, best = node.rpc.batch(calls, return_errors=True)
    assert isinstance(count, int) and isinstance(best, str) and len(best) == 64
    assert isinstance(error, RpcError) and error.code == -8


def test_refused_call_is_rpc_error_with_code_and_message(node):
    with pytest.raises(RpcError) as caught:
        node.rpc.call("getblock", "00" * 32)
    assert caught.value.code == -5
    assert "not found" in caught.value.message.lower()
    with pytest.raises(RpcError) as caught:
        node.rpc.call("nosuchmethod")
    assert caught.value.code == -32601


def test_wrong_credentials_are_unavailability_and_never_echo_the_password(node, caplog):
    secret = "Wr0ng-p4ss-never-logged"
    url = f"http://{node.rpc_user}:{secret}@127.0.0.1:{node.rpc_port}"
    caplog.set_level(logging.DEBUG)
    rpc = BitcoinRpc(url, retries=0)
    with pytest.raises(ChainUnavailable) as caught:
        rpc.call("getblockcount")
    assert caught.value.reason == "unauthorized"
    assert secret not in str(caught.value)
    assert secret not in repr(rpc) and secret not in rpc.endpoint
    rpc.close()
    # The real password neither: a successful call logged at DEBUG.
    node.rpc.call("getblockcount")
    assert secret not in caplog.text
    assert node.rpc_password not in caplog.text
    assert node.rpc_password not in repr(node.rpc) and node.rpc_password not in repr(node)


def test_node_down_is_unavailability_after_bounded_retries():
    port = free_port()  # nothing listens there
    rpc = BitcoinRpc(f"http://u:p@127.0.0.1:{port}", retries=2, retry_backoff=0.01)
    with pytest.raises(ChainUnavailable) as caught:
        rpc.call("getblockcount")
    assert caught.value.reason == "unreachable"
    assert str(port) in str(caught.value) and ":p@" not in str(caught.value)
    rpc.close()


def test_malformed_url_is_refused_without_echoing_it():
    with pytest.raises(ValueError) as caught:
        BitcoinRpc("ftp://user:s3cret@host")
    assert "s3cret" not in str(caught.value)


class Scripted:
    """A transport that answers from a script and counts what it was asked."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    def client(self, **kwargs) -> BitcoinRpc:
        kwargs.setdefault("retry_backoff", 0)
        return BitcoinRpc("http://us%40er:p%3As%2Fs@127.0.0.1:9", transport=httpx.MockTransport(self), **kwargs)


def _reply(result=None, error=None, status=200, rid=1):
    return httpx.Response(status, content=json.dumps({"result": result, "error": error, "id": rid}).encode())


def test_credentials_are_percent_decoded_into_basic_auth():
    script = Scripted(_reply(result=7))
    assert script.client().call("getblockcount") == 7
    header = script.requests[0].headers["authorization"]
    assert base64.b64decode(header.split()[1]).decode() == "us@er:p:s/s"
    assert script.requests[0].url.userinfo == b""
    body = json.loads(script.requests[0].content)
    assert body["method"] == "getblockcount" and body["params"] == []


def test_connection_errors_are_retried_a_bounded_number_of_times():
    script = Scripted(httpx.ConnectError("refused"))
    with pytest.raises(ChainUnavailable):
        script.client(retries=3).call("sendtoaddress", "x", Decimal("1"))
    assert len(script.requests) == 4  # never reached the node: safe even for a payment

    script = Scripted(httpx.ConnectError("refused"), _reply(result=5))
    assert script.client(retries=3).call("getblockcount") == 5
    assert len(script.requests) == 2


def test_a_payment_is_never_repeated_after_the_node_may_have_acted():
    script = Scripted(httpx.ReadTimeout("slow"), _reply(result="txid"))
    with pytest.raises(ChainUnavailable) as caught:
        script.client(retries=3).call("sendtoaddress", "x", Decimal("1"))
    assert caught.value.reason == "timeout"
    assert len(script.requests) == 1
    # A read is repeated.
    script = Scripted(httpx.ReadTimeout("slow"), _reply(result=9))
    assert script.client(retries=3).call("getblockcount") == 9
    assert len(script.requests) == 2


@pytest.mark.parametrize(("code", "reason"), [(-28, "warming_up"), (-10, "syncing"), (-9, "syncing")])
def test_not_ready_codes_are_unavailability(code, reason):
    script = Scripted(_reply(error={"code": code, "message": "Loading block index..."}, status=500))
    with pytest.raises(ChainUnavailable) as caught:
        script.client().call("getblockcount")
    assert caught.value.reason == reason


def test_overload_and_garbage_are_unavailability():
    script = Scripted(httpx.Response(503, content=b"Work queue depth exceeded"))
    with pytest.raises(ChainUnavailable) as caught:
        script.client().call("getblockcount")
    assert caught.value.reason == "overloaded"
    script = Scripted(httpx.Response(200, content=b"<html>proxy</html>"))
    with pytest.raises(ChainUnavailable) as caught:
        script.client().call("getblockcount")
    assert caught.value.reason == "bad_response"
