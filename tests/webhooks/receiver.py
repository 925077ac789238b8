"""Shared pieces of the webhook tests (no tests here): a real HTTP(S) receiver
on 127.0.0.1 that checks signatures the way the docs tell customers to and
can be told to fail or to hold its answer, a resolver with made-up names, and
a throwaway CA. The conftest modules of the test folders that need them
import the fixtures from here."""

from __future__ import annotations

import base64
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
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

# =============================================================================
# What a receiver does (the docs' snippets)
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


def standard_verify(secret: str, headers: dict[str, str], body: bytes) -> bool:
    """The Standard Webhooks library's own verifier (webhook-id, -timestamp, -signature)."""
    try:
        Webhook(secret).verify(body, headers)
    except WebhookVerificationError:
        return False
    return True


def independent_signature(secret: str, msg_id: str, timestamp: str, body: bytes) -> str:
    """What `openssl dgst -sha256 -mac HMAC -macopt hexkey:<key> -binary | base64`
    prints for "<id>.<timestamp>.<body>", the key being the base64 after whsec_."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    mac = hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return base64.b64encode(mac).decode()


def independent_verify(secret: str, headers: dict[str, str], body: bytes) -> bool:
    """Standard Webhooks verification computed by hand, without the library."""
    lower = {k.lower(): v for k, v in headers.items()}
    try:
        msg_id, timestamp, signatures = lower["webhook-id"], lower["webhook-timestamp"], lower["webhook-signature"]
    except KeyError:
        return False
    expected = independent_signature(secret, msg_id, timestamp, body)
    offered = [part.split(",", 1) for part in signatures.split(" ")]
    return any(version == "v1" and hmac.compare_digest(expected, value) for version, value in offered)


# =============================================================================
# The receiver
# =============================================================================


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    # None: the receiver had no secret to check with. Otherwise every check the
    # receiver makes passed: GRH-Signature, and (unless `standard` is off) the
    # Standard Webhooks signature by the library and by hand.
    verified: bool | None
    verified_legacy: bool | None = None
    verified_standard: bool | None = None
    verified_independent: bool | None = None


@dataclass
class Receiver:
    """Answers `status` (200) to every POST, except the next `fail_times`
    ones, which get `fail_status`. With `hold` set, every POST is recorded
    and then waits for the test to set that event before it is answered;
    with `answer_together` = n, POSTs wait until n of them are in flight at
    once (from then on they are answered at once)."""

    server: ThreadingHTTPServer = field(repr=False)
    scheme: str = "http"
    host: str = "127.0.0.1"
    secret: str | None = None
    standard: bool = True  # deliveries carry Standard Webhooks headers (provisioning jobs do not)
    status: int = 200
    fail_times: int = 0
    fail_status: int = 500
    hold: threading.Event | None = None
    answer_together: int = 0
    location: str | None = None
    requests: list[Received] = field(default_factory=list)
    answered: int = 0
    server_names: list[str | None] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    together: threading.Condition = field(default_factory=threading.Condition, repr=False)
    in_flight: int = 0
    in_flight_peak: int = 0

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
        received = Received(method, self.path, headers, body, None)
        if receiver.secret is not None:
            received.verified_legacy = signature_verify(receiver.secret, self.headers.get("GRH-Signature", ""), body)
            received.verified = received.verified_legacy
            if receiver.standard:
                received.verified_standard = standard_verify(receiver.secret, headers, body)
                received.verified_independent = independent_verify(receiver.secret, headers, body)
                received.verified = received.verified and received.verified_standard and received.verified_independent
        with receiver.lock:
            receiver.requests.append(received)
        return receiver

    def do_POST(self):
        receiver = self._record("POST")
        status = receiver._answer()
        with receiver.together:
            receiver.in_flight += 1
            receiver.in_flight_peak = max(receiver.in_flight_peak, receiver.in_flight)
            receiver.together.notify_all()
            receiver.together.wait_for(lambda: receiver.in_flight_peak >= receiver.answer_together)
        if receiver.hold is not None:
            receiver.hold.wait()
        with receiver.together:
            receiver.in_flight -= 1
        self.send_response(status)
        if receiver.location and 300 <= status < 400:
            self.send_header("Location", receiver.location)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", "6")
        self.end_headers()
        self.wfile.write(b"thanks")
        with receiver.lock:
            receiver.answered += 1

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
    if receiver.hold is not None:
        receiver.hold.set()  # answer what is still held, so the server can stop
    with receiver.together:
        receiver.answer_together = 0
        receiver.together.notify_all()
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
            # What a strict verifier (Python 3.13's default VERIFY_X509_STRICT) asks of a leaf.
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
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
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
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
