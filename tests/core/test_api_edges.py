"""Inputs and URLs an attacker or a lost client sends: a body nested a thousand
deep, a wrong URL under /api/ with DEBUG on, a trailing slash; the index at
/api/v1/; answers carrying secrets are never cached."""

from __future__ import annotations

import pytest
from django.test import override_settings
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db

DEEP = "[" * 1000 + "]" * 1000
DEEP_OBJECT = '{"a":' * 1000 + "1" + "}" * 1000


@pytest.fixture
def customer_token(customer):
    from accounts.services import token_create

    return token_create(account=customer, name="t").raw


@pytest.mark.parametrize("body", [DEEP, DEEP_OBJECT], ids=["arrays", "objects"])
def test_a_body_nested_a_thousand_deep_is_a_400_on_every_json_endpoint(api, body, customer_token, catalog):
    schema = api.get("/api/schema/?format=json").json()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {customer_token}")
    seen = 0
    for path, item in schema["paths"].items():
        for method, op in item.items():
            if "requestBody" not in op:
                continue
            url = path
            for param in op.get("parameters", []):
                if param["in"] == "path":
                    url = url.replace("{" + param["name"] + "}", "1")
            resp = getattr(client, method)(url, data=body, content_type="application/json")
            assert resp.status_code < 500, (method, url, resp.content[:200])
            error = resp.json()["error"]
            if "/ops/" in url:
                assert resp.status_code == 403  # staff only: refused before the body is read
                continue
            assert resp.status_code == 400, (method, url, resp.content[:200])
            assert error["code"] == "nesting_too_deep", (method, url, error)
            seen += 1
    assert seen >= 15


def test_unauthenticated_endpoints_refuse_deep_bodies_too(api):
    for url in ("/api/v1/accounts", "/api/v1/auth/token", "/api/v1/sizing/check", "/api/v1/pricing/quote"):
        resp = api.post(url, data=DEEP, content_type="application/json")
        assert resp.status_code == 400, url
        assert resp.json()["error"]["code"] == "nesting_too_deep"


def test_a_body_within_the_limit_is_read(api, settings, catalog):
    settings.API_JSON_MAX_DEPTH = 4
    body = {"gpu": "a100-sxm", "gpu_count": 2, "term": "monthly", "addons": []}  # depth 2
    assert api.post("/api/v1/pricing/quote", body, format="json").status_code == 200
    deeper = {**body, "addons": [[[["x"]]]]}  # depth 5
    resp = api.post("/api/v1/pricing/quote", deeper, format="json")
    assert resp.status_code == 400
    assert resp.json()["error"] == {
        "code": "nesting_too_deep",
        "message": "JSON nested deeper than 4 levels is refused.",
        "details": {},
    }


@pytest.mark.parametrize("debug", [False, True], ids=["production", "debug"])
def test_wrong_urls_under_api_answer_json_in_every_mode(debug):
    client = APIClient()
    with override_settings(DEBUG=debug):
        wrong = client.get("/api/v1/no-such-thing")
        assert wrong.status_code == 404
        assert wrong["Content-Type"] == "application/json"
        assert wrong.json()["error"]["code"] == "not_found"
        assert wrong.json()["error"]["details"] == {"index": "/api/v1/"}
        slash = client.get("/api/v1/catalog/gpus/")
        assert slash.status_code == 404
        assert slash["Content-Type"] == "application/json"
        assert slash.json()["error"]["details"] == {"did_you_mean": "/api/v1/catalog/gpus"}
        outside = client.get("/api/nothing-here")
        assert outside.status_code == 404 and outside.json()["error"]["code"] == "not_found"


def test_a_server_error_under_api_is_json_even_with_debug(monkeypatch):
    from catalog.views import GpuListView

    def boom(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(GpuListView, "get", boom)
    client = APIClient(raise_request_exception=False)
    with override_settings(DEBUG=True):
        resp = client.get("/api/v1/catalog/gpus")
    assert resp.status_code == 500
    assert resp["Content-Type"] == "application/json"
    assert resp.json()["error"]["code"] == "server_error"
    assert "Traceback" not in resp.content.decode()


def test_the_api_root_is_an_index(api):
    resp = api.get("/api/v1/")
    assert resp.status_code == 200
    body = resp.json()
    assert body["schema"] == "/api/schema/" and body["docs"] == "/api/docs/"
    for path in ("/api/v1/accounts", "/api/v1/orders", "/api/v1/invoices/{invoice_id}", "/api/v1/sizing/check"):
        assert path in body["endpoints"]
    # Without the slash, Django's redirect to it.
    assert api.get("/api/v1").status_code in (301, 302)


@pytest.mark.parametrize("debug", [False, True], ids=["production", "debug"])
def test_the_api_root_works_in_debug_too(debug):
    with override_settings(DEBUG=debug):
        assert APIClient().get("/api/v1/").status_code == 200


# --- Answers that carry secrets ---------------------------------------------------


def test_answers_with_secrets_are_not_cached(api, settings):
    settings.AUTH_FAILURES_PER_USERNAME = 100
    password = "violet-harbour-lantern-93"
    signup = api.post("/api/v1/accounts", {"username": "alice", "password": password}, format="json")
    assert signup.status_code == 201
    assert signup["Cache-Control"] == "no-store"
    token = api.post("/api/v1/auth/token", {"username": "alice", "password": password}, format="json")
    assert token.status_code == 201 and token["Cache-Control"] == "no-store"
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token.json()['token']}")
    codes = client.post("/api/v1/account/recovery-codes", {"password": password}, format="json")
    assert codes.status_code == 200 and codes["Cache-Control"] == "no-store"
    recover = api.post(
        "/api/v1/auth/recover",
        {
            "username": "alice",
            "recovery_code": codes.json()["recovery_codes"][0],
            "new_password": "amber-quarry-whistle-58",
        },
        format="json",
    )
    assert recover.status_code == 200 and recover["Cache-Control"] == "no-store"
    # Answers without a secret keep the default.
    assert "no-store" not in api.get("/api/v1/catalog/gpus").get("Cache-Control", "")


def test_webhook_secrets_are_not_cached(customer_api):
    from webhooks import views as webhook_views

    views = [webhook_views.WebhookEndpointListView, webhook_views.WebhookSecretRotateView]
    assert all(view.no_store for view in views)
    resp = customer_api.post("/api/v1/webhooks/1/rotate-secret", {}, format="json")
    assert resp["Cache-Control"] == "no-store"  # even the refusal (no such endpoint)
    assert resp.status_code == 404


def test_a_parser_that_runs_out_of_stack_answers_400(api, monkeypatch):
    """Where the JSON decoder itself gives up (a RecursionError: Python builds
    and thread stacks differ in how deep they go), the answer is the same 400."""
    from rest_framework import parsers

    def too_deep(*args, **kwargs):
        raise RecursionError("maximum recursion depth exceeded while decoding a JSON object")

    monkeypatch.setattr(parsers.json, "load", too_deep)
    resp = api.post("/api/v1/accounts", data=DEEP, content_type="application/json")
    assert resp.status_code == 400
    assert resp.json()["error"]["code"] == "nesting_too_deep"


def test_a_disallowed_host_under_api_gets_json_not_the_debug_page():
    """With DEBUG on, Django's answer to an unknown Host is a page showing the
    settings; under /api/ it is the error shape."""
    client = APIClient(HTTP_HOST="gpu.example.net")
    with override_settings(DEBUG=True, ALLOWED_HOSTS=["127.0.0.1"]):
        resp = client.get("/api/v1/catalog/gpus")
    assert resp.status_code == 400
    assert resp["Content-Type"] == "application/json"
    assert resp.json()["error"]["code"] == "bad_request"
    assert "ALLOWED_HOSTS" not in resp.content.decode() and "SECRET" not in resp.content.decode()


def test_the_schema_is_generated_once_per_format_and_language(api, catalog, monkeypatch):
    """Generating the schema takes some 170 ms of CPU: a process does it once per
    format and language; a `lang` it does not have, or a `version` (there is
    one), is a 400, not another schema to generate."""
    from drf_spectacular.generators import SchemaGenerator

    from catalog.serializers import schema_version as changed_version
    from core.views import SchemaView

    monkeypatch.setattr(SchemaView, "kept", {})
    generated = []
    real = SchemaGenerator.get_schema

    def counted(self, *args, **kwargs):
        generated.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(SchemaGenerator, "get_schema", counted)
    first = api.get("/api/schema/?format=json")
    again = api.get("/api/schema/?format=json")
    assert first.status_code == again.status_code == 200 and len(generated) == 1
    assert again.content == first.content and again["Content-Type"] == first["Content-Type"]
    assert again["Content-Disposition"] == first["Content-Disposition"]
    assert first.json()["info"]["version"] == "1"
    yaml = api.get("/api/schema/")
    assert yaml.status_code == 200 and yaml.content.startswith(b"openapi:") and len(generated) == 2
    assert api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi").content == yaml.content
    # An indent asked for is its own document, not what everyone else gets from then on.
    wide = api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json; indent=8")
    assert wide.content != first.content and len(generated) == 3
    assert api.get("/api/schema/?format=json").content == first.content
    assert api.get("/api/schema/?format=json&lang=es").status_code == 200 and len(generated) == 4
    refused = api.get("/api/schema/?format=json&lang=xx")
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "invalid"
    assert "lang" in refused.json()["error"]["details"]["fields"]
    assert api.get("/api/schema/?format=json&version=9").status_code == 400
    assert len(generated) == 4
    # A catalog change (its enums are in the schema) is in the next one.
    from catalog.models import Region

    Region.objects.filter(code="DFW-1").update(is_active=False)
    changed = api.get("/api/schema/?format=json")
    assert len(generated) == 5 and changed.content != first.content

    def regions(schema):
        parameters = schema["paths"]["/api/v1/catalog/stock"]["get"]["parameters"]
        return next(p["schema"]["enum"] for p in parameters if p["name"] == "region")

    assert "DFW-1" in regions(first.json()) and "DFW-1" not in regions(changed.json())
    assert all(key[0] == changed_version() for key in SchemaView.kept)  # the older catalog's are let go
