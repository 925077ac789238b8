"""A Python client generated from the served schema by openapi-python-client, as
docs/api.md tells a customer to make one, runs the README walk-through: sign
up, a token, the catalog, a quote, an SSH key, an order, its invoice, the
payment (recorded as staff record one verified on the node), the hand-over by
a staff `ops` token through the same client, the active rental, a renewal and
its payment. The client is generated into the test's temporary folder, never
committed."""

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


def test_the_generated_client_runs_the_walk_through_to_a_renewal(client_package):
    from django.contrib.auth.models import Permission

    from accounts.models import Account
    from tests.accounts.helpers import code_for, enrolled
    from tests.rentals.helpers import committed, new_key_line, pay

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
            ("orders", "orders_list"),
            ("orders", "orders_retrieve"),
            ("invoices", "invoices_list"),
            ("invoices", "invoices_retrieve"),
            ("ops", "ops_rentals_ready_create"),
            ("rentals", "rentals_list"),
            ("rentals", "rentals_retrieve"),
            ("rentals", "rentals_renew_create"),
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

    order_id = body["id"]

    # The invoice, from the list (a page) and on its own.
    invoices = ops["invoices_list"].sync(client=client)
    assert [i.id for i in invoices.results] == [body["invoice"]["id"]] and invoices.next_ is None
    invoice = ops["invoices_retrieve"].sync(client=client, invoice_id=body["invoice"]["id"])
    assert invoice.status == "new" and invoice.pay_currency == "BTC"

    # Paid: staff record a payment they verified on the node; the order becomes a rental.
    pay(invoice.number, int(invoice.amount))
    paid = ops["orders_retrieve"].sync(client=client, order_id=order_id)
    assert paid.status == "paid" and paid.rental_id
    assert [o.id for o in ops["orders_list"].sync(client=client).results] == [order_id]
    rental = ops["rentals_retrieve"].sync(client=client, rental_id=paid.rental_id)
    assert rental.status == "provisioning"

    # The hand-over: a staff member with the permission and an authenticator gets an ops token.
    staff = Account.objects.create_user("operator", "a-long-staff-password-7", is_staff=True)
    staff.user_permissions.add(Permission.objects.get(codename="provision_rental"))
    device = enrolled(staff)
    ops_login = ops["auth_token_create"].sync_detailed(
        client=anonymous,
        body=models.TokenObtainInputRequest.from_dict(
            {"username": "operator", "password": "a-long-staff-password-7", "scope": "ops", "otp": code_for(device)}
        ),
    )
    assert ops_login.status_code == 201, ops_login.content
    operator = client_package.AuthenticatedClient(
        base_url="http://testserver", token=ops_login.parsed.token, httpx_args=transport
    )
    with committed():
        handed = ops["ops_rentals_ready_create"].sync_detailed(
            client=operator,
            rental_id=rental.id,
            body=models.OpsReadyInputRequest(ipv4="192.0.2.10", ipv6_prefix="2001:db8:10::/64"),
        )
    assert handed.status_code == 200, handed.content
    active = ops["rentals_retrieve"].sync(client=client, rental_id=rental.id)
    assert (active.status, active.ipv4) == ("active", "192.0.2.10")
    first_paid_until = active.paid_until

    # A renewal for two more terms, in the currency last paid in, then paid.
    renewed = ops["rentals_renew_create"].sync_detailed(
        client=client, rental_id=rental.id, body=models.RenewInputRequest.from_dict({"terms": 2})
    )
    assert renewed.status_code == 201, renewed.content
    [renewal] = json.loads(renewed.content)["renewal_invoices"]
    assert (renewal["status"], renewal["terms"], renewal["pay_currency"]) == ("new", 2, "BTC")
    pay(renewal["number"], int(renewal["amount"]), txid="tx-renewal")
    after = ops["rentals_retrieve"].sync(client=client, rental_id=rental.id)
    assert after.paid_until > first_paid_until
    assert [r.id for r in ops["rentals_list"].sync(client=client).results] == [rental.id]
