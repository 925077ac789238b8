"""Webhook settings, the periodic sweep's schedule, and the staff admin."""

from __future__ import annotations

import os
import subprocess

import pytest
from django.conf import settings as django_settings
from django.test import Client

from accounts.models import Account
from tests.warm_python import python_run
from webhooks import services as webhooks
from webhooks.models import WebhookDelivery, WebhookEndpoint

pytestmark = pytest.mark.django_db


def _import_settings(**env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "WEBHOOK_ALLOW_PRIVATE_TARGETS")}
    environment.update(SECRET_KEY="settings-import-check-0123456789", **env)
    return python_run(
        "-c",
        "import config.settings as s; print(s.WEBHOOK_ALLOW_PRIVATE_TARGETS)",
        cwd=django_settings.BASE_DIR,
        env=environment,
        timeout=60,
    )


@pytest.mark.slow
def test_private_targets_are_refused_at_start_up_without_debug():
    refused = _import_settings(WEBHOOK_ALLOW_PRIVATE_TARGETS="1")
    assert refused.returncode != 0
    assert "ImproperlyConfigured" in refused.stderr and "WEBHOOK_ALLOW_PRIVATE_TARGETS" in refused.stderr

    local = _import_settings(WEBHOOK_ALLOW_PRIVATE_TARGETS="1", DEBUG="1")
    assert local.returncode == 0, local.stderr
    assert local.stdout.strip() == "True"

    default = _import_settings()
    assert default.returncode == 0, default.stderr
    assert default.stdout.strip() == "False"


def test_the_defaults():
    assert django_settings.WEBHOOK_ALLOW_PRIVATE_TARGETS is False
    assert django_settings.WEBHOOK_TIMEOUT_SECONDS == 10


def test_the_sweep_runs_every_ten_seconds():
    from config.celery import app

    app.loader.import_default_modules()  # what a worker does at start: autodiscovery finds webhooks.tasks
    entry = django_settings.CELERY_BEAT_SCHEDULE["webhooks.deliveries_sweep"]
    assert entry["schedule"] == 10.0
    assert entry["task"] in app.tasks
    assert "webhooks.delivery_attempt" in app.tasks


# =============================================================================
# Admin: read-only lists; the secret never shown
# =============================================================================


@pytest.fixture
def staff_client() -> Client:
    client = Client()
    client.force_login(Account.objects.create_superuser("boss", "violet-harbour-lantern-93"))
    return client


@pytest.fixture
def recorded(customer):
    created = webhooks.endpoint_create(
        account=customer, url="https://93.184.215.14/hooks", events=["invoice.settled"], description="prod"
    )
    webhooks.event_emit(account=customer, type="invoice.settled", data={"invoice": "GRH-000001"})
    return created


@pytest.mark.parametrize("model", ["webhookendpoint", "webhookevent", "webhookdelivery"])
def test_staff_see_read_only_lists_without_the_secret(staff_client, recorded, model):
    changelist = staff_client.get(f"/admin/webhooks/{model}/")
    assert changelist.status_code == 200
    assert recorded.secret not in changelist.content.decode()
    assert staff_client.get(f"/admin/webhooks/{model}/add/").status_code == 403
    assert staff_client.get(f"/admin/webhooks/{model}/", {"q": "not-a-uuid"}).status_code == 200

    obj = {
        "webhookendpoint": recorded.endpoint,
        "webhookevent": WebhookDelivery.objects.get().event,
        "webhookdelivery": WebhookDelivery.objects.get(),
    }[model]
    detail = staff_client.get(f"/admin/webhooks/{model}/{obj.pk}/change/")
    assert detail.status_code == 200
    assert recorded.secret not in detail.content.decode()
    assert staff_client.post(f"/admin/webhooks/{model}/{obj.pk}/delete/", {"post": "yes"}).status_code == 403
    assert WebhookEndpoint.objects.filter(pk=recorded.endpoint.pk).exists()


@pytest.mark.parametrize(
    "lookup", ["secret__startswith", "secret__regex", "secret", "previous_secret__startswith", "secret__gte"]
)
def test_staff_cannot_filter_endpoints_by_their_secret(staff_client, recorded, lookup):
    # A count per filtered list would give the secret away one character at a time.
    resp = staff_client.get("/admin/webhooks/webhookendpoint/", {lookup: recorded.secret[:8]})
    assert resp.status_code == 400
    assert recorded.secret not in resp.content.decode()
    # Filters on what the list shows still work.
    assert staff_client.get("/admin/webhooks/webhookendpoint/", {"is_active__exact": "1"}).status_code == 200


def _rotation_overlap(**env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "WEBHOOK_SECRET_ROTATION_OVERLAP")}
    environment.update(SECRET_KEY="settings-import-check-0123456789", **env)
    return python_run(
        "-c",
        "import config.settings as s; print(int(s.WEBHOOK_SECRET_ROTATION_OVERLAP.total_seconds()))",
        cwd=django_settings.BASE_DIR,
        env=environment,
        timeout=60,
    )


@pytest.mark.slow
def test_the_rotation_overlap_setting():
    assert django_settings.WEBHOOK_SECRET_ROTATION_OVERLAP.total_seconds() == 86400
    for given, seconds in (("", "86400"), ("3600", "3600"), ("90m", "5400"), ("36h", "129600"), ("2d", "172800")):
        done = _rotation_overlap(**({"WEBHOOK_SECRET_ROTATION_OVERLAP": given} if given else {}))
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == seconds
    for bad in ("soon", "-1h", "31d"):
        refused = _rotation_overlap(WEBHOOK_SECRET_ROTATION_OVERLAP=bad)
        assert refused.returncode != 0
        assert "ImproperlyConfigured" in refused.stderr and "WEBHOOK_SECRET_ROTATION_OVERLAP" in refused.stderr
