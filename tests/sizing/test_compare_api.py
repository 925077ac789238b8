"""POST /api/v1/sizing/compare: the buyer's table through the API, and the
decision-matrix class `recommend` gains."""

from decimal import ROUND_CEILING, ROUND_HALF_UP, Decimal

import pytest

from sizing.payloads import CompareOutput, RecommendOutput

from .shapes import assert_shape, shape

pytestmark = pytest.mark.django_db

CENT = Decimal("0.01")
WORKLOAD = {
    "model": "llama-3.1-70b",
    "precision": "fp8",
    "context": 8192,
    "input_tokens": 1000,
    "output_tokens": 500,
}


@pytest.fixture(autouse=True)
def _seeded(catalog, seeded_architectures):
    pass


def compare(api, **body):
    return api.post("/api/v1/sizing/compare", {**WORKLOAD, **body}, format="json")


def ok(resp) -> dict:
    assert resp.status_code == 200, resp.json()
    return resp.json()


def refused(resp, code: str) -> dict:
    assert resp.status_code == 400, resp.json()
    error = resp.json()["error"]
    assert error["code"] == code, error
    return error


THREE = [{"gpu": "h100-sxm", "gpu_count": 2}, {"gpu": "h200-sxm", "gpu_count": 1}, {"gpu": "l40s", "gpu_count": 8}]


def test_three_cards_side_by_side(api):
    body = ok(
        compare(
            api, concurrency=32, ttft_p95_ms=1000, e2e_p95_ms=30000, utilization=0.5, region="DFW-1", candidates=THREE
        )
    )
    assert_shape(body, shape(CompareOutput()))
    assert [(r["gpu"], r["gpu_count"], r["index"]) for r in body["rows"]] == [
        ("h100-sxm", 2, 0),
        ("h200-sxm", 1, 1),
        ("l40s", 8, 2),
    ]
    assert body["load"] == {"concurrency": 32, "requests_per_s": None}
    assert (body["input_tokens"], body["output_tokens"], body["profile"]) == (1000, 500, "vllm")
    for row in body["rows"]:
        assert row["fits"] and row["reasons"] == [] and not row["count_chosen"]
        price = Decimal(row["price_usd"])
        # The month's price over its 720 hours; a busy hour costs that over the busy share.
        assert Decimal(row["hourly_usd"]) == (price / 720).quantize(CENT, ROUND_HALF_UP)
        assert Decimal(row["effective_hourly_usd"]) == (price / 720 / Decimal("0.5")).quantize(CENT, ROUND_HALF_UP)
        accepted = row["accepted_output_tokens_per_hour"]
        assert accepted == pytest.approx(row["output_tokens_per_s"] * row["accepted_share"] * 3600, rel=1e-3)
        assert Decimal(row["cost_per_million_accepted_usd"]) == (
            price / 720 / Decimal("0.5") * 10**6 / accepted
        ).quantize(CENT, ROUND_HALF_UP)
        # Within the targets at the operating concurrency, at most the load.
        assert row["meets_targets"] and row["concurrency"] <= 32
        assert row["latency"]["ttft_ms"]["p95"] <= 1000 and row["latency"]["e2e_ms"]["p95"] <= 30000
        assert row["latency"]["e2e_ms"]["p95"] <= row["latency"]["e2e_ms"]["p99"]
        assert row["stock"]["region"] == "DFW-1" and row["stock"]["deliverable_now"]
        assert row["launch_command"].startswith("vllm serve ")
        assert f"--max-num-seqs {row['concurrency']} " in row["launch_command"]
        memory = row["memory"]
        assert memory["kv_cache_share"] == pytest.approx(
            memory["kv_cache_needed_gb"] / memory["kv_cache_available_gb"], abs=0.01
        )
        assert memory["oom_risk"] == ("near_limit" if memory["kv_cache_share"] >= 0.8 else "low") or (
            memory["gpu_memory_utilization"] > 0.9 and memory["oom_risk"] == "near_limit"
        )
        assert row["rent_or_api"] is None
    h100, _, l40s = body["rows"]
    # SXM against PCIe, in the notes and the interconnect.
    assert (h100["interconnect"], l40s["interconnect"]) == ("nvswitch", "pcie")
    assert "NVSwitch" in h100["notes"][0] and "PCIe" in l40s["notes"][0]
    # Stock as the catalog's stock endpoint says for Dallas.
    stock = {r["gpu"]: r for r in api.get("/api/v1/catalog/stock?region=DFW-1").json()}
    for row in body["rows"]:
        assert row["stock"]["available"] == stock[row["gpu"]]["available"]
    # The winner: the lowest cost per accepted million, and the reason in the guide's terms.
    costs = {r["index"]: Decimal(r["cost_per_million_accepted_usd"]) for r in body["rows"]}
    winner = body["winner"]
    assert costs[winner["index"]] == min(costs.values())
    best = body["rows"][winner["index"]]
    runner = min((r for r in body["rows"] if r is not best), key=lambda r: Decimal(r["cost_per_million_accepted_usd"]))
    price_ratio = Decimal(best["price_usd"]) / Decimal(runner["price_usd"])
    throughput_ratio = Decimal(best["accepted_output_tokens_per_hour"]) / runner["accepted_output_tokens_per_hour"]
    assert f"{price_ratio.quantize(Decimal('0.1'), ROUND_HALF_UP)}x the price of" in winner["reason"] or (
        f"{price_ratio.quantize(CENT, ROUND_HALF_UP)}x the price of" in winner["reason"]
    )
    assert f"{runner['gpu_count']} x {runner['gpu_name']}" in winner["reason"]
    assert winner["versus"][0]["accepted_throughput_ratio"] == float(throughput_ratio.quantize(CENT, ROUND_HALF_UP))
    assert body["workload_class"]["code"] == "latency_sensitive_chat"
    assert body["workload_class"]["also"][0]["code"] == "inference_70b"
    assert [r["in_guide_shortlist"] for r in body["rows"]] == [True, True, False]


def test_a_card_alone_gets_its_cheapest_count_that_carries_the_load(api):
    body = ok(compare(api, concurrency=32, candidates=[{"gpu": "h200-sxm"}, {"gpu": "h100-sxm"}]))
    chosen = {r["gpu"]: r for r in body["rows"]}
    for slug, row in chosen.items():
        assert row["count_chosen"] and row["meets_load"] and row["concurrency"] == 32
        # Every smaller count on offer falls short of the load.
        for smaller in (1, 2, 4):
            if smaller >= row["gpu_count"]:
                break
            alone = ok(compare(api, concurrency=32, candidates=[{"gpu": slug, "gpu_count": smaller}, {"gpu": "l4"}]))
            assert not alone["rows"][0]["meets_load"]
    # One H200 holds fewer than 32 sequences of 8k; two do.
    assert chosen["h200-sxm"]["gpu_count"] == 2


def test_a_candidate_that_does_not_run_is_a_row_not_a_refusal(api):
    body = ok(
        compare(
            api,
            concurrency=8,
            candidates=[{"gpu": "rtx-4090", "gpu_count": 1}, {"gpu": "b200", "gpu_count": 1}, {"gpu": "h200-sxm"}],
        )
    )
    small, b200, h200 = body["rows"]
    assert not small["fits"] and small["reasons"][0]["code"] == "does_not_fit"
    assert small["cost_per_million_accepted_usd"] is None and small["latency"] is None and small["memory"] is None
    assert small["accepted_output_tokens_per_hour"] == 0 and small["price_usd"] is not None
    # B200 comes two at least: the catalog's refusal, in the row, unpriced.
    assert not b200["fits"] and b200["reasons"][0]["code"] == "min_gpus" and b200["price_usd"] is None
    assert h200["fits"] and body["winner"]["index"] == 2
    odd = ok(compare(api, concurrency=8, candidates=[{"gpu": "l40s", "gpu_count": 3}, {"gpu": "h200-sxm"}]))
    assert not odd["rows"][0]["fits"] and odd["rows"][0]["reasons"][0]["code"] == "invalid_gpu_count"
    assert "only candidate" in body["winner"]["reason"]
    none = ok(
        compare(api, concurrency=8, candidates=[{"gpu": "rtx-4090", "gpu_count": 1}, {"gpu": "l4", "gpu_count": 2}])
    )
    assert none["winner"] is None and "runs the workload" in none["no_winner_reason"]


def test_targets_no_candidate_meets(api):
    body = ok(compare(api, concurrency=8, ttft_p95_ms=1, candidates=[{"gpu": "h200-sxm"}, {"gpu": "b200"}]))
    assert body["winner"] is None and "targets" in body["no_winner_reason"]
    for row in body["rows"]:
        assert row["fits"] and not row["meets_targets"] and row["accepted_output_tokens_per_hour"] == 0
        assert row["cost_per_million_accepted_usd"] is None and row["latency"]["ttft_ms"]["p95"] > 1


def test_rent_or_call_an_api(api):
    body = ok(
        compare(
            api,
            requests_per_s=1.0,
            utilization=0.25,
            api_usd_per_million_input="0.60",
            api_usd_per_million_output="1.20",
            candidates=[{"gpu": "h200-sxm", "gpu_count": 1}, {"gpu": "mi300x", "gpu_count": 1}],
        )
    )
    # 1,000 prompt tokens per 500 output tokens: $2.40 per million output tokens, prompts included.
    assert body["api"]["usd_per_million_output_with_prompts"] == "2.4000"
    # The volume of 1 request/s of 500 tokens, a quarter of the 720 hours.
    assert body["api"]["volume_output_tokens_per_month"] == 500 * 3600 * 720 // 4
    assert body["api"]["volume_source"] == "request_rate"
    for row in body["rows"]:
        rent = row["rent_or_api"]
        monthly = Decimal(row["price_usd"])
        assert rent["rent_usd_per_month"] == f"{monthly:.2f}"
        assert rent["break_even_output_tokens_per_month"] == int(
            (monthly * 10**6 / Decimal("2.4")).to_integral_value(ROUND_CEILING)
        )
        capacity = row["accepted_output_tokens_per_hour"] * 720
        assert rent["break_even_utilization"] == pytest.approx(
            rent["break_even_output_tokens_per_month"] / capacity, abs=0.001
        )
        assert rent["renting_can_win"] == (rent["break_even_utilization"] <= 1)
        # At 25 % busy the rent is dearer per token exactly when the break-even share is above 25 %.
        assert rent["cheaper_at_utilization"] == ("api" if rent["break_even_utilization"] > 0.25 else "rent")
        volume = body["api"]["volume_output_tokens_per_month"]
        assert rent["instances_at_volume"] == 1
        assert Decimal(rent["api_usd_at_volume"]) == (Decimal("2.4") * volume / 10**6).quantize(CENT, ROUND_HALF_UP)
        expected = "rent" if monthly < Decimal(rent["api_usd_at_volume"]) else "api"
        assert rent["cheaper_at_volume"] == expected
    # A stated volume wins over the rate's.
    stated = ok(
        compare(
            api,
            concurrency=8,
            api_usd_per_million_output="10",
            output_tokens_per_month=5_000_000,
            candidates=[{"gpu": "h200-sxm", "gpu_count": 1}, {"gpu": "l40s", "gpu_count": 4}],
        )
    )
    assert stated["api"]["volume_source"] == "stated" and stated["api"]["usd_per_million_input"] == "0.0000"
    # Five million tokens a month: $50 by the API, far below any month of rent.
    assert {r["rent_or_api"]["cheaper_at_volume"] for r in stated["rows"]} == {"api"}


def test_the_term_prices_the_hours(api):
    body = ok(
        compare(api, concurrency=8, term="weekly", candidates=[{"gpu": "h200-sxm", "gpu_count": 1}, {"gpu": "l4"}])
    )
    row = body["rows"][0]
    assert row["term"] == "weekly" and row["price_usd"] == "640.00"
    assert row["hourly_usd"] == (Decimal("640") / 168).quantize(CENT, ROUND_HALF_UP).to_eng_string()


@pytest.mark.parametrize(
    ("body", "code", "field"),
    [
        ({"concurrency": 8, "candidates": [{"gpu": "h200-sxm"}]}, "invalid", "candidates"),
        ({"concurrency": 8, "candidates": [{"gpu": "l4"}] * 6}, "invalid", "candidates"),
        ({"concurrency": 8, "requests_per_s": 1, "candidates": THREE}, "invalid", "requests_per_s"),
        ({"concurrency": 8, "utilization": 0, "candidates": THREE}, "invalid", "utilization"),
        ({"concurrency": 8, "api_usd_per_million_output": "-1", "candidates": THREE}, "invalid", None),
        ({"concurrency": 8, "candidates": [{"gpu": "h100"}, {"gpu": "l4"}]}, "unknown_gpu", None),
        ({"concurrency": 8, "region": "MARS-1", "candidates": THREE}, "unknown_region", None),
        ({"concurrency": 8, "context": 1000, "candidates": THREE}, "lengths_exceed_context", None),
    ],
)
def test_refusals(api, body, code, field):
    error = refused(compare(api, **body), code)
    if field:
        assert field in error["details"]["fields"], error


def test_recommend_names_the_workloads_class(api):
    body = api.post(
        "/api/v1/sizing/recommend",
        {"model": "llama-3.1-70b", "precision": "fp8", "context": 32768, "use": "rag"},
        format="json",
    ).json()
    documented = shape(RecommendOutput())
    del documented["candidates"][0]["available"]  # only with a region
    assert_shape(body, documented)
    placed = body["workload_class"]
    assert placed["code"] == "long_context_rag" and placed["because"] == "use: rag"
    assert placed["watch_point"] == "Benchmark with real context lengths, not just short prompts."
    assert placed["start_with"][0] == "h200-sxm"
    plain = api.post("/api/v1/sizing/recommend", {"model": "llama-3.1-8b", "precision": "bf16"}, format="json").json()
    assert plain["workload_class"]["code"] == "chat_7b_13b" and plain["workload_class"]["also"] == []


def test_a_config_json_and_a_use(api):
    from .conftest import hf_config

    body = ok(
        api.post(
            "/api/v1/sizing/compare",
            {
                "architecture": hf_config("qwen2.5-7b"),
                "precision": "bf16",
                "context": 4096,
                "concurrency": 16,
                "use": "batch",
                "candidates": [{"gpu": "l4"}, {"gpu": "l40s", "gpu_count": 1}],
            },
            format="json",
        )
    )
    assert body["workload_class"]["code"] == "batch" and body["workload_class"]["because"] == "use: batch"
    assert body["workload_class"]["also"][0]["code"] == "chat_7b_13b"
    assert all(r["fits"] for r in body["rows"]) and body["winner"] is not None
    # The batch class starts with the L40S, not the L4.
    assert [r["in_guide_shortlist"] for r in body["rows"]] == [False, True]
