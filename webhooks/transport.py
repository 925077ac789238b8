"""One HTTP POST of a delivery: to an address the SSRF guard checked (never
to a second DNS answer), TLS on the name, no redirect followed, no response
body read, and one deadline for the whole attempt so a slow or trickling
receiver cannot hold a worker past WEBHOOK_TIMEOUT_SECONDS.

A failed attempt is told to the customer as a category (webhooks.failures) and a fixed
sentence, never as the network library's own error text: that text ("[Errno
111] Connection refused", "Connection reset by peer", a TLS alert) said what
listens on a port, and made webhooks a port scanner. The raw error goes to the
log for operators."""

from __future__ import annotations

import ssl
import time
from dataclasses import dataclass
from typing import Any

import certifi
import httpcore

from core.errors import DomainError
from webhooks.failures import Failure
from webhooks.targets import IpAddress, target_resolve

ERROR_MAX = 300  # WebhookAttempt.error
# Whatever spoke on the port (another protocol's banner, nothing before closing): one sentence.
PROTOCOL_ERROR_SENTENCE = "No valid HTTP answer (the receiver closed the connection or spoke another protocol)."


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


class _AddressesFailed(httpcore.ConnectError):
    """No checked address took the connection. It keeps each address's error:
    httpcore's pool re-raises what the backend raised `from None`, which drops
    a chained cause."""

    def __init__(self, failures: list[httpcore.ConnectError], addresses: tuple[IpAddress, ...]) -> None:
        super().__init__("; ".join(f"{a}: {f}" for a, f in zip(addresses, failures, strict=True)) or "no address")
        self.failures = failures


class _PinnedBackend(httpcore.NetworkBackend):
    """Connects to the checked addresses, whatever host name httpcore asks
    for (the name still goes into the Host header and the TLS handshake)."""

    def __init__(self, addresses: tuple[IpAddress, ...], deadline: float) -> None:
        self._addresses = addresses
        self._deadline = deadline
        self._backend = httpcore.SyncBackend()

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        failures: list[httpcore.ConnectError] = []
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
                failures.append(exc)
                continue
            return _DeadlineStream(stream, self._deadline)
        raise _AddressesFailed(failures, self._addresses)

    def connect_unix_socket(self, path, timeout=None, socket_options=None):
        raise httpcore.ConnectError("Webhooks are not sent to local sockets.")


def tls_context() -> ssl.SSLContext:
    return ssl.create_default_context(cafile=certifi.where())


@dataclass(frozen=True)
class PostResult:
    status_code: int | None
    error: str  # what the customer reads: a fixed sentence of the category (empty on success)
    category: str = ""  # a Failure (empty on success)
    detail: str = ""  # the raw error, for the log only

    @property
    def ok(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


def _causes(exc: BaseException) -> list[BaseException]:
    """`exc` and what lies under it: its cause or context, and (when no address
    took the connection) each address's error."""
    found: list[BaseException] = []
    pending: list[BaseException] = [exc]
    while pending:
        current = pending.pop()
        if any(current is seen for seen in found):
            continue
        found.append(current)
        pending.extend(getattr(current, "failures", ()))
        if (under := current.__cause__ or current.__context__) is not None:
            pending.append(under)
    return found


def _refused(exc: BaseException) -> bool:
    """Every address refused the connection (a port with nothing listening)."""
    if isinstance(exc, _AddressesFailed):
        return bool(exc.failures) and all(_refused(f) for f in exc.failures)
    return any(isinstance(e, ConnectionRefusedError) for e in _causes(exc))


def _failure(exc: Exception, timeout: float) -> PostResult:
    """The category and the customer's sentence for a network error."""
    detail = f"{type(exc).__name__}: {exc}"[:ERROR_MAX]
    causes = _causes(exc)
    if isinstance(exc, httpcore.TimeoutException) or any(isinstance(e, TimeoutError) for e in causes):
        return PostResult(None, f"Timed out after {timeout:g} s.", Failure.TIMEOUT, detail)
    if any(isinstance(e, ssl.SSLCertVerificationError) for e in causes):
        message = (
            "TLS failed: the receiver's certificate was not accepted "
            "(expired, for another name, or not signed by a trusted authority)."
        )
        return PostResult(None, message, Failure.TLS_ERROR, detail)
    if any(isinstance(e, ssl.SSLError) for e in causes):
        return PostResult(None, "TLS failed: the handshake did not complete.", Failure.TLS_ERROR, detail)
    if isinstance(exc, httpcore.ConnectError):
        if _refused(exc):
            return PostResult(None, "The connection was refused.", Failure.CONNECTION_REFUSED, detail)
        return PostResult(None, "Could not connect.", Failure.CONNECTION_FAILED, detail)
    # Connected, then no HTTP answer: closed, reset, or another protocol's bytes
    # (an SSH or Redis banner). One sentence for all, so it says nothing of what listens.
    return PostResult(None, PROTOCOL_ERROR_SENTENCE, Failure.PROTOCOL_ERROR, detail)


def post(*, url: str, headers: dict[str, str], body: bytes, timeout: float) -> PostResult:
    """POST `body` to `url` once: resolve and check the target, connect to a
    checked address, follow no redirect, read no response body."""
    deadline = clock() + timeout
    try:
        target = target_resolve(url=url)
    except DomainError as exc:
        category = Failure.DNS if exc.code == "unresolvable_host" else Failure.TARGET_NOT_ALLOWED
        return PostResult(None, exc.message, category, exc.code)
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
    except (
        httpcore.TimeoutException,
        httpcore.NetworkError,
        httpcore.ProtocolError,
        httpcore.UnsupportedProtocol,
    ) as exc:
        return _failure(exc, timeout)
    if 300 <= status < 400:
        return PostResult(status, f"The receiver answered {status}: redirects are not followed.", Failure.REDIRECT)
    if not 200 <= status < 300:
        return PostResult(status, f"The receiver answered {status}.", Failure.HTTP_STATUS)
    return PostResult(status, "")
