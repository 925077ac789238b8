"""Checkpoint-true weight bytes: the layout each config.json gives, per format,
against the sizes of real published checkpoints (sizing/data/checkpoints.json
names the source of each)."""

import json
from pathlib import Path

import pytest

from sizing.engine import checkpoint_bytes
from sizing.hf_config import architecture_from_hf_config, checkpoint_format
from sizing.weights import FORMATS, Layout, Linear, format_get, matrix_bytes, weight_bytes

from .conftest import arch, hf_config

CHECKPOINTS = json.loads(
    (Path(__file__).resolve().parent.parent.parent / "sizing" / "data" / "checkpoints.json").read_text()
)["checkpoints"]


def parsed(slug: str):
    return architecture_from_hf_config(hf_config(slug), slug=slug)


@pytest.mark.parametrize(
    "row", [r for r in CHECKPOINTS if "published_bytes" in r], ids=lambda r: f"{r['model']}-{r['format']}"
)
def test_published_checkpoint_sizes_within_two_percent(row):
    assert row["source"].startswith("https://")
    computed = checkpoint_bytes(arch=parsed(row["model"]), fmt=format_get(row["format"])).total
    assert abs(computed / row["published_bytes"] - 1) < 0.02, (computed, row["published_bytes"])


def test_every_checkpoint_row_names_its_repo_and_source():
    for row in CHECKPOINTS:
        assert row["source"] == f"https://huggingface.co/{row['repo']}" or "published_bytes" in row
        assert row["format"] in FORMATS and arch(row["model"])


def test_the_evidence_covers_what_the_issue_asks():
    pinned = {(r["model"], r["format"]) for r in CHECKPOINTS}
    for wanted in [
        ("llama-3.1-8b", "fp8"),
        ("llama-3.1-70b", "fp8"),
        ("llama-3.1-8b", "awq"),
        ("llama-3.1-70b", "awq"),
        ("qwen2.5-7b", "awq"),
        ("gpt-oss-120b", "mxfp4"),
        ("gpt-oss-20b", "mxfp4"),
    ]:
        assert wanted in pinned


def test_layout_counts_every_parameter_of_the_config():
    for slug in ("llama-3.1-8b", "llama-3.1-70b", "qwen2.5-7b", "gpt-oss-120b", "mixtral-8x7b", "deepseek-v3"):
        a = parsed(slug)
        assert a.layout.total_params == a.total_params
    # Llama 3.1 8B in BF16 is exactly its published 16,060,522,496 bytes.
    assert checkpoint_bytes(arch=parsed("llama-3.1-8b"), fmt=FORMATS["bf16"]).total == 16_060_522_496


def test_breakdown_embeddings_stay_16_bit_and_scales_are_counted():
    a = parsed("llama-3.1-8b")
    awq = checkpoint_bytes(arch=a, fmt=format_get("awq"))
    assert awq.embeddings == 2 * 128256 * 4096 * 2  # embed_tokens and lm_head, BF16, untied
    linear_params = a.layout.linear_params
    assert awq.linear == linear_params // 2
    # fp16 scales and 4-bit zeros per 128 input columns: 2.5 bytes per group.
    assert awq.scales == pytest.approx(linear_params / 128 * 2.5, rel=0.001)
    gptq = checkpoint_bytes(arch=a, fmt=format_get("gptq"))
    assert gptq.scales > awq.scales  # g_idx per input column
    assert format_get("int4") == format_get("awq")
    # A bigger group means fewer scales.
    assert checkpoint_bytes(arch=a, fmt=format_get("awq", group_size=64)).scales > awq.scales


def test_tied_embeddings_counted_once():
    cfg = {**hf_config("llama-3.1-8b"), "tie_word_embeddings": True}
    tied = architecture_from_hf_config(cfg)
    untied = parsed("llama-3.1-8b")
    fmt = format_get("fp8")
    diff = checkpoint_bytes(arch=untied, fmt=fmt).embeddings - checkpoint_bytes(arch=tied, fmt=fmt).embeddings
    assert diff == 128256 * 4096 * 2


def test_mxfp4_quantizes_only_the_experts():
    a = parsed("gpt-oss-120b")
    wb = checkpoint_bytes(arch=a, fmt=format_get("mxfp4"))
    experts = sum(lin.in_features * lin.out_features * lin.count for lin in a.layout.linears if lin.role == "expert")
    attention = sum(
        lin.in_features * lin.out_features * lin.count for lin in a.layout.linears if lin.role in ("attention", "kv")
    )
    assert wb.linear == experts // 2 + attention * 2  # experts 4-bit, attention BF16
    assert wb.scales == experts // 32  # one E8M0 byte per 32 weights
    # MXFP4 on a dense model changes nothing: it has no experts.
    dense = parsed("llama-3.1-8b")
    assert (
        checkpoint_bytes(arch=dense, fmt=format_get("mxfp4")).total
        == checkpoint_bytes(arch=dense, fmt=FORMATS["bf16"]).total
    )


def test_matrix_bytes_per_format():
    assert matrix_bytes(fmt=FORMATS["bf16"], in_features=4096, out_features=4096, quantized=True) == (
        4096 * 4096 * 2,
        0,
    )
    w, s = matrix_bytes(fmt=FORMATS["nvfp4"], in_features=4096, out_features=1024, quantized=True)
    assert w == 4096 * 1024 // 2 and s == 4096 * 1024 // 16 + 8
    w, s = matrix_bytes(fmt=FORMATS["fp8"], in_features=4096, out_features=1024, quantized=True)
    assert w == 4096 * 1024 and s == 1024 * 4 + 4
    # A router stays 16-bit whatever the format.
    layout = Layout(linears=(Linear("router", 64, 8, 2, "replicate"),), hidden_size=64)
    assert weight_bytes(layout=layout, fmt=FORMATS["awq"]).other == 64 * 8 * 2 * 2


def test_tensor_parallel_shards_and_replicates_kv_projections():
    a = parsed("qwen2.5-7b")  # 4 KV heads
    fmt = FORMATS["bf16"]
    one = checkpoint_bytes(arch=a, fmt=fmt)
    two = checkpoint_bytes(arch=a, fmt=fmt, gpu_count=2)
    four = checkpoint_bytes(arch=a, fmt=fmt, gpu_count=4)
    assert two.total < one.total and four.total < two.total
    assert four.total * 4 > one.total  # norms replicated


def test_nominal_shapes_get_an_estimated_layout():
    a = arch("ref-70b")
    wb = checkpoint_bytes(arch=a, fmt=FORMATS["bf16"])
    assert abs(wb.total - 140 * 10**9) < 10**7  # all 70B parameters in linear layers
    moe = arch("mixtral-8x7b")  # a seeded row without its layout: experts from the active count
    estimated = checkpoint_bytes(arch=moe, fmt=FORMATS["bf16"])
    assert abs(estimated.total / (46.7e9 * 2) - 1) < 0.01


@pytest.mark.parametrize(
    "quantization,expected",
    [
        ({"quant_method": "awq", "bits": 4, "group_size": 128}, {"format": "awq", "group_size": 128}),
        ({"quant_method": "gptq", "bits": 4, "group_size": 32}, {"format": "gptq", "group_size": 32}),
        ({"quant_method": "mxfp4"}, {"format": "mxfp4", "group_size": None}),
        ({"quant_method": "fp8", "weight_block_size": [128, 128]}, {"format": "fp8", "group_size": None}),
        ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, {"format": "nvfp4", "group_size": None}),
        (
            {
                "quant_method": "compressed-tensors",
                "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float"}}},
            },
            {"format": "fp8", "group_size": None},
        ),
        (
            {"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {"num_bits": 8, "type": "int"}}}},
            {"format": "int8", "group_size": None},
        ),
        (
            {
                "quant_method": "compressed-tensors",
                "config_groups": {"g": {"weights": {"num_bits": 4, "type": "int", "group_size": 64}}},
            },
            {"format": "gptq", "group_size": 64},
        ),
        (None, None),
    ],
)
def test_quantization_config_names_the_format(quantization, expected):
    assert checkpoint_format(quantization) == expected


def test_rope_scaling_stretches_the_context_as_vllm_does():
    qwen = hf_config("qwen2.5-7b")
    assert architecture_from_hf_config(qwen).max_context == 32768
    yarn = {**qwen, "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}
    stretched = architecture_from_hf_config(yarn)
    assert stretched.max_context == 131072 and stretched.native_context == 32768
    # Llama 3.1's llama3 scaling already states its length.
    assert architecture_from_hf_config(hf_config("llama-3.1-8b")).max_context == 131072
    assert architecture_from_hf_config(hf_config("gpt-oss-20b")).max_context == 131072  # yarn 4096 x 32


def test_checkpoint_bytes_hold_what_vllm_skips():
    from sizing.weights import weight_bytes as wb

    a = parsed("deepseek-v3")
    fmt = format_get("fp8")
    loaded = wb(layout=a.layout, fmt=fmt).total
    files = wb(layout=a.layout, fmt=fmt, checkpoint=True).total
    # The MTP layer: ~11.5B parameters in FP8 plus its BF16 embedding and head copies (2 x 0.93B x 2 bytes).
    assert 14e9 < files - loaded < 16e9
    assert checkpoint_bytes(arch=a, fmt=fmt).total == files


def test_llama4_vision_tower_stays_16_bit():
    a = parsed("llama-4-scout")
    vision = sum(lin.in_features * lin.out_features * lin.count for lin in a.layout.linears if lin.role == "vision")
    quantized = sum(
        lin.in_features * lin.out_features * lin.count
        for lin in a.layout.linears
        if lin.role not in ("vision", "router")
    )
    bf16 = checkpoint_bytes(arch=a, fmt=format_get("bf16"))
    fp8 = checkpoint_bytes(arch=a, fmt=format_get("fp8"))
    # Every linear layer halves but the vision tower's (and the routers, counted with the other 16-bit parts).
    assert bf16.linear - fp8.linear == quantized and vision > 0
