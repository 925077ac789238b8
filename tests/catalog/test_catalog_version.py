"""The free counts the triggers keep on each host, and the catalog version
that caches and validators (ETag, Last-Modified, 304) are keyed on."""

import pytest
from django.db.models import Count, Q

from catalog.models import CatalogVersion, GpuModel, Host, MultiGpuDiscount, Region, Slot, SlotStatus
from catalog.services import slot_service_set, slots_release, slots_reserve
from sizing.models import Architecture

pytestmark = pytest.mark.django_db


def counts_match() -> bool:
    counted = Host.objects.annotate(n=Count("slots", filter=Q(slots__status=SlotStatus.FREE)))
    return all(h.n == h.free_slots for h in counted)


def version() -> int:
    return CatalogVersion.objects.get().version


def test_free_counts_follow_every_write_to_the_slots(catalog, django_user_model):
    region, gpu = Region.objects.get(code="DFW-1"), GpuModel.objects.get(slug="h100-sxm")
    before = version()
    r = slots_reserve(region=region, gpu=gpu, count=4, holder="order:t1")
    assert Host.objects.get(pk=r.host.pk).free_slots == r.host.free_slots
    Slot.objects.filter(holder="order:t1").update(status=SlotStatus.RENTED)
    assert slots_release(holder="order:t1") == 4
    staff = django_user_model.objects.create_superuser("ops", "a-long-staff-password")
    slot = Slot.objects.filter(status=SlotStatus.FREE).first()
    slot_service_set(slot_id=slot.pk, in_service=False, actor=staff, reason="fan failed")
    Slot.objects.filter(host__region=region, host__gpu__slug="l4").update(status=SlotStatus.RESERVED, holder="x")
    Slot.objects.filter(host__name="dfw-1-l4-001").delete()
    assert counts_match()
    assert version() == before  # stock moves; the catalog does not


def test_an_edit_of_a_host_never_writes_its_free_count(catalog):
    host = Host.objects.filter(free_slots__gt=0).first()
    stale = Host.objects.get(pk=host.pk)
    Slot.objects.filter(host=host, status=SlotStatus.FREE).update(status=SlotStatus.RENTED, holder="x")
    stale.name = stale.name + "-renamed"
    stale.save()
    assert Host.objects.get(pk=host.pk).free_slots == 0


@pytest.mark.parametrize(
    "change",
    [
        lambda: GpuModel.objects.filter(slug="l4").update(monthly_usd=260),
        lambda: MultiGpuDiscount.objects.filter(min_gpus=8).update(percent=11),
        lambda: Host.objects.filter(name="dfw-1-l4-001").update(is_active=False),
        lambda: Architecture.objects.filter(slug="llama-3.1-8b").update(max_context=65536),
    ],
)
def test_any_write_to_the_catalog_moves_its_version(catalog, change):
    before = version()
    change()
    assert version() != before


def test_catalog_lists_answer_304_to_a_conditional_request(api, catalog):
    for path in ("/api/v1/catalog/gpus", "/api/v1/catalog/regions", "/api/v1/catalog/addons"):
        first = api.get(path)
        assert first.status_code == 200 and first["ETag"] and first["Last-Modified"]
        again = api.get(path, HTTP_IF_NONE_MATCH=first["ETag"])
        assert again.status_code == 304 and not again.content
        assert api.get(path, HTTP_IF_MODIFIED_SINCE=first["Last-Modified"]).status_code == 304
        assert api.get(path, HTTP_IF_NONE_MATCH='"catalog-0"').status_code == 200


def test_a_price_change_shows_at_once_and_changes_the_etag(api, catalog):
    first = api.get("/api/v1/catalog/gpus")
    quote = {"gpu": "l4", "gpu_count": 1, "term": "monthly"}
    assert api.post("/api/v1/pricing/quote", quote, format="json").json()["total_usd"] == "250.00"
    GpuModel.objects.filter(slug="l4").update(monthly_usd=260)
    again = api.get("/api/v1/catalog/gpus", HTTP_IF_NONE_MATCH=first["ETag"])
    assert again.status_code == 200 and again["ETag"] != first["ETag"]
    assert {g["slug"]: g["monthly_usd"] for g in again.json()}["l4"] == "260.00"
    assert api.post("/api/v1/pricing/quote", quote, format="json").json()["total_usd"] == "260.00"


def test_what_a_process_keeps_is_bounded_in_bytes(catalog, monkeypatch):
    from catalog import selectors

    monkeypatch.setattr(selectors, "MEMO_BYTES", 10_000)
    snapshot = selectors.catalog_current()
    for n in range(50):
        selectors.catalog_memo(snapshot, ("bench", n), lambda: b"x" * 1000)
    assert 0 < selectors._memo_bytes <= 10_000
    built = []
    selectors.catalog_memo(snapshot, ("bench", 0), lambda: built.append(1) or b"y")  # long evicted: built again
    selectors.catalog_memo(snapshot, ("bench", 49), lambda: built.append(2) or b"z")  # still kept
    assert built == [1]
