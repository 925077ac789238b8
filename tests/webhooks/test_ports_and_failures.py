"""Webhooks are no port scanner: public addresses get ports 80 and 443 only
(others by WEBHOOK_ALLOWED_PORTS), a failed attempt is told as a category and
a fixed sentence (never the socket's own error), and URLs with invisible or
reordering characters are refused."""

from __future__ import annotations

import importlib
import socket
import threading

import pytest

from tests.webhooks.receiver import receiver_start, receiver_stop
from webhooks import services as webhooks
from webhooks import transport
from webhooks.failures import Failure
from webhooks.models import WebhookAttempt, WebhookDelivery, WebhookEndpoint

pytestmark = pytest.mark.django_db

PUBLIC = "93.184.215.14"


def create(client, url: str):
    return client.post("/api/v1/webhooks", {"url": url, "events": ["invoice.settled"]}, format="json")


def emit(account, capture) -> None:
    with capture(execute=True):
        webhooks.event_emit(account=account, type="invoice.settled", data={"invoice": "GRH-000001"})


# =============================================================================
# Ports
# =============================================================================


@pytest.mark.parametrize("port", [22, 6379, 25, 8443, 8080, 5432, 1])
def test_a_public_address_on_another_port_is_refused(customer_api, port):
    resp = create(customer_api, f"https://{PUBLIC}:{port}/hook")
    assert resp.status_code == 400, resp.json()
    error = resp.json()["error"]
    assert error["code"] == "target_not_allowed"
    assert error["details"] == {"port": port, "reason": "port", "allowed_ports": [80, 443]}
    assert not WebhookEndpoint.objects.exists()


@pytest.mark.parametrize("url", [f"https://{PUBLIC}/hook", f"https://{PUBLIC}:443/hook", f"https://{PUBLIC}:80/hook"])
def test_ports_80_and_443_are_accepted(customer_api, url):
    assert create(customer_api, url).status_code == 201


def test_a_refused_port_costs_no_name_lookup(customer_api, dns):
    dns.set("hooks.example.com", PUBLIC)
    resp = create(customer_api, "https://hooks.example.com:6379/")
    assert resp.json()["error"]["details"]["reason"] == "port"
    assert dns.lookups["hooks.example.com"] == 0


def test_the_setting_allows_more_ports(customer_api, settings):
    settings.WEBHOOK_ALLOWED_PORTS = frozenset({443, 8443})
    assert create(customer_api, f"https://{PUBLIC}:8443/hook").status_code == 201
    refused = create(customer_api, f"https://{PUBLIC}:80/hook").json()["error"]
    assert refused["details"] == {"port": 80, "reason": "port", "allowed_ports": [443, 8443]}


def test_local_runs_take_any_port_on_loopback_but_not_on_public_addresses(customer_api, allow_private, dns):
    assert create(customer_api, "http://127.0.0.1:6379/hook").status_code == 201
    assert create(customer_api, "http://10.1.2.3:2222/hook").status_code == 201
    refused = create(customer_api, f"http://{PUBLIC}:22/hook").json()["error"]
    assert (refused["code"], refused["details"]["reason"]) == ("target_not_allowed", "port")
    # A name with a public and a loopback address: the public one decides.
    dns.set("mixed.example.com", "127.0.0.1", PUBLIC)
    assert create(customer_api, "http://mixed.example.com:6379/").json()["error"]["details"]["reason"] == "port"


def test_a_stored_url_on_another_port_is_refused_at_delivery(customer, dns, django_capture_on_commit_callbacks):
    """A URL stored before the rule (or by other means) is checked again at every attempt."""
    dns.set("hooks.example.com", PUBLIC)
    WebhookEndpoint.objects.create(
        account=customer,
        url="https://hooks.example.com:6379/",
        events=["invoice.settled"],
        secret=webhooks.secret_generate(),
    )
    emit(customer, django_capture_on_commit_callbacks)
    [attempt] = WebhookAttempt.objects.all()
    assert attempt.status_code is None
    assert attempt.error_category == Failure.TARGET_NOT_ALLOWED
    assert attempt.error == "Webhooks are sent to port 80 or 443 only (this URL says 6379)."
    assert dns.lookups["hooks.example.com"] == 0  # refused before any lookup or connection


# =============================================================================
# Failures as categories: what listens on a port is not told
# =============================================================================


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class _RawServer:
    """Accepts connections on loopback and, for each, sends `banner` (if any)
    and closes: an SSH or Redis server as a webhook would meet it, or a
    service that hangs up."""

    def __init__(self, banner: bytes) -> None:
        self.banner = banner
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen()
        self.port = self.listener.getsockname()[1]
        self.accepted = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with conn:
                self.accepted += 1
                if self.banner:
                    conn.sendall(self.banner)
                conn.recv(65536)

    def close(self) -> None:
        self.listener.close()


def _attempt_for(customer, url, capture) -> WebhookAttempt:
    WebhookDelivery.objects.all().delete()
    WebhookEndpoint.objects.all().delete()
    webhooks.endpoint_create(account=customer, url=url, events=["invoice.settled"])
    emit(customer, capture)
    return WebhookAttempt.objects.get()


def test_services_on_a_port_all_read_alike(customer, allow_private, django_capture_on_commit_callbacks):
    """An SSH banner, a Redis error line and a hang-up give one category and one
    sentence; a closed port another; none carries the socket's own words."""
    seen = {}
    servers = {
        "ssh": _RawServer(b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n"),
        "redis": _RawServer(b"-ERR unknown command 'POST'\r\n"),
        "hang-up": _RawServer(b""),
    }
    try:
        for name, server in servers.items():
            attempt = _attempt_for(customer, f"http://127.0.0.1:{server.port}/", django_capture_on_commit_callbacks)
            assert server.accepted == 1, name  # it really connected, then got no HTTP answer
            seen[name] = (attempt.error_category, attempt.error)
    finally:
        for server in servers.values():
            server.close()
    closed = _attempt_for(customer, f"http://127.0.0.1:{_free_port()}/", django_capture_on_commit_callbacks)
    seen["closed"] = (closed.error_category, closed.error)

    assert (
        seen["ssh"] == seen["redis"] == seen["hang-up"] == (Failure.PROTOCOL_ERROR, transport.PROTOCOL_ERROR_SENTENCE)
    )
    assert seen["closed"] == (Failure.CONNECTION_REFUSED, "The connection was refused.")
    for _category, error in seen.values():
        for raw in ("Errno", "SSH", "ERR", "refused by peer", "reset", "RemoteProtocolError", "ConnectError"):
            assert raw not in error


def test_the_api_shows_the_category(customer, customer_api, allow_private, django_capture_on_commit_callbacks):
    attempt = _attempt_for(customer, f"http://127.0.0.1:{_free_port()}/", django_capture_on_commit_callbacks)
    endpoint = attempt.delivery.endpoint
    [shown] = customer_api.get(f"/api/v1/webhooks/{endpoint.pk}/deliveries").json()["results"]
    [logged] = shown["attempt_log"]
    assert logged["error_category"] == "connection_refused"
    assert logged["error"] == "The connection was refused."
    assert logged["status_code"] is None


def test_an_answer_outside_2xx_is_http_status(customer, receiver, allow_private, django_capture_on_commit_callbacks):
    receiver.status = 503
    attempt = _attempt_for(customer, receiver.url, django_capture_on_commit_callbacks)
    assert (attempt.status_code, attempt.error_category, attempt.error) == (
        503,
        Failure.HTTP_STATUS,
        "The receiver answered 503.",
    )
    receiver.status = 204
    attempt = _attempt_for(customer, receiver.url, django_capture_on_commit_callbacks)
    assert (attempt.status_code, attempt.error_category, attempt.error) == (204, "", "")


def test_a_name_that_stops_resolving_is_dns(customer, dns, django_capture_on_commit_callbacks, monkeypatch):
    dns.set("hooks.example.com", PUBLIC)
    webhooks.endpoint_create(account=customer, url="https://hooks.example.com/", events=["invoice.settled"])
    real = socket.getaddrinfo

    def gone(host, *args, **kwargs):
        if host in ("hooks.example.com", b"hooks.example.com"):
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", gone)
    emit(customer, django_capture_on_commit_callbacks)
    attempt = WebhookAttempt.objects.get()
    assert attempt.error_category == Failure.DNS
    assert attempt.error == "The name hooks.example.com does not resolve."


def test_a_tls_server_that_is_not_trusted_is_tls_error(
    customer, allow_private, dns, django_capture_on_commit_callbacks, tmp_path
):
    from tests.webhooks.receiver import ca_create

    ca = ca_create()  # not trusted by the sender
    dns.set("hooks.test", "127.0.0.1")
    target = receiver_start(ca.server_context("hooks.test", tmp_path), host="hooks.test")
    try:
        attempt = _attempt_for(customer, target.url, django_capture_on_commit_callbacks)
    finally:
        receiver_stop(target)
    assert attempt.error_category == Failure.TLS_ERROR
    assert "CERTIFICATE_VERIFY_FAILED" not in attempt.error and "_ssl.c" not in attempt.error


# =============================================================================
# Invisible and reordering characters
# =============================================================================


@pytest.mark.parametrize(
    "url",
    [
        f"https://{PUBLIC}/hook\u202egnp.exe",  # right-to-left override
        f"https://{PUBLIC}/\u2066hook\u2069",  # isolates
        f"https://{PUBLIC}/ho\u200bok",  # zero-width space
        f"https://{PUBLIC}/hook?x=\u200d",  # zero-width joiner
        f"https://{PUBLIC}/\ufeffhook",  # byte-order mark
        f"https://{PUBLIC}/ho\u00adok",  # soft hyphen
        f"https://{PUBLIC}/ho\u00a0ok",  # no-break space
        f"https://{PUBLIC}/ho\u3000ok",  # ideographic space
        f"https://{PUBLIC}/hook\u2028",  # line separator
        f"https://{PUBLIC}/hook\x7f",  # DEL
        f"https://{PUBLIC}/hook\x85",  # next line (C1 control)
        f"https://{PUBLIC}/\ue000",  # private use
        f"https://{PUBLIC}/\U000e0041",  # tag character
        f"https://{PUBLIC}/hook\t",
    ],
)
def test_invisible_and_control_characters_are_refused(customer_api, url):
    resp = create(customer_api, url)
    assert resp.status_code == 400, resp.json()
    error = resp.json()["error"]
    assert (error["code"], error["details"]) == ("invalid_url", {"reason": "characters"})


def test_the_same_characters_percent_encoded_are_visible_and_accepted(customer_api):
    assert create(customer_api, f"https://{PUBLIC}/hook%E2%80%AEgnp.exe?x=%E2%80%8B").status_code == 201


# =============================================================================
# Attempts logged before the categories
# =============================================================================


@pytest.mark.parametrize(
    ("status_code", "error", "category", "sentence"),
    [
        (
            None,
            "Could not connect: 127.0.0.1: [Errno 111] Connection refused",
            "connection_refused",
            "The connection was refused.",
        ),
        (
            None,
            "Could not connect: 93.184.215.14: [Errno 113] No route to host",
            "connection_failed",
            "Could not connect.",
        ),
        (
            None,
            "Could not connect: [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed",
            "tls_error",
            "TLS failed: the handshake did not complete.",
        ),
        (
            None,
            "RemoteProtocolError: Server disconnected without sending a response.",
            "protocol_error",
            transport.PROTOCOL_ERROR_SENTENCE,
        ),
        (None, "ReadError: [Errno 104] Connection reset by peer", "protocol_error", transport.PROTOCOL_ERROR_SENTENCE),
        (None, "Timed out after 10 s.", "timeout", "Timed out after 10 s."),
        (None, "Internal error (RuntimeError).", "internal_error", "Internal error; it has been logged."),
        (
            None,
            "Webhooks are not sent to loopback addresses (127.0.0.1).",
            "target_not_allowed",
            "Webhooks are not sent to loopback addresses (127.0.0.1).",
        ),
        (None, "The name a.example does not resolve.", "dns", "The name a.example does not resolve."),
        (302, "Redirects are not followed.", "redirect", "The receiver answered 302: redirects are not followed."),
        (500, "", "http_status", "The receiver answered 500."),
        (200, "", "", ""),
    ],
)
def test_the_migration_retells_old_attempts_as_categories(status_code, error, category, sentence):
    migration = importlib.import_module("webhooks.migrations.0003_attempt_error_category")
    assert migration.categorize(status_code, error) == (category, sentence)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_migration_rewrites_stored_attempts(django_user_model):
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    before, after = [("webhooks", "0002_staff_names")], [("webhooks", "0003_attempt_error_category")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    try:
        old = executor.loader.project_state(before[0]).apps
        account = old.get_model("accounts", "Account").objects.create(username="probe", password="x")
        endpoint = old.get_model("webhooks", "WebhookEndpoint").objects.create(
            account_id=account.pk, url="https://93.184.215.14:6379/", events=["invoice.settled"], secret="s"
        )
        event = old.get_model("webhooks", "WebhookEvent").objects.create(
            account_id=account.pk, type="invoice.settled", data={}, created_at="2026-12-01T00:00:00Z"
        )
        delivery = old.get_model("webhooks", "WebhookDelivery").objects.create(
            event_id=event.pk, endpoint_id=endpoint.pk, created_at="2026-12-01T00:00:00Z"
        )
        attempts = old.get_model("webhooks", "WebhookAttempt").objects
        for status_code, error in (
            (None, "Could not connect: 93.184.215.14: [Errno 111] Connection refused"),
            (None, "RemoteProtocolError: Server disconnected without sending a response."),
            (502, ""),
            (200, ""),
        ):
            attempts.create(
                delivery_id=delivery.pk, at="2026-12-01T00:00:00Z", status_code=status_code, error=error, duration_ms=1
            )
        executor = MigrationExecutor(connection)
        executor.migrate(after)
    finally:
        MigrationExecutor(connection).migrate(executor.loader.graph.leaf_nodes())
    rows = list(WebhookAttempt.objects.order_by("pk").values_list("status_code", "error_category", "error"))
    assert rows == [
        (None, "connection_refused", "The connection was refused."),
        (None, "protocol_error", transport.PROTOCOL_ERROR_SENTENCE),
        (502, "http_status", "The receiver answered 502."),
        (200, "", ""),
    ]
