from collections import Counter

import pytest
from django.core.management import call_command

from catalog.models import GpuModel, Host, Region, Slot, SlotStatus, Template

pytestmark = pytest.mark.django_db

SLUGS = [
    "b200",
    "mi300x",
    "h200-sxm",
    "h100-sxm",
    "a100-sxm",
    "h100-pcie",
    "rtx-5090",
    "rtx-4090",
    "rtx-6000-ada",
    "rtx-3090",
    "l40s",
    "a40",
    "l4",
    "rtx-a6000",
    "rtx-a5000",
]


def test_fifteen_cards_in_the_published_order(catalog):
    assert list(GpuModel.objects.values_list("slug", flat=True)) == SLUGS


def test_three_regions(catalog):
    assert list(Region.objects.values_list("code", "name")) == [
        ("DFW-1", "Dallas"),
        ("IAD-1", "Ashburn"),
        ("PDX-1", "Hillsboro"),
    ]


def test_6300_gpus_across_the_regions(catalog):
    assert Slot.objects.count() == 6300
    assert sum(Host.objects.values_list("slot_count", flat=True)) == 6300


def test_free_stock_matches_the_published_figures(catalog):
    free = Counter(Slot.objects.filter(status=SlotStatus.FREE).values_list("host__gpu__slug", flat=True))
    assert free["h100-sxm"] == 63
    assert free["rtx-5090"] == 100
    assert free["l40s"] == 74
    assert free["rtx-4090"] == 265


def test_mi300x_only_in_dallas_and_b200_six_plus_two_nodes(catalog):
    assert set(Host.objects.filter(gpu__slug="mi300x").values_list("region__code", flat=True)) == {"DFW-1"}
    b200 = Counter(Host.objects.filter(gpu__slug="b200").values_list("region__code", flat=True))
    assert b200 == {"DFW-1": 6, "PDX-1": 2}
    assert set(Host.objects.filter(gpu__slug="b200").values_list("slot_count", flat=True)) == {8}


def test_hosts_per_card(catalog):
    sizes = dict(GpuModel.objects.values_list("slug", "gpus_per_host"))
    assert sizes.pop("h100-pcie") == 4
    assert set(sizes.values()) == {8}


def test_templates_rocm_only_on_mi300x(catalog):
    rocm = Template.objects.get(slug="rocm-6.4-pytorch")
    assert [g.slug for g in GpuModel.objects.all() if rocm.runs_on(g)] == ["mi300x"]
    vllm = Template.objects.get(slug="vllm-0.9-ubuntu-24.04")
    assert not vllm.runs_on(GpuModel.objects.get(slug="mi300x"))
    assert vllm.runs_on(GpuModel.objects.get(slug="l4"))
    plain = Template.objects.get(slug="ubuntu-24.04")
    assert all(plain.runs_on(g) for g in GpuModel.objects.all())


def test_seed_is_idempotent_and_keeps_staff_edits(catalog, capsys):
    h100 = GpuModel.objects.get(slug="h100-sxm")
    h100.monthly_usd = "1590.00"
    h100.save()
    Host.objects.filter(name="dfw-1-l4-001").delete()
    before = Slot.objects.count()

    call_command("seed_catalog")
    out = capsys.readouterr().out
    assert "1 hosts" in out and "8 slots" in out  # only the deleted host came back
    assert "architectures" not in out  # loaded already, nothing new

    call_command("seed_catalog")
    assert "nothing to add" in capsys.readouterr().out
    assert Slot.objects.count() == before + 8
    h100.refresh_from_db()
    assert str(h100.monthly_usd) == "1590.00"


def test_seed_catalog_loads_the_sizing_architectures(catalog, capsys):
    from sizing.models import Architecture

    Architecture.objects.filter(slug="ref-70b").delete()
    call_command("seed_catalog")
    assert "1 architectures" in capsys.readouterr().out
    assert Architecture.objects.filter(slug="ref-70b").exists()
