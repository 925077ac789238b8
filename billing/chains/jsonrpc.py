"""JSON-RPC batches, as the Bitcoin Core and Solana clients send and read them.

`batch_payload` numbers the calls of one batch; `batch_results` matches a
batch's reply to its calls by id (a node may answer in any order) and returns
their results in the order of the calls. Each client keeps its own transport
(pacing, retries, authentication) and its own reading of an error object
(`error_of`: a code meaning "try later" becomes the client's `unavailable`
class, any other an `RpcError`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from billing.chains.errors import ChainUnavailable

Call = tuple[str, list[Any]]


def batch_payload(ids: Sequence[int], calls: Sequence[Call], *, version: str) -> list[dict[str, Any]]:
    return [
        {"jsonrpc": version, "id": rid, "method": method, "params": params}
        for rid, (method, params) in zip(ids, calls, strict=True)
    ]


def batch_results(
    reply: Any,
    *,
    ids: Sequence[int],
    calls: Sequence[Call],
    what: str,
    endpoint: str,
    error_of: Callable[..., Exception],
    unavailable: type[ChainUnavailable] = ChainUnavailable,
    return_errors: bool = False,
    result_required: bool = False,
) -> list[Any]:
    """The results of a batch's `calls`, in their order, from the node's `reply`.

    A reply that is one error object (the node refused the whole batch) raises
    it. A reply that is not a list, or lacks an answer to one of the calls, is
    `unavailable` ("bad_response"), and so is an answer without a result when
    `result_required` (Solana's; without it a missing result reads as None, as
    Bitcoin Core's client always took it). A call the node refused raises its
    error, or with `return_errors` stands in the results as the error, so the
    caller can go on with the others; unavailability always raises.
    """
    if isinstance(reply, dict) and reply.get("error") is not None:
        raise error_of(reply["error"], method=what)
    if not isinstance(reply, list):
        raise unavailable(f"{what}: malformed reply from {endpoint}", reason="bad_response")
    by_id = {item.get("id"): item for item in reply if isinstance(item, dict)}
    results: list[Any] = []
    for rid, (method, _params) in zip(ids, calls, strict=True):
        item = by_id.get(rid)
        if item is None:
            raise unavailable(f"{what}: the reply lacks the answer to {method}", reason="bad_response")
        if item.get("error") is not None:
            error = error_of(item["error"], method=method)
            if isinstance(error, ChainUnavailable) or not return_errors:
                raise error
            results.append(error)
        elif result_required and "result" not in item:
            raise unavailable(f"{what}: the answer to {method} has no result", reason="bad_response")
        else:
            results.append(item.get("result"))
    return results
