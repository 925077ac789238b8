"""The Solana RPC client: batches within the batch size, waits out 429s (the
provider's Retry-After, else exponential back-off), paces itself under a
calls-per-second budget, tells unavailability from refusals, and never shows
an API key."""

from __future__ import annotations

import socket

import httpx
import pytest

from billing.chains.solana.rpc import SolanaRpc, SolanaRpcError, SolanaUnavailable
from tests.chains.solana.support import Waits


def test_batch_splits_into_requests_of_the_batch_size(sol_node, waits):
    rpc = SolanaRpc(sol_node.url, batch_size=10, sleep=waits)
    results = rpc.batch([("getSlot", [{"commitment": "confirmed"}])] * 25 + [("getGenesisHash", [])])
    assert results[:25] == [sol_node.ledger.confirmed_slot] * 25
    assert results[25] == sol_node.ledger.genesis_hash
    assert sol_node.stats.http_requests == 3 and sol_node.stats.total_calls == 26
    assert (rpc.stats.http_requests, rpc.stats.calls) == (3, 26)
    assert waits == []


def test_refused_calls_stand_in_the_batch_or_raise(sol_rpc):
    results = sol_rpc.batch([("getSlot", []), ("getBalance", ["nope"])], return_errors=True)
    assert isinstance(results[0], int)
    assert isinstance(results[1], SolanaRpcError) and results[1].code == -32602
    with pytest.raises(SolanaRpcError, match="Invalid param: WrongSize"):
        sol_rpc.batch([("getSlot", []), ("getBalance", ["nope"])])
    with pytest.raises(SolanaRpcError) as refused:
        sol_rpc.call("getNothing")
    assert refused.value.code == -32601


def test_http_429_waits_retry_after(sol_node, sol_rpc, waits):
    sol_node.rate_limit(2, retry_after=2)
    assert sol_rpc.call("getGenesisHash") == sol_node.ledger.genesis_hash
    assert waits == [2, 2]
    assert sol_rpc.stats.rate_limited == 2 and sol_rpc.stats.waited_seconds == 4
    assert sol_node.stats.http_requests == 3


def test_429_without_retry_after_backs_off_exponentially_also_inside_a_200(sol_node, waits):
    rpc = SolanaRpc(sol_node.url, backoff=0.5, sleep=waits)
    sol_node.rate_limit(2)
    sol_node.rate_limit(1, style="jsonrpc")
    assert rpc.batch([("getSlot", []), ("getSlot", [])]) == [sol_node.ledger.finalized_slot] * 2
    assert waits == [0.5, 1.0, 2.0]


def test_a_provider_that_keeps_limiting_makes_the_node_unavailable(sol_node, waits):
    rpc = SolanaRpc(sol_node.url, rate_limit_retries=3, backoff=1, backoff_max=3, sleep=waits)
    sol_node.rate_limit(10)
    with pytest.raises(SolanaUnavailable) as unavailable:
        rpc.call("getSlot")
    assert unavailable.value.reason == "rate_limited"
    assert "SOL_RPC_MAX_RPS" in str(unavailable.value)
    assert waits == [1, 2, 3]  # capped at backoff_max
    assert sol_node.stats.http_requests == 4


def test_pacing_keeps_calls_per_second_under_the_budget(sol_node):
    clock = [100.0]
    waits = Waits()

    def sleep(seconds: float) -> None:
        waits(seconds)
        clock[0] += seconds

    rpc = SolanaRpc(sol_node.url, batch_size=10, max_calls_per_second=20, sleep=sleep, monotonic=lambda: clock[0])
    rpc.batch([("getSlot", [])] * 25)  # 10 + 10 + 5 calls
    assert waits == [0.5, 0.5]
    rpc.call("getSlot")  # the last 5 calls' quarter second has not passed on this clock
    assert waits == [0.5, 0.5, 0.25]
    clock[0] += 60
    rpc.call("getSlot")
    assert len(waits) == 3


def test_endpoint_never_shows_credentials_or_api_keys(waits):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://user:s3cret@127.0.0.1:{port}/v2/PATHKEY?api-key=QUERYKEY"
    rpc = SolanaRpc(url, transport_retries=2, backoff=0.25, sleep=waits)
    assert rpc.endpoint == f"http://127.0.0.1:{port}" and "KEY" not in repr(rpc)
    with pytest.raises(SolanaUnavailable) as unavailable:
        rpc.call("getSlot")
    assert unavailable.value.reason == "unreachable"
    assert not any(secret in str(unavailable.value) for secret in ("s3cret", "PATHKEY", "QUERYKEY"))
    assert waits == [0.25, 0.5]
    with pytest.raises(ValueError) as bad:
        SolanaRpc("ftp://key@host/KEY")
    assert "KEY" not in str(bad.value)


def test_path_query_and_basic_auth_reach_the_provider():
    seen = []

    def provider(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"jsonrpc": "2.0", "id": 1, "result": "ok"})

    rpc = SolanaRpc("https://user:pw@rpc.example/v2/KEY?api-key=Q", transport=httpx.MockTransport(provider))
    assert rpc.call("getHealth") == "ok"
    assert str(seen[0].url) == "https://rpc.example/v2/KEY?api-key=Q"
    assert seen[0].headers["authorization"].startswith("Basic ")


@pytest.mark.parametrize(
    ("status", "body", "reason"),
    [
        (
            200,
            {"jsonrpc": "2.0", "id": 1, "error": {"code": -32005, "message": "Node is behind by 180 slots"}},
            "unhealthy",
        ),
        (
            200,
            {
                "jsonrpc": "2.0",
                "id": 1,
                "error": {"code": -32011, "message": "Transaction history is not available from this node"},
            },
            "no_history",
        ),
        (
            200,
            {
                "jsonrpc": "2.0",
                "id": 1,
                "error": {"code": -32016, "message": "Minimum context slot has not been reached"},
            },
            "behind",
        ),
        (401, {"error": "unauthorized"}, "unauthorized"),
        (413, {"error": "too large"}, "batch_too_large"),
        (503, None, "overloaded"),
        (200, None, "bad_response"),
        (200, {"jsonrpc": "2.0", "id": 1}, "bad_response"),
    ],
)
def test_node_failures_are_unavailability_with_a_reason(status, body, reason):
    def provider(request: httpx.Request) -> httpx.Response:
        if body is None:
            return httpx.Response(status, text="<html>busy</html>")
        return httpx.Response(status, json=body)

    rpc = SolanaRpc("https://rpc.example", transport=httpx.MockTransport(provider))
    with pytest.raises(SolanaUnavailable) as unavailable:
        rpc.call("getSlot")
    assert unavailable.value.reason == reason
