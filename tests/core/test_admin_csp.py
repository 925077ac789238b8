"""Admin pages (the login included) and the API docs send a
Content-Security-Policy; the docs page's script and styles are files, so the
policy needs no inline exception. (tests/rentals/test_admin_browser.py checks in
Chromium that nothing on these pages breaks the policy.)"""

from __future__ import annotations

import pytest
from django.test import Client

from core.csp import HEADER, STRICT, csp_header_value, csp_policy

pytestmark = pytest.mark.django_db

ADMIN_POLICY = csp_header_value(STRICT)
DOCS_POLICY = csp_header_value(csp_policy(img_src=["'self'", "data:"]))


@pytest.fixture
def admin_client(django_user_model):
    boss = django_user_model.objects.create_superuser("boss", "a-long-staff-password")
    client = Client()
    client.force_login(boss)
    return client


def test_the_login_page_and_a_failed_login_send_the_policy():
    client = Client()
    assert client.get("/admin/login/")[HEADER] == ADMIN_POLICY
    failed = client.post("/admin/login/", {"username": "nobody", "password": "wrong-password-1"})
    assert failed.status_code == 200 and failed[HEADER] == ADMIN_POLICY
    # A page that sends an anonymous visitor to the login says so too.
    assert client.get("/admin/billing/invoice/")[HEADER] == ADMIN_POLICY


@pytest.mark.parametrize(
    "url",
    [
        "/admin/",
        "/admin/rentals/rentaldashboard/",
        "/admin/billing/invoice/",
        "/admin/catalog/gpumodel/",
        "/admin/catalog/gpumodel/add/",
        "/admin/two-factor/",
        "/admin/password_change/",
        "/admin/jsi18n/",
    ],
)
def test_admin_pages_send_the_strict_policy(admin_client, catalog, url):
    resp = admin_client.get(url)
    assert resp.status_code == 200, url
    assert resp[HEADER] == ADMIN_POLICY
    assert "unsafe-inline" not in resp[HEADER]


def test_the_strict_policy_holds_for_the_admin_markup(admin_client, catalog):
    """No inline script or style attribute in what the admin renders (they would be refused)."""
    for url in ("/admin/", "/admin/rentals/rentaldashboard/", "/admin/two-factor/", "/admin/catalog/gpumodel/"):
        html = admin_client.get(url).content.decode()
        assert ' style="' not in html, url
        assert "<script>" not in html and "<style" not in html, url


def test_the_api_docs_send_a_policy_and_load_their_script_as_a_file():
    client = Client()
    page = client.get("/api/docs/")
    assert page.status_code == 200 and page[HEADER] == DOCS_POLICY
    html = page.content.decode()
    assert "<style" not in html and "<script>" not in html
    assert 'src="/api/docs/?script="' in html
    script = client.get("/api/docs/?script=")
    assert script.status_code == 200 and script["Content-Type"].startswith("application/javascript")
    assert "/api/schema/" in script.content.decode()
