"""The OpenAPI schema is valid OpenAPI 3, the docs work offline, and no
generated input makes any endpoint answer 5xx (schemathesis over the whole
schema, authenticated as a customer with a key, an order and a webhook)."""

import os

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from openapi_spec_validator import validate
from schemathesis.config import SchemathesisConfig

from config.wsgi import application

pytestmark = pytest.mark.django_db


def test_schema_is_valid_openapi_3(api):
    resp = api.get("/api/schema/?format=json")
    assert resp.status_code == 200
    schema = resp.json()
    assert schema["openapi"].startswith("3.")
    validate(schema)
    paths = set(schema["paths"])
    for path in (
        "/api/v1/accounts",
        "/api/v1/auth/token",
        "/api/v1/catalog/gpus",
        "/api/v1/pricing/quote",
        "/api/v1/sizing/check",
        "/api/v1/sizing/recommend",
        "/api/v1/orders",
        "/api/v1/invoices/{invoice_id}",
        "/api/v1/rentals",
        "/api/v1/webhooks",
        "/api/v1/currencies",
    ):
        assert path in paths, path


def test_docs_are_served_offline(api):
    resp = api.get("/api/docs/")
    assert resp.status_code == 200
    html = resp.content.decode()
    assert "swagger-ui" in html
    assert "cdn.jsdelivr.net" not in html and "unpkg.com" not in html
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/" in html


# Every check schemathesis has, as configured by default, but one: a request the
# schema allows may still be refused by a rule the schema cannot state (a card
# slug that is not in the catalog, a password the validators refuse, a model
# that does not fit): a documented 400 or 422 in the error shape, not a defect.
CONFIG = SchemathesisConfig.from_str(
    """
[checks.positive_data_acceptance]
expected-statuses = ["2xx", "3xx", "400", "401", "403", "404", "409", "422", "429"]
"""
)
schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", application, config=CONFIG)


@pytest.fixture
def keep_connection():
    """Calling the WSGI app directly (as schemathesis does) would close the
    test's database connection at the end of each request; Django's own test
    client disconnects the same handlers."""
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections

    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def token(chains, catalog, customer, keep_connection):
    from accounts.services import ssh_key_add, token_create
    from tests.rentals.helpers import new_key_line

    ssh_key_add(account=customer, public_key=new_key_line(), name="k")
    return token_create(account=customer, name="fuzz").raw


@pytest.mark.slow
@schema.parametrize()
@settings(
    max_examples=int(os.environ.get("SCHEMA_FUZZ_EXAMPLES", "12")),
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
def test_no_input_gets_a_server_error_or_breaks_the_schema(case, token):
    """Every check schemathesis has: no 5xx, and every answer (status, content
    type, headers, body) as the schema says."""
    # Given as the caller's headers, so the auth checks know it is real (and try the call without it).
    response = case.call_and_validate(headers={"Authorization": f"Bearer {token}"})
    assert response.status_code < 500, (case.method, case.path, case.body, response.text[:500])
    if 400 <= response.status_code < 500 and response.headers.get("Content-Type", "").startswith("application/json"):
        body = response.json()
        assert set(body) == {"error"} and {"code", "message", "details"} <= set(body["error"]), body
