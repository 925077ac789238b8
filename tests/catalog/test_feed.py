"""The catalog's change feed (catalog/feed.py): web workers hear of catalog and
stock changes from the database's notifications and answer the public reads
without asking for the catalog version; without the feed they query."""

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from catalog import feed
from catalog.models import CatalogVersion, GpuModel, Region
from catalog.selectors import catalog_current
from catalog.services import slots_release, slots_reserve

pytestmark = pytest.mark.django_db(transaction=True)

WAIT = 10.0  # seconds: a notification on loopback arrives in milliseconds


@pytest.fixture
def live_feed(catalog, settings):
    """This process's feed, started as a web worker starts it, and connected."""
    CatalogVersion.objects.get_or_create(id=1, defaults={"version": 1, "changed_at": timezone.now()})
    settings.CATALOG_CHANGE_FEED = True
    settings.CATALOG_FEED_HEARTBEAT_SECONDS = 60  # what is seen here comes from notifications
    running = feed.start()
    assert running.wait_for(lambda s: s is not None, WAIT) is not None
    yield running
    feed.stop()
    assert feed.current() is None


def version_row() -> int:
    return CatalogVersion.objects.get().version


def test_the_feed_hears_catalog_and_stock_changes(live_feed):
    first = live_feed.state()
    assert first.version == version_row()

    GpuModel.objects.filter(slug="l4").update(monthly_usd=261)
    after_price = live_feed.wait_for(lambda s: s is not None and s.version != first.version, WAIT)
    assert after_price.version == version_row() != first.version
    assert after_price.stock_generation > first.stock_generation  # a catalog change may change stock too

    region, gpu = Region.objects.get(code="DFW-1"), GpuModel.objects.get(slug="h100-sxm")
    with transaction.atomic():
        slots_reserve(region=region, gpu=gpu, count=2, holder="order:feed")
    after_order = live_feed.wait_for(lambda s: s.stock_generation > after_price.stock_generation, WAIT)
    assert after_order.stock_generation > after_price.stock_generation
    assert after_order.version == after_price.version  # stock moved; the catalog did not


def test_public_reads_cost_no_query_and_still_show_each_change(live_feed, api):
    workload = {"model": "llama-3.1-8b", "precision": "fp8", "context": 8192, "concurrency": 4, "region": "DFW-1"}
    for _ in range(2):  # the first answer of a version is built, the next ones are kept
        gpus = api.get("/api/v1/catalog/gpus")
        stock = api.get("/api/v1/catalog/stock?region=DFW-1&gpu=h100-sxm")
        quote = api.post("/api/v1/pricing/quote", {"gpu": "l4", "gpu_count": 1, "term": "monthly"}, format="json")
        sized = api.post("/api/v1/sizing/recommend", workload, format="json")
    assert sized.status_code == 200 and sized.json()["candidates"]
    with CaptureQueriesContext(connection) as queries:
        assert api.get("/api/v1/catalog/gpus").content == gpus.content
        assert api.get("/api/v1/catalog/stock?region=DFW-1&gpu=h100-sxm").content == stock.content
        again = api.post("/api/v1/pricing/quote", {"gpu": "l4", "gpu_count": 1, "term": "monthly"}, format="json")
        assert again.content == quote.content
        assert api.post("/api/v1/sizing/recommend", workload, format="json").content == sized.content
    assert len(queries) == 0, [q["sql"] for q in queries]

    # A price edit: the next answers carry it, with a new validator.
    before = live_feed.state()
    GpuModel.objects.filter(slug="l4").update(monthly_usd=261)
    live_feed.wait_for(lambda s: s.version != before.version, WAIT)
    edited = api.get("/api/v1/catalog/gpus")
    assert edited["ETag"] != gpus["ETag"]
    assert next(g for g in edited.json() if g["slug"] == "l4")["monthly_usd"] == "261.00"
    quoted = api.post("/api/v1/pricing/quote", {"gpu": "l4", "gpu_count": 1, "term": "monthly"}, format="json")
    assert quoted.json() != quote.json()

    # An order's reservation: the next stock answer counts it.
    free = stock.json()[0]["available"]
    state = live_feed.state()
    with transaction.atomic():
        slots_reserve(
            region=Region.objects.get(code="DFW-1"), gpu=GpuModel.objects.get(slug="h100-sxm"), count=8, holder="o:1"
        )
    live_feed.wait_for(lambda s: s.stock_generation > state.stock_generation, WAIT)
    assert api.get("/api/v1/catalog/stock?region=DFW-1&gpu=h100-sxm").json()[0]["available"] == free - 8
    state = live_feed.state()
    with transaction.atomic():
        slots_release(holder="o:1")
    live_feed.wait_for(lambda s: s.stock_generation > state.stock_generation, WAIT)
    assert api.get("/api/v1/catalog/stock?region=DFW-1&gpu=h100-sxm").json()[0]["available"] == free


def test_an_order_prices_what_the_database_holds_even_before_the_feed_hears(live_feed):
    with CaptureQueriesContext(connection) as queries:
        catalog_current(exact=True)
    assert any("catalog_catalogversion" in q["sql"] for q in queries)


def test_a_lost_connection_falls_back_to_queries_then_reconnects(live_feed):
    before = live_feed.state()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [live_feed.backend_pid])
    assert live_feed.wait_for(lambda s: s is None, WAIT) is None
    with CaptureQueriesContext(connection) as queries:
        snapshot = catalog_current()  # no feed: the version is asked for
    assert any("catalog_catalogversion" in q["sql"] for q in queries)

    # A change while nobody listens is read when the feed is back.
    GpuModel.objects.filter(slug="l4").update(monthly_usd=262)
    assert version_row() != snapshot.version
    back = live_feed.wait_for(lambda s: s is not None, WAIT + feed.RETRY_MAX_SECONDS)
    assert back is not None and back.version == version_row() != before.version
    assert catalog_current().gpus["l4"].monthly_usd == 262


def test_no_feed_where_it_is_off(catalog, settings):
    settings.CATALOG_CHANGE_FEED = False
    assert feed.start() is None
    assert feed.current() is None
