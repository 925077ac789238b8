"""JSON-RPC over HTTP to an Ethereum execution client or provider, on web3.py's HTTPProvider.

The watcher reads raw JSON-RPC results (hex strings) through the provider and
decodes what it needs itself: web3's result formatters turn every field of
every transaction into Python objects, which costs more than the matching on
a block of a thousand transactions.

`call` makes one request; `batch` sends many in one HTTP request (JSON-RPC
batch) and returns the results in order, split into `batch_size` calls per
request. A provider that refuses batches, or caps their size, gets smaller
ones, down to single calls.

Failures come out as the two exceptions of `billing.chains.errors`:
`ChainUnavailable` (down, timeout, 401/403, 429, 5xx, not JSON) and `RpcError`
(the node's own error object). The URL is never logged or quoted: provider
URLs carry API keys in their path; `endpoint` is scheme, host and port only.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

import requests
from web3 import HTTPProvider, Web3
from web3.providers.rpc.utils import ExceptionRetryConfiguration
from web3.types import RPCEndpoint

from billing.chains.errors import ChainUnavailable, RpcError

log = logging.getLogger(__name__)

# JSON-RPC error codes (EIP-1474).
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
LIMIT_EXCEEDED = -32005

# Read-only methods: retried by the provider after a lost connection or a timeout.
_RETRIED = (
    "eth_chainId",
    "eth_syncing",
    "eth_blockNumber",
    "eth_getBlockByNumber",
    "eth_getBlockByHash",
    "eth_getTransactionReceipt",
    "eth_getLogs",
    "eth_getBalance",
    "eth_call",
    "eth_getCode",
    "trace_block",
    "debug_traceBlockByNumber",
    "web3_clientVersion",
)


def endpoint_of(url: str) -> str:
    """scheme://host:port of an RPC URL, without credentials, path or query (they may hold keys)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("an Ethereum RPC URL looks like https://host[:port]/[path]")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{parts.scheme}://{host}:{parts.port}" if parts.port else f"{parts.scheme}://{host}"


class EthRpc:
    """One node or provider endpoint. Use as a context manager, or `close()`."""

    def __init__(
        self, url: str, *, timeout: float = 30.0, batch_size: int = 100, retries: int = 2, backoff: float = 0.25
    ) -> None:
        self.endpoint = endpoint_of(url)
        self.batch_size = max(1, batch_size)
        self._session = requests.Session()
        self.provider = HTTPProvider(
            url,
            request_kwargs={"timeout": timeout},
            session=self._session,
            exception_retry_configuration=ExceptionRetryConfiguration(
                errors=(requests.ConnectionError, requests.Timeout),
                retries=max(1, retries + 1),
                backoff_factor=backoff,
                method_allowlist=_RETRIED,
            ),
        )
        self.web3 = Web3(self.provider)
        self.requests = 0  # HTTP requests made (for the benchmark and logs)
        self.calls = 0  # JSON-RPC calls made
        self.seconds = 0.0  # spent waiting for the node and decoding its JSON

    def __enter__(self) -> EthRpc:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._session.close()

    def __repr__(self) -> str:
        return f"EthRpc({self.endpoint})"

    # --- transport -------------------------------------------------------------

    def _unavailable(self, exc: Exception, method: str) -> ChainUnavailable:
        if isinstance(exc, requests.Timeout):
            return ChainUnavailable(f"{self.endpoint} timed out on {method}", reason="timeout")
        if isinstance(exc, requests.ConnectionError):
            return ChainUnavailable(f"{self.endpoint} is unreachable", reason="unreachable")
        if isinstance(exc, requests.HTTPError) and exc.response is not None:
            status = exc.response.status_code
            if status in (401, 403):
                return ChainUnavailable(
                    f"{self.endpoint} refused our credentials (HTTP {status})", reason="unauthorized"
                )
            if status == 429:
                return ChainUnavailable(f"{self.endpoint} is rate limiting us (HTTP 429)", reason="overloaded")
            return ChainUnavailable(f"{self.endpoint} answered HTTP {status} to {method}", reason="bad_response")
        if isinstance(exc, ValueError):  # not JSON
            return ChainUnavailable(f"{self.endpoint} answered {method} with something not JSON", reason="bad_response")
        return ChainUnavailable(f"{self.endpoint}: {exc.__class__.__name__} on {method}", reason="unreachable")

    @staticmethod
    def _result(response: Any, method: str) -> Any:
        if not isinstance(response, dict):
            raise ChainUnavailable(f"malformed answer to {method}", reason="bad_response")
        error = response.get("error")
        if error is not None:
            if isinstance(error, dict):
                raise RpcError(
                    int(error.get("code", 0) or 0), str(error.get("message", "")), method=method, data=error.get("data")
                )
            raise RpcError(0, str(error), method=method)
        if "result" not in response:
            raise ChainUnavailable(f"answer to {method} has no result", reason="bad_response")
        return response["result"]

    def call(self, method: str, *params: Any) -> Any:
        """One call; the node's result, or RpcError / ChainUnavailable."""
        self.requests += 1
        self.calls += 1
        started = time.perf_counter()
        try:
            response = self.provider.make_request(method, list(params))
        except (requests.RequestException, ValueError) as exc:
            raise self._unavailable(exc, method) from None
        finally:
            self.seconds += time.perf_counter() - started
        return self._result(response, method)

    def batch(self, calls: Sequence[tuple[str, Sequence[Any]]], *, return_errors: bool = False) -> list[Any]:
        """Many calls, `batch_size` per HTTP request; results in the order of `calls`.

        With `return_errors`, a call the node refused yields its RpcError in
        place of a result instead of raising.
        """
        results: list[Any] = []
        start = 0
        while start < len(calls):
            chunk = calls[start : start + self.batch_size]
            if len(chunk) == 1:
                method, params = chunk[0]
                try:
                    results.append(self.call(method, *params))
                except RpcError as exc:
                    if not return_errors:
                        raise
                    results.append(exc)
                start += 1
                continue
            responses = self._batch_send(chunk)
            if responses is None:  # refused as a batch: smaller ones
                self.batch_size = max(1, len(chunk) // 2)
                log.info(
                    "%s refused a batch of %d calls; sending %d at a time", self.endpoint, len(chunk), self.batch_size
                )
                continue
            for (method, _params), response in zip(chunk, responses, strict=True):
                try:
                    results.append(self._result(response, method))
                except RpcError as exc:
                    if not return_errors:
                        raise
                    results.append(exc)
            start += len(chunk)
        return results

    def _batch_send(self, chunk: Sequence[tuple[str, Sequence[Any]]]) -> list[Any] | None:
        """One batch request; None when the endpoint refuses it as a whole."""
        self.requests += 1
        self.calls += len(chunk)
        method = chunk[0][0]
        started = time.perf_counter()
        try:
            return self._batch_post(chunk, method)
        finally:
            self.seconds += time.perf_counter() - started

    def _batch_post(self, chunk: Sequence[tuple[str, Sequence[Any]]], method: str) -> list[Any] | None:
        try:
            responses = self.provider.make_batch_request([(RPCEndpoint(m), list(p)) for m, p in chunk])
        except requests.ConnectionError:
            # Batches are reads only: one more try after a dropped connection.
            try:
                responses = self.provider.make_batch_request([(RPCEndpoint(m), list(p)) for m, p in chunk])
            except (requests.RequestException, ValueError) as exc:
                raise self._unavailable(exc, method) from None
        except requests.HTTPError as exc:
            status = exc.response.status_code if exc.response is not None else 0
            if status in (400, 413):
                return None  # batch too large or batches not accepted
            raise self._unavailable(exc, method) from None
        except (requests.RequestException, ValueError) as exc:
            raise self._unavailable(exc, method) from None
        if not isinstance(responses, list) or len(responses) != len(chunk):
            return None
        return responses
