"""Standard Webhooks signatures: verified with the standardwebhooks library's
own verifier, by an independent HMAC computation, and by the docs' openssl
command line; and the overlap after a secret is rotated, when each delivery
carries the signatures of both secrets."""

from __future__ import annotations

import json
import subprocess
import textwrap
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from tests.webhooks.receiver import independent_signature, signature_verify, standard_verify
from webhooks import services as webhooks
from webhooks.models import WebhookEndpoint
from webhooks.signing import secret_generate, secret_is_valid, signature_headers

pytestmark = pytest.mark.django_db

T0 = datetime(2031, 3, 1, 12, 0, tzinfo=UTC)

# The docs' command line (docs/webhooks.md), run as written with the three
# headers and the secret in the environment and the body in body.json.
OPENSSL_LINE = textwrap.dedent(
    """\
    KEY=$(printf '%s' "${SECRET#whsec_}" | base64 -d | od -An -v -tx1 | tr -d ' \\n')
    { printf '%s.%s.' "$WEBHOOK_ID" "$WEBHOOK_TIMESTAMP"; cat body.json; } \\
      | openssl dgst -sha256 -mac HMAC -macopt "hexkey:$KEY" -binary | base64
    """
)


@pytest.fixture
def emit(django_capture_on_commit_callbacks):
    def _emit(account, data=None):
        with django_capture_on_commit_callbacks(execute=True):
            return webhooks.event_emit(account=account, type="invoice.settled", data=data or {"invoice": "GRH-000009"})

    return _emit


def _endpoint(account, receiver) -> WebhookEndpoint:
    created = webhooks.endpoint_create(account=account, url=receiver.url, events=["invoice.settled"])
    receiver.secret = created.secret
    return created.endpoint


def _lower(headers: dict[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}


def test_secrets_are_standard_webhooks_secrets():
    secret = secret_generate()
    assert secret.startswith("whsec_") and secret_is_valid(secret)
    assert len(Webhook(secret)._whsecret) == 32
    assert secret_generate() != secret
    assert not secret_is_valid("whsec_not base64!")
    assert not secret_is_valid("whsec_" + "QUJD")  # 3 bytes: too short a key
    assert not secret_is_valid("s")


def test_the_library_verifies_a_delivery_and_refuses_a_forgery(customer, receiver, allow_private, emit):
    endpoint = _endpoint(customer, receiver)
    with time_machine.travel(T0, tick=False) as clock:
        event = emit(customer, data={"invoice": "GRH-000009", "note": "café ☕"})
        request = receiver.posts[0]
        headers = _lower(request.headers)
        assert (headers["webhook-id"], headers["webhook-timestamp"]) == (str(event.id), str(int(T0.timestamp())))
        assert headers["webhook-signature"].startswith("v1,")

        verified = Webhook(endpoint.secret).verify(request.body, request.headers)
        assert verified == json.loads(request.body)
        assert verified["data"]["note"] == "café ☕"
        for tampered in (
            request.body.replace(b"GRH-000009", b"GRH-000010"),
            request.body + b" ",
        ):
            with pytest.raises(WebhookVerificationError):
                Webhook(endpoint.secret).verify(tampered, request.headers)
        with pytest.raises(WebhookVerificationError):
            Webhook(secret_generate()).verify(request.body, request.headers)
        with pytest.raises(WebhookVerificationError):
            Webhook(endpoint.secret).verify(request.body, headers | {"webhook-id": "another-id"})
        # A replay more than five minutes later is refused by the library.
        clock.shift(timedelta(minutes=5, seconds=1))
        with pytest.raises(WebhookVerificationError, match="too old"):
            Webhook(endpoint.secret).verify(request.body, request.headers)


def test_an_independent_hmac_gives_the_same_signature(customer, receiver, allow_private, emit):
    endpoint = _endpoint(customer, receiver)
    emit(customer)
    request = receiver.posts[0]
    headers = _lower(request.headers)
    expected = independent_signature(endpoint.secret, headers["webhook-id"], headers["webhook-timestamp"], request.body)
    assert headers["webhook-signature"] == f"v1,{expected}"
    assert request.verified_standard is True and request.verified_independent is True
    # The header sent before stays, and still verifies the old way.
    assert headers["grh-signature"].startswith(f"t={headers['webhook-timestamp']},v1=")
    assert request.verified_legacy is True


def test_the_docs_openssl_line_computes_the_same_signature(customer, receiver, allow_private, emit, tmp_path):
    endpoint = _endpoint(customer, receiver)
    emit(customer, data={"invoice": "GRH-000009", "note": "café ☕"})
    request = receiver.posts[0]
    headers = _lower(request.headers)
    (tmp_path / "body.json").write_bytes(request.body)
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "SECRET": endpoint.secret,
        "WEBHOOK_ID": headers["webhook-id"],
        "WEBHOOK_TIMESTAMP": headers["webhook-timestamp"],
    }
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", OPENSSL_LINE],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert f"v1,{done.stdout.strip()}" == headers["webhook-signature"]


def test_signature_headers_carry_one_signature_per_secret():
    first, second = secret_generate(), secret_generate()
    body = b'{"id":"e1","type":"ping"}'
    headers = signature_headers(msg_id="e1", timestamp=1_900_000_000, body=body, secrets=[first, second])
    standard = headers["Webhook-Signature"].split(" ")
    assert [s.split(",")[0] for s in standard] == ["v1", "v1"]
    assert standard[0] == "v1," + independent_signature(first, "e1", "1900000000", body)
    assert standard[1] == "v1," + independent_signature(second, "e1", "1900000000", body)
    legacy = headers["GRH-Signature"]
    assert legacy.startswith("t=1900000000,v1=") and legacy.count(",v1=") == 2
    with pytest.raises(ValueError):
        signature_headers(msg_id="e1", timestamp=1_900_000_000, body=body, secrets=[])


# =============================================================================
# Rotation and its overlap
# =============================================================================


def test_rotating_keeps_the_old_secret_signing_for_the_overlap(
    customer, customer_api, receiver, allow_private, emit, settings
):
    settings.WEBHOOK_SECRET_ROTATION_OVERLAP = timedelta(hours=24)
    endpoint = _endpoint(customer, receiver)
    old = endpoint.secret
    with time_machine.travel(T0, tick=False) as clock:
        resp = customer_api.post(f"/api/v1/webhooks/{endpoint.pk}/rotate-secret")
        assert resp.status_code == 200, resp.json()
        new = resp.json()["secret"]
        assert new != old and secret_is_valid(new)
        assert resp.json()["previous_secret_expires_at"] == "2031-03-02T12:00:00Z"
        shown = customer_api.get(f"/api/v1/webhooks/{endpoint.pk}").json()
        assert shown["previous_secret_expires_at"] == "2031-03-02T12:00:00Z"
        assert "secret" not in shown and "previous_secret" not in shown

        clock.shift(timedelta(hours=23, minutes=59, seconds=59))
        receiver.secret = new
        emit(customer)
        during = receiver.posts[-1]
        headers = _lower(during.headers)
        assert len(headers["webhook-signature"].split(" ")) == 2
        assert headers["grh-signature"].count("v1=") == 2
        for secret in (new, old):  # a receiver holding either secret accepts it
            assert standard_verify(secret, during.headers, during.body)
            assert signature_verify(secret, headers["grh-signature"], during.body)
        assert during.verified is True

        clock.shift(timedelta(seconds=1))
        emit(customer)
        after = receiver.posts[-1]
        headers = _lower(after.headers)
        assert len(headers["webhook-signature"].split(" ")) == 1
        assert headers["grh-signature"].count("v1=") == 1
        assert standard_verify(new, after.headers, after.body)
        assert not standard_verify(old, after.headers, after.body)
        assert not signature_verify(old, headers["grh-signature"], after.body)


def test_a_retry_after_the_overlap_is_signed_with_the_new_secret_only(
    customer, receiver, allow_private, emit, settings
):
    settings.WEBHOOK_SECRET_ROTATION_OVERLAP = timedelta(minutes=5)
    endpoint = _endpoint(customer, receiver)
    old = endpoint.secret
    receiver.fail_times = 1
    with time_machine.travel(T0, tick=False) as clock:
        emit(customer)
        new = webhooks.endpoint_secret_rotate(account=customer, endpoint_id=endpoint.pk).secret
        clock.shift(timedelta(minutes=10))
        assert webhooks.deliveries_sweep() == 1
        retry = receiver.posts[-1]
        assert standard_verify(new, retry.headers, retry.body)
        assert not standard_verify(old, retry.headers, retry.body)


def test_a_second_rotation_ends_the_first_overlap(customer, receiver, allow_private, emit, settings):
    settings.WEBHOOK_SECRET_ROTATION_OVERLAP = timedelta(hours=24)
    endpoint = _endpoint(customer, receiver)
    first = endpoint.secret
    with time_machine.travel(T0, tick=False) as clock:
        second = webhooks.endpoint_secret_rotate(account=customer, endpoint_id=endpoint.pk).secret
        clock.shift(timedelta(hours=1))
        third = webhooks.endpoint_secret_rotate(account=customer, endpoint_id=endpoint.pk).secret
        emit(customer)
        request = receiver.posts[-1]
        assert standard_verify(third, request.headers, request.body)
        assert standard_verify(second, request.headers, request.body)
        assert not standard_verify(first, request.headers, request.body)
    endpoint.refresh_from_db()
    assert endpoint.previous_secret_expires_at == T0 + timedelta(hours=25)


def test_a_leaked_secret_can_be_ended_at_once(customer, customer_api, receiver, allow_private, emit):
    endpoint = _endpoint(customer, receiver)
    old = endpoint.secret
    resp = customer_api.post(f"/api/v1/webhooks/{endpoint.pk}/rotate-secret", {"overlap_seconds": 0}, format="json")
    assert resp.status_code == 200, resp.json()
    assert resp.json()["previous_secret_expires_at"] is None
    receiver.secret = resp.json()["secret"]
    emit(customer)
    request = receiver.posts[-1]
    assert request.verified is True
    assert not standard_verify(old, request.headers, request.body)
    endpoint.refresh_from_db()
    assert (endpoint.previous_secret, endpoint.previous_secret_expires_at) == ("", None)


def test_a_shorter_overlap_is_allowed_a_longer_one_is_refused(customer, customer_api, settings):
    settings.WEBHOOK_SECRET_ROTATION_OVERLAP = timedelta(hours=24)
    endpoint = webhooks.endpoint_create(
        account=customer, url="https://93.184.215.14/hooks", events=["invoice.settled"]
    ).endpoint
    url = f"/api/v1/webhooks/{endpoint.pk}/rotate-secret"
    with time_machine.travel(T0, tick=False):
        resp = customer_api.post(url, {"overlap_seconds": 3600}, format="json")
        assert resp.status_code == 200
        assert resp.json()["previous_secret_expires_at"] == "2031-03-01T13:00:00Z"
        refused = customer_api.post(url, {"overlap_seconds": 86401}, format="json")
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "invalid_overlap"
    assert refused.json()["error"]["details"] == {"max_seconds": 86400}
    for bad in (-1, "soon", 10**12):
        resp = customer_api.post(url, {"overlap_seconds": bad}, format="json")
        assert resp.status_code == 400
        assert resp.json()["error"]["code"] == "invalid"


def test_rotation_is_audited_without_the_secrets(customer, settings):
    from core.models import AuditEntry

    settings.WEBHOOK_SECRET_ROTATION_OVERLAP = timedelta(hours=2)
    created = webhooks.endpoint_create(account=customer, url="https://93.184.215.14/hooks", events=["invoice.settled"])
    with time_machine.travel(T0, tick=False):
        rotated = webhooks.endpoint_secret_rotate(account=customer, endpoint_id=created.endpoint.pk)
    entry = AuditEntry.objects.get(action="webhook.rotate_secret")
    assert entry.changes == {"previous_secret_expires_at": "2031-03-01T14:00:00+00:00"}
    text = json.dumps(entry.changes)
    assert created.secret not in text and rotated.secret not in text
