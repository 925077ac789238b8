"""The buyer's table (sizing/compare.py) and the guide's decision matrix
(sizing/matrix.py), as pure functions: no database."""

import json
from dataclasses import replace
from decimal import Decimal
from pathlib import Path

import pytest

from catalog.models import GpuModel
from sizing.arithmetic import Workload
from sizing.compare import (
    LIMIT_LOAD,
    LIMIT_MEMORY,
    LIMIT_TARGETS,
    ApiPrice,
    Load,
    Targets,
    operating_point,
    rent_or_api,
)
from sizing.engine import budget_compute, engine_check, throughput_compute
from sizing.matrix import decision_matrix, workload_class
from sizing.services import card_from_gpu

from .conftest import CARDS, arch

SEED = Path(__file__).resolve().parents[2] / "catalog" / "data" / "catalog.json"


def gpu(slug: str) -> GpuModel:
    name, memory, bandwidth, fp8, architecture = CARDS[slug]
    return GpuModel(
        slug=slug,
        name=name,
        vendor="amd" if slug == "mi300x" else "nvidia",
        architecture=architecture,
        memory_gb=memory,
        bandwidth_gbps=bandwidth,
        fp8=fp8,
        software_stack="rocm" if slug == "mi300x" else "cuda",
        monthly_usd=Decimal(1),
        weekly_usd=Decimal(1),
    )


def workload(slug="llama-3.1-70b", precision="fp8", **kw) -> Workload:
    kw.setdefault("context", 8192)
    kw.setdefault("input_tokens", 1000)
    kw.setdefault("output_tokens", 500)
    return Workload(
        arch=arch(slug),
        precision=precision,
        profile="vllm",
        max_gpu_memory_utilization=Decimal("0.95"),
        **kw,
    )


def weights_per_gpu(w: Workload, g: GpuModel, count: int) -> int:
    return engine_check(workload=w, card=card_from_gpu(g), gpu_count=count).engine.weights_per_gpu.total


def perf_at(w: Workload, g: GpuModel, count: int, concurrency: int):
    """The launch line's steady state at `concurrency` (--max-num-seqs set to it), computed apart."""
    card = card_from_gpu(g)
    at = replace(w, concurrency=concurrency)
    budget = budget_compute(workload=at, card=card, gpu_count=count)
    return throughput_compute(workload=at, card=card, gpu_count=count, budget=budget, grids=True).performance


def point(w, slug, count, load, targets=None):
    g, targets = gpu(slug), targets or Targets()
    return operating_point(
        workload=w, gpu=g, gpu_count=count, load=load, targets=targets, weights_per_gpu=weights_per_gpu(w, g, count)
    )


# --- The share of requests inside a target ------------------------------------------------


def test_the_share_inside_a_target_agrees_with_the_percentiles():
    perf = perf_at(workload(), gpu("h100-sxm"), 2, 16)
    assert perf.share_within() == 1.0
    assert perf.share_within(e2e_s=perf.e2e_p95_s) >= 0.95
    assert perf.share_within(e2e_s=perf.e2e_p99_s) >= 0.99
    assert perf.share_within(e2e_s=perf.e2e_p50_s * 0.99) < 0.5
    assert perf.share_within(ttft_s=perf.ttft_p95_s) >= 0.95
    assert perf.share_within(ttft_s=min(perf.ttft_grid) / 2) == 0.0
    # Both bounds: never more than either alone.
    both = perf.share_within(ttft_s=perf.ttft_p50_s, e2e_s=perf.e2e_p95_s)
    assert both <= min(perf.share_within(ttft_s=perf.ttft_p50_s), perf.share_within(e2e_s=perf.e2e_p95_s))
    # What recommend keeps carries no grids, and cannot be asked.
    bare = throughput_compute(
        workload=replace(workload(), concurrency=16), card=card_from_gpu(gpu("h100-sxm")), gpu_count=2
    )
    assert bare.performance.ttft_grid == ()
    with pytest.raises(ValueError):
        bare.performance.share_within(e2e_s=1.0)


# --- The operating point ---------------------------------------------------------------------


def test_without_targets_the_load_is_the_operating_point():
    w = workload()
    p = point(w, "h200-sxm", 2, Load(concurrency=16))
    assert (p.concurrency, p.limited_by, p.meets_targets, p.meets_load) == (16, LIMIT_LOAD, True, True)
    assert p.accepted_share == 1.0
    perf = perf_at(w, gpu("h200-sxm"), 2, 16)
    assert p.accepted_tokens_per_s == pytest.approx(perf.output_tokens_per_s)


def test_memory_caps_the_concurrency():
    w = workload()
    p = point(w, "h100-sxm", 2, Load(concurrency=500))
    assert p.limited_by == LIMIT_MEMORY and not p.meets_load
    assert p.concurrency == p.most_that_fit < 500
    # One more sequence of the context does not fit the launch line.
    card = card_from_gpu(gpu("h100-sxm"))
    assert not engine_check(workload=replace(w, concurrency=p.concurrency + 1), card=card, gpu_count=2).fits
    assert engine_check(workload=replace(w, concurrency=p.concurrency), card=card, gpu_count=2).fits


def test_the_highest_concurrency_that_meets_the_targets():
    w = workload()
    # A TTFT target between what 8 and what the whole load of 64 clients see.
    g = gpu("l40s")
    low, high = perf_at(w, g, 8, 8), perf_at(w, g, 8, 64)
    target = (low.ttft_p95_s + high.ttft_p95_s) / 2 * 1000
    targets = Targets(ttft_p95_ms=target)
    p = point(w, "l40s", 8, Load(concurrency=64), targets)
    assert p.limited_by == LIMIT_TARGETS and p.meets_targets and not p.meets_load
    assert 8 <= p.concurrency < min(64, p.most_that_fit)
    assert targets.met_by(perf_at(w, g, 8, p.concurrency))
    assert not targets.met_by(perf_at(w, g, 8, p.concurrency + 1))
    # Requests over the target are not accepted.
    share = p.performance.share_within(ttft_s=target / 1000)
    assert p.accepted_share == share >= 0.95
    assert p.accepted_tokens_per_s == pytest.approx(p.performance.output_tokens_per_s * share)


def test_a_target_no_concurrency_meets_accepts_nothing():
    p = point(workload(), "h100-sxm", 2, Load(concurrency=8), Targets(ttft_p95_ms=1))
    assert (p.concurrency, p.meets_targets, p.accepted_tokens_per_s, p.limited_by) == (1, False, 0.0, LIMIT_TARGETS)


def test_a_request_rate_takes_the_fewest_clients_that_reach_it():
    w = workload()
    g = gpu("h200-sxm")
    p = point(w, "h200-sxm", 1, Load(requests_per_s=1.0))
    assert p.meets_load and p.limited_by == LIMIT_LOAD
    assert perf_at(w, g, 1, p.concurrency).requests_per_s >= 1.0
    assert perf_at(w, g, 1, p.concurrency - 1).requests_per_s < 1.0
    # The customer sends no more than the rate: 1 request/s of 500 output tokens.
    assert p.accepted_tokens_per_s == pytest.approx(500.0)
    # A rate beyond what the memory's sequences reach: all of them, short of the load.
    far = point(w, "h200-sxm", 1, Load(requests_per_s=1000.0))
    assert far.limited_by == LIMIT_MEMORY and not far.meets_load and far.concurrency == far.most_that_fit


def test_a_load_is_a_concurrency_or_a_rate():
    with pytest.raises(ValueError):
        Load()
    with pytest.raises(ValueError):
        Load(concurrency=1, requests_per_s=1.0)


# --- Rent or call an API -------------------------------------------------------------------------


def test_rent_or_api_break_even():
    # $2.50 an hour is $1,800 a month; at $2.00 per million output tokens that buys 900 M tokens.
    # One instance accepts 1 M tokens an hour, 720 M a month: it cannot reach the break-even.
    out = rent_or_api(
        hourly_usd=Decimal("2.50"),
        accepted_tokens_per_hour=1_000_000,
        utilization=Decimal("0.5"),
        api_per_million_output=Decimal("2.00"),
        volume=1_500_000_000,
    )
    assert out.rent_usd_per_month == Decimal("1800.00")
    assert out.break_even_output_tokens_per_month == 900_000_000
    assert out.break_even_utilization == Decimal("1.25") and not out.renting_can_win
    # Busy half the hours: $5.00 per million rented against $2.00 by the API.
    assert out.cheaper_at_utilization == "api"
    # 1.5 billion tokens need 3 instances: $5,400 against $3,000.
    assert (out.instances_at_volume, out.rent_usd_at_volume, out.api_usd_at_volume) == (
        3,
        Decimal("5400.00"),
        Decimal("3000"),
    )
    assert out.cheaper_at_volume == "api"

    dear = rent_or_api(
        hourly_usd=Decimal("2.50"),
        accepted_tokens_per_hour=1_000_000,
        utilization=Decimal("0.5"),
        api_per_million_output=Decimal("10"),
        volume=500_000_000,
    )
    assert dear.break_even_output_tokens_per_month == 180_000_000
    assert dear.break_even_utilization == Decimal("0.25") and dear.renting_can_win
    assert dear.cheaper_at_utilization == "rent" and dear.cheaper_at_volume == "rent"
    assert dear.instances_at_volume == 1

    free = rent_or_api(
        hourly_usd=Decimal("2.50"),
        accepted_tokens_per_hour=1_000_000,
        utilization=Decimal(1),
        api_per_million_output=Decimal(0),
        volume=None,
    )
    assert free.break_even_output_tokens_per_month is None and not free.renting_can_win
    assert free.cheaper_at_utilization == "api" and free.cheaper_at_volume is None


def test_the_api_price_counts_the_prompts():
    price = ApiPrice(usd_per_million_input=Decimal("0.60"), usd_per_million_output=Decimal("1.20"))
    # 1,000 prompt tokens per 500 output tokens: two input tokens per output token.
    assert price.per_million_output(input_tokens=1000, output_tokens=500) == Decimal("2.40")


# --- The decision matrix -------------------------------------------------------------------------


def test_the_matrix_is_the_guides_eight_rows_with_catalog_cards():
    slugs = {g["slug"] for g in json.loads(SEED.read_text())["gpus"]}
    matrix = decision_matrix()
    assert list(matrix) == [
        "chat_7b_13b",
        "inference_30b_34b",
        "inference_70b",
        "long_context_rag",
        "batch",
        "latency_sensitive_chat",
        "local",
        "regulated",
    ]
    for row in matrix.values():
        assert row.start_with and set(row.start_with) <= slugs, row.code
        assert row.watch_point and row.why and row.guide_gpus


@pytest.mark.parametrize(
    ("model", "kw", "use", "latency", "expected", "also"),
    [
        ("llama-3.1-8b", {}, None, False, "chat_7b_13b", []),
        ("qwen2.5-14b", {}, None, False, "chat_7b_13b", []),
        ("qwen2.5-32b", {}, None, False, "inference_30b_34b", []),
        ("codellama-34b", {}, None, False, "inference_30b_34b", []),
        ("llama-3.1-70b", {}, None, False, "inference_70b", []),
        ("llama-3.1-405b", {}, None, False, "inference_70b", []),
        (
            "llama-3.1-70b",
            {"input_tokens": 16000, "context": 32768},
            None,
            False,
            "long_context_rag",
            ["inference_70b"],
        ),
        ("llama-3.1-70b", {"context": 65536, "input_tokens": None}, None, False, "long_context_rag", ["inference_70b"]),
        ("llama-3.1-8b", {}, "rag", False, "long_context_rag", ["chat_7b_13b"]),
        ("llama-3.1-70b", {}, None, True, "latency_sensitive_chat", ["inference_70b"]),
        ("llama-3.1-8b", {}, "chat", False, "chat_7b_13b", []),
        ("llama-3.1-8b", {}, "local", True, "local", ["chat_7b_13b"]),
        ("llama-3.1-70b", {}, "regulated", False, "regulated", ["inference_70b"]),
        ("llama-3.1-70b", {"input_tokens": 16000, "context": 32768}, "batch", False, "batch", ["inference_70b"]),
    ],
)
def test_the_class_a_workload_falls_in(model, kw, use, latency, expected, also):
    placed = workload_class(workload=workload(model, "bf16", **kw), use=use, latency_target=latency)
    assert placed.workload_class.code == expected
    assert [a.code for a in placed.also] == also
    assert placed.because
