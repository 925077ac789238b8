"""The sizing endpoints in the default vllm profile."""

from decimal import Decimal

import pytest

from sizing.payloads import CheckOutput, RecommendOutput

from .conftest import hf_config
from .shapes import assert_shape, shape

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _seeded(catalog, seeded_architectures):
    pass


def check(api, **body):
    body.setdefault("context", 8192)
    return api.post("/api/v1/sizing/check", body, format="json")


def recommend(api, **body):
    body.setdefault("context", 8192)
    return api.post("/api/v1/sizing/recommend", body, format="json")


def test_check_is_engine_true_by_default(api):
    resp = check(api, model="llama-3.1-70b", precision="fp8", gpu="h100-sxm", gpu_count=2, concurrency=16)
    assert resp.status_code == 200, resp.json()
    body = resp.json()
    assert_shape(body, shape(CheckOutput()))
    assert body["profile"] == "vllm" and body["fits"] is True
    weights = body["weights"]
    assert weights["format"] == "fp8" and weights["layout"] == "config"
    assert weights["total"]["total_gb"] == pytest.approx(72.68, abs=0.01)
    assert weights["total"]["embeddings_gb"] == pytest.approx(4.2, abs=0.01)  # 16-bit embeddings and head
    assert body["per_gpu"]["weights_gb"] == weights["per_gpu"]["total_gb"]
    engine = body["engine"]
    assert 0.5 < engine["gpu_memory_utilization_min"] <= engine["gpu_memory_utilization_max"] == 0.95
    assert engine["max_concurrency"] >= 16 and engine["max_context"] >= 8192
    # Capacity is what the launch line gives vLLM: its default 0.90 here, not the 0.95 it could have.
    assert "--gpu-memory-utilization 0.90" in body["launch"]["command"]
    assert body["per_gpu"]["capacity_gb"] == pytest.approx(0.90 * 79.18 * 2**30 / 1e9, abs=0.01)
    # The cost per million tokens comes from the aggregate bound at 16 sequences.
    throughput = body["throughput"]
    assert throughput["concurrency"] == 16 and throughput["aggregate_tokens_per_s"] > 10 * 47
    expected = Decimal("3211.00") * 10**6 / (throughput["aggregate_tokens_per_s"] * 720 * 3600)
    assert Decimal(body["cost_per_million_tokens_usd"]) == expected.quantize(Decimal("0.01"))
    launch = body["launch"]
    assert launch["command"].startswith("vllm serve RedHatAI/Meta-Llama-3.1-70B-Instruct-FP8 ")
    assert "--tensor-parallel-size 2" in launch["command"] and "--max-num-seqs 16" in launch["command"]
    # The guide is still there, with its own figures.
    guide = check(api, model="llama-3.1-70b", precision="fp8", gpu="h100-sxm", gpu_count=2, profile="guide").json()
    assert guide["profile"] == "guide" and guide["per_gpu"]["weights_gb"] == 35.28 and guide["launch"] is None


def test_check_refuses_a_format_the_card_cannot_run(api):
    body = check(api, model="llama-3.1-8b", precision="awq", gpu="mi300x").json()
    assert body["fits"] is False and body["launch"] is None
    (reason,) = [r for r in body["reasons"] if r["code"] == "format_unsupported"]
    assert reason["details"]["weight_format"] == "awq" and "fp8" in reason["details"]["formats"]
    ampere = check(api, model="llama-3.1-8b", precision="fp8", gpu="a100-sxm").json()
    assert ampere["fits"] is True and any("weight-only" in n for n in ampere["notes"])


def test_a_posted_quantized_config_is_sized_in_its_format(api):
    cfg = hf_config("gpt-oss-120b")
    # The template's vLLM 0.9.2 cannot load gpt-oss at all: it says which release can.
    template = check(api, architecture=cfg, gpu="h100-sxm", context=32768, concurrency=4).json()
    assert template["fits"] is False and template["launch"] is None
    (reason,) = [r for r in template["reasons"] if r["code"] == "model_unsupported"]
    assert reason["details"]["needs"] == "0.10.1" and reason["details"]["engine_version"] == "0.9.2"
    newest = reason["details"]["engine_versions"][-1]
    body = check(api, architecture=cfg, gpu="h100-sxm", context=32768, concurrency=4, engine_version=newest).json()
    assert body["precision"] == "mxfp4" and body["fits"] is True and body["engine"]["engine_version"] == newest
    assert body["weights"]["total"]["total_gb"] == pytest.approx(65.25, abs=0.01)
    assert body["launch"]["model"] == "openai/gpt-oss-120b"
    mismatch = check(api, architecture=cfg, precision="bf16", gpu="h100-sxm")
    assert mismatch.status_code == 400 and mismatch.json()["error"]["code"] == "format_mismatch"
    assert check(api, architecture=cfg, precision="mxfp4", gpu="h100-sxm", engine_version=newest).status_code == 200
    refused = check(api, architecture=cfg, gpu="a100-sxm", gpu_count=2).json()
    assert "format_unsupported" in [r["code"] for r in refused["reasons"]]  # no MXFP4 in vLLM 0.9.2
    marlin = check(api, architecture=cfg, gpu="a100-sxm", gpu_count=2, engine_version=newest).json()
    assert marlin["fits"] is True and any("weight-only" in n for n in marlin["notes"])
    unknown = check(api, architecture=cfg, gpu="h100-sxm", engine_version="0.1.0")
    assert unknown.status_code == 400 and unknown.json()["error"]["code"] == "invalid"
    bad = check(api, architecture={**cfg, "quantization_config": {"quant_method": "bitsandbytes"}}, gpu="l4")
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "unsupported_checkpoint"


def test_context_beyond_the_positions_needs_rope_scaling(api):
    qwen = hf_config("qwen2.5-7b")
    resp = check(api, architecture=qwen, precision="bf16", gpu="h100-sxm", context=65536)
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "context_too_long"
    yarn = {**qwen, "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}
    body = check(api, architecture=yarn, precision="bf16", gpu="h100-sxm", context=65536).json()
    assert body["fits"] is True and body["model"]["max_context"] == 131072
    assert any("rope scaling" in n for n in body["launch"]["notes"])
    too_far = check(api, architecture=yarn, precision="bf16", gpu="h100-sxm", context=131073)
    assert too_far.status_code == 400 and too_far.json()["error"]["code"] == "context_too_long"


def test_the_utilization_setting_decides(api, settings):
    body = check(api, model="llama-3.1-70b", precision="fp8", gpu="h100-sxm").json()
    assert body["fits"] is True and body["engine"]["gpu_memory_utilization_min"] == 0.92
    assert body["engine"]["kv_cache_available_gb"] == pytest.approx(
        body["per_gpu"]["capacity_gb"] - body["per_gpu"]["weights_gb"] - body["per_gpu"]["overhead_gb"], abs=0.02
    )
    settings.SIZING_MAX_GPU_MEMORY_UTILIZATION = Decimal("0.90")
    body = check(api, model="llama-3.1-70b", precision="fp8", gpu="h100-sxm").json()
    assert body["fits"] is False and body["reasons"][0]["details"]["gpu_memory_utilization_needed"] == 0.92


def test_recommend_in_the_vllm_profile(api):
    resp = recommend(api, model="llama-3.1-8b", precision="bf16", concurrency=32, vendor="nvidia")
    assert resp.status_code == 200, resp.json()
    body = resp.json()
    documented = shape(RecommendOutput())
    del documented["candidates"][0]["available"]  # only with a region
    assert_shape(body, documented)
    prices = [Decimal(c["price_usd"]) for c in body["candidates"]]
    assert prices == sorted(prices) and prices
    for c in body["candidates"]:
        assert c["launch_command"].startswith("vllm serve meta-llama/Llama-3.1-8B-Instruct ")
        assert c["gpu_memory_utilization_min"] <= 0.95 and c["aggregate_tokens_per_s"] > 0
        again = check(
            api, model="llama-3.1-8b", precision="bf16", concurrency=32, gpu=c["gpu"], gpu_count=c["gpu_count"]
        )
        assert again.json()["fits"] and again.json()["cost_per_million_tokens_usd"] == c["cost_per_million_tokens_usd"]
    (advice,) = [a for a in body["advice"] if a["code"] == "cost_by_concurrency"]
    rows = advice["details"]["rows"]
    costs = [Decimal(r["cost_per_million_tokens_usd"]) for r in rows]
    assert rows[0]["concurrency"] == 1 and len(rows) > 3
    assert costs == sorted(costs, reverse=True) and costs[-1] < costs[0] / 5


def test_recommend_leaves_out_what_cannot_run(api):
    assert recommend(api, model="gpt-oss-20b", precision="mxfp4", gpu_count=1).json()["candidates"] == []
    body = recommend(api, model="gpt-oss-20b", precision="mxfp4", gpu_count=1, engine_version="0.34.0").json()
    archs = {c["gpu"] for c in body["candidates"]}
    assert {"a100-sxm", "l40s", "mi300x", "h100-sxm"} <= archs
    # FP8 experts run weight-only on Ampere (Marlin's MoE kernel): the cards stay, with the advice that says so.
    fp8 = recommend(api, model="mixtral-8x7b", precision="fp8").json()
    assert {c["gpu"] for c in fp8["candidates"]} & {"a100-sxm", "a40", "rtx-a6000", "rtx-a5000", "rtx-3090"}
    codes = [a["code"] for a in fp8["advice"]]
    assert "fp8_weight_only" in codes and "ampere_no_fp8" not in codes
    dense = recommend(api, model="llama-3.1-8b", precision="fp8").json()
    assert {c["gpu"] for c in dense["candidates"]} & {"a100-sxm", "rtx-3090"}
    assert "fp8_weight_only" in [a["code"] for a in dense["advice"]]


def test_stated_parameters_drop_the_config_layout(api):
    body = check(api, model="llama-3.1-8b", params_b=10, precision="bf16", gpu="h100-sxm").json()
    assert body["weights"]["layout"] == "estimated" and body["weights"]["total"]["total_gb"] == 20.0


def test_an_estimate_far_from_the_published_count_is_said_in_the_answer(api):
    cfg = hf_config("llama-4-maverick")
    wrong = {**cfg, "text_config": {**cfg["text_config"], "interleave_moe_layer_step": 1}}
    body = check(api, architecture=wrong, precision="fp8", gpu="h200-sxm", gpu_count=8).json()
    assert any("400.0B published" in n for n in body["notes"])
    right = check(api, architecture=cfg, precision="fp8", gpu="h100-sxm", gpu_count=8).json()
    assert not any("published" in n for n in right["notes"])
    # Maverick is served on 8 x H100 from Meta's FP8 checkpoint.
    assert right["fits"] is True
    assert right["launch"]["model"] == "meta-llama/Llama-4-Maverick-17B-128E-Instruct-FP8"
