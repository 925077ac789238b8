"""The JSON-RPC client against anvil and against a proxy playing difficult providers."""

from __future__ import annotations

import socket

import pytest

from billing.chains.errors import ChainUnavailable, RpcError
from billing.chains.ethereum.rpc import EthRpc, endpoint_of

pytestmark = pytest.mark.chain


def test_calls_and_batches_in_order(node, rpc):
    height = node.mine(3)
    assert int(rpc.call("eth_blockNumber"), 16) == height
    blocks = rpc.batch([("eth_getBlockByNumber", (hex(h), False)) for h in range(height - 2, height + 1)])
    assert [int(b["number"], 16) for b in blocks] == [height - 2, height - 1, height]
    assert rpc.requests == 2 and rpc.calls == 4


def test_the_node_refusing_a_call(node, rpc):
    with pytest.raises(RpcError) as refused:
        rpc.call("eth_noSuchMethod")
    assert refused.value.method == "eth_noSuchMethod"
    [ok, error] = rpc.batch([("eth_chainId", ()), ("eth_noSuchMethod", ())], return_errors=True)
    assert int(ok, 16) == node.chain_id and isinstance(error, RpcError)


def test_batches_refused_get_smaller(node, proxy):
    proxy.max_batch = 3
    height = node.mine(8)
    with EthRpc(proxy.url, batch_size=50) as client:
        blocks = client.batch([("eth_getBlockByNumber", (hex(h), False)) for h in range(height - 7, height + 1)])
        assert [int(b["number"], 16) for b in blocks] == list(range(height - 7, height + 1))
        assert client.batch_size <= 3


@pytest.mark.parametrize(("status", "reason"), [(429, "overloaded"), (401, "unauthorized"), (503, "bad_response")])
def test_http_failures_are_unavailability(node, proxy, status, reason):
    proxy.http_status = status
    with EthRpc(proxy.url, retries=0) as client, pytest.raises(ChainUnavailable) as failed:
        client.call("eth_blockNumber")
    assert failed.value.reason == reason


def test_an_unreachable_node(node):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: connections are refused
        with EthRpc(f"http://127.0.0.1:{port}", retries=0) as client, pytest.raises(ChainUnavailable) as failed:
            client.call("eth_blockNumber")
    assert failed.value.reason == "unreachable"
    assert str(port) in str(failed.value)


def test_urls_are_never_quoted_whole():
    assert endpoint_of("https://user:secret@eth.example:8545/v3/0123456789abcdef?key=1") == "https://eth.example:8545"
    assert endpoint_of("http://[::1]:8545") == "http://[::1]:8545"
    with pytest.raises(ValueError, match="looks like"):
        endpoint_of("ws://127.0.0.1:8546")
    assert "secret" not in repr(EthRpc("https://user:secret@eth.example/v3/abcdef"))
