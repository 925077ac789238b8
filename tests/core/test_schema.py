"""The OpenAPI schema is valid OpenAPI 3, the docs work offline, and no
generated input makes any endpoint answer 5xx (schemathesis over the whole
schema, authenticated as a customer with a key, an order and a webhook)."""

import os
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from openapi_spec_validator import validate
from schemathesis import GenerationMode
from schemathesis.config import SchemathesisConfig
from schemathesis.specs.openapi.checks import positive_data_acceptance

from config.wsgi import application
from tests.schema_rules import refusal_allowed

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


# The settings the CLI reads too (schemathesis.toml says why each is there).
CONFIG = SchemathesisConfig.from_path(str(Path(__file__).resolve().parents[2] / "schemathesis.toml"))
EXAMPLES = int(os.environ.get("SCHEMA_FUZZ_EXAMPLES", "12"))


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
# Transactional, as a server runs: each request commits on its own, so a service
# that locks rows (select_for_update) outside a transaction of its own answers 500
# here as it would in production, instead of hiding inside the test's transaction.
@pytest.mark.django_db(transaction=True)
def test_no_input_gets_a_server_error_or_breaks_the_schema(token):
    """Every check schemathesis has, on positive and negative data for every
    operation: no 5xx, every answer (status, content type, headers, body) as the
    schema says, valid requests accepted and invalid ones refused. The schema is
    loaded here, not at import: its enums are read from the catalog."""
    schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", application, config=CONFIG)
    # Given as the caller's headers, so the auth checks know it is real (and try the call without it).
    headers = {"Authorization": f"Bearer {token}"}
    failures = []

    def run(case):
        response = case.call(headers=headers)
        assert response.status_code < 500, (case.method, case.path, case.body, response.text[:500])
        excluded = [positive_data_acceptance] if refusal_allowed(response) else []
        case.validate_response(response, headers=headers, excluded_checks=excluded)

    for result in schema.get_all_operations():
        operation = result.ok()
        for mode in GenerationMode:
            test = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))(
                given(case=operation.as_strategy(generation_mode=mode))(run)
            )
            try:
                test()
            except Unsatisfiable:  # no invalid request exists (an operation with no parameters or body)
                assert mode is GenerationMode.NEGATIVE, operation.label
            except (
                Exception,
                BaseExceptionGroup,
            ) as exc:  # every operation is tried; the failures are reported together
                failures.append(f"{operation.label} ({mode.value}): {exc}")
    assert not failures, "\n\n".join(failures)


def test_each_create_links_to_its_reads_and_deletes(api):
    schema = api.get("/api/schema/?format=json").json()
    paths = schema["paths"]

    def links(path: str) -> dict:
        return {k: v["parameters"] for k, v in paths[path]["post"]["responses"]["201"]["links"].items()}

    assert links("/api/v1/account/ssh-keys") == {
        "account_ssh_keys_retrieve": {"ssh_key_id": "$response.body#/id"},
        "account_ssh_keys_delete": {"ssh_key_id": "$response.body#/id"},
    }
    assert {"orders_retrieve", "orders_cancel_create"} <= set(links("/api/v1/orders"))
    assert {"webhooks_retrieve", "webhooks_update", "webhooks_delete", "webhooks_ping"} <= set(
        links("/api/v1/webhooks")
    )
    assert links("/api/v1/auth/token") == {"auth_token_revoke": {"token_id": "$response.body#/id"}}
    for path in ("/api/v1/orders", "/api/v1/webhooks", "/api/v1/account/ssh-keys"):
        for link in paths[path]["post"]["responses"]["201"]["links"].values():
            [target] = [
                op
                for item in paths.values()
                for op in item.values()
                if isinstance(op, dict) and op.get("operationId") == link["operationId"]
            ]
            assert {p["name"] for p in target["parameters"] if p["in"] == "path"} == set(link["parameters"])


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_stateful_phase_follows_the_links(token):
    """Schemathesis's state machine: creates, then the reads, updates and deletes their
    links lead to, with every check and the same allowances as above."""
    schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", application, config=CONFIG)
    headers = {"Authorization": f"Bearer {token}"}

    class Workflow(schema.as_state_machine()):
        def get_call_kwargs(self, case):
            return {"headers": headers}

        def validate_response(self, response, case, additional_checks=None, **kwargs):
            assert response.status_code < 500, (case.method, case.path, case.body, response.text[:500])
            excluded = [positive_data_acceptance] if refusal_allowed(response) else []
            case.validate_response(
                response,
                headers=headers,
                excluded_checks=excluded,
                transport_kwargs=kwargs or None,
                recorder=getattr(self, "recorder", None),
            )

    Workflow.run(
        settings=settings(
            max_examples=EXAMPLES, stateful_step_count=6, deadline=None, suppress_health_check=list(HealthCheck)
        )
    )
