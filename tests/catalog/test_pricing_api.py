"""Every pricing figure of FACTS.md, through the public API."""

from decimal import Decimal

import pytest

from catalog.models import MultiGpuDiscount, TermDiscount

pytestmark = pytest.mark.django_db

# Monthly / 720, half up to the cent; the seed's table plus the decided A6000 / A5000.
PER_GPU_HOUR = {
    "b200": "5.40",
    "mi300x": "2.21",
    "h200-sxm": "3.18",
    "h100-sxm": "2.35",
    "a100-sxm": "1.38",
    "h100-pcie": "2.07",
    "rtx-5090": "0.75",
    "rtx-4090": "0.54",
    "rtx-6000-ada": "0.64",
    "rtx-3090": "0.32",
    "l40s": "0.72",
    "a40": "0.33",
    "l4": "0.35",
    "rtx-a6000": "0.46",
    "rtx-a5000": "0.29",
}


def quote(api, **body):
    return api.post("/api/v1/pricing/quote", body, format="json")


def test_catalog_lists_every_card_with_its_hourly_price(api, catalog):
    resp = api.get("/api/v1/catalog/gpus")
    assert resp.status_code == 200
    rows = {r["slug"]: r for r in resp.json()}
    assert {slug: r["hourly_usd"] for slug, r in rows.items()} == PER_GPU_HOUR
    h100 = rows["h100-sxm"]
    assert {
        "name": "H100 SXM",
        "vendor": "nvidia",
        "architecture": "Hopper",
        "memory_gb": 80,
        "bandwidth_gbps": 3350,
        "fp8": True,
        "monthly_usd": "1690.00",
        "weekly_usd": "475.00",
        "min_gpus": 1,
        "max_gpus": 8,
    }.items() <= h100.items()
    assert rows["b200"]["min_gpus"] == 2 and rows["b200"]["allowed_counts"] == [2, 4, 8]
    assert rows["h100-pcie"]["allowed_counts"] == [1, 2, 4]
    assert [r["slug"] for r in resp.json() if not r["fp8"]] == ["a100-sxm", "rtx-3090", "a40", "rtx-a6000", "rtx-a5000"]


@pytest.mark.parametrize("slug,hourly", sorted(PER_GPU_HOUR.items()))
def test_single_card_monthly_quote_per_gpu_hour(api, catalog, slug, hourly):
    count = 2 if slug == "b200" else 1
    resp = quote(api, gpu=slug, gpu_count=count, term="monthly")
    assert resp.status_code == 200, resp.json()
    if count == 1:
        assert resp.json()["per_gpu_hour_usd"] == hourly


@pytest.mark.parametrize(
    "slug,count,total,per_gpu_hour,per_hour,pct",
    [
        ("a100-sxm", 2, "1881.00", "1.31", "2.61", 5),
        ("h100-sxm", 8, "12168.00", "2.11", "16.90", 10),
        ("b200", 8, "28008.00", "4.86", "38.90", 10),
        ("mi300x", 8, "11448.00", "1.99", "15.90", 10),
        ("h100-sxm", 4, "6219.20", "2.16", "8.64", 8),
        ("h100-sxm", 1, "1690.00", "2.35", "2.35", 0),
    ],
)
def test_worked_figures(api, catalog, slug, count, total, per_gpu_hour, per_hour, pct):
    body = quote(api, gpu=slug, gpu_count=count, term="monthly").json()
    assert body["total_usd"] == total
    assert body["per_gpu_hour_usd"] == per_gpu_hour
    assert body["per_hour_usd"] == per_hour
    assert body["discount_pct"] == pct
    assert Decimal(body["subtotal_usd"]) - Decimal(body["discount_usd"]) == Decimal(total)


def test_b200_minimum_before_discount_is_7780(api, catalog):
    body = quote(api, gpu="b200", gpu_count=2, term="monthly").json()
    assert body["subtotal_usd"] == "7780.00"
    assert body["total_usd"] == "7391.00"


def test_b200_below_two_is_refused(api, catalog):
    resp = quote(api, gpu="b200", gpu_count=1, term="monthly")
    assert resp.status_code == 400
    assert resp.json()["error"]["code"] == "min_gpus"
    assert resp.json()["error"]["details"]["min_gpus"] == 2


@pytest.mark.parametrize("count", [3, 16, 5, 6])
def test_counts_other_than_1_2_4_8_are_refused(api, catalog, count):
    resp = quote(api, gpu="h100-sxm", gpu_count=count, term="monthly")
    assert resp.status_code == 400
    err = resp.json()["error"]
    assert err["code"] == "invalid_gpu_count"
    assert err["details"]["allowed_counts"] == [1, 2, 4, 8]


def test_h100_pcie_hosts_hold_four(api, catalog):
    assert quote(api, gpu="h100-pcie", gpu_count=4, term="monthly").status_code == 200
    resp = quote(api, gpu="h100-pcie", gpu_count=8, term="monthly")
    assert resp.json()["error"]["code"] == "invalid_gpu_count"


def test_weekly_node_and_terms(api, catalog):
    body = quote(api, gpu="b200", gpu_count=8, term="weekly").json()
    assert body["subtotal_usd"] == "8720.00"  # 8 x 1090
    assert body["total_usd"] == "7848.00"  # the seed's page rounds it to $7,850/week
    assert body["hours"] == 168
    three = quote(api, gpu="b200", gpu_count=8, term="weekly", terms=3).json()
    assert three["total_usd"] == "23544.00" and three["hours"] == 504


def test_addons_take_the_instance_discount_and_weekly_is_7_30ths(api, catalog):
    body = quote(api, gpu="h100-sxm", gpu_count=8, term="monthly", addons=["dedicated-100g", "private-vlan"]).json()
    lines = {ln["code"]: ln for ln in body["lines"]}
    assert lines["addon:dedicated-100g"]["subtotal_usd"] == "220.00"
    assert lines["addon:dedicated-100g"]["amount_usd"] == "198.00"
    assert lines["addon:private-vlan"]["amount_usd"] == "22.50"
    assert body["total_usd"] == "12388.50"
    assert body["per_gpu_hour_usd"] == "2.11"  # the cards alone
    weekly = quote(api, gpu="l4", gpu_count=1, term="weekly", addons=["dedicated-100g", "private-vlan"]).json()
    lines = {ln["code"]: ln for ln in weekly["lines"]}
    assert lines["addon:dedicated-100g"]["unit_usd"] == "51.33"
    assert lines["addon:private-vlan"]["unit_usd"] == "5.83"


def test_usage_charges_and_unknown_addons_cannot_be_ordered(api, catalog):
    for slug in ("egress-overage", "nope"):
        resp = quote(api, gpu="l4", gpu_count=1, term="monthly", addons=[slug])
        assert resp.status_code == 400 and resp.json()["error"]["code"] == "unknown_addon"


def test_templates_must_run_on_the_card(api, catalog):
    ok = quote(api, gpu="mi300x", gpu_count=1, term="monthly", template="rocm-6.4-pytorch")
    assert ok.status_code == 200
    resp = quote(api, gpu="h100-sxm", gpu_count=1, term="monthly", template="rocm-6.4-pytorch")
    err = resp.json()["error"]
    assert resp.status_code == 400 and err["code"] == "template_incompatible"
    assert "vllm-0.9-ubuntu-24.04" in err["details"]["compatible_templates"]
    resp = quote(api, gpu="mi300x", gpu_count=1, term="monthly", template="vllm-0.9-ubuntu-24.04")
    assert resp.json()["error"]["code"] == "template_incompatible"


def test_discount_tiers_are_data(api, catalog):
    MultiGpuDiscount.objects.filter(min_gpus=8).update(percent=Decimal("12.5"))
    TermDiscount.objects.filter(term="monthly", min_terms=3).update(percent=Decimal("5"))
    body = quote(api, gpu="h100-sxm", gpu_count=8, term="monthly", terms=3).json()
    assert body["multi_gpu_discount_pct"] == 12.5
    assert body["term_discount_pct"] == 5
    assert body["discount_pct"] == 17.5
    assert body["subtotal_usd"] == "40560.00"
    assert body["total_usd"] == "33462.00"


def test_term_discounts_are_seeded_at_zero(api, catalog):
    assert set(TermDiscount.objects.values_list("percent", flat=True)) == {Decimal("0")}
    body = quote(api, gpu="l4", gpu_count=1, term="monthly", terms=12).json()
    assert body["total_usd"] == "3000.00" and body["term_discount_pct"] == 0


@pytest.mark.parametrize(
    "body,code",
    [
        ({"gpu": "h100-sxm", "gpu_count": 1}, "invalid"),
        ({"gpu": "h100-sxm", "gpu_count": 1, "term": "daily"}, "invalid"),
        ({"gpu": "nope", "gpu_count": 1, "term": "monthly"}, "unknown_gpu"),
        ({"gpu": "h100-sxm", "gpu_count": 0, "term": "monthly"}, "invalid"),
        ({"gpu": "h100-sxm", "gpu_count": "x", "term": "monthly"}, "invalid"),
        ({"gpu": "h100-sxm", "gpu_count": 1, "term": "monthly", "terms": 13}, "invalid"),
        ({"gpu": "h100-sxm", "gpu_count": 1, "term": "monthly", "addons": ["private-vlan", "private-vlan"]}, "invalid"),
    ],
)
def test_bad_quotes_get_the_error_shape(api, catalog, body, code):
    resp = quote(api, **body)
    assert resp.status_code == 400
    assert set(resp.json()) == {"error"}
    assert resp.json()["error"]["code"] == code


ACTIVE_GPUS = list(PER_GPU_HOUR)


def test_an_unknown_card_alone_keeps_its_code_and_lists_the_cards(api, catalog):
    error = quote(api, gpu="h100", gpu_count=8, term="monthly").json()["error"]
    assert error["code"] == "unknown_gpu"
    assert sorted(error["details"]["gpus"]) == sorted(ACTIVE_GPUS)


def test_a_missing_term_does_not_hide_an_unknown_card(api, catalog):
    """Every field is checked before answering: the card that does not exist is
    reported with the term that is missing, and the cards there are listed."""
    resp = quote(api, gpu="h100", gpu_count=8)
    assert resp.status_code == 400
    error = resp.json()["error"]
    assert error["code"] == "invalid"
    assert error["details"]["fields"] == {"gpu": ["No card 'h100'."], "term": ["This field is required."]}
    assert sorted(error["details"]["gpus"]) == sorted(ACTIVE_GPUS)
    assert error["message"] == "gpu: No card 'h100'."


def test_unknown_addons_and_templates_are_reported_with_the_valid_ones(api, catalog):
    resp = quote(api, gpu="l4", gpu_count=1, term="monthly", addons=["egress-overage"], template="windows-95")
    error = resp.json()["error"]
    assert (resp.status_code, error["code"]) == (400, "invalid")
    assert set(error["details"]["fields"]) == {"addons", "template"}
    assert sorted(error["details"]["addons"]) == ["dedicated-100g", "private-vlan"]
    assert "ubuntu-24.04" in error["details"]["templates"]
    alone = quote(api, gpu="l4", gpu_count=1, term="monthly", template="windows-95").json()["error"]
    assert alone["code"] == "unknown_template" and "ubuntu-24.04" in alone["details"]["templates"]


def test_malformed_json_is_a_parse_error(api, catalog):
    resp = api.post("/api/v1/pricing/quote", "{not json", content_type="application/json")
    assert resp.status_code == 400
    assert resp.json()["error"]["code"] == "parse_error"


def test_wrong_method_is_405_in_the_error_shape(api, catalog):
    resp = api.get("/api/v1/pricing/quote")
    assert resp.status_code == 405
    assert resp.json()["error"]["code"] == "method_not_allowed"


def test_discounts_that_would_give_it_away_are_refused(api, catalog):
    MultiGpuDiscount.objects.filter(min_gpus=8).update(percent=Decimal("60"))
    TermDiscount.objects.filter(term="monthly", min_terms=12).update(percent=Decimal("40"))
    resp = quote(api, gpu="h100-sxm", gpu_count=8, term="monthly", terms=12)
    assert resp.status_code == 409 and resp.json()["error"]["code"] == "pricing_unavailable"
