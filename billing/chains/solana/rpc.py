"""JSON-RPC client for a Solana node or RPC provider.

One URL (`SOL_RPC_URL`): a validator's RPC port or a provider's endpoint.
Providers put their API key in the path or the query string, so neither ever
appears in a log line, an exception or a repr: `endpoint` is scheme, host and
port only. Basic-auth credentials in the URL travel in the Authorization header.

What a watcher needs from the transport, and what this client does:

- Batches. `batch` sends many calls as JSON-RPC batch requests, at most
  `batch_size` calls per HTTP request (providers cap batch sizes), and returns
  the results in order.
- Rate limits. A provider answering HTTP 429 (or a JSON-RPC error 429 /
  -32429) is waited out: the `Retry-After` header when it sends one, else an
  exponential back-off, up to `rate_limit_retries` times, then
  `SolanaUnavailable(reason="rate_limited")`. With `max_calls_per_second` the
  client paces itself so it never asks faster than the plan allows (providers
  count every call of a batch).
- Failures a caller must tell apart: `SolanaUnavailable` (the node cannot answer
  usefully now: unreachable, timing out, refusing our credentials, rate
  limiting, unhealthy or behind, without transaction history) and
  `SolanaRpcError` (the node answered and refused this one call, with its code).

Every call a watcher makes is a read, so any transport failure is retried.
Numbers stay exact: JSON numbers with a fraction are parsed as `Decimal`.
"""

from __future__ import annotations

import itertools
import json
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any
from urllib.parse import unquote, urlsplit

import httpx

from billing.chains.errors import ChainUnavailable, RpcError
from billing.chains.jsonrpc import batch_payload, batch_results

log = logging.getLogger(__name__)

# JSON-RPC error codes of the Solana RPC that mean "not now" rather than "no".
NODE_UNHEALTHY = -32005  # "Node is unhealthy" / "Node is behind by N slots"
MIN_CONTEXT_SLOT_NOT_REACHED = -32016
TRANSACTION_HISTORY_NOT_AVAILABLE = -32011  # the node keeps no transaction history
INTERNAL_ERROR = -32603
UNSUPPORTED_TRANSACTION_VERSION = -32015
RATE_LIMITED_CODES = frozenset({429, -32429})
_UNAVAILABLE = {
    NODE_UNHEALTHY: "unhealthy",
    MIN_CONTEXT_SLOT_NOT_REACHED: "behind",
    TRANSACTION_HISTORY_NOT_AVAILABLE: "no_history",
    INTERNAL_ERROR: "node_error",
}


class SolanaUnavailable(ChainUnavailable):
    """The node cannot answer usefully right now; try again later."""

    def __init__(self, message: str, *, reason: str = "unreachable") -> None:
        super().__init__(message, reason=reason)
        # A stable word for health reports: unreachable, timeout, unauthorized,
        # rate_limited, batch_too_large, overloaded, bad_response, unhealthy,
        # behind, no_history, node_error, wrong_cluster.
        self.reason = reason


class SolanaRpcError(RpcError):
    """The node answered and refused the call."""


@dataclass
class RpcStats:
    """What a client sent: HTTP requests, JSON-RPC calls (each call of a batch
    counts, as providers count them), 429 answers and seconds spent waiting
    (pacing and back-off)."""

    http_requests: int = 0
    calls: int = 0
    rate_limited: int = 0
    waited_seconds: float = 0.0


def _endpoint(url: str) -> tuple[str, httpx.BasicAuth | None]:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        # The message names the shape, never the value: it may hold an API key.
        raise ValueError("SOL_RPC_URL must look like https://host[:port]/[path][?query]")
    host = parts.hostname
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    auth = (
        httpx.BasicAuth(unquote(parts.username or ""), unquote(parts.password or ""))
        if parts.username or parts.password
        else None
    )
    return f"{parts.scheme}://{netloc}", auth


def _request_url(url: str) -> str:
    """The URL to post to: the configured one without its userinfo."""
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)[-1]
    return parts._replace(netloc=netloc).geturl()


class SolanaRpc:
    """A JSON-RPC connection to one Solana endpoint.

    `call` makes one call; `batch` many, in as few HTTP requests as
    `batch_size` allows. Instances hold a connection pool: reuse them and
    `close()` them (or use them as a context manager). `sleep` and `monotonic`
    stand in for the clock in tests.
    """

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 30.0,
        connect_timeout: float = 5.0,
        batch_size: int = 100,
        max_calls_per_second: float = 0.0,
        rate_limit_retries: int = 6,
        backoff: float = 0.5,
        backoff_max: float = 30.0,
        transport_retries: int = 2,
        sleep: Callable[[float], object] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._endpoint, auth = _endpoint(url)
        self._url = _request_url(url)
        self.timeout = timeout
        self.batch_size = max(1, int(batch_size))
        self.max_calls_per_second = max(0.0, float(max_calls_per_second))
        self.rate_limit_retries = max(0, int(rate_limit_retries))
        self.backoff = max(0.0, float(backoff))
        self.backoff_max = max(self.backoff, float(backoff_max))
        self.transport_retries = max(0, int(transport_retries))
        self._sleep = sleep
        self._monotonic = monotonic
        self._next_send_at = 0.0
        self._ids = itertools.count(1)
        self.stats = RpcStats()
        # Called before every HTTP request: a long scan renews its lease through it.
        self.on_request: Callable[[], object] | None = None
        self._client = httpx.Client(
            auth=auth,
            timeout=httpx.Timeout(timeout, connect=connect_timeout),
            headers={"Content-Type": "application/json"},
            transport=transport,
        )

    # --- plumbing ------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        """Scheme, host and port: safe to log and show (no path, query or key)."""
        return self._endpoint

    def __repr__(self) -> str:
        return f"SolanaRpc({self.endpoint!r})"

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> SolanaRpc:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _wait(self, seconds: float) -> None:
        if seconds > 0:
            self.stats.waited_seconds += seconds
            self._sleep(seconds)

    def _pace(self, calls: int) -> None:
        """Keep under `max_calls_per_second`: each request waits until the
        calls before it have had their share of time."""
        if not self.max_calls_per_second:
            return
        now = self._monotonic()
        if self._next_send_at > now:
            self._wait(self._next_send_at - now)
            now = self._next_send_at
        self._next_send_at = max(now, self._next_send_at) + calls / self.max_calls_per_second

    def _retry_after(self, response: httpx.Response, attempt: int) -> float:
        header = response.headers.get("Retry-After", "").strip()
        try:
            seconds = float(header)
        except ValueError:
            seconds = -1.0
        if seconds < 0:
            seconds = self.backoff * (2**attempt)
        return min(seconds, self.backoff_max)

    def _post(self, payload: Any, *, calls: int, what: str) -> Any:
        """Send one HTTP request; the decoded JSON answer. Waits out 429s and
        retries transport failures (every Solana call a watcher makes is a read)."""
        body = json.dumps(payload)
        limited = failures = 0
        while True:
            self._pace(calls)
            if self.on_request is not None:
                self.on_request()
            self.stats.http_requests += 1
            self.stats.calls += calls
            try:
                response = self._client.post(self._url, content=body)
            except httpx.TimeoutException as exc:
                failure: Exception = exc
                reason = "timeout"
            except httpx.TransportError as exc:
                failure, reason = exc, "unreachable"
            else:
                reply = self._decode(response, what=what)
                if not self._rate_limited(response, reply):
                    return reply
                self.stats.rate_limited += 1
                if limited >= self.rate_limit_retries:
                    raise SolanaUnavailable(
                        f"{what}: {self.endpoint} is still rate limiting after {limited + 1} attempts; "
                        "lower SOL_RPC_MAX_RPS or raise the provider plan",
                        reason="rate_limited",
                    )
                delay = self._retry_after(response, limited)
                log.warning("%s: %s answered 429, waiting %.2fs", what, self.endpoint, delay)
                self._wait(delay)
                limited += 1
                continue
            if failures >= self.transport_retries:
                detail = "no answer within" if reason == "timeout" else "unreachable"
                raise SolanaUnavailable(
                    f"{what}: {self.endpoint} {detail}"
                    + (f" {self.timeout:g}s" if reason == "timeout" else f" ({failure.__class__.__name__})"),
                    reason=reason,
                ) from failure
            self._wait(self.backoff * (2**failures))
            failures += 1

    @staticmethod
    def _rate_limited(response: httpx.Response, reply: Any) -> bool:
        if response.status_code == 429:
            return True
        # Some providers answer 200 with a rate-limit error, for the request or
        # for some calls of a batch: the whole request is asked again.
        items = reply if isinstance(reply, list) else [reply]
        return any(
            isinstance(item, dict)
            and isinstance(item.get("error"), dict)
            and item["error"].get("code") in RATE_LIMITED_CODES
            for item in items
        )

    def _decode(self, response: httpx.Response, *, what: str) -> Any:
        status = response.status_code
        if status in (401, 403):
            raise SolanaUnavailable(
                f"{what}: {self.endpoint} refused our credentials (HTTP {status}); check SOL_RPC_URL",
                reason="unauthorized",
            )
        if status == 413:
            raise SolanaUnavailable(
                f"{what}: {self.endpoint} refused a request this large (HTTP 413); lower SOL_RPC_BATCH_SIZE",
                reason="batch_too_large",
            )
        try:
            return json.loads(response.content, parse_float=Decimal)
        except ValueError:
            if status == 429:
                return None
            if status in (502, 503, 504):
                raise SolanaUnavailable(
                    f"{what}: {self.endpoint} is overloaded (HTTP {status})", reason="overloaded"
                ) from None
            raise SolanaUnavailable(
                f"{what}: {self.endpoint} answered HTTP {status} without JSON", reason="bad_response"
            ) from None

    @staticmethod
    def _error(error: Any, *, method: str) -> Exception:
        if isinstance(error, dict):
            try:
                code = int(error.get("code", 0) or 0)
            except (TypeError, ValueError):
                code = 0
            message = str(error.get("message", ""))
            data = error.get("data")
        else:
            code, message, data = 0, str(error), None
        reason = _UNAVAILABLE.get(code)
        if reason is not None:
            return SolanaUnavailable(f"{method}: {message} (code {code})", reason=reason)
        return SolanaRpcError(code, message, method=method, data=data)

    # --- calls -----------------------------------------------------------------

    def call(self, method: str, *params: Any) -> Any:
        """One call; its result, or `SolanaRpcError` / `SolanaUnavailable`."""
        started = time.perf_counter()
        payload = {"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": list(params)}
        reply = self._post(payload, calls=1, what=method)
        log.debug("rpc %s %.1f ms", method, (time.perf_counter() - started) * 1000)
        if not isinstance(reply, dict):
            raise SolanaUnavailable(f"{method}: malformed reply from {self.endpoint}", reason="bad_response")
        if reply.get("error") is not None:
            raise self._error(reply["error"], method=method)
        if "result" not in reply:
            raise SolanaUnavailable(f"{method}: reply from {self.endpoint} has no result", reason="bad_response")
        return reply["result"]

    def batch(self, calls: Iterable[tuple[str, Sequence[Any]]], *, return_errors: bool = False) -> list[Any]:
        """Many calls, `batch_size` per HTTP request; results in the order of `calls`.

        A call the node refused raises its `SolanaRpcError`, or, with
        `return_errors=True`, stands in the list as that exception so the
        caller can go on with the others. Unavailability always raises.
        """
        listed = [(method, list(params)) for method, params in calls]
        results: list[Any] = []
        for start in range(0, len(listed), self.batch_size):
            results.extend(self._batch_once(listed[start : start + self.batch_size], return_errors=return_errors))
        return results

    def _batch_once(self, calls: list[tuple[str, list[Any]]], *, return_errors: bool) -> list[Any]:
        ids = [next(self._ids) for _ in calls]
        payload = batch_payload(ids, calls, version="2.0")
        what = f"batch of {len(calls)} ({calls[0][0]}...)"
        started = time.perf_counter()
        reply = self._post(payload, calls=len(calls), what=what)
        log.debug("rpc %s %.1f ms", what, (time.perf_counter() - started) * 1000)
        return batch_results(
            reply,
            ids=ids,
            calls=calls,
            what=what,
            endpoint=self.endpoint,
            error_of=self._error,
            unavailable=SolanaUnavailable,
            return_errors=return_errors,
            result_required=True,
        )
