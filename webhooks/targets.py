"""The SSRF guard: where a webhook may be sent.

Targets are checked twice: when a URL is registered, and at every attempt,
where the name is resolved, every address is checked and the connection goes
to a checked address (never to a second lookup: webhooks.transport), while
the Host header and TLS (SNI and certificate checks) stay on the name.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass

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


def address_refusal(ip: IpAddress) -> str | None:
    """Why a request may not go to `ip` (a word: loopback, private,
    link_local, multicast, reserved, unspecified, not_global), or None.
    Unspecified and multicast addresses are never targets; the rest are
    allowed when WEBHOOK_ALLOW_PRIVATE_TARGETS is on (local runs, tests)."""
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(ip)
        if embedded is not None and (reason := address_refusal(embedded)):
            return reason
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_multicast:
        return "multicast"
    if settings.WEBHOOK_ALLOW_PRIVATE_TARGETS:
        return None
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


def _invalid_url(message: str, reason: str) -> DomainError:
    return DomainError("invalid_url", message, details={"reason": reason})


def _resolve(host: str, port: int) -> tuple[IpAddress, ...]:
    try:
        return (ipaddress.ip_address(host),)
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
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
    if url != url.strip() or any(ord(c) < 0x21 or ord(c) == 0x7F for c in url):
        raise _invalid_url("A webhook URL has no spaces or control characters.", "characters")
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
    addresses = _resolve(host, port)
    for ip in addresses:
        reason = address_refusal(ip)
        if reason is not None:
            raise DomainError(
                "target_not_allowed",
                f"Webhooks are not sent to {reason.replace('_', '-')} addresses ({ip}).",
                details={"address": str(ip), "reason": reason},
            )
    return WebhookTarget(
        scheme=parsed.scheme,
        host=host,
        port=port,
        netloc=parsed.netloc.decode("ascii"),
        path=parsed.raw_path.decode("ascii"),
        addresses=addresses,
    )
