"""One HTTP POST of a delivery: to an address the SSRF guard checked (never
to a second DNS answer), TLS on the name, no redirect followed, no response
body read, and one deadline for the whole attempt so a slow or trickling
receiver cannot hold a worker past WEBHOOK_TIMEOUT_SECONDS."""

from __future__ import annotations

import ssl
import time
from dataclasses import dataclass
from typing import Any

import certifi
import httpcore

from core.errors import DomainError
from webhooks.targets import IpAddress, target_resolve

ERROR_MAX = 300  # WebhookAttempt.error


def clock() -> float:
    """The clock attempt deadlines are kept on (monotonic seconds)."""
    return time.monotonic()


class _DeadlineStream(httpcore.NetworkStream):
    """A connection whose every read, write and TLS handshake ends by one
    deadline, so a slow receiver cannot hold a worker past the timeout."""

    def __init__(self, stream: httpcore.NetworkStream, deadline: float) -> None:
        self._stream = stream
        self._deadline = deadline

    def _left(self, timeout: float | None, error: type[Exception]) -> float:
        left = self._deadline - clock()
        if left <= 0:
            raise error("timed out")
        return left if timeout is None else min(timeout, left)

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, self._left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, self._left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        stream = self._stream.start_tls(ssl_context, server_hostname, self._left(timeout, httpcore.ConnectTimeout))
        return _DeadlineStream(stream, self._deadline)

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _PinnedBackend(httpcore.NetworkBackend):
    """Connects to the checked addresses, whatever host name httpcore asks
    for (the name still goes into the Host header and the TLS handshake)."""

    def __init__(self, addresses: tuple[IpAddress, ...], deadline: float) -> None:
        self._addresses = addresses
        self._deadline = deadline
        self._backend = httpcore.SyncBackend()

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        failures = []
        for address in self._addresses:
            left = self._deadline - clock()
            if left <= 0:
                raise httpcore.ConnectTimeout("timed out")
            try:
                stream = self._backend.connect_tcp(
                    str(address),
                    port,
                    timeout=left if timeout is None else min(timeout, left),
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except httpcore.ConnectError as exc:
                failures.append(f"{address}: {exc}")
                continue
            return _DeadlineStream(stream, self._deadline)
        raise httpcore.ConnectError("; ".join(failures) or "no address")

    def connect_unix_socket(self, path, timeout=None, socket_options=None):
        raise httpcore.ConnectError("Webhooks are not sent to local sockets.")


def tls_context() -> ssl.SSLContext:
    return ssl.create_default_context(cafile=certifi.where())


@dataclass(frozen=True)
class PostResult:
    status_code: int | None
    error: str

    @property
    def ok(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


def post(*, url: str, headers: dict[str, str], body: bytes, timeout: float) -> PostResult:
    """POST `body` to `url` once: resolve and check the target, connect to a
    checked address, follow no redirect, read no response body."""
    deadline = clock() + timeout
    try:
        target = target_resolve(url=url)
    except DomainError as exc:
        return PostResult(None, exc.message)
    request_url = httpcore.URL(
        scheme=target.scheme.encode(), host=target.host.encode(), port=target.port, target=target.path.encode()
    )
    request_headers = [(b"Host", target.netloc.encode())] + [(k.encode(), v.encode()) for k, v in headers.items()]
    extensions = {"timeout": {"connect": timeout, "read": timeout, "write": timeout, "pool": timeout}}
    try:
        with httpcore.ConnectionPool(
            ssl_context=tls_context(),
            max_connections=1,
            network_backend=_PinnedBackend(target.addresses, deadline),
        ) as pool:
            with pool.stream("POST", request_url, headers=request_headers, content=body, extensions=extensions) as rsp:
                status = rsp.status
    except httpcore.TimeoutException:
        return PostResult(None, f"Timed out after {timeout:g} s.")
    except httpcore.ConnectError as exc:
        return PostResult(None, f"Could not connect: {exc}"[:ERROR_MAX])
    except (httpcore.NetworkError, httpcore.ProtocolError, httpcore.UnsupportedProtocol) as exc:
        return PostResult(None, f"{type(exc).__name__}: {exc}"[:ERROR_MAX])
    if 300 <= status < 400:
        return PostResult(status, "Redirects are not followed.")
    return PostResult(status, "")
