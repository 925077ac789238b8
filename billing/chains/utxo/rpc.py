"""JSON-RPC client for Bitcoin Core and Litecoin Core.

Both nodes speak the same JSON-RPC dialect over HTTP with basic auth. The
client is configured with one URL, `http://user:pass@host:port` (credentials
percent-encoded when they hold reserved characters), and optionally a wallet
name, which selects the node's `/wallet/<name>` endpoint.

Two exceptions (billing.chains.errors, shared by every chain client) cover
every failure a caller must tell apart:

- `ChainUnavailable`: the node cannot answer usefully right now (down,
  unreachable, timing out, refusing our credentials, warming up, still in
  initial block download). The watcher backs off and reports itself blind.
- `RpcError`: the node answered and refused this call (bad parameters, unknown
  block, insufficient funds...), with the node's own code and message.

Amounts stay exact: JSON numbers are parsed as `Decimal`, never as float, and
`Decimal` parameters are sent as strings (the nodes accept amounts as strings).

The password never appears in a log line, an exception or a repr: the
credentials are split off the URL at construction and travel only in the
Authorization header.
"""

from __future__ import annotations

import itertools
import json
import logging
import time
from collections.abc import Iterable, Sequence
from decimal import Decimal
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import httpx

from billing.chains.errors import ChainUnavailable, RpcError
from billing.chains.jsonrpc import batch_payload, batch_results

__all__ = ["BitcoinRpc", "ChainUnavailable", "RpcError"]

log = logging.getLogger(__name__)

# Node error codes that mean "not now" rather than "no": the call would succeed
# once the node is up to date, so they are reported as unavailability.
RPC_CLIENT_NOT_CONNECTED = -9
RPC_CLIENT_IN_INITIAL_DOWNLOAD = -10
RPC_IN_WARMUP = -28
_UNAVAILABLE_CODES = frozenset({RPC_CLIENT_NOT_CONNECTED, RPC_CLIENT_IN_INITIAL_DOWNLOAD, RPC_IN_WARMUP})

# Read-only calls may be repeated after any transport failure. Any other call
# (sending, bumping, mining) is repeated only when the request provably never
# reached the node (the connection could not be made), so a retry can never
# pay twice.
_READ_ONLY_PREFIXES = ("get", "list", "decode", "estimate", "validate", "test", "help", "uptime")


def _json_default(value: Any) -> Any:
    if isinstance(value, Decimal):
        return str(value)
    raise TypeError(f"cannot send {type(value).__name__} as JSON")


def _is_read_only(method: str) -> bool:
    return method.startswith(_READ_ONLY_PREFIXES)


class BitcoinRpc:
    """A JSON-RPC connection to one node (and optionally one of its wallets).

    `call` makes one request; `batch` sends many calls in one HTTP request and
    returns their results in order. Instances hold a connection pool: reuse
    them, and `close()` (or use as a context manager) when done.
    """

    def __init__(
        self,
        url: str,
        *,
        wallet: str | None = None,
        timeout: float = 30.0,
        connect_timeout: float = 5.0,
        retries: int = 2,
        retry_backoff: float = 0.25,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            # The message names the shape, never the value: it may hold a password.
            raise ValueError("node RPC URL must look like http://user:pass@host:port")
        host = parts.hostname
        if ":" in host:
            host = f"[{host}]"
        netloc = f"{host}:{parts.port}" if parts.port else host
        self._endpoint = f"{parts.scheme}://{netloc}"
        self._auth = (
            httpx.BasicAuth(unquote(parts.username or ""), unquote(parts.password or ""))
            if parts.username or parts.password
            else None
        )
        self._url_with_auth = url
        self.wallet = wallet
        self._path = f"/wallet/{quote(wallet, safe='')}" if wallet is not None else "/"
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.retries = max(0, retries)
        self.retry_backoff = retry_backoff
        self._transport = transport
        self._ids = itertools.count(1)
        self._client = httpx.Client(
            base_url=self._endpoint,
            auth=self._auth,
            timeout=httpx.Timeout(timeout, connect=connect_timeout),
            headers={"Content-Type": "application/json"},
            transport=transport,
        )

    # --- plumbing ----------------------------------------------------------

    @property
    def endpoint(self) -> str:
        """Where the calls go, without credentials (safe to log and show)."""
        return f"{self._endpoint}{self._path if self.wallet is not None else ''}"

    def __repr__(self) -> str:
        return f"BitcoinRpc({self.endpoint!r})"

    def for_wallet(self, wallet: str) -> BitcoinRpc:
        """Another client for the same node, bound to one of its wallets."""
        return BitcoinRpc(
            self._url_with_auth,
            wallet=wallet,
            timeout=self.timeout,
            connect_timeout=self.connect_timeout,
            retries=self.retries,
            retry_backoff=self.retry_backoff,
            transport=self._transport,
        )

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> BitcoinRpc:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _post(self, payload: Any, *, read_only: bool, what: str) -> httpx.Response:
        body = json.dumps(payload, default=_json_default)
        attempt = 0
        while True:
            try:
                return self._client.post(self._path, content=body)
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
                # Never reached the node: safe to repeat whatever the call is.
                failure: Exception = exc
                reason = "unreachable"
            except (httpx.ReadTimeout, httpx.WriteTimeout) as exc:
                if not read_only:
                    raise ChainUnavailable(
                        f"{what}: no answer from {self.endpoint} within {self.timeout:g}s", reason="timeout"
                    ) from exc
                failure, reason = exc, "timeout"
            except httpx.TransportError as exc:
                if not read_only:
                    raise ChainUnavailable(
                        f"{what}: connection to {self.endpoint} failed ({exc.__class__.__name__})"
                    ) from exc
                failure, reason = exc, "unreachable"
            if attempt >= self.retries:
                raise ChainUnavailable(
                    f"{what}: node at {self.endpoint} unreachable ({failure.__class__.__name__})",
                    reason=reason,
                ) from failure
            time.sleep(self.retry_backoff * (2**attempt))
            attempt += 1

    def _decode(self, response: httpx.Response, *, what: str) -> Any:
        status = response.status_code
        if status in (401, 403):
            raise ChainUnavailable(
                f"{what}: node at {self.endpoint} refused the RPC credentials (HTTP {status})",
                reason="unauthorized",
            )
        try:
            # Exact amounts: every JSON number with a fraction becomes a Decimal.
            return json.loads(response.content, parse_float=Decimal)
        except ValueError:
            if status == 503:
                raise ChainUnavailable(f"{what}: node at {self.endpoint} is overloaded", reason="overloaded") from None
            raise ChainUnavailable(
                f"{what}: node at {self.endpoint} answered HTTP {status} without JSON", reason="bad_response"
            ) from None

    @staticmethod
    def _error(error: Any, *, method: str) -> Exception:
        if isinstance(error, dict):
            code = int(error.get("code", 0) or 0)
            message = str(error.get("message", ""))
        else:
            code, message = 0, str(error)
        if code in _UNAVAILABLE_CODES:
            reason = "warming_up" if code == RPC_IN_WARMUP else "syncing"
            return ChainUnavailable(f"{method}: {message} (code {code})", reason=reason)
        return RpcError(code, message, method=method)

    # --- calls ---------------------------------------------------------------

    def call(self, method: str, *params: Any) -> Any:
        """One call; its result, or `RpcError` / `ChainUnavailable`."""
        request_id = next(self._ids)
        started = time.perf_counter()
        response = self._post(
            {"jsonrpc": "1.0", "id": request_id, "method": method, "params": list(params)},
            read_only=_is_read_only(method),
            what=method,
        )
        reply = self._decode(response, what=method)
        log.debug("rpc %s %.1f ms", method, (time.perf_counter() - started) * 1000)
        if not isinstance(reply, dict):
            raise ChainUnavailable(f"{method}: malformed reply from {self.endpoint}", reason="bad_response")
        if reply.get("error") is not None:
            raise self._error(reply["error"], method=method)
        if response.status_code >= 400 and "result" not in reply:
            raise ChainUnavailable(f"{method}: HTTP {response.status_code}", reason="bad_response")
        return reply.get("result")

    def batch(self, calls: Iterable[tuple[str, Sequence[Any]]], *, return_errors: bool = False) -> list[Any]:
        """Many calls in one HTTP request; results in the order of `calls`.

        A call the node refused raises its `RpcError`, or, with
        `return_errors=True`, stands in the list as the `RpcError` instance
        so the caller can go on with the others (e.g. a mempool transaction
        that was mined between two requests). Unavailability always raises.
        """
        listed = [(method, list(params)) for method, params in calls]
        if not listed:
            return []
        ids = [next(self._ids) for _ in listed]  # one per call: unique within this client
        payload = batch_payload(ids, listed, version="1.0")
        what = f"batch of {len(listed)} ({listed[0][0]}...)"
        started = time.perf_counter()
        response = self._post(payload, read_only=all(_is_read_only(m) for m, _ in listed), what=what)
        reply = self._decode(response, what=what)
        log.debug("rpc %s %.1f ms", what, (time.perf_counter() - started) * 1000)
        return batch_results(
            reply,
            ids=ids,
            calls=listed,
            what=what,
            endpoint=self.endpoint,
            error_of=self._error,
            return_errors=return_errors,
        )
