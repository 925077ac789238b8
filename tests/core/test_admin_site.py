"""The staff site as a whole: names that read as words, the index in the
order staff use it, no "View site" that leads nowhere, and every page
answering without a server error."""

from __future__ import annotations

import pytest
from django.test import Client
from django.utils import timezone

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(django_user_model):
    boss = django_user_model.objects.create_superuser("boss", "a-long-staff-password")
    client = Client()
    client.force_login(boss)
    return client


def _index(client) -> list[dict]:
    resp = client.get("/admin/")
    assert resp.status_code == 200
    return resp.context["app_list"]


def test_names_read_as_words(admin_client):
    names = {m["name"] for app in _index(admin_client) for m in app["models"]}
    for name in ("Webhook deliveries", "GPU models", "Multi-GPU discounts", "Add-ons", "Exchange rates"):
        assert name in names, sorted(names)
    for wrong in ("Webhook deliverys", "Gpu models", "Multi gpu discounts", "Addons"):
        assert wrong not in names


def test_the_index_leads_with_rentals_and_its_dashboard(admin_client):
    apps = _index(admin_client)
    assert [a["name"] for a in apps][:3] == ["Rentals", "Billing", "Catalog"]
    # The day's pages first; then the rest of the app by name (the benchmark uploads and their chart).
    assert [m["name"] for m in apps[0]["models"]][:3] == ["Dashboard", "Orders", "Rentals"]
    assert [m["name"] for m in apps[0]["models"]][3:] == ["Benchmark runs", "Measured vs predicted"]
    assert "System" in [a["name"] for a in apps] and "Core" not in [a["name"] for a in apps]


def test_no_view_site_link_but_the_dashboard_and_api_docs(admin_client):
    html = admin_client.get("/admin/").content.decode()
    assert "View site" not in html
    assert 'href="/admin/rentals/rentaldashboard/">Dashboard</a>' in html
    assert 'href="/api/docs/">API docs</a>' in html


def test_every_list_and_add_page_answers_without_a_server_error(admin_client, catalog):
    for app in _index(admin_client):
        for model in app["models"]:
            for url in filter(None, (model.get("admin_url"), model.get("add_url"))):
                assert admin_client.get(url).status_code == 200, url


def test_audit_changes_and_webhook_event_data_read_as_tables(admin_client, django_user_model):
    from core.audit import audit_record
    from core.models import AuditEntry
    from webhooks.models import WebhookEvent

    alice = django_user_model.objects.create_user("alice", "a-long-customer-password")
    audit_record(actor=alice, action="admin.change", obj=alice, changes={"is_active": [True, False]}, reason="x")
    entry = AuditEntry.objects.get(action="admin.change")
    html = admin_client.get(f"/admin/core/auditentry/{entry.pk}/change/").content.decode()
    assert '<th scope="row">is_active</th><td>yes, no</td>' in html
    event = WebhookEvent.objects.create(
        account=alice, type="invoice.settled", data={"invoice": {"number": "GRH-1"}}, created_at=timezone.now()
    )
    html = admin_client.get(f"/admin/webhooks/webhookevent/{event.pk}/change/").content.decode()
    assert '<th scope="row">number</th><td>GRH-1</td>' in html
