"""Shared pieces of the webhook tests (no tests here): a real HTTP(S) receiver
on 127.0.0.1 that checks signatures the way the README tells customers to
and can be told to fail, a resolver with made-up names, and a throwaway CA.
Test modules import the fixtures they use from here."""

from __future__ import annotations

import hashlib
import hmac
import socket
import ssl
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

# =============================================================================
# What a receiver does (the README's snippet, line for line)
# =============================================================================


def signature_verify(secret: str, signature_header: str, body: bytes, tolerance: int = 300) -> bool:
    parts: dict[str, list[str]] = {}
    for item in signature_header.split(","):
        key, _, value = item.strip().partition("=")
        parts.setdefault(key, []).append(value)
    try:
        timestamp = int(parts["t"][0])
    except (KeyError, ValueError):
        return False
    if abs(time.time() - timestamp) > tolerance:
        return False  # an old (replayed) or far-future message
    expected = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return any(hmac.compare_digest(expected, candidate) for candidate in parts.get("v1", []))


# =============================================================================
# The receiver
# =============================================================================


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    verified: bool | None  # None: the receiver had no secret to check with


@dataclass
class Receiver:
    """Answers `status` (200) to every POST, except the next `fail_times`
    ones, which get `fail_status`. `delay` seconds before answering."""

    server: ThreadingHTTPServer = field(repr=False)
    scheme: str = "http"
    host: str = "127.0.0.1"
    secret: str | None = None
    status: int = 200
    fail_times: int = 0
    fail_status: int = 500
    delay: float = 0.0
    location: str | None = None
    requests: list[Received] = field(default_factory=list)
    server_names: list[str | None] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}/hooks/grh?source=test"

    @property
    def posts(self) -> list[Received]:
        return [r for r in self.requests if r.method == "POST"]

    def _answer(self) -> int:
        with self.lock:
            if self.fail_times > 0:
                self.fail_times -= 1
                return self.fail_status
            return self.status


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _record(self, method: str) -> Receiver:
        receiver: Receiver = self.server.receiver  # type: ignore[attr-defined]
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = dict(self.headers.items())
        verified = None
        if receiver.secret is not None:
            verified = signature_verify(receiver.secret, self.headers.get("GRH-Signature", ""), body)
        with receiver.lock:
            receiver.requests.append(Received(method, self.path, headers, body, verified))
        return receiver

    def do_POST(self):
        receiver = self._record("POST")
        status = receiver._answer()
        if receiver.delay:
            time.sleep(receiver.delay)
        self.send_response(status)
        if receiver.location and 300 <= status < 400:
            self.send_header("Location", receiver.location)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", "6")
        self.end_headers()
        self.wfile.write(b"thanks")

    def do_GET(self):
        self._record("GET")
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format, *args):
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # a client that gave up (timeout tests) is expected


def receiver_start(tls: ssl.SSLContext | None = None, host: str = "127.0.0.1") -> Receiver:
    server = _Server(("127.0.0.1", 0), _Handler)
    receiver = Receiver(server=server, scheme="https" if tls else "http", host=host)
    if tls is not None:
        tls.sni_callback = lambda _sock, name, _ctx: receiver.server_names.append(name)
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    server.receiver = receiver  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return receiver


def receiver_stop(receiver: Receiver) -> None:
    receiver.server.shutdown()
    receiver.server.server_close()


@pytest.fixture
def receiver():
    started = receiver_start()
    yield started
    receiver_stop(started)


@pytest.fixture
def allow_private(settings):
    """Local-run mode: http:// and loopback targets allowed (the receiver is on 127.0.0.1)."""
    settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = True
    return settings


# =============================================================================
# Names that resolve where a test says
# =============================================================================


class Dns:
    def __init__(self) -> None:
        self.answers: dict[str, list[list[str]]] = {}
        self.lookups: Counter[str] = Counter()

    def set(self, name: str, *addresses: str) -> None:
        self.answers[name] = [list(addresses)]

    def set_sequence(self, name: str, *answers: list[str]) -> None:
        """One answer per lookup, in order; the last one is kept for every later lookup."""
        self.answers[name] = [list(a) for a in answers]

    def answer(self, name: str) -> list[str]:
        self.lookups[name] += 1
        answers = self.answers[name]
        return answers.pop(0) if len(answers) > 1 else answers[0]


@pytest.fixture
def dns(monkeypatch) -> Dns:
    """`dns.set(name, address, ...)` makes `name` resolve to those addresses
    (counting lookups); other names go to the system resolver."""
    fake = Dns()
    real_getaddrinfo = socket.getaddrinfo

    def getaddrinfo(host, port, family=0, type=0, proto=0, flags=0):
        name = host.decode() if isinstance(host, bytes) else host
        if name not in fake.answers:
            return real_getaddrinfo(host, port, family, type, proto, flags)
        answer = []
        for address in fake.answer(name):
            if ":" in address:
                answer.append((socket.AF_INET6, socket.SOCK_STREAM, 6, "", (address, int(port or 0), 0, 0)))
            else:
                answer.append((socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, int(port or 0))))
        return answer

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return fake


# =============================================================================
# A throwaway certificate authority
# =============================================================================


@dataclass
class Authority:
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    @property
    def pem(self) -> str:
        return self.cert.public_bytes(serialization.Encoding.PEM).decode()

    def server_context(self, hostname: str, directory: Path) -> ssl.SSLContext:
        """A TLS server context presenting a certificate for `hostname` signed by this CA."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.now(UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hostname)]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(days=1))
            .not_valid_after(now + timedelta(days=30))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(hostname)]), critical=False)
            .sign(self.key, hashes.SHA256())
        )
        cert_path, key_path = directory / f"{hostname}.crt", directory / f"{hostname}.key"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert_path, key_path)
        return context


def ca_create() -> Authority:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "webhook tests CA")])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=1))
        .not_valid_after(now + timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return Authority(key=key, cert=cert)
