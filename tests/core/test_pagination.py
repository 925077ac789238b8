"""Every list endpoint answers pages ({"next", "previous", "results"}) cut by a
cursor: nothing is cut silently, a page keeps its place when rows are added in
front, ties in the ordering's first field are paged once each, and a cursor or
page size that was not made here is a 400 with its code."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
import time_machine
from drf_spectacular.generators import SchemaGenerator

from accounts import services as accounts
from billing import services as billing

pytestmark = pytest.mark.django_db


def _walk(client, url: str, **params) -> list[dict]:
    """Every row, following `next` to the end."""
    rows: list[dict] = []
    page = client.get(url, params).json()
    rows += page["results"]
    while page["next"]:
        page = client.get(page["next"]).json()
        rows += page["results"]
    return rows


def test_every_row_is_reached_in_order_a_page_at_a_time(customer, customer_api):
    made = [accounts.token_create(account=customer, name=f"t{n}").token.pk for n in range(7)]
    rows = _walk(customer_api, "/api/v1/auth/tokens", page_size=3)
    assert [r["id"] for r in rows] == made[::-1]  # newest first, each once

    first = customer_api.get("/api/v1/auth/tokens", {"page_size": 3}).json()
    assert first["previous"] is None and len(first["results"]) == 3
    last = customer_api.get("/api/v1/auth/tokens", {"page_size": 7}).json()
    assert last["next"] is None and len(last["results"]) == 7


def test_a_page_keeps_its_place_when_rows_are_added_in_front(customer, customer_api):
    for n in range(4):
        billing.credit_adjust(account_id=customer.pk, amount_usd=Decimal(n + 1), reason=f"r{n}", actor=None)
    first = customer_api.get("/api/v1/account/credit", {"page_size": 2}).json()
    assert [r["amount_usd"] for r in first["results"]] == ["4.00", "3.00"]
    billing.credit_adjust(account_id=customer.pk, amount_usd=Decimal("9"), reason="new", actor=None)
    second = customer_api.get(first["next"]).json()
    assert [r["amount_usd"] for r in second["results"]] == ["2.00", "1.00"]  # not "3.00" again


def test_rows_made_in_the_same_instant_are_paged_once_each(customer, customer_api):
    with time_machine.travel(datetime(2026, 12, 1, 12, tzinfo=UTC), tick=False):
        made = [accounts.token_create(account=customer, name=f"t{n}").token.pk for n in range(5)]
    rows = _walk(customer_api, "/api/v1/auth/tokens", page_size=2)
    assert sorted(r["id"] for r in rows) == sorted(made) and len(rows) == 5


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"page_size": 0}, "invalid"),
        ({"page_size": 201}, "invalid"),
        ({"page_size": "ten"}, "invalid"),
        ({"cursor": "x" * 513}, "invalid"),
        ({"limit": 10}, "invalid"),
        ({"cursor": ""}, "invalid"),  # a parameter this list does not know is not ignored
        ({"cursor": "not base64!"}, "invalid_cursor"),
        ({"cursor": "cD1ub3QtYS10aW1l"}, "invalid_cursor"),  # "p=not-a-time": a forged position
        ({"cursor": "\x1e"}, "invalid_cursor"),  # whitespace alone: no cursor made here, not a blank one
        ({"cursor": "===="}, "invalid_cursor"),  # decodes to nothing: not a cursor made here either
    ],
)
def test_a_page_the_server_did_not_make_is_refused(customer_api, params, code):
    resp = customer_api.get("/api/v1/orders", params)
    assert resp.status_code == 400
    assert resp.json()["error"]["code"] == code


def test_the_schema_describes_every_list_as_a_page():
    schema = SchemaGenerator().get_schema(request=None, public=True)
    components = schema["components"]["schemas"]
    # Reference lists the server bounds itself (the catalog's cards, regions, add-ons and templates, the
    # currencies, the models sizing knows by name): a few dozen rows at most, the same for everyone, answered whole.
    whole = {
        "/api/v1/catalog/gpus",
        "/api/v1/catalog/regions",
        "/api/v1/catalog/stock",
        "/api/v1/catalog/addons",
        "/api/v1/catalog/templates",
        "/api/v1/currencies",
        "/api/v1/sizing/models",
    }
    paged = []
    for path, operations in schema["paths"].items():
        get = operations.get("get")
        if not get or "200" not in get["responses"]:
            continue
        content = get["responses"]["200"].get("content", {}).get("application/json", {}).get("schema", {})
        if content.get("type") == "array":
            assert path in whole, f"{path} answers a bare list"
            continue
        ref = content.get("$ref", "")
        if ref.endswith("Page"):
            page = components[ref.rsplit("/", 1)[1]]
            assert set(page["properties"]) == {"next", "previous", "results"}
            assert {p["name"] for p in get["parameters"] if p["in"] == "query"} >= {"cursor", "page_size"}
            paged.append(path)
    assert {
        "/api/v1/orders",
        "/api/v1/rentals",
        "/api/v1/invoices",
        "/api/v1/account/credit",
        "/api/v1/auth/tokens",
        "/api/v1/account/ssh-keys",
        "/api/v1/webhooks",
        "/api/v1/webhooks/{endpoint_id}/deliveries",
        "/api/v1/rentals/{rental_id}/benchmarks",
    } <= set(paged)
