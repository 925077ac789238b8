"""A Python client generated from the served schema by openapi-python-client, as
docs/api.md tells a customer to make one, runs the README walk-through's first
steps: sign up, a token, the catalog, a quote, an SSH key and an order. The
client is generated into the test's temporary folder, never committed."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from config.wsgi import application

pytestmark = [pytest.mark.django_db, pytest.mark.slow]

PACKAGE = "gpu_rent_hub_client"


@pytest.fixture
def keep_connection():
    """Calling the WSGI app directly would close the test's database connection
    at the end of each request; Django's own test client disconnects the same handlers."""
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections

    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def client_package(catalog, chains, tmp_path, keep_connection):
    """The client, generated from /api/schema/ and imported. (Fetched through the WSGI app as the
    client's calls are: Django's test client would connect the handler keep_connection disconnects.)"""
    with httpx.Client(transport=httpx.WSGITransport(app=application), base_url="http://testserver") as http:
        schema = http.get("/api/schema/?format=json")
    assert schema.status_code == 200
    (tmp_path / "schema.json").write_text(json.dumps(schema.json()))
    bin_dir = Path(sys.executable).parent
    command = [str(bin_dir / "openapi-python-client"), "generate", "--path", str(tmp_path / "schema.json")]
    done = subprocess.run(
        [*command, "--output-path", str(tmp_path / PACKAGE), "--meta", "none"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    sys.path.insert(0, str(tmp_path))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(tmp_path))
        for name in [n for n in sys.modules if n == PACKAGE or n.startswith(f"{PACKAGE}.")]:
            del sys.modules[name]


def test_the_generated_client_signs_up_quotes_and_orders(client_package):
    from tests.rentals.helpers import new_key_line

    ops = {
        name: importlib.import_module(f"{PACKAGE}.api.{tag}.{name}")
        for tag, name in (
            ("accounts", "account_create"),
            ("accounts", "account_ssh_keys_create"),
            ("accounts", "auth_token_create"),
            ("catalog", "catalog_gpus_list"),
            ("catalog", "catalog_stock_list"),
            ("catalog", "catalog_templates_list"),
            ("pricing", "pricing_quote_create"),
            ("orders", "orders_create"),
        )
    }
    models = importlib.import_module(f"{PACKAGE}.models")
    transport = {"transport": httpx.WSGITransport(app=application)}
    anonymous = client_package.Client(base_url="http://testserver", httpx_args=transport)

    # Sign up: a token and recovery codes.
    signed_up = ops["account_create"].sync_detailed(
        client=anonymous,
        body=models.AccountCreateInputRequest(username="walker", password="violet-harbour-lantern-93"),
    )
    assert signed_up.status_code == 201, signed_up.content
    assert len(signed_up.parsed.recovery_codes) == 10

    # Log in: a token of its own, used for the rest.
    login = ops["auth_token_create"].sync_detailed(
        client=anonymous,
        body=models.TokenObtainInputRequest(username="walker", password="violet-harbour-lantern-93", name="ci"),
    )
    assert login.status_code == 201, login.content
    assert login.parsed.token != signed_up.parsed.token
    client = client_package.AuthenticatedClient(
        base_url="http://testserver", token=login.parsed.token, httpx_args=transport
    )

    # The catalog: a card with stock somewhere, in a count it comes in, and a template for it.
    gpus = {gpu.slug: gpu for gpu in ops["catalog_gpus_list"].sync(client=client)}
    stock = [row for row in ops["catalog_stock_list"].sync(client=client) if row.available >= 1]
    row, count = next(
        (row, n)
        for row in stock
        for n in gpus[row.gpu].allowed_counts
        if gpus[row.gpu].min_gpus <= n <= row.max_per_host
    )
    [template, *_] = [t for t in ops["catalog_templates_list"].sync(client=client) if row.gpu in t.gpus]

    # A quote, then the order it prices.
    quote = ops["pricing_quote_create"].sync_detailed(
        client=client,
        body=models.QuoteInputRequest.from_dict({"gpu": row.gpu, "gpu_count": count, "term": "monthly"}),
    )
    assert quote.status_code == 200, quote.content
    assert quote.parsed.gpu == row.gpu and quote.parsed.gpu_count == count

    key = ops["account_ssh_keys_create"].sync_detailed(
        client=client, body=models.SshKeyCreateInputRequest(public_key=new_key_line(), name="laptop")
    )
    assert key.status_code == 201, key.content

    order = ops["orders_create"].sync_detailed(
        client=client,
        body=models.OrderCreateInputRequest.from_dict(
            {
                "region": row.region,
                "gpu": row.gpu,
                "gpu_count": count,
                "term": "monthly",
                "template": template.slug,
                "ssh_keys": [key.parsed.id],
                "pay_currency": "BTC",
            }
        ),
    )
    assert order.status_code == 201, order.content
    body = json.loads(order.content)
    assert body["total_usd"] == quote.parsed.total_usd, (body["total_usd"], quote.parsed.total_usd)
    assert body["status"] == "awaiting_payment", body["status"]
