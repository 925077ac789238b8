"""The sizing endpoints: shapes, refusals, and the seed's answers through the API."""

import json

import pytest

from catalog.models import GpuModel, Slot, SlotStatus
from sizing.models import Architecture
from sizing.seed import architectures_seed

from .conftest import hf_config, whole_gb
from .shapes import assert_shape, shape

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _seeded(catalog, seeded_architectures):
    pass


# This module holds the guide's figures: every request names the guide profile
# (tests/sizing/test_engine_api.py covers the default vllm profile).
def check(api, **body):
    body.setdefault("context", 8192)
    body.setdefault("concurrency", 1)
    body.setdefault("profile", "guide")
    return api.post("/api/v1/sizing/check", body, format="json")


def recommend(api, **body):
    body.setdefault("context", 8192)
    body.setdefault("concurrency", 1)
    body.setdefault("profile", "guide")
    return api.post("/api/v1/sizing/recommend", body, format="json")


def firsts(resp):
    assert resp.status_code == 200, resp.json()
    return [(c["gpu"], c["gpu_count"]) for c in resp.json()["candidates"]]


# --- models ---------------------------------------------------------------------


def test_models_lists_the_twenty_real_models_and_six_reference_shapes(api):
    resp = api.get("/api/v1/sizing/models")
    assert resp.status_code == 200
    rows = {r["slug"]: r for r in resp.json()}
    assert len([r for r in rows.values() if r["is_reference"]]) == 6
    assert len([r for r in rows.values() if not r["is_reference"]]) == 20
    assert rows["gemma-2-27b"]["head_dim"] == 128 and rows["gemma-2-27b"]["sliding_window"] == 4096
    assert rows["deepseek-v3"]["attention_kind"] == "mla" and rows["deepseek-v3"]["mla_latent_dim"] == 512
    assert (rows["gpt-oss-120b"]["params_b"], rows["gpt-oss-120b"]["active_params_b"]) == (117.0, 5.1)
    assert rows["ref-120b"]["layers"] == 80 and rows["ref-120b"]["params_b"] == 120.0


def test_seed_is_idempotent_and_keeps_staff_edits():
    Architecture.objects.filter(slug="llama-3.1-8b").update(max_context=65536)
    Architecture.objects.filter(slug="phi-3-mini-4k").delete()
    assert architectures_seed() == 1
    assert architectures_seed() == 0
    assert Architecture.objects.get(slug="llama-3.1-8b").max_context == 65536
    assert Architecture.objects.count() == 26


def test_inactive_models_are_neither_listed_nor_accepted(api):
    Architecture.objects.filter(slug="ref-7b").update(is_active=False)
    assert "ref-7b" not in {r["slug"] for r in api.get("/api/v1/sizing/models").json()}
    resp = check(api, model="ref-7b", precision="fp8", gpu="l4")
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "unknown_model"


# --- check ----------------------------------------------------------------------


def test_check_shape_for_70b_fp8_on_h100_sxm(api):
    resp = check(api, model="ref-70b", precision="fp8", gpu="h100-sxm", gpu_count=1)
    assert resp.status_code == 200
    body = resp.json()
    assert body["fits"] is True and body["reasons"] == []
    assert body["per_gpu"] == {
        "weights_gb": 70.0,
        "kv_cache_gb": 2.68,
        "overhead_gb": 2.0,
        "required_gb": 74.68,
        "capacity_gb": 80.0,
        "headroom_gb": 5.32,
        "kv_heads": 8,
    }
    assert body["total"]["required_gb"] == 74.68 and body["total"]["kv_cache_one_copy_gb"] == 2.68
    assert body["decode_ceiling_tokens_per_s"] == 48  # 3350 / 70
    assert body["monthly_usd"] == body["price_usd"] == "1690.00" and body["term"] == "monthly"
    # $1,690 over 48 t/s x 720 h x 3600 s = 124.4 M tokens: $13.58 per million.
    assert body["cost_per_million_tokens_usd"] == "13.58"
    assert body["model"]["kv_cache_bytes_per_token"] == 2 * 80 * 8 * 128 * 2


def test_check_70b_fp8_at_32k_does_not_fit_and_says_by_how_much(api):
    body = check(api, model="ref-70b", precision="fp8", gpu="h100-sxm", context=32768).json()
    assert body["fits"] is False
    assert body["reasons"] == [
        {
            "code": "does_not_fit",
            "message": "Each GPU needs 82.74 GB; the H100 SXM has 80 GB: 2.74 GB short.",
            "details": {"required_gb": 82.74, "capacity_gb": 80, "shortfall_gb": 2.74},
        }
    ]
    assert body["per_gpu"]["kv_cache_gb"] == 10.74 and body["per_gpu"]["headroom_gb"] == -2.74


def test_check_concurrency_and_fp8_kv(api):
    one = check(api, model="ref-70b", precision="fp8", gpu="h200-sxm").json()["per_gpu"]["kv_cache_gb"]
    eight = check(api, model="ref-70b", precision="fp8", gpu="h200-sxm", concurrency=8).json()
    assert eight["per_gpu"]["kv_cache_gb"] == pytest.approx(8 * one, abs=0.05) and eight["fits"]
    half = check(api, model="ref-70b", precision="fp8", kv_precision="fp8", gpu="h200-sxm").json()
    assert half["per_gpu"]["kv_cache_gb"] == 1.34


def test_check_fp8_on_ampere_is_a_reason(api):
    body = check(api, model="ref-7b", precision="fp8", gpu="a100-sxm").json()
    assert body["fits"] is False and [r["code"] for r in body["reasons"]] == ["fp8_unsupported"]
    body = check(api, model="ref-7b", precision="bf16", kv_precision="fp8", gpu="rtx-3090").json()
    assert body["reasons"][0]["details"]["fields"] == ["kv_precision"]


def test_check_counts_the_catalog_refuses(api):
    body = check(api, model="ref-405b", precision="fp8", gpu="b200", gpu_count=1).json()
    assert next(r["code"] for r in body["reasons"]) == "min_gpus" and body["price_usd"] is None
    body = check(api, model="ref-7b", precision="fp8", gpu="l40s", gpu_count=3).json()
    assert "invalid_gpu_count" in [r["code"] for r in body["reasons"]]
    assert "tp_indivisible" in [r["code"] for r in body["reasons"]]
    body = check(api, model="ref-70b", precision="bf16", gpu="h100-pcie", gpu_count=8).json()
    assert [r["code"] for r in body["reasons"]] == ["invalid_gpu_count"]  # 4 per host


def test_check_tp_indivisible(api):
    body = check(api, model="qwen2.5-7b", precision="bf16", gpu="l4", gpu_count=8).json()
    assert [r["code"] for r in body["reasons"]] == ["tp_indivisible"]
    assert body["reasons"][0]["details"] == {"attention_heads": 28, "gpu_count": 8}


# --- real models across GPUs ----------------------------------------------------


def test_llama_70b_bf16_on_two_h100_sxm_and_eight_l40s(api):
    two = check(api, model="llama-3.1-70b", precision="bf16", gpu="h100-sxm", gpu_count=2).json()
    assert two["fits"] and two["per_gpu"]["weights_gb"] == 70.55 and two["per_gpu"]["kv_heads"] == 4
    assert two["monthly_usd"] == "3211.00"  # 2 x $1,690 less 5 %
    assert two["decode_ceiling_tokens_per_s"] == 47  # 6700 / 141.1
    eight = check(api, model="llama-3.1-70b", precision="bf16", gpu="l40s", gpu_count=8).json()
    assert eight["fits"] and eight["per_gpu"]["kv_heads"] == 1
    assert eight["per_gpu"]["weights_gb"] == pytest.approx(141.1 / 8, abs=0.01)
    one = check(api, model="llama-3.1-70b", precision="bf16", gpu="h100-sxm", gpu_count=1).json()
    assert not one["fits"]


def test_llama_405b_fp8_on_eight_h200(api):
    body = check(api, model="llama-3.1-405b", precision="fp8", gpu="h200-sxm", gpu_count=8).json()
    assert body["fits"] and body["per_gpu"]["weights_gb"] == 50.73
    assert body["total"]["weights_gb"] == 405.85


def test_deepseek_v3_fp8_fits_eight_h200_not_eight_h100_latent_replicated(api):
    h200 = check(api, model="deepseek-v3", precision="fp8", gpu="h200-sxm", gpu_count=8, context=32768).json()
    assert h200["fits"]
    latent = h200["total"]["kv_cache_one_copy_gb"]
    assert latent == pytest.approx(61 * 576 * 2 * 32768 / 1e9, abs=0.01)
    assert h200["per_gpu"]["kv_cache_gb"] == latent  # every GPU holds the whole latent cache
    assert h200["total"]["kv_cache_gb"] == pytest.approx(8 * latent, abs=0.05)
    h100 = check(api, model="deepseek-v3", precision="fp8", gpu="h100-sxm", gpu_count=8, context=32768).json()
    assert not h100["fits"] and h100["reasons"][0]["code"] == "does_not_fit"
    assert h100["per_gpu"]["kv_cache_gb"] == latent


def test_gpt_oss_120b_memory_from_total_ceiling_from_active(api):
    body = check(api, model="gpt-oss-120b", precision="int4", gpu="h100-sxm").json()
    assert body["fits"] and body["per_gpu"]["weights_gb"] == 58.5
    assert body["decode_ceiling_tokens_per_s"] == 1314  # 3350 / (5.1 x 0.5)
    assert body["model"]["params_b"] == 117.0 and body["model"]["active_params_b"] == 5.1


# --- config.json ----------------------------------------------------------------


def test_check_from_a_posted_config(api):
    body = check(api, architecture=hf_config("llama-3.1-70b"), precision="fp8", gpu="h100-sxm").json()
    assert body["fits"] and body["per_gpu"]["weights_gb"] == pytest.approx(70.55, abs=0.01)
    named = check(api, architecture=hf_config("llama-3.1-8b"), params_b=8, precision="bf16", gpu="rtx-4090").json()
    assert named["decode_ceiling_tokens_per_s"] == 63 and named["model"]["params_b"] == 8.0


def test_explicit_params_override_a_seeded_model(api):
    body = check(api, model="mixtral-8x7b", params_b=46.7, active_params_b=20, precision="fp8", gpu="h100-sxm").json()
    assert body["model"]["active_params_b"] == 20.0


# --- refusals ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "body,code",
    [
        ({"model": "no-such-model", "precision": "fp8", "gpu": "l4"}, "unknown_model"),
        ({"precision": "fp8", "gpu": "l4"}, "invalid"),
        ({"model": "ref-7b", "architecture": {}, "precision": "fp8", "gpu": "l4"}, "invalid"),
        ({"model": "ref-7b", "precision": "fp4", "gpu": "l4"}, "invalid"),
        ({"model": "ref-7b", "precision": "fp8", "kv_precision": "int4", "gpu": "l4"}, "invalid"),
        ({"model": "ref-7b", "precision": "fp8", "gpu": "l4", "context": 0}, "invalid"),
        ({"model": "ref-7b", "precision": "fp8", "gpu": "l4", "context": -5}, "invalid"),
        ({"model": "ref-7b", "precision": "fp8", "gpu": "l4", "concurrency": 0}, "invalid"),
        ({"model": "ref-7b", "precision": "fp8", "gpu": "l4", "gpu_count": 0}, "invalid"),
        ({"model": "ref-7b", "precision": "fp8", "gpu": "l4", "context": "many"}, "invalid"),
        ({"model": "ref-7b", "precision": "fp8", "gpu": "l4", "params_b": -1}, "invalid"),
        ({"model": "ref-7b", "precision": "fp8", "gpu": "l4", "params_b": "NaN"}, "invalid"),
        ({"model": "ref-7b", "precision": "fp8", "gpu": "l4", "params_b": 5, "active_params_b": 6}, "invalid"),
        ({"model": "ref-7b", "precision": "fp8", "gpu": "l4", "overhead_gb": -1}, "invalid"),
        ({"model": "llama-2-13b", "precision": "fp8", "gpu": "l4", "context": 8192}, "context_too_long"),
        ({"model": "ref-7b", "precision": "fp8", "gpu": "no-such-gpu"}, "unknown_gpu"),
        ({"model": "ref-7b", "precision": "fp8", "gpu": "l4", "term": "daily"}, "invalid"),
        ({"architecture": {"model_type": "llama"}, "precision": "fp8", "gpu": "l4"}, "malformed_config"),
        ({"architecture": [1, 2], "precision": "fp8", "gpu": "l4"}, "malformed_config"),
        ({"architecture": "config", "precision": "fp8", "gpu": "l4"}, "malformed_config"),
        ({"model": 7, "precision": "fp8", "gpu": "l4"}, "unknown_model"),
        ({"model": ["x"], "precision": "fp8", "gpu": "l4"}, "invalid"),
    ],
)
def test_bad_check_input_gets_the_error_shape(api, body, code):
    body.setdefault("context", 1024)
    resp = api.post("/api/v1/sizing/check", body, format="json")
    assert 400 <= resp.status_code < 500, resp.content
    error = resp.json()["error"]
    assert error["code"] == code and error["message"] and isinstance(error["details"], dict)


def test_context_too_long_names_the_maximum(api):
    resp = check(api, model="gemma-2-27b", precision="bf16", gpu="h100-sxm", context=8193)
    assert resp.status_code == 400
    assert resp.json()["error"]["details"] == {"context": 8193, "max_context": 8192, "model": "gemma-2-27b"}


def test_non_json_and_empty_bodies_are_4xx(api):
    assert api.post("/api/v1/sizing/check", "not json", content_type="application/json").status_code == 400
    assert api.post("/api/v1/sizing/recommend", {}, format="json").status_code == 400
    assert api.post("/api/v1/sizing/recommend", [], format="json").status_code == 400


# --- recommend ------------------------------------------------------------------


@pytest.mark.parametrize(
    "slug,expected",
    [
        ("ref-7b", "l4"),
        ("ref-13b", "l4"),
        ("ref-34b", "rtx-6000-ada"),
        ("ref-70b", "h100-pcie"),
        ("ref-120b", "h200-sxm"),
    ],
)
def test_cheapest_nvidia_single_card_for_each_fp8_figure(api, slug, expected):
    assert firsts(recommend(api, model=slug, precision="fp8", vendor="nvidia", gpu_count=1))[0] == (expected, 1)


def test_no_single_card_holds_405b_fp8(api):
    assert firsts(recommend(api, model="ref-405b", precision="fp8", gpu_count=1)) == []
    body = recommend(api, model="ref-405b", precision="fp8", gpu_count=1).json()
    assert "nothing_fits" in [a["code"] for a in body["advice"]]


def test_405b_fp8_whole_nodes_cheapest_is_8x_mi300x_and_unrestricted_is_smaller(api):
    nodes = recommend(api, model="ref-405b", precision="fp8", gpu_count=8).json()
    top = nodes["candidates"][0]
    assert (top["gpu"], top["gpu_count"], top["price_usd"]) == ("mi300x", 8, "11448.00")
    assert "smaller_than_a_node" not in [a["code"] for a in nodes["advice"]]
    body = recommend(api, model="ref-405b", precision="fp8").json()
    top = body["candidates"][0]
    assert (top["gpu"], top["gpu_count"], top["price_usd"]) == ("mi300x", 4, "5851.20")
    (node_advice,) = [a for a in body["advice"] if a["code"] == "smaller_than_a_node"]
    assert node_advice["details"] == {
        "cheapest": {"gpu": "mi300x", "gpu_count": 4, "price_usd": "5851.20"},
        "cheapest_node": {"gpu": "mi300x", "gpu_count": 8, "price_usd": "11448.00"},
    }
    assert "whole 8-GPU nodes" in node_advice["message"]


def test_recommend_is_sorted_cheapest_first_and_every_candidate_fits(api):
    body = recommend(api, model="ref-70b", precision="bf16").json()
    prices = [float(c["price_usd"]) for c in body["candidates"]]
    assert prices == sorted(prices) and len(prices) > 5
    for c in body["candidates"]:
        assert c["headroom_gb"] >= 0 and c["required_gb"] <= c["capacity_gb"]
        again = check(api, model="ref-70b", precision="bf16", gpu=c["gpu"], gpu_count=c["gpu_count"]).json()
        assert again["fits"] and again["price_usd"] == c["price_usd"]
        assert again["cost_per_million_tokens_usd"] == c["cost_per_million_tokens_usd"]
    # 70B in BF16 on a single MI300X (145 GB, 47 GB to spare), as the seed says.
    mi = next(c for c in body["candidates"] if (c["gpu"], c["gpu_count"]) == ("mi300x", 1))
    assert whole_gb(mi["headroom_gb"]) == 47
    assert firsts(recommend(api, model="ref-70b", precision="bf16", gpu_count=1)) == [("mi300x", 1)]
    # Unrestricted, four Ampere A40s hold it for less: $883.20 a month.
    assert body["candidates"][0]["gpu"] == "a40" and body["candidates"][0]["price_usd"] == "883.20"


def test_recommend_counts_every_fitting_configuration(api):
    body = recommend(api, model="ref-7b", precision="int4").json()
    active = GpuModel.objects.filter(is_active=True)
    assert body["considered"] == sum(len(g.allowed_counts) for g in active)
    assert len(body["candidates"]) == body["considered"]  # a 7B in 4-bit fits everywhere


def test_recommend_filters(api):
    amd = firsts(recommend(api, model="ref-70b", precision="fp8", vendor="amd"))
    assert {g for g, _ in amd} == {"mi300x"}
    capped = firsts(recommend(api, model="ref-70b", precision="bf16", max_gpus=2))
    assert capped and max(n for _, n in capped) <= 2
    exact = firsts(recommend(api, model="ref-70b", precision="bf16", gpu_count=4))
    assert exact and {n for _, n in exact} == {4}
    fp8 = firsts(recommend(api, model="ref-7b", precision="fp8"))
    assert not {g for g, _ in fp8} & {"a100-sxm", "a40", "rtx-a6000", "rtx-a5000", "rtx-3090"}


def test_recommend_weekly_ranks_by_weekly_price(api):
    body = recommend(api, model="ref-7b", precision="fp8", term="weekly", gpu_count=1).json()
    top = body["candidates"][0]
    assert top["term"] == "weekly" and top["gpu"] == "l4" and top["price_usd"] == "70.00"
    assert top["monthly_usd"] == "250.00"
    assert body["term"] == "weekly"


def test_recommend_region_offers_only_what_it_can_supply_now(api):
    dfw = firsts(recommend(api, model="ref-405b", precision="fp8", region="DFW-1"))
    assert ("mi300x", 4) in dfw
    iad = recommend(api, model="ref-405b", precision="fp8", region="iad-1").json()
    assert iad["region"] == "IAD-1"
    assert not {g for g, _ in firsts(recommend(api, model="ref-405b", precision="fp8", region="IAD-1"))} & {
        "mi300x",
        "b200",
    }
    assert all("available" in c for c in iad["candidates"])
    # Take every free H200 in PDX-1 but three: no host can give 4 or 8 there any more.
    Slot.objects.filter(host__region__code="PDX-1", host__gpu__slug="h200-sxm", status=SlotStatus.FREE).update(
        status=SlotStatus.RENTED, holder="test"
    )
    host = GpuModel.objects.get(slug="h200-sxm").hosts.filter(region__code="PDX-1").first()
    Slot.objects.filter(host=host, index__lt=3).update(status=SlotStatus.FREE, holder="")
    pdx = firsts(recommend(api, model="ref-70b", precision="bf16", region="PDX-1"))
    assert ("h200-sxm", 2) in pdx and ("h200-sxm", 4) not in pdx and ("h200-sxm", 8) not in pdx


def test_recommend_unknown_region_and_bad_filters(api):
    resp = recommend(api, model="ref-7b", precision="fp8", region="MARS-1")
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "unknown_region"
    resp = recommend(api, model="ref-7b", precision="fp8", gpu_count=3)
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "invalid_gpu_count"
    for bad in (
        {"vendor": "intel"},
        {"max_gpus": 0},
        {"term": "yearly"},
        {"traffic": "sometimes"},
        {"tokens_per_month": -1},
    ):
        resp = recommend(api, model="ref-7b", precision="fp8", **bad)
        assert resp.status_code == 400 and resp.json()["error"]["code"] == "invalid"


def test_advice_hosted_api_below_ten_million_tokens(api):
    body = recommend(
        api, model="ref-7b", precision="fp8", vendor="nvidia", gpu_count=1, tokens_per_month=10_000_000
    ).json()
    assert "hosted_api_cheaper" not in [a["code"] for a in body["advice"]]
    body = recommend(
        api, model="ref-7b", precision="fp8", vendor="nvidia", gpu_count=1, tokens_per_month=9_000_000
    ).json()
    (advice,) = [a for a in body["advice"] if a["code"] == "hosted_api_cheaper"]
    # L4 at $250 a month over 9 M tokens: $27.78 per million.
    assert advice["details"]["cost_per_million_tokens_usd"] == "27.78" and advice["details"]["gpu"] == "l4"


def test_advice_ampere_fp8_kv_dominance_and_bursty_traffic(api):
    codes = [a["code"] for a in recommend(api, model="ref-7b", precision="fp8").json()["advice"]]
    assert "ampere_no_fp8" in codes and "kv_cache_dominates" not in codes and "bursty_traffic" not in codes
    assert "ampere_no_fp8" not in [a["code"] for a in recommend(api, model="ref-7b", precision="int4").json()["advice"]]
    long = recommend(api, model="ref-70b", precision="fp8", context=131072, concurrency=32, traffic="bursty").json()
    codes = [a["code"] for a in long["advice"]]
    assert "kv_cache_dominates" in codes and "bursty_traffic" in codes
    kv = next(a for a in long["advice"] if a["code"] == "kv_cache_dominates")
    assert kv["details"]["kv_cache_gb"] > kv["details"]["weights_gb"]
    assert "FP8 KV cache halves it" in kv["message"]


def test_recommend_from_a_config(api):
    body = recommend(api, architecture=hf_config("deepseek-v3"), precision="fp8", gpu_count=8).json()
    assert ("h200-sxm", 8) in [(c["gpu"], c["gpu_count"]) for c in body["candidates"]]
    assert ("h100-sxm", 8) not in [(c["gpu"], c["gpu_count"]) for c in body["candidates"]]


def test_recommend_payload_has_the_documented_shape(api):
    from sizing.payloads import RecommendOutput

    documented = shape(RecommendOutput())
    body = recommend(api, model="ref-70b", precision="fp8", region="DFW-1", tokens_per_month=5).json()
    assert body["candidates"] and body["advice"]
    assert_shape(body, documented)  # with a region every candidate says how many are free
    del documented["candidates"][0]["available"]
    assert_shape(recommend(api, model="ref-70b", precision="fp8").json(), documented)


# --- new sizings per address ---------------------------------------------------------


def test_new_recommendations_are_limited_per_address_and_kept_ones_are_not(api, settings):
    """A workload no worker has an answer kept for takes the whole sizing: past
    SIZING_NEW_PER_ADDRESS from one address (IPv6: its /64) in the window, 429
    with Retry-After. An answer asked again, and other addresses, still go through."""
    settings.SIZING_NEW_PER_ADDRESS = 2
    settings.SIZING_NEW_WINDOW_SECONDS = 60

    def ask(concurrency, address="198.51.100.7"):
        body = {"model": "llama-3.1-8b", "precision": "bf16", "context": 4093, "concurrency": concurrency}
        return api.post("/api/v1/sizing/recommend", body | {"profile": "guide"}, format="json", REMOTE_ADDR=address)

    assert ask(3).status_code == 200
    assert ask(5).status_code == 200
    refused = ask(7)
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "throttled"
    wait = refused.json()["error"]["details"]["retry_after_seconds"]
    assert 1 <= wait <= 60 and refused["Retry-After"] == str(wait)
    assert refused.json()["error"]["message"].endswith(f"Try again in {wait} seconds.")
    assert ask(3).status_code == 200  # answered before: kept, not counted
    assert ask(7, address="198.51.100.8").status_code == 200
    # An IPv6 client's /64 counts as one address.
    assert ask(9, address="2001:db8:1:2::10").status_code == 200
    assert ask(11, address="2001:db8:1:2::11").status_code == 200
    assert ask(13, address="2001:db8:1:2:ffff::1").status_code == 429
    assert ask(13, address="2001:db8:1:3::1").status_code == 200


def test_checks_and_comparisons_count_as_new_sizings(api, settings):
    """A check and a comparison are worked out on every request: each counts
    against the same limit as a new recommendation, from the same address."""
    settings.SIZING_NEW_PER_ADDRESS = 3
    settings.SIZING_NEW_WINDOW_SECONDS = 60
    workload = {"model": "llama-3.1-8b", "precision": "bf16", "context": 4096, "concurrency": 4}
    two = [{"gpu": "h100-sxm", "gpu_count": 1}, {"gpu": "l40s", "gpu_count": 1}]

    def post(path, body, address="198.51.100.20"):
        return api.post(f"/api/v1/sizing/{path}", body, format="json", REMOTE_ADDR=address)

    same_check = workload | {"gpu": "h100-sxm", "gpu_count": 1, "profile": "guide"}
    assert post("check", same_check).status_code == 200
    assert post("check", same_check).status_code == 200  # asked again: worked out again, counted again
    assert post("compare", workload | {"candidates": two}).status_code == 200
    refused = post("compare", workload | {"candidates": two})
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "throttled"
    assert int(refused["Retry-After"]) == refused.json()["error"]["details"]["retry_after_seconds"]
    assert post("check", same_check).status_code == 429
    fresh = workload | {"concurrency": 5, "profile": "guide"}
    assert api.post("/api/v1/sizing/recommend", fresh, format="json", REMOTE_ADDR="198.51.100.20").status_code == 429
    # Another address has its own count. A body is counted before it is read (reading a
    # large one costs too): refused ones count, and past the limit none is read.
    assert post("check", same_check, address="198.51.100.21").status_code == 200
    assert [post("check", {"gpu": "h100-sxm"}, address="198.51.100.22").status_code for _ in range(4)] == [
        400,
        400,
        400,
        429,
    ]
    assert post("compare", {"candidates": "not a list"}, address="198.51.100.22").status_code == 429


def test_a_config_json_larger_than_64_kib_is_refused(api):
    """A published config.json takes a few KiB: a larger one is refused before it is sized."""
    config = hf_config("llama-2-13b") | {"padding": ["x" * 100] * 700}
    body = {"architecture": config, "precision": "bf16", "context": 4096, "concurrency": 1}
    for path, extra in (("check", {"gpu": "h100-sxm", "gpu_count": 1}), ("recommend", {})):
        refused = api.post(f"/api/v1/sizing/{path}", body | extra, format="json")
        assert refused.status_code == 400, refused.json()
        error = refused.json()["error"]
        assert error["code"] == "workload_too_large" and error["details"]["max_workload_bytes"] == 65536
        assert error["details"]["workload_bytes"] > 65536


def test_no_limit_on_new_recommendations_when_it_is_zero(api, settings):
    settings.SIZING_NEW_PER_ADDRESS = 0
    for concurrency in range(21, 26):
        assert (
            recommend(api, model="llama-3.1-8b", precision="bf16", concurrency=concurrency, context=4091).status_code
            == 200
        )


def test_a_lone_surrogate_in_a_config_json_is_measured_as_sent(api):
    """JSON may carry a lone surrogate escape ("\\ud800"): a few bytes, refused for what it
    is, not as a config.json over 64 KiB."""
    body = '{"architecture": {"model_type": "\\ud800"}, "precision": "bf16", "context": 4096, "gpu": "l4"}'
    resp = api.post("/api/v1/sizing/check", body, content_type="application/json")
    assert resp.status_code == 400 and resp.json()["error"]["code"] != "workload_too_large", resp.json()


def test_a_lone_surrogate_anywhere_in_a_config_json_is_refused(api):
    """In the model's `_name_or_path`, which the answer names the model by: it failed
    to render (a 500). No UTF-8 text carries one: 400."""
    config = json.dumps(hf_config("llama-3.1-8b"))[:-1] + ', "_name_or_path": "meta-llama/\\udc80"}'
    for path, extra in (("check", ', "gpu": "l4"'), ("recommend", "")):
        body = f'{{"architecture": {config}, "precision": "bf16", "context": 4096{extra}}}'
        resp = api.post(f"/api/v1/sizing/{path}", body, content_type="application/json")
        assert resp.status_code == 400 and "lone surrogate" in resp.json()["error"]["message"], resp.content[:300]


@pytest.mark.parametrize(("raw", "kept"), [('"meta-llama/x\\u0000"', "meta-llama/x\ufffd")])
def test_a_config_json_key_jsonb_cannot_store_is_kept_as_u_fffd(chains, customer, customer_api, raw, kept):
    """A key the sizing does not read is kept on an order as sent (jsonb): a NUL
    in it made the order's insert fail (a 500: jsonb and text columns hold none).
    Kept as U+FFFD, as an idempotent answer keeps it; the sizing reads the rest."""
    from accounts.services import ssh_key_add
    from rentals.models import Order
    from tests.rentals.helpers import new_key_line

    config = json.dumps(hf_config("llama-3.1-8b"))[:-1] + f', "_name_or_path": {raw}}}'
    key = ssh_key_add(account=customer, public_key=new_key_line(), name="k")
    workload = f'{{"architecture": {config}, "precision": "bf16", "context": 4096, "concurrency": 1}}'
    order = (
        '{"region": "DFW-1", "gpu": "l4", "gpu_count": 1, "term": "monthly", "terms": 1, '
        f'"template": "vllm-0.9-ubuntu-24.04", "addons": [], "ssh_keys": [{key.pk}], "pay_currency": "LTC", '
        f'"workload": {workload}}}'
    )
    resp = customer_api.post("/api/v1/orders", order, content_type="application/json")
    assert resp.status_code == 201, resp.content[:500]
    stored = Order.objects.get(pk=resp.json()["id"])
    assert stored.workload["architecture"]["_name_or_path"] == kept


def test_a_rope_type_that_is_not_a_name_is_no_500(api):
    """`rope_scaling.rope_type` as a list or an object was looked up in a set (TypeError, a 500)."""
    config = hf_config("llama-3.1-8b") | {"rope_scaling": {"rope_type": [], "factor": 8.0}}
    resp = api.post(
        "/api/v1/sizing/check",
        {"architecture": config, "precision": "bf16", "context": 4096, "gpu": "l4"},
        format="json",
    )
    assert resp.status_code in (200, 400), resp.content[:500]
