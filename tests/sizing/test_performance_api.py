"""Throughput, latency and cost in the sizing API (vllm profile)."""

from decimal import Decimal

import pytest

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _seeded(catalog, seeded_architectures):
    pass


def post(api, path, **body):
    body.setdefault("context", 8192)
    return api.post(f"/api/v1/sizing/{path}", body, format="json")


def test_check_answers_throughput_and_latency_at_the_concurrency(api):
    body = post(
        api,
        "check",
        model="llama-3.1-70b",
        precision="fp8",
        concurrency=8,
        input_tokens=1000,
        output_tokens=500,
        gpu="h100-sxm",
        gpu_count=2,
    ).json()
    speed, latency = body["throughput"], body["latency"]
    assert speed["input_tokens"] == 1000 and speed["output_tokens"] == 500 and speed["in_flight"] == 8
    assert speed["output_tokens_per_s"] == pytest.approx(speed["requests_per_s"] * 500, rel=0.01)
    # Little's law: 8 clients, each request taking its E2E time.
    assert speed["requests_per_s"] * latency["e2e_ms"]["p50"] / 1000 == pytest.approx(8, rel=0.15)
    assert latency["ttft_ms"]["p50"] <= latency["ttft_ms"]["p95"]
    assert latency["e2e_ms"]["p50"] <= latency["e2e_ms"]["p95"] <= latency["e2e_ms"]["p99"]
    # What one client sees while its request decodes: 1 / TPOT (TPOT shown to 0.1 ms).
    assert abs(speed["per_sequence_tokens_per_s"] - 1000 / latency["tpot_ms"]["p50"]) < 1.5
    # The cost per million tokens is the month's price over the tokens that rate yields.
    expected = Decimal(body["price_usd"]) * 10**6 / (speed["aggregate_tokens_per_s"] * 720 * 3600)
    assert Decimal(body["cost_per_million_tokens_usd"]) == expected.quantize(Decimal("0.01"))
    # More clients: more tokens per second, each one slower.
    busy = post(
        api,
        "check",
        model="llama-3.1-70b",
        precision="fp8",
        concurrency=32,
        input_tokens=1000,
        output_tokens=500,
        gpu="h100-sxm",
        gpu_count=2,
    ).json()
    assert busy["throughput"]["output_tokens_per_s"] > speed["output_tokens_per_s"]
    assert busy["latency"]["tpot_ms"]["p50"] > latency["tpot_ms"]["p50"]
    assert Decimal(busy["cost_per_million_tokens_usd"]) < Decimal(body["cost_per_million_tokens_usd"])


def test_default_lengths_and_the_guide_profile(api):
    body = post(api, "check", model="llama-3.1-8b", precision="bf16", gpu="l40s").json()
    assert (body["throughput"]["input_tokens"], body["throughput"]["output_tokens"]) == (1000, 1000)
    short = post(api, "check", model="llama-3.1-8b", precision="bf16", gpu="l40s", context=1024).json()
    assert (short["throughput"]["input_tokens"], short["throughput"]["output_tokens"]) == (512, 512)
    guide = post(api, "check", model="llama-3.1-8b", precision="bf16", gpu="l40s", profile="guide").json()
    assert guide["throughput"] is None and guide["latency"] is None


def test_lengths_longer_than_the_context_are_refused(api):
    resp = post(
        api,
        "check",
        model="llama-3.1-8b",
        precision="bf16",
        gpu="l40s",
        context=1000,
        input_tokens=900,
        output_tokens=200,
    )
    assert resp.status_code == 400
    assert resp.json()["error"]["code"] == "lengths_exceed_context"


def test_recommend_advice_uses_the_same_model(api):
    body = post(api, "recommend", model="llama-3.1-8b", precision="bf16", concurrency=16, vendor="nvidia").json()
    (advice,) = [a for a in body["advice"] if a["code"] == "cost_by_concurrency"]
    rows = advice["details"]["rows"]
    tpots = [r["tpot_p50_ms"] for r in rows]
    assert tpots == sorted(tpots) and all(r["ttft_p50_ms"] > 0 for r in rows)
    cheapest = body["candidates"][0]
    again = post(
        api,
        "check",
        model="llama-3.1-8b",
        precision="bf16",
        concurrency=16,
        gpu=cheapest["gpu"],
        gpu_count=cheapest["gpu_count"],
    ).json()
    one = [r for r in rows if r["concurrency"] == 16]
    assert one and one[0]["aggregate_tokens_per_s"] == again["throughput"]["aggregate_tokens_per_s"]
