"""The seed's arithmetic, reproduced from the pure functions (no database)."""

from decimal import Decimal
from fractions import Fraction

import pytest

from sizing.arithmetic import (
    GB,
    Workload,
    decode_ceiling,
    fit_check,
    gb_number,
    kv_cache_bytes,
    kv_cache_bytes_per_token,
    requirement_compute,
    round_half_up,
    to_gb,
    weights_bytes,
)

from .conftest import CARDS, arch, card, whole_gb

# The seed's VRAM table: (reference shape) -> (BF16, FP8, 4-bit) in whole GB at
# 8,192 tokens, batch 1, 2 GB overhead, a BF16 KV cache.
SEED_TABLE = {
    "ref-7b": (17, 10, 7),
    "ref-13b": (35, 22, 15),
    "ref-34b": (72, 38, 21),
    "ref-70b": (145, 75, 40),
    "ref-120b": (245, 125, 65),
    "ref-405b": (816, 411, 209),
}


@pytest.mark.parametrize("slug", SEED_TABLE)
@pytest.mark.parametrize("column,precision", [(0, "bf16"), (1, "fp8"), (2, "int4")])
def test_reference_table_row(slug, column, precision):
    req = requirement_compute(workload=Workload(arch=arch(slug), precision=precision, context=8192), gpu_count=1)
    assert whole_gb(to_gb(req.required_per_gpu)) == SEED_TABLE[slug][column]
    assert req.required_per_gpu == req.required_total  # one GPU holds everything


def test_weights_bytes_per_precision():
    assert weights_bytes(params=7 * 10**9, precision="bf16") == 14 * GB
    assert weights_bytes(params=7 * 10**9, precision="fp16") == 14 * GB
    assert weights_bytes(params=7 * 10**9, precision="fp8") == 7 * GB
    assert weights_bytes(params=7 * 10**9, precision="int8") == 7 * GB
    assert weights_bytes(params=7 * 10**9, precision="int4") == 3_500_000_000
    assert weights_bytes(params=3, precision="int4") == 2  # a half byte rounds up


# The seed's decode-ceiling column: 8B in BF16 (16 GB read per token) on each card.
SEED_CEILINGS = {
    "b200": 500,
    "mi300x": 331,
    "h200-sxm": 300,
    "h100-sxm": 209,
    "a100-sxm": 128,
    "h100-pcie": 125,
    "rtx-5090": 112,
    "rtx-4090": 63,
    "rtx-6000-ada": 60,
    "rtx-3090": 59,
    "l40s": 54,
    "a40": 44,
    "l4": 19,
}


@pytest.mark.parametrize("slug,expected", SEED_CEILINGS.items())
def test_decode_ceiling_seed_column(slug, expected):
    eight_b = arch("ref-7b").__class__(**{**arch("ref-7b").__dict__, "total_params": 8 * 10**9})
    assert decode_ceiling(arch=eight_b, precision="bf16", bandwidth_gbps=CARDS[slug][2]) == expected


def test_decode_ceiling_rounds_half_up_and_scales_with_gpus():
    assert round_half_up(Fraction(117, 2)) == 59  # RTX 3090: 936 / 16 = 58.5
    assert round_half_up(Fraction(255, 2)) == 128  # A100: 2040 / 16 = 127.5
    a = arch("llama-3.1-70b")
    one = decode_ceiling(arch=a, precision="fp8", bandwidth_gbps=3350)
    eight = decode_ceiling(arch=a, precision="fp8", bandwidth_gbps=3350, gpu_count=8)
    assert one == 47  # 3350 / 70.55
    assert eight == 380  # 26800 / 70.55 = 379.87


def test_seventy_b_fp8_kv_cache_figures():
    a = arch("ref-70b")
    kv_8k = kv_cache_bytes(arch=a, kv_precision="bf16", context=8192, concurrency=1)
    assert to_gb(kv_8k, 1) == Decimal("2.7")
    assert to_gb(kv_cache_bytes(arch=a, kv_precision="bf16", context=32768, concurrency=1), 1) == Decimal("10.7")
    # Each extra concurrent 8k sequence adds the same 2.7 GB: 8 in flight ~22 GB more, 32 ~85 GB.
    kv_9 = kv_cache_bytes(arch=a, kv_precision="bf16", context=8192, concurrency=9)
    assert kv_9 - kv_cache_bytes(arch=a, kv_precision="bf16", context=8192, concurrency=8) == kv_8k
    assert abs(to_gb(8 * kv_8k) - 22) < 1
    assert abs(to_gb(32 * kv_8k) - 85) < 1
    # FP8 KV halves it.
    assert kv_cache_bytes(arch=a, kv_precision="fp8", context=8192, concurrency=1) * 2 == kv_8k


def test_seventy_b_fp8_fits_80gb_at_8k_with_5gb_to_spare_but_not_at_32k():
    a = arch("ref-70b")
    at_8k = fit_check(workload=Workload(arch=a, precision="fp8", context=8192), card=card("h100-sxm"), gpu_count=1)
    assert at_8k.fits and whole_gb(to_gb(at_8k.headroom_per_gpu)) == 5
    at_32k = fit_check(workload=Workload(arch=a, precision="fp8", context=32768), card=card("h100-sxm"), gpu_count=1)
    assert not at_32k.fits
    (reason,) = at_32k.reasons
    assert reason.code == "does_not_fit"
    assert reason.details == {"required_gb": 82.74, "capacity_gb": 80, "shortfall_gb": 2.74}


def test_34b_int4_on_rtx_3090_has_about_3gb_to_spare():
    check = fit_check(
        workload=Workload(arch=arch("ref-34b"), precision="int4", context=8192), card=card("rtx-3090"), gpu_count=1
    )
    assert check.fits
    assert to_gb(check.headroom_per_gpu, 1) == Decimal("3.4")


def test_fp8_refused_on_ampere_weights_or_kv():
    a = arch("ref-7b")
    for workload in (Workload(arch=a, precision="fp8"), Workload(arch=a, precision="bf16", kv_precision="fp8")):
        check = fit_check(workload=workload, card=card("a100-sxm"), gpu_count=1)
        assert [r.code for r in check.reasons] == ["fp8_unsupported"]
    assert fit_check(workload=Workload(arch=a, precision="int4"), card=card("rtx-3090"), gpu_count=1).fits


def test_tensor_parallel_split_and_kv_replication():
    a = arch("ref-70b")  # 64 heads, 8 KV heads
    w = Workload(arch=a, precision="bf16", context=8192)
    one = requirement_compute(workload=w, gpu_count=1)
    for n in (2, 4, 8):
        req = requirement_compute(workload=w, gpu_count=n)
        assert req.weights_per_gpu == one.weights_per_gpu // n
        assert req.kv_heads_per_gpu == 8 // n
        assert req.kv_cache_per_gpu == one.kv_cache_per_gpu // n
    # Beyond N = KV heads the heads are replicated: Qwen2.5 7B has 4 KV heads (28 heads).
    q = arch("qwen2.5-7b")
    wq = Workload(arch=q, precision="bf16", context=4096)
    two = requirement_compute(workload=wq, gpu_count=2)
    four = requirement_compute(workload=wq, gpu_count=4)
    assert four.kv_heads_per_gpu == 1 and two.kv_heads_per_gpu == 2
    assert four.kv_cache_per_gpu * 4 == requirement_compute(workload=wq, gpu_count=1).kv_cache_per_gpu
    # Llama 2 13B (40 heads) on 8 GPUs: 5 heads each, fine; 28 heads on 8 GPUs: indivisible.
    assert fit_check(
        workload=Workload(arch=arch("llama-2-13b"), precision="bf16", context=4096), card=card("l4"), gpu_count=8
    ).fits
    check = fit_check(workload=wq, card=card("h100-sxm"), gpu_count=8)
    assert [r.code for r in check.reasons] == ["tp_indivisible"]
    assert check.requirement.weights_per_gpu == requirement_compute(workload=wq, gpu_count=1).weights_per_gpu // 8


def test_kv_heads_replicated_when_gpus_outnumber_them():
    mqa = arch("ref-7b").__class__(**{**arch("ref-7b").__dict__, "kv_heads": 2, "attention_kind": "gqa"})
    w = Workload(arch=mqa, precision="bf16", context=8192)
    single = requirement_compute(workload=w, gpu_count=1).kv_cache_per_gpu
    eight = requirement_compute(workload=w, gpu_count=8)
    assert eight.kv_heads_per_gpu == 1
    assert eight.kv_cache_per_gpu == single // 2  # one of two heads, on every GPU
    assert eight.kv_cache_total == 4 * single  # the group holds four copies


def test_mla_latent_is_replicated_on_every_gpu():
    a = arch("deepseek-v3")
    assert kv_cache_bytes_per_token(arch=a, kv_precision="bf16") == 61 * 576 * 2
    w = Workload(arch=a, precision="fp8", context=32768)
    single = requirement_compute(workload=w, gpu_count=1)
    eight = requirement_compute(workload=w, gpu_count=8)
    assert eight.kv_cache_per_gpu == single.kv_cache_per_gpu == single.kv_cache_logical
    assert eight.weights_per_gpu == 83_875_000_000


def test_sliding_window_layers_hold_the_window_only():
    g = arch("gemma-2-27b")  # 46 layers, 23 slide over 4096 tokens
    per_layer_token = 2 * 16 * 128 * 2
    assert kv_cache_bytes(arch=g, kv_precision="bf16", context=8192, concurrency=1) == (
        per_layer_token * (23 * 8192 + 23 * 4096)
    )
    assert kv_cache_bytes(arch=g, kv_precision="bf16", context=2048, concurrency=1) == per_layer_token * 46 * 2048
    o = arch("gpt-oss-120b")  # 18 of 36 layers slide over 128 tokens
    assert kv_cache_bytes(arch=o, kv_precision="bf16", context=131072, concurrency=1) == (
        2 * 8 * 64 * 2 * (18 * 131072 + 18 * 128)
    )


def test_moe_memory_from_total_ceiling_from_active():
    o = arch("gpt-oss-120b")
    w = Workload(arch=o, precision="int4", context=8192)
    req = requirement_compute(workload=w, gpu_count=1)
    assert req.weights_per_gpu == 58_500_000_000  # 117B x 0.5
    # 3,350 GB/s / (5.1B x 0.5 B) = 1,313.7 t/s, not the 57 t/s the total would give.
    assert fit_check(workload=w, card=card("h100-sxm"), gpu_count=1).decode_ceiling_tokens_per_s == 1314
    check = fit_check(workload=w, card=card("h100-sxm"), gpu_count=1)
    assert check.fits


def test_overhead_is_configurable_per_gpu():
    a = arch("ref-7b")
    base = requirement_compute(workload=Workload(arch=a, precision="fp8"), gpu_count=2)
    more = requirement_compute(workload=Workload(arch=a, precision="fp8", overhead_gb=Decimal("3.5")), gpu_count=2)
    assert more.required_per_gpu - base.required_per_gpu == 1_500_000_000
    assert more.overhead_total == 7 * GB


@pytest.mark.parametrize(
    "nbytes",
    [0, 1, 4_999_999, 5_000_000, 14_999_999, 2_684_354_560, 74_684_354_560, -2_740_000_001, -5_000_000, 10**40],
)
def test_gb_rounding_is_half_up_and_matches_for_json(nbytes):
    expected = (
        (Decimal(nbytes) / GB).quantize(Decimal("0.01"), rounding="ROUND_HALF_UP") if abs(nbytes) < 10**20 else None
    )
    if expected is not None:
        assert to_gb(nbytes) == expected
    assert gb_number(nbytes) == float(to_gb(nbytes))
    assert to_gb(Fraction(nbytes * 3, 3)) == to_gb(nbytes)
