"""Emitting and delivering webhooks to a real receiver on 127.0.0.1: the
signature, the retry schedule (the clock moved, the sweep run), exhaustion,
redelivery, subscriptions, failure kinds, SSRF at delivery time, TLS on the
name while connecting to the checked address, and two sweeps at once."""

from __future__ import annotations

import json
import socket
import ssl
import threading
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine
from django.db import connection

from tests.waiting import wait_until
from tests.webhooks.receiver import ca_create, receiver_start, receiver_stop, signature_verify, standard_verify
from webhooks import services as webhooks
from webhooks import transport
from webhooks.models import DeliveryStatus, WebhookDelivery, WebhookEndpoint, WebhookEvent
from webhooks.tasks import deliveries_sweep as webhook_deliveries_sweep
from webhooks.tasks import delivery_attempt as webhook_delivery_attempt

pytestmark = pytest.mark.django_db

# The schedule the issue sets: waits after failed attempts 1..5.
SCHEDULE = [timedelta(seconds=s) for s in (10, 60, 600, 3600, 21600)]
T0 = datetime(2031, 3, 1, 12, 0, tzinfo=UTC)


def endpoint_for(account, receiver, events=("invoice.settled",), url=None) -> WebhookEndpoint:
    created = webhooks.endpoint_create(account=account, url=url or receiver.url, events=list(events))
    receiver.secret = created.secret
    return created.endpoint


@pytest.fixture
def emit(django_capture_on_commit_callbacks):
    """event_emit in a transaction that commits (first attempts run, eagerly)."""

    def _emit(account, type="invoice.settled", data=None, execute=True):
        with django_capture_on_commit_callbacks(execute=execute):
            return webhooks.event_emit(account=account, type=type, data=data or {"invoice": "GRH-000001"})

    return _emit


def only_delivery() -> WebhookDelivery:
    return WebhookDelivery.objects.get()


def attempt_log(delivery: WebhookDelivery) -> list:
    return list(delivery.attempt_log.order_by("at", "id"))


# =============================================================================
# The request a receiver gets
# =============================================================================


def test_a_delivery_is_signed_json_that_the_receiver_verifies(customer, receiver, allow_private, emit):
    endpoint_for(customer, receiver)
    with time_machine.travel(T0, tick=False):
        event = emit(customer, data={"invoice": "GRH-000042", "amount_usd": Decimal("1881.00")})

    assert len(receiver.posts) == 1
    request = receiver.posts[0]
    assert request.verified is True
    assert request.path == "/hooks/grh?source=test"
    headers = {k.lower(): v for k, v in request.headers.items()}
    assert headers["content-type"] == "application/json"
    assert headers["user-agent"] == "GPU-Rent-Hub-Webhooks/1"
    assert headers["webhook-id"] == str(event.id)
    timestamp = int(headers["webhook-timestamp"])
    assert timestamp == int(T0.timestamp())
    assert headers["grh-signature"].startswith(f"t={timestamp},v1=")
    body = json.loads(request.body)
    assert body == {
        "id": str(event.id),
        "type": "invoice.settled",
        "created_at": event.created_at.isoformat().replace("+00:00", "Z"),
        "data": {"invoice": "GRH-000042", "amount_usd": "1881.00"},
    }
    delivery = only_delivery()
    assert (delivery.status, delivery.attempts, delivery.next_attempt_at) == (DeliveryStatus.SUCCEEDED, 1, None)
    assert delivery.delivered_at is not None
    [attempt] = attempt_log(delivery)
    assert (attempt.status_code, attempt.error) == (200, "")
    assert attempt.duration_ms >= 0


def test_tampering_or_the_wrong_secret_fails_verification(customer, receiver, allow_private, emit):
    endpoint = endpoint_for(customer, receiver)
    emit(customer)
    request = receiver.posts[0]
    signature, body = request.headers["GRH-Signature"], request.body
    timestamp = int(request.headers["Webhook-Timestamp"])
    v1 = signature.split("v1=")[1]

    assert signature_verify(endpoint.secret, signature, body)
    assert not signature_verify(endpoint.secret, signature, body.replace(b"GRH-000001", b"GRH-000002"))
    assert not signature_verify(endpoint.secret, signature, body + b" ")
    assert not signature_verify(endpoint.secret, f"t={timestamp + 1},v1={v1}", body)
    assert not signature_verify(endpoint.secret, f"t={timestamp},v1={'0' * 64}", body)
    assert not signature_verify(webhooks.secret_generate(), signature, body)
    assert not signature_verify(endpoint.secret, f"v1={v1}", body)
    with time_machine.travel(datetime.fromtimestamp(timestamp + 301, UTC)):
        assert not signature_verify(endpoint.secret, signature, body)  # a replay, too late


def test_every_attempt_sends_the_same_body_and_id_signed_anew(customer, receiver, allow_private, emit):
    endpoint_for(customer, receiver)
    receiver.fail_times = 1
    with time_machine.travel(T0, tick=False) as clock:
        emit(customer)
        clock.shift(SCHEDULE[0])
        assert webhooks.deliveries_sweep() == 1
    first, second = receiver.posts
    assert first.body == second.body
    assert first.headers["Webhook-Id"] == second.headers["Webhook-Id"]
    assert int(second.headers["Webhook-Timestamp"]) - int(first.headers["Webhook-Timestamp"]) == 10
    assert first.verified and second.verified


def test_a_rotated_secret_signs_the_next_attempts(customer, receiver, allow_private, emit, settings):
    settings.WEBHOOK_SECRET_ROTATION_OVERLAP = timedelta(hours=24)
    endpoint = endpoint_for(customer, receiver)
    old_secret = endpoint.secret
    with time_machine.travel(T0, tick=False) as clock:
        rotated = webhooks.endpoint_secret_rotate(account=customer, endpoint_id=endpoint.pk)
        assert rotated.secret != old_secret
        receiver.secret = rotated.secret
        # Within the overlap the old secret still verifies too.
        clock.shift(timedelta(hours=23, minutes=59))
        emit(customer)
        during = receiver.posts[0]
        assert during.verified is True
        assert signature_verify(old_secret, during.headers["GRH-Signature"], during.body)
        assert standard_verify(old_secret, during.headers, during.body)
        # Once it is over, only the new one does.
        clock.shift(timedelta(minutes=1))
        emit(customer)
    request = receiver.posts[1]
    with time_machine.travel(T0 + timedelta(hours=24), tick=False):
        assert request.verified is True
        assert not signature_verify(old_secret, request.headers["GRH-Signature"], request.body)
        assert not standard_verify(old_secret, request.headers, request.body)


# =============================================================================
# Retries, exhaustion, the sweep
# =============================================================================


def test_retries_follow_the_schedule_exactly_then_succeed(customer, receiver, allow_private, emit):
    endpoint_for(customer, receiver)
    receiver.fail_times = 5
    expected = [T0]
    with time_machine.travel(T0, tick=False) as clock:
        emit(customer)
        delivery = only_delivery()
        for number, wait in enumerate(SCHEDULE, start=1):
            delivery.refresh_from_db()
            assert delivery.status == DeliveryStatus.PENDING
            assert delivery.attempts == number
            assert delivery.next_attempt_at == expected[-1] + wait
            clock.move_to(expected[-1] + wait - timedelta(seconds=1))
            assert webhooks.deliveries_sweep() == 0  # not due yet
            clock.move_to(expected[-1] + wait)
            assert webhooks.deliveries_sweep() == 1
            expected.append(expected[-1] + wait)
        assert webhooks.deliveries_sweep() == 0

    delivery.refresh_from_db()
    assert delivery.status == DeliveryStatus.SUCCEEDED
    assert delivery.attempts == 6
    assert delivery.delivered_at == expected[-1]
    assert delivery.next_attempt_at is None
    log = attempt_log(delivery)
    assert [a.at for a in log] == expected
    assert [a.status_code for a in log] == [500, 500, 500, 500, 500, 200]
    assert len(receiver.posts) == 6
    assert all(r.verified for r in receiver.posts)


def test_six_failures_and_the_delivery_is_failed(customer, receiver, allow_private, emit):
    endpoint_for(customer, receiver)
    receiver.status = 503
    with time_machine.travel(T0, tick=False) as clock:
        emit(customer)
        for wait in SCHEDULE:
            clock.shift(wait)
            assert webhooks.deliveries_sweep() == 1
        delivery = only_delivery()
        assert (delivery.status, delivery.attempts, delivery.next_attempt_at) == (DeliveryStatus.FAILED, 6, None)
        assert delivery.delivered_at is None
        clock.shift(timedelta(days=30))
        assert webhooks.deliveries_sweep() == 0
    assert len(receiver.posts) == 6
    assert [a.status_code for a in attempt_log(delivery)] == [503] * 6


def test_a_second_sweep_with_nothing_due_changes_nothing(customer, receiver, allow_private, emit):
    endpoint_for(customer, receiver)
    receiver.fail_times = 1
    with time_machine.travel(T0, tick=False) as clock:
        emit(customer)
        clock.shift(SCHEDULE[0])
        assert webhook_deliveries_sweep() == 1
        snapshot = list(WebhookDelivery.objects.values())
        assert webhook_deliveries_sweep() == 0
        assert list(WebhookDelivery.objects.values()) == snapshot
    assert len(receiver.posts) == 2


def test_a_lost_first_attempt_task_is_made_by_the_sweep(customer, receiver, allow_private, emit):
    endpoint_for(customer, receiver)
    emit(customer, execute=False)  # the task queued on commit never ran
    delivery = only_delivery()
    assert (delivery.status, delivery.attempts) == (DeliveryStatus.PENDING, 0)
    assert receiver.posts == []

    assert webhooks.deliveries_sweep() == 1
    assert len(receiver.posts) == 1
    # The task arriving late finds nothing due and sends nothing.
    assert webhook_delivery_attempt(delivery.pk) is False
    assert len(receiver.posts) == 1
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts) == (DeliveryStatus.SUCCEEDED, 1)


def test_a_switched_off_endpoint_waits_and_resumes(customer, receiver, allow_private, emit):
    endpoint = endpoint_for(customer, receiver)
    receiver.fail_times = 1
    with time_machine.travel(T0, tick=False) as clock:
        emit(customer)
        webhooks.endpoint_update(account=customer, endpoint_id=endpoint.pk, is_active=False)
        clock.shift(timedelta(hours=1))
        assert webhooks.deliveries_sweep() == 0
        assert webhooks.event_emit(account=customer, type="invoice.settled", data={}) is None
        webhooks.endpoint_update(account=customer, endpoint_id=endpoint.pk, is_active=True)
        assert webhooks.deliveries_sweep() == 1
    assert only_delivery().status == DeliveryStatus.SUCCEEDED
    assert len(receiver.posts) == 2


def test_deleting_an_endpoint_drops_its_pending_deliveries(customer, receiver, allow_private, emit):
    endpoint = endpoint_for(customer, receiver)
    receiver.status = 500
    emit(customer)
    webhooks.endpoint_delete(account=customer, endpoint_id=endpoint.pk)
    assert not WebhookDelivery.objects.exists()
    with time_machine.travel(timedelta(days=1)):
        assert webhooks.deliveries_sweep() == 0
    assert len(receiver.posts) == 1


# =============================================================================
# Redelivery
# =============================================================================


def test_redeliver_a_delivered_one(customer, receiver, allow_private, emit, django_capture_on_commit_callbacks):
    endpoint = endpoint_for(customer, receiver)
    emit(customer)
    delivery = only_delivery()
    with django_capture_on_commit_callbacks(execute=True):
        webhooks.delivery_redeliver(account=customer, endpoint_id=endpoint.pk, delivery_id=delivery.pk)
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts) == (DeliveryStatus.SUCCEEDED, 2)
    first, second = receiver.posts
    assert first.body == second.body and first.headers["Webhook-Id"] == second.headers["Webhook-Id"]
    assert second.verified


def test_redeliver_a_failed_one(customer, receiver, allow_private, emit, django_capture_on_commit_callbacks):
    endpoint = endpoint_for(customer, receiver)
    receiver.fail_times = 7
    with time_machine.travel(T0, tick=False) as clock:
        emit(customer)
        for wait in SCHEDULE:
            clock.shift(wait)
            webhooks.deliveries_sweep()
        delivery = only_delivery()
        assert delivery.status == DeliveryStatus.FAILED
        clock.shift(timedelta(days=2))
        # Still failing: one attempt, and it stays failed (no new schedule).
        with django_capture_on_commit_callbacks(execute=True):
            webhooks.delivery_redeliver(account=customer, endpoint_id=endpoint.pk, delivery_id=delivery.pk)
        delivery.refresh_from_db()
        assert (delivery.status, delivery.attempts, delivery.next_attempt_at) == (DeliveryStatus.FAILED, 7, None)
        # The receiver is fixed: the next redelivery succeeds.
        clock.shift(timedelta(minutes=5))
        with django_capture_on_commit_callbacks(execute=True):
            webhooks.delivery_redeliver(account=customer, endpoint_id=endpoint.pk, delivery_id=delivery.pk)
        delivery.refresh_from_db()
        assert (delivery.status, delivery.attempts) == (DeliveryStatus.SUCCEEDED, 8)
        assert delivery.delivered_at == T0 + sum(SCHEDULE, timedelta()) + timedelta(days=2, minutes=5)
    assert len(receiver.posts) == 8


def test_redeliver_a_pending_one_attempts_now(
    customer, receiver, allow_private, emit, django_capture_on_commit_callbacks
):
    endpoint = endpoint_for(customer, receiver)
    receiver.status = 500
    with time_machine.travel(T0, tick=False) as clock:
        emit(customer)
        clock.shift(SCHEDULE[0])
        webhooks.deliveries_sweep()
        delivery = only_delivery()
        assert delivery.next_attempt_at == T0 + SCHEDULE[0] + SCHEDULE[1]
        clock.shift(timedelta(seconds=5))
        now = T0 + SCHEDULE[0] + timedelta(seconds=5)
        with django_capture_on_commit_callbacks(execute=True):
            webhooks.delivery_redeliver(account=customer, endpoint_id=endpoint.pk, delivery_id=delivery.pk)
        delivery.refresh_from_db()
        assert attempt_log(delivery)[-1].at == now
        # Its third attempt failed: the third wait of the schedule follows.
        assert (delivery.status, delivery.attempts) == (DeliveryStatus.PENDING, 3)
        assert delivery.next_attempt_at == now + SCHEDULE[2]
    assert len(receiver.posts) == 3


# =============================================================================
# Who gets what
# =============================================================================


def test_only_active_subscribed_endpoints_of_the_account_get_the_event(
    customer, other_customer, receiver, allow_private, emit
):
    def register(account, name, events, is_active=True):
        created = webhooks.endpoint_create(
            account=account, url=f"{receiver.url}&to={name}", events=events, is_active=is_active
        )
        return created.endpoint

    settled = register(customer, "settled", ["invoice.settled", "rental.active"])
    register(customer, "active", ["rental.active"])
    register(customer, "off", ["invoice.settled"], is_active=False)
    register(other_customer, "other", ["invoice.settled"])

    event = emit(customer, type="invoice.settled")
    assert [r.path.rsplit("=", 1)[1] for r in receiver.posts] == ["settled"]
    assert list(WebhookDelivery.objects.values_list("endpoint", flat=True)) == [settled.pk]
    assert event.account == customer

    receiver.requests.clear()
    emit(customer, type="rental.active")
    assert sorted(r.path.rsplit("=", 1)[1] for r in receiver.posts) == ["active", "settled"]


def test_no_subscriber_records_nothing(customer, other_customer, receiver, allow_private, emit):
    endpoint_for(other_customer, receiver, events=["rental.suspended"])
    endpoint_for(customer, receiver, events=["rental.active"])
    assert emit(customer, type="rental.suspended") is None
    assert emit(customer, type="invoice.expired") is None
    assert not WebhookEvent.objects.exists()
    assert not WebhookDelivery.objects.exists()
    assert receiver.posts == []


def test_unknown_event_types_are_a_programming_error(customer):
    with pytest.raises(ValueError, match="invoice.paid"):
        webhooks.event_emit(account=customer, type="invoice.paid", data={})
    with pytest.raises(ValueError):
        webhooks.event_emit(account=customer, type="ping", data={})
    assert not WebhookEvent.objects.exists()


def test_the_event_rolls_back_with_the_caller(customer, receiver, allow_private, django_capture_on_commit_callbacks):
    from django.db import transaction

    endpoint_for(customer, receiver)

    class CallerFailed(Exception):
        pass

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        with pytest.raises(CallerFailed), transaction.atomic():
            webhooks.event_emit(account=customer, type="invoice.settled", data={})
            raise CallerFailed
    assert callbacks == []
    assert not WebhookEvent.objects.exists()
    assert receiver.posts == []


def test_ping_goes_to_that_endpoint_whatever_it_subscribes(
    customer, receiver, allow_private, django_capture_on_commit_callbacks
):
    endpoint = endpoint_for(customer, receiver, events=["rental.terminated"])
    with django_capture_on_commit_callbacks(execute=True):
        delivery = webhooks.endpoint_ping(account=customer, endpoint_id=endpoint.pk)
    body = json.loads(receiver.posts[0].body)
    assert body["type"] == "ping"
    assert body["data"] == {"endpoint_id": endpoint.pk}
    assert receiver.posts[0].verified
    delivery.refresh_from_db()
    assert delivery.status == DeliveryStatus.SUCCEEDED


# =============================================================================
# What counts as a failed attempt
# =============================================================================


def test_a_redirect_is_not_followed(customer, receiver, allow_private, emit):
    endpoint_for(customer, receiver)
    receiver.fail_times, receiver.fail_status = 1, 302
    receiver.location = f"http://127.0.0.1:{receiver.port}/elsewhere"
    emit(customer)
    [attempt] = attempt_log(only_delivery())
    assert attempt.status_code == 302
    assert "redirect" in attempt.error.lower()
    assert [r.method for r in receiver.requests] == ["POST"]
    assert only_delivery().status == DeliveryStatus.PENDING


def test_connection_refused_is_a_failed_attempt(customer, allow_private, emit):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    webhooks.endpoint_create(account=customer, url=f"http://127.0.0.1:{port}/hook", events=["invoice.settled"])
    emit(customer)
    delivery = only_delivery()
    [attempt] = attempt_log(delivery)
    assert attempt.status_code is None
    # A category and a fixed sentence: nothing of the socket's own error (errno, text).
    assert (attempt.error_category, attempt.error) == ("connection_refused", "The connection was refused.")
    assert (delivery.status, delivery.attempts) == (DeliveryStatus.PENDING, 1)


def test_a_slow_receiver_times_out(customer, receiver, allow_private, emit, settings):
    settings.WEBHOOK_TIMEOUT_SECONDS = 0.5
    endpoint_for(customer, receiver)
    receiver.hold = threading.Event()  # the receiver answers only when the test lets it
    emit(customer)
    # The sender gave up on its own: the receiver got the request and is still holding its answer.
    assert len(receiver.posts) == 1 and receiver.answered == 0
    receiver.hold.set()
    [attempt] = attempt_log(only_delivery())
    assert attempt.status_code is None
    assert attempt.error == "Timed out after 0.5 s."
    assert attempt.duration_ms >= 400


def test_a_trickling_receiver_cannot_outlast_the_timeout(customer, allow_private, emit, settings, monkeypatch):
    """Each byte arrives well within a read timeout; the attempt's deadline still ends it.

    The deadline is kept on transport.clock: here a clock that moves 0.1 s each
    time the sender looks at it (before every read), and a receiver that sends
    the next byte of a never-ending status line each time it does."""
    settings.WEBHOOK_TIMEOUT_SECONDS = 1
    looks = threading.Semaphore(0)
    now = [0.0]

    def clock() -> float:
        now[0] += 0.1
        looks.release()
        return now[0]

    monkeypatch.setattr(transport, "clock", clock)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    stop = threading.Event()
    sent: list[int] = []

    def trickle():
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 100:
                while not looks.acquire(timeout=0.01):  # the sender's next look at the clock
                    if stop.is_set():
                        return
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    return
                sent.append(byte)

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    try:
        webhooks.endpoint_create(
            account=customer, url=f"http://127.0.0.1:{listener.getsockname()[1]}/", events=["invoice.settled"]
        )
        emit(customer)
    finally:
        stop.set()
        thread.join(5)
        listener.close()
    [attempt] = attempt_log(only_delivery())
    assert attempt.error == "Timed out after 1 s."
    # Ended by the deadline (about ten looks at the clock), not by a read timeout after the whole line.
    assert 0 < len(sent) < 20


def test_an_unexpected_error_is_logged_as_an_attempt_and_the_sweep_goes_on(
    customer, receiver, allow_private, emit, monkeypatch
):
    endpoint_for(customer, receiver)

    def broken():
        raise RuntimeError("TLS setup broke")

    monkeypatch.setattr(transport, "tls_context", broken)
    emit(customer, execute=False)
    emit(customer, type="invoice.settled", execute=False)
    assert webhooks.deliveries_sweep() == 2
    for delivery in WebhookDelivery.objects.all():
        [attempt] = attempt_log(delivery)
        assert (attempt.error_category, attempt.error) == ("internal_error", "Internal error; it has been logged.")
        assert (delivery.status, delivery.attempts) == (DeliveryStatus.PENDING, 1)
    assert webhooks.deliveries_sweep() == 0


# =============================================================================
# SSRF at delivery time; TLS on the name, TCP to the checked address
# =============================================================================


def test_a_name_that_now_resolves_to_loopback_is_not_contacted(customer, receiver, dns, emit, settings):
    settings.WEBHOOK_ALLOWED_PORTS = frozenset({443, receiver.port})  # the port is not what stops it
    dns.set("hooks.example.com", "93.184.215.14")
    url = f"https://hooks.example.com:{receiver.port}/grh"
    webhooks.endpoint_create(account=customer, url=url, events=["invoice.settled"])
    dns.set("hooks.example.com", "127.0.0.1")  # rebinding
    emit(customer)
    delivery = only_delivery()
    [attempt] = attempt_log(delivery)
    assert attempt.status_code is None
    assert "loopback" in attempt.error and "127.0.0.1" in attempt.error
    assert attempt.error_category == "target_not_allowed"
    assert receiver.requests == []
    assert delivery.status == DeliveryStatus.PENDING


@pytest.mark.parametrize(
    ("answer", "word"),
    [
        (["93.184.215.14", "10.1.2.3"], "private"),
        (["169.254.169.254"], "link-local"),
        (["::ffff:127.0.0.1"], "loopback"),
        (["fd00::1"], "private"),
    ],
)
def test_every_address_of_the_name_is_checked_at_delivery(customer, dns, emit, answer, word):
    dns.set("hooks.example.com", "93.184.215.14")
    webhooks.endpoint_create(account=customer, url="https://hooks.example.com/grh", events=["invoice.settled"])
    dns.set("hooks.example.com", *answer)
    emit(customer)
    [attempt] = attempt_log(only_delivery())
    assert word in attempt.error


def test_a_stored_url_that_is_not_allowed_any_more_is_refused(customer, receiver, emit):
    """A URL saved while private targets were allowed (or by other means) is still checked."""
    WebhookEndpoint.objects.create(
        account=customer, url=receiver.url, events=["invoice.settled"], secret=webhooks.secret_generate()
    )
    emit(customer)
    [attempt] = attempt_log(only_delivery())
    assert attempt.error == "Webhooks are delivered over HTTPS only."
    assert receiver.requests == []


def test_the_connection_goes_to_the_address_that_was_checked(customer, allow_private, dns, emit):
    target = receiver_start(host="hooks.test")
    try:
        dns.set("hooks.test", "127.0.0.1")
        endpoint_for(customer, target)
        # The attempt's lookup answers the receiver's address; any later lookup
        # would answer an address where nothing listens.
        dns.set_sequence("hooks.test", ["127.0.0.1"], ["127.0.0.2"])
        lookups = dns.lookups["hooks.test"]
        emit(customer)
    finally:
        receiver_stop(target)
    assert dns.lookups["hooks.test"] == lookups + 1
    assert len(target.posts) == 1
    assert target.posts[0].headers["Host"] == f"hooks.test:{target.port}"
    assert only_delivery().status == DeliveryStatus.SUCCEEDED


def test_tls_uses_the_name_for_sni_and_verification(customer, allow_private, dns, emit, monkeypatch, tmp_path):
    ca = ca_create()
    monkeypatch.setattr(transport, "tls_context", lambda: ssl.create_default_context(cadata=ca.pem))
    dns.set("hooks.test", "127.0.0.1")
    dns.set("wrong.test", "127.0.0.1")
    good = receiver_start(ca.server_context("hooks.test", tmp_path), host="hooks.test")
    # Serves a certificate for another name than the one in the URL.
    wrong = receiver_start(ca.server_context("other.test", tmp_path), host="wrong.test")
    try:
        endpoint_for(customer, good)
        webhooks.endpoint_create(account=customer, url=wrong.url, events=["invoice.settled"])
        emit(customer)
    finally:
        receiver_stop(good)
        receiver_stop(wrong)

    assert good.server_names == ["hooks.test"]
    assert [r.headers["Host"] for r in good.posts] == [f"hooks.test:{good.port}"]
    assert good.posts[0].verified
    assert wrong.posts == []
    by_url = {d.endpoint.url: d for d in WebhookDelivery.objects.select_related("endpoint")}
    assert by_url[good.url].status == DeliveryStatus.SUCCEEDED
    [attempt] = attempt_log(by_url[wrong.url])
    assert attempt.error_category == "tls_error"
    assert "certificate was not accepted" in attempt.error


def test_an_unknown_certificate_authority_is_refused(customer, allow_private, dns, emit, tmp_path):
    ca = ca_create()  # not trusted by the sender
    dns.set("hooks.test", "127.0.0.1")
    target = receiver_start(ca.server_context("hooks.test", tmp_path), host="hooks.test")
    try:
        endpoint_for(customer, target)
        emit(customer)
    finally:
        receiver_stop(target)
    assert target.posts == []
    [attempt] = attempt_log(only_delivery())
    assert attempt.error_category == "tls_error"
    assert "certificate was not accepted" in attempt.error


# =============================================================================
# Two workers at once
# =============================================================================


@pytest.mark.django_db(transaction=True)
def test_two_sweeps_never_send_one_attempt_twice(receiver, allow_private, django_user_model):
    from django.utils import timezone

    account = django_user_model.objects.create_user("concurrent", "a long enough passphrase")
    endpoint = endpoint_for(account, receiver)
    now = timezone.now()
    for number in range(6):  # six deliveries due now (as if their first tasks were lost)
        event = WebhookEvent.objects.create(account=account, type="invoice.settled", data={"n": number}, created_at=now)
        WebhookDelivery.objects.create(event=event, endpoint=endpoint, created_at=now, next_attempt_at=now)
    receiver.answer_together = 2  # each waits for the other sweep's first request: both take a share
    barrier = threading.Barrier(2)
    made: list[int] = []

    def sweep():
        try:
            barrier.wait()
            made.append(webhooks.deliveries_sweep())
        finally:
            connection.close()

    threads = [threading.Thread(target=sweep) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    assert sum(made) == 6
    assert min(made) >= 1  # both workers took a share
    ids = [r.headers["Webhook-Id"] for r in receiver.posts]
    assert len(ids) == 6 and len(set(ids)) == 6
    assert all(r.verified for r in receiver.posts)
    for delivery in WebhookDelivery.objects.all():
        assert (delivery.status, delivery.attempts, delivery.attempt_log.count()) == (DeliveryStatus.SUCCEEDED, 1, 1)


@pytest.mark.django_db(transaction=True)
def test_deleting_an_endpoint_waits_for_a_transaction_emitting_to_it(receiver, allow_private, django_user_model):
    """The emitter's commit must not fail on its new delivery's foreign key
    because the endpoint vanished meanwhile: the deletion waits for it."""
    from django.db import transaction

    account = django_user_model.objects.create_user("emitter", "a long enough passphrase")
    endpoint = endpoint_for(account, receiver)
    emitted = threading.Event()
    deleter_pid: list[int] = []
    order: list[str] = []
    outcome: dict[str, object] = {}

    def deleter_waits_on_a_lock() -> bool:
        with connection.cursor() as cursor:
            cursor.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", deleter_pid)
            row = cursor.fetchone()
        return row is not None and row[0] == "Lock"

    def caller():
        try:
            with transaction.atomic():
                webhooks.event_emit(account=account, type="invoice.settled", data={})
                emitted.set()
                # The rest of the caller's work goes on while the deletion waits for it.
                wait_until(lambda: bool(deleter_pid), what="the deletion to start")
                wait_until(deleter_waits_on_a_lock, what="the deletion to wait on the caller's lock")
                order.append("caller commits")
            outcome["caller"] = "committed"
        except Exception as exc:  # what the test looks for
            outcome["caller"] = repr(exc)
        finally:
            emitted.set()
            connection.close()

    def customer_deletes():
        emitted.wait()
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                deleter_pid.append(cursor.fetchone()[0])
            webhooks.endpoint_delete(account=account, endpoint_id=endpoint.pk)
            order.append("deleted")
            outcome["delete"] = "done"
        except Exception as exc:
            outcome["delete"] = repr(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=caller), threading.Thread(target=customer_deletes)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    assert outcome["caller"] == "committed"
    assert outcome["delete"] == "done"
    assert order == ["caller commits", "deleted"]  # the deletion waited for the caller's commit
    assert not WebhookEndpoint.objects.exists()
    assert not WebhookDelivery.objects.exists()
    assert WebhookEvent.objects.filter(type="invoice.settled").count() == 1


def test_deliveries_go_to_their_own_queue_when_one_is_named(settings):
    """A slow endpoint holds a delivery worker for WEBHOOK_TIMEOUT_SECONDS a try: with
    WEBHOOK_QUEUE set (deploy/env.example), deliveries are published there, for
    gpurenthub-webhooks.service alone, and the chain watchers' jobs stay where they were."""
    from config.celery import app

    def queue_of(name):
        return app.amqp.router.route({}, name)["queue"].name

    settings.WEBHOOK_QUEUE = "webhooks"
    assert queue_of("webhooks.delivery_attempt") == "webhooks"
    assert queue_of("webhooks.deliveries_sweep") == "webhooks"
    assert queue_of("billing.chain_scan") == app.conf.task_default_queue
    settings.WEBHOOK_QUEUE = ""  # make run, the tests: one worker takes everything
    assert queue_of("webhooks.delivery_attempt") == app.conf.task_default_queue
