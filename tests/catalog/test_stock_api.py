import pytest

from catalog.models import Slot, SlotStatus

pytestmark = pytest.mark.django_db


def totals(rows):
    out = {}
    for r in rows:
        out[r["gpu"]] = out.get(r["gpu"], 0) + r["available"]
    return out


def test_stock_totals_across_regions(api, catalog):
    resp = api.get("/api/v1/catalog/stock")
    assert resp.status_code == 200
    t = totals(resp.json())
    assert (t["h100-sxm"], t["rtx-5090"], t["l40s"], t["rtx-4090"]) == (63, 100, 74, 265)


def test_stock_by_region_and_largest_block(api, catalog):
    rows = api.get("/api/v1/catalog/stock", {"region": "DFW-1"}).json()
    assert {r["region"] for r in rows} == {"DFW-1"}
    by_gpu = {r["gpu"]: r for r in rows}
    assert by_gpu["mi300x"] == {"region": "DFW-1", "gpu": "mi300x", "available": 22, "max_per_host": 8}
    assert by_gpu["b200"]["max_per_host"] == 8


def test_mi300x_only_in_dfw_and_no_b200_in_iad(api, catalog):
    rows = api.get("/api/v1/catalog/stock", {"gpu": "mi300x"}).json()
    assert [r["region"] for r in rows] == ["DFW-1"]
    iad = {r["gpu"] for r in api.get("/api/v1/catalog/stock", {"region": "IAD-1"}).json()}
    assert "b200" not in iad and "mi300x" not in iad and len(iad) == 13
    regions = {r["code"]: r["gpus"] for r in api.get("/api/v1/catalog/regions").json()}
    assert "mi300x" in regions["DFW-1"] and "mi300x" not in regions["PDX-1"]


def test_stock_follows_the_slots(api, catalog):
    Slot.objects.filter(host__name="pdx-1-b200-001", status=SlotStatus.FREE).update(
        status=SlotStatus.RESERVED, holder="order:test"
    )
    row = api.get("/api/v1/catalog/stock", {"region": "PDX-1", "gpu": "b200"}).json()[0]
    assert row["available"] == 0 and row["max_per_host"] == 0


def test_unknown_region_is_a_400(api, catalog):
    resp = api.get("/api/v1/catalog/stock", {"region": "LHR-1"})
    assert resp.status_code == 400
    assert resp.json()["error"]["code"] == "unknown_region"
    assert resp.json()["error"]["details"]["regions"] == ["DFW-1", "IAD-1", "PDX-1"]


def test_addons_and_templates(api, catalog):
    addons = {a["slug"]: a for a in api.get("/api/v1/catalog/addons").json()}
    assert addons["dedicated-100g"]["monthly_usd"] == "220.00"
    assert addons["private-vlan"]["monthly_usd"] == "25.00"
    assert (addons["egress-overage"]["monthly_usd"], addons["egress-overage"]["included_units"]) == ("4.00", 20)
    assert addons["egress-overage"]["orderable"] is False
    templates = {t["slug"]: t for t in api.get("/api/v1/catalog/templates").json()}
    assert set(templates) == {"vllm-0.9-ubuntu-24.04", "ollama-ubuntu-24.04", "rocm-6.4-pytorch", "ubuntu-24.04"}
    assert templates["rocm-6.4-pytorch"]["gpus"] == ["mi300x"]
    assert "mi300x" not in templates["vllm-0.9-ubuntu-24.04"]["gpus"]
    assert len(templates["ubuntu-24.04"]["gpus"]) == 15


def test_a_retired_card_leaves_the_stock(api, catalog):
    from catalog.models import GpuModel

    GpuModel.objects.filter(slug="rtx-a5000").update(is_active=False)
    assert "rtx-a5000" not in {r["gpu"] for r in api.get("/api/v1/catalog/stock").json()}
    assert all("rtx-a5000" not in r["gpus"] for r in api.get("/api/v1/catalog/regions").json())
