"""The SSRF guard: where a webhook may be sent.

Targets are checked twice: when a URL is registered, and at every attempt,
where the name is resolved, every address is checked and the connection goes
to a checked address (never to a second lookup: webhooks.transport), while
the Host header and TLS (SNI and certificate checks) stay on the name.
A public address is only contacted on WEBHOOK_ALLOWED_PORTS (80 and 443), so
webhooks cannot be used to probe other services' ports.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import unicodedata
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
from django.conf import settings

from core.errors import DomainError

URL_MAX = 500  # WebhookEndpoint.url

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_NAT64_WELL_KNOWN = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")


@dataclass(frozen=True)
class WebhookTarget:
    """A checked URL: where to connect (the addresses) and what to ask for
    (scheme, name, port, path), kept apart so a second DNS answer never
    decides where a request goes."""

    scheme: str
    host: str  # ASCII (IDNA) name or literal address, without brackets
    port: int
    netloc: str  # the Host header: name[:port] as written, IPv6 in brackets
    path: str  # path and query
    addresses: tuple[IpAddress, ...]


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries to an IPv4 host, if any."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    if ip in _NAT64_WELL_KNOWN:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def _not_public(ip: IpAddress) -> str | None:
    """Why `ip` is not a public address (a word: loopback, private,
    link_local, multicast, reserved, unspecified, not_global), or None."""
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(ip)
        if embedded is not None and (reason := _not_public(embedded)):
            return reason
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_multicast:
        return "multicast"
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link_local"
    if ip.is_reserved:
        return "reserved"
    if ip.is_private or (ip.version == 6 and (ip.is_site_local or ip in _NAT64_LOCAL)):
        return "private"
    if not ip.is_global:  # e.g. the carrier-grade NAT range 100.64.0.0/10
        return "not_global"
    return None


def address_refusal(ip: IpAddress) -> str | None:
    """Why a request may not go to `ip` (a word: loopback, private,
    link_local, multicast, reserved, unspecified, not_global), or None.
    Unspecified and multicast addresses are never targets; the rest are
    allowed when WEBHOOK_ALLOW_PRIVATE_TARGETS is on (local runs, tests)."""
    reason = _not_public(ip)
    if reason is None or (settings.WEBHOOK_ALLOW_PRIVATE_TARGETS and reason not in ("unspecified", "multicast")):
        return None
    return reason


def _port_refusal(port: int) -> DomainError:
    allowed = sorted(settings.WEBHOOK_ALLOWED_PORTS)
    return DomainError(
        "target_not_allowed",
        f"Webhooks are sent to port {' or '.join(map(str, allowed))} only (this URL says {port}).",
        details={"port": port, "reason": "port", "allowed_ports": allowed},
    )


def _invisible(character: str) -> bool:
    """A character a URL must not carry: controls, format characters (the
    bidirectional overrides and isolates, zero-width joiners, the byte-order
    mark, the soft hyphen), separators and spaces of every kind, surrogates,
    private-use and unassigned code points. They hide or reorder what a URL
    shows to staff and customers; a real URL percent-encodes them."""
    return ord(character) < 0x21 or unicodedata.category(character) in _INVISIBLE_CATEGORIES


_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zs", "Zl", "Zp"})


def _invalid_url(message: str, reason: str) -> DomainError:
    return DomainError("invalid_url", message, details={"reason": reason})


# Name lookups run on threads of their own, so a lookup that hangs (a nameserver that
# never answers) costs the web request or the delivery WEBHOOK_RESOLVE_TIMEOUT_SECONDS,
# not the system resolver's own timeouts; the lookup runs on and its answer is dropped.
# Sixteen at once per process, and one per name: a second lookup of a name in flight
# waits for the first, so one slow domain asked for again and again holds one thread.
# How long a hung lookup holds its thread is the system resolver's to say: glibc's
# defaults are 5 s a try and 2 tries a nameserver, and deploy/env.example shortens
# them for every unit (RES_OPTIONS, resolv.conf(5)).
_LOOKUPS = ThreadPoolExecutor(max_workers=16, thread_name_prefix="webhook-dns")
_IN_FLIGHT: dict[tuple[str, int], Future[list[Any]]] = {}
# Reentrant: a lookup already done when its callback is added runs _forget at once, in this thread.
_IN_FLIGHT_LOCK = threading.RLock()


def _lookup(host: str, port: int) -> Future[list[Any]]:
    """The lookup of (host, port) in flight, or a new one."""
    key = (host, port)
    with _IN_FLIGHT_LOCK:
        lookup = _IN_FLIGHT.get(key)
        if lookup is None:
            lookup = _LOOKUPS.submit(socket.getaddrinfo, host, port, type=socket.SOCK_STREAM)
            _IN_FLIGHT[key] = lookup
            lookup.add_done_callback(lambda done: _forget(key, done))
    return lookup


def _forget(key: tuple[str, int], done: Future[list[Any]]) -> None:
    with _IN_FLIGHT_LOCK:
        if _IN_FLIGHT.get(key) is done:
            del _IN_FLIGHT[key]


def _resolve(host: str, port: int) -> tuple[IpAddress, ...]:
    try:
        return (ipaddress.ip_address(host),)
    except ValueError:
        pass
    lookup = _lookup(host, port)
    timeout = settings.WEBHOOK_RESOLVE_TIMEOUT_SECONDS
    try:
        infos = lookup.result(timeout=timeout)
    except TimeoutError:
        raise DomainError(
            "unresolvable_host",
            f"The name {host} did not resolve within {timeout:g} seconds.",
            details={"host": host, "reason": "timeout"},
        ) from None
    except (OSError, UnicodeError) as exc:
        raise DomainError("unresolvable_host", f"The name {host} does not resolve.", details={"host": host}) from exc
    addresses: list[IpAddress] = []
    for _family, _type, _proto, _canon, sockaddr in infos:
        ip = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
        if ip not in addresses:
            addresses.append(ip)
    if not addresses:
        raise DomainError("unresolvable_host", f"The name {host} does not resolve.", details={"host": host})
    return tuple(addresses)


def target_resolve(*, url: str) -> WebhookTarget:
    """Parse `url`, resolve its host and check every address it resolves to.
    DomainError `invalid_url`, `https_required`, `unresolvable_host` or
    `target_not_allowed` (details: address and reason)."""
    if not isinstance(url, str) or not url or len(url) > URL_MAX:
        raise _invalid_url(f"A webhook URL has 1 to {URL_MAX} characters.", "length")
    if any(_invisible(c) for c in url):
        raise _invalid_url("A webhook URL has no spaces, control or invisible characters.", "characters")
    try:
        parsed = httpx.URL(url)
        host = parsed.raw_host.decode("ascii")
    except (httpx.InvalidURL, UnicodeError, ValueError) as exc:
        raise _invalid_url("This is not a valid URL.", "syntax") from exc
    if parsed.scheme not in ("https", "http"):
        raise _invalid_url("A webhook URL starts with https://.", "scheme")
    if parsed.scheme != "https" and not settings.WEBHOOK_ALLOW_PRIVATE_TARGETS:
        raise DomainError("https_required", "Webhooks are delivered over HTTPS only.")
    if parsed.userinfo:
        raise _invalid_url("A webhook URL may not carry a user name or password.", "credentials")
    if not host:
        raise _invalid_url("A webhook URL names a host.", "host")
    port = parsed.port if parsed.port is not None else (443 if parsed.scheme == "https" else 80)
    if not 0 < port < 65536:
        raise _invalid_url("A port is a number from 1 to 65535.", "port")
    if port not in settings.WEBHOOK_ALLOWED_PORTS and not settings.WEBHOOK_ALLOW_PRIVATE_TARGETS:
        raise _port_refusal(port)  # before any lookup: a refused port costs no DNS query
    addresses = _resolve(host, port)
    for ip in addresses:
        reason = address_refusal(ip)
        if reason is not None:
            raise DomainError(
                "target_not_allowed",
                f"Webhooks are not sent to {reason.replace('_', '-')} addresses ({ip}).",
                details={"address": str(ip), "reason": reason},
            )
    # Local runs send to loopback and private receivers on any port; a public
    # address only ever gets the allowed ports (no port scans through webhooks).
    if port not in settings.WEBHOOK_ALLOWED_PORTS and any(_not_public(ip) is None for ip in addresses):
        raise _port_refusal(port)
    return WebhookTarget(
        scheme=parsed.scheme,
        host=host,
        port=port,
        netloc=parsed.netloc.decode("ascii"),
        path=parsed.raw_path.decode("ascii"),
        addresses=addresses,
    )
