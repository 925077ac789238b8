"""A JSON-RPC batch's reply read back into its calls' results (billing/chains/jsonrpc.py)."""

import pytest

from billing.chains.errors import ChainUnavailable, RpcError
from billing.chains.jsonrpc import batch_payload, batch_results


class Busy(ChainUnavailable):
    pass


def error_of(error, *, method):
    if error.get("code") == -28:
        return Busy(f"{method}: warming up", reason="warming_up")
    return RpcError(error["code"], error["message"], method=method)


CALLS = [("getblockhash", [1]), ("getblock", ["ab", 1]), ("getblockcount", [])]
IDS = [7, 8, 9]


def read(reply, **kwargs):
    kwargs.setdefault("error_of", error_of)
    kwargs.setdefault("unavailable", Busy)
    return batch_results(reply, ids=IDS, calls=CALLS, what="batch of 3", endpoint="node", **kwargs)


def test_the_payload_numbers_each_call():
    assert batch_payload(IDS, CALLS, version="2.0") == [
        {"jsonrpc": "2.0", "id": 7, "method": "getblockhash", "params": [1]},
        {"jsonrpc": "2.0", "id": 8, "method": "getblock", "params": ["ab", 1]},
        {"jsonrpc": "2.0", "id": 9, "method": "getblockcount", "params": []},
    ]


def test_answers_in_any_order_come_back_in_the_calls_order():
    reply = [{"id": 9, "result": 120}, {"id": 7, "result": "ab"}, {"id": 8, "result": {"height": 1}}, "junk"]
    assert read(reply) == ["ab", {"height": 1}, 120]


def test_a_refused_call_raises_or_stands_in_its_place():
    reply = [
        {"id": 7, "result": "ab"},
        {"id": 8, "error": {"code": -5, "message": "Block not found"}},
        {"id": 9, "result": 1},
    ]
    with pytest.raises(RpcError, match="Block not found"):
        read(reply)
    results = read(reply, return_errors=True)
    assert results[0] == "ab" and results[2] == 1
    assert isinstance(results[1], RpcError) and results[1].code == -5 and results[1].method == "getblock"


def test_an_unavailable_node_raises_even_when_errors_are_returned():
    reply = [{"id": 7, "result": "ab"}, {"id": 8, "error": {"code": -28, "message": "Loading"}}, {"id": 9, "result": 1}]
    with pytest.raises(Busy, match="getblock: warming up"):
        read(reply, return_errors=True)


def test_the_whole_batch_refused():
    with pytest.raises(RpcError, match="too large") as refused:
        read({"id": None, "error": {"code": -32600, "message": "batch too large"}})
    assert refused.value.method == "batch of 3"


@pytest.mark.parametrize("reply", [None, "nope", {"result": []}, 42])
def test_a_reply_that_is_not_a_list_is_a_bad_response(reply):
    with pytest.raises(Busy, match="malformed reply from node") as bad:
        read(reply)
    assert bad.value.reason == "bad_response"


def test_a_missing_answer_is_a_bad_response():
    with pytest.raises(Busy, match="lacks the answer to getblockcount") as bad:
        read([{"id": 7, "result": "ab"}, {"id": 8, "result": {}}])
    assert bad.value.reason == "bad_response"


def test_an_answer_without_a_result():
    reply = [{"id": 7, "result": "ab"}, {"id": 8}, {"id": 9, "result": None}]
    assert read(reply) == ["ab", None, None]  # Bitcoin Core: a call that returns nothing
    with pytest.raises(Busy, match="the answer to getblock has no result"):
        read(reply, result_required=True)
    assert read([{"id": 7, "result": None}, {"id": 8, "result": 0}, {"id": 9, "result": []}], result_required=True) == [
        None,
        0,
        [],
    ]


def test_the_default_unavailable_class():
    with pytest.raises(ChainUnavailable) as bad:
        batch_results([], ids=IDS, calls=CALLS, what="b", endpoint="n", error_of=error_of)
    assert type(bad.value) is ChainUnavailable
