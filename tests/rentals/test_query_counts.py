"""How many database queries the hot endpoints make (not timed): order
placement, stock, the catalog, a quote and a recommendation. The figures are
ceilings; a change that adds queries to a hot path fails here first, and one
that removes some lowers the ceiling (docs/operations.md#performance).
Counted without the catalog's change feed, as a process that is not a web
worker runs; with it, tests/catalog/test_feed.py holds that the public reads
make none."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from accounts.services import ssh_key_add
from tests.rentals.helpers import new_key_line

pytestmark = pytest.mark.django_db

# The most queries each may make. An order is the whole transaction: reads of
# the catalog it names, the order and its lines (save, then bulk_create: two),
# the reservation under the host's lock, the invoice and its lines (two), the
# invoice number (the year's counter advanced, the invoice given it: two) and
# the payment request (one), and the answer; and the unpaid caps (the account's
# row and its client address locked in one statement, what the account and the
# address hold unpaid and the card's stock in the region in another: two).
# Plain ORM writes: four more than when a parent and its children, and the
# number with the request, were each one hand-built statement (14).
ORDER_MAX = 18
STOCK_MAX = 2
CATALOG_MAX = 1
QUOTE_MAX = 1
RECOMMEND_MAX = 2


def order_body(key_id: int, **overrides) -> dict:
    body = {
        "region": "DFW-1",
        "gpu": "l4",
        "gpu_count": 1,
        "term": "monthly",
        "terms": 1,
        "template": "ollama-ubuntu-24.04",
        "addons": ["private-vlan"],
        "ssh_keys": [key_id],
        "pay_currency": "LTC",
    }
    return body | overrides


def counted(call) -> tuple[object, int]:
    with CaptureQueriesContext(connection) as ctx:
        resp = call()
    return resp, len(ctx.captured_queries)


def test_order_placement_queries(chains, catalog, customer, customer_api, settings):
    settings.UNPAID_ORDERS_MAX = 10  # three orders in a row from one new account
    key = ssh_key_add(account=customer, public_key=new_key_line(), name="k")
    customer_api.post("/api/v1/orders", order_body(key.pk), format="json")  # first ever: counters are created
    resp, n = counted(lambda: customer_api.post("/api/v1/orders", order_body(key.pk), format="json"))
    assert resp.status_code == 201, resp.json()
    assert n <= ORDER_MAX, n
    # A workload adds no query: the sizing check prices nothing the order has not priced.
    workload = {"model": "llama-3.1-8b", "precision": "fp8", "context": 8192, "concurrency": 1}
    resp, with_workload = counted(
        lambda: customer_api.post("/api/v1/orders", order_body(key.pk, workload=workload), format="json")
    )
    assert resp.status_code == 201, resp.json()
    assert with_workload <= n + 1, (with_workload, n)


def test_stock_queries(api, catalog):
    api.get("/api/v1/catalog/stock")  # the process's first read loads the catalog; counted is what each request costs
    for params in ({}, {"region": "DFW-1"}, {"region": "IAD-1", "gpu": "l4"}):
        resp, n = counted(lambda params=params: api.get("/api/v1/catalog/stock", params))
        assert resp.status_code == 200 and resp.json()
        assert n <= STOCK_MAX, (params, n)


def test_catalog_queries(api, catalog):
    api.get("/api/v1/catalog/gpus")
    resp, n = counted(lambda: api.get("/api/v1/catalog/gpus"))
    assert resp.status_code == 200 and len(resp.json()) == 15
    assert n <= CATALOG_MAX, n


def test_quote_queries(api, catalog):
    body = {"gpu": "h100-sxm", "gpu_count": 8, "term": "monthly"}
    api.post("/api/v1/pricing/quote", body, format="json")
    resp, n = counted(lambda: api.post("/api/v1/pricing/quote", body, format="json"))
    assert resp.status_code == 200 and resp.json()["total_usd"] == "12168.00"
    assert n <= QUOTE_MAX, n


def test_recommend_queries(api, catalog):
    body = {"model": "llama-3.1-70b", "precision": "fp8", "context": 8192, "concurrency": 8, "region": "DFW-1"}
    api.post("/api/v1/sizing/recommend", body, format="json")
    resp, n = counted(lambda: api.post("/api/v1/sizing/recommend", body, format="json"))
    assert resp.status_code == 200 and resp.json()["candidates"]
    assert n <= RECOMMEND_MAX, n
