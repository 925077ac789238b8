"""The vllm profile's arithmetic (no database): the memory budget against
vLLM's own start-up figures, the formats each card runs, the solvers, the
decode bound and the launch line."""

from dataclasses import replace
from decimal import Decimal

import pytest

from sizing.arithmetic import Workload
from sizing.engine import (
    BLOCK_SIZE,
    Throughput,
    budget_compute,
    card_facts,
    engine_check,
    kv_bytes_per_sequence,
    kv_tokens_capacity,
    max_concurrency,
    max_context,
    throughput_compute,
)
from sizing.hf_config import architecture_from_hf_config

from .conftest import CARDS, card, hf_config

GIB = 2**30


def parsed(slug: str):
    return architecture_from_hf_config(hf_config(slug), slug=slug)


def vllm(slug_or_arch, precision="bf16", **kw):
    a = parsed(slug_or_arch) if isinstance(slug_or_arch, str) else slug_or_arch
    kw.setdefault("max_gpu_memory_utilization", Decimal("0.95"))
    return Workload(arch=a, precision=precision, profile="vllm", **kw)


# --- Evidence: vLLM's start-up log -------------------------------------------------------

# vLLM on one H100 (79.18 GiB total), meta-llama/Llama-3.1-8B-Instruct, --max-model-len 16000,
# gpu_memory_utilization 0.9, its defaults of max_num_seqs 1024 and max_num_batched_tokens 8192:
# "Available KV cache memory: 51.38 GiB" (weights 14.99 GiB, activation peak 4.76 GiB, non-torch 0.13 GiB).
# Source: https://github.com/llm-d/llm-d-benchmark/blob/main/config_explorer/empirical-vllm-memory-results.md
LOGGED_KV_GIB = Decimal("51.38")
LOGGED_TOTAL_GIB = Decimal("79.18")


def test_h100_memory_is_what_vllm_reports():
    assert card_facts(card("h100-sxm")).memory_bytes == int(LOGGED_TOTAL_GIB * GIB) // 2**20 * 2**20


def test_kv_capacity_of_llama_8b_on_one_h100_at_0_9_within_5_percent_of_vllm():
    w = vllm("llama-3.1-8b", context=16000, concurrency=1024)
    budget = budget_compute(workload=w, card=card("h100-sxm"), gpu_count=1)
    ours = budget.kv_available(Decimal("0.9"))
    logged = int(LOGGED_KV_GIB * GIB)
    assert abs(ours / logged - 1) < 0.05, ours / GIB
    assert ours <= logged  # and on the safe side: CUDA graphs are counted inside the utilization
    # In tokens, as vLLM logs its KV cache size: 131,072 bytes a token for Llama 3.1 8B in BF16.
    tokens = kv_tokens_capacity(arch=w.arch, kv_precision="bf16", gpu_count=1, kv_bytes=ours)
    assert abs(tokens / (logged // 131072) - 1) < 0.05
    # The weights term is the checkpoint's bytes: vLLM logged 14.99 GiB.
    assert round(budget.weights / GIB, 2) == pytest.approx(14.96, abs=0.05)


# --- The budget ---------------------------------------------------------------------------


def test_blocks_and_lowest_utilization():
    w = vllm("llama-3.1-8b", context=8193, concurrency=3)
    b = budget_compute(workload=w, card=card("h100-sxm"), gpu_count=1)
    assert b.kv_per_sequence == 32 * (8193 // BLOCK_SIZE + 1) * BLOCK_SIZE * 2 * 8 * 128 * 2  # whole blocks
    assert b.kv_needed == 3 * b.kv_per_sequence
    need = b.utilization_min()
    assert int(b.memory_bytes * need) >= b.required > int(b.memory_bytes * (need - Decimal("0.01")))


def test_fits_only_within_the_utilization_setting():
    # The guide fits 70B FP8 on one 80 GB card with 5 GB to spare. The checkpoint is 72.7 GB (16-bit
    # embeddings and head) and vLLM keeps its own memory outside the cache: it needs 0.94 of the card.
    w = vllm("llama-3.1-70b", precision="fp8", context=8192, max_gpu_memory_utilization=Decimal("0.90"))
    h100 = card("h100-sxm")
    check = engine_check(workload=w, card=h100, gpu_count=1)
    assert not check.fits and [r.code for r in check.reasons] == ["does_not_fit"]
    details = check.reasons[0].details
    assert details["gpu_memory_utilization_needed"] == 0.94 and details["gpu_memory_utilization_max"] == 0.9
    assert check.engine.utilization_min == Decimal("0.94")
    # The default setting (0.95) lets it start; the launch line gives vLLM all of it, not the bare 0.94,
    # so an engine a little larger than estimated still keeps the cache the order was sold on.
    loose = engine_check(workload=replace(w, max_gpu_memory_utilization=Decimal("0.95")), card=h100, gpu_count=1)
    assert loose.fits and loose.engine.launch.args["gpu-memory-utilization"] == "0.95"
    # Twice the context does not fit at all.
    long = engine_check(
        workload=replace(w, context=16384, max_gpu_memory_utilization=Decimal("0.95")), card=h100, gpu_count=1
    )
    assert not long.fits
    assert engine_check(workload=replace(w, context=16384), card=h100, gpu_count=2).fits


def test_sliding_window_layers_are_booked_as_vllm_admits_them():
    a = parsed("gpt-oss-20b")  # 12 of 24 layers slide over 128 tokens
    step = 8192
    per_seq = kv_bytes_per_sequence(arch=a, kv_precision="bf16", context=32768, gpu_count=1, batched_tokens=step)
    per_token_layer = 2 * 8 * 64 * 2
    full = 12 * (32768 // 16)
    sliding = 12 * (-(-(128 - 1 + step) // 16) + 1)  # the window plus a step of tokens, plus a block
    assert per_seq == (full + sliding) * 16 * per_token_layer
    # Short sequences: a sliding layer never books more than the sequence.
    short = kv_bytes_per_sequence(arch=a, kv_precision="bf16", context=100, gpu_count=1, batched_tokens=step)
    assert short == 24 * 7 * 16 * per_token_layer


def test_tensor_parallel_adds_nccl_memory_and_replicates_mla():
    w = vllm("llama-3.1-70b", context=8192)
    one = budget_compute(workload=w, card=card("h200-sxm"), gpu_count=1)
    two = budget_compute(workload=w, card=card("h200-sxm"), gpu_count=2)
    assert two.non_torch > one.non_torch
    ds = vllm("deepseek-v3", precision="fp8", context=32768)
    b1 = budget_compute(workload=ds, card=card("h200-sxm"), gpu_count=1)
    b8 = budget_compute(workload=ds, card=card("h200-sxm"), gpu_count=8)
    assert b1.kv_per_sequence == b8.kv_per_sequence  # the latent is on every GPU


# --- Formats by hardware ------------------------------------------------------------------------


REFUSALS = [
    # (model, weight format, kv, card, reason code)
    ("mixtral-8x7b", "fp8", "bf16", "a100-sxm", "fp8_unsupported"),  # FP8 MoE needs Ada+
    ("mixtral-8x7b", "fp8", "bf16", "rtx-3090", "fp8_unsupported"),
    ("llama-3.1-8b", "awq", "bf16", "mi300x", "format_unsupported"),
    ("llama-3.1-8b", "gptq", "bf16", "mi300x", "format_unsupported"),
    ("llama-3.1-8b", "int8", "bf16", "mi300x", "format_unsupported"),
    ("llama-3.1-8b", "nvfp4", "bf16", "h100-sxm", "format_unsupported"),
    ("llama-3.1-8b", "nvfp4", "bf16", "l40s", "format_unsupported"),
    ("llama-3.1-8b", "nvfp4", "bf16", "mi300x", "format_unsupported"),
    ("llama-3.1-8b", "nvfp4", "bf16", "a100-sxm", "format_unsupported"),
    ("gpt-oss-20b", "mxfp4", "bf16", "a100-sxm", "format_unsupported"),
    ("gpt-oss-20b", "mxfp4", "bf16", "l40s", "format_unsupported"),
    ("gpt-oss-20b", "mxfp4", "bf16", "rtx-4090", "format_unsupported"),
]


@pytest.mark.parametrize("model,fmt,kv,gpu,code", REFUSALS)
def test_every_refusal_of_the_format_table(model, fmt, kv, gpu, code):
    check = engine_check(workload=vllm(model, fmt, kv_precision=kv, context=4096), card=card(gpu), gpu_count=8)
    reason = next(r for r in check.reasons if r.code == code)
    alternatives = reason.details["formats"]
    assert fmt not in alternatives and "bf16" in alternatives
    # Every format it names does run there.
    for other in alternatives:
        again = engine_check(workload=vllm(model, other, context=4096), card=card(gpu), gpu_count=8)
        assert not [r for r in again.reasons if r.code in ("format_unsupported", "fp8_unsupported")], other


ALLOWED = [
    ("llama-3.1-8b", "fp8", "a100-sxm"),  # weight-only on Ampere, with a note
    ("llama-3.1-8b", "fp8", "rtx-3090"),
    ("llama-3.1-8b", "awq", "a100-sxm"),
    ("llama-3.1-8b", "int8", "rtx-a6000"),
    ("llama-3.1-8b", "fp8", "mi300x"),
    ("llama-3.1-8b", "nvfp4", "b200"),
    ("llama-3.1-8b", "nvfp4", "rtx-5090"),
    ("gpt-oss-20b", "mxfp4", "h100-sxm"),
    ("gpt-oss-20b", "mxfp4", "b200"),
    ("gpt-oss-20b", "mxfp4", "mi300x"),
    ("mixtral-8x7b", "fp8", "l40s"),
]


@pytest.mark.parametrize("model,fmt,gpu", ALLOWED)
def test_combinations_that_run(model, fmt, gpu):
    check = engine_check(workload=vllm(model, fmt, context=4096), card=card(gpu), gpu_count=2)
    assert not [r for r in check.reasons if r.code in ("format_unsupported", "fp8_unsupported")]
    weight_only = fmt == "fp8" and CARDS[gpu][4] == "Ampere"
    assert any("weight-only" in n for n in check.engine.notes) == weight_only


def test_fp8_kv_cache_runs_on_ampere():
    check = engine_check(
        workload=vllm("llama-3.1-8b", "bf16", kv_precision="fp8", context=8192), card=card("a100-sxm"), gpu_count=1
    )
    assert check.fits
    assert check.engine.launch.args["kv-cache-dtype"] == "fp8"


# --- Solvers ------------------------------------------------------------------------------------------


def test_most_sequences_and_longest_context():
    w = vllm("llama-3.1-8b", context=32768, concurrency=4)
    h100 = card("h100-sxm")
    weights = budget_compute(workload=w, card=h100, gpu_count=1).weights
    most = max_concurrency(workload=w, card=h100, gpu_count=1, weights=weights)
    assert engine_check(workload=replace(w, concurrency=most), card=h100, gpu_count=1).fits
    assert not engine_check(workload=replace(w, concurrency=most + 1), card=h100, gpu_count=1).fits
    longest = max_context(workload=replace(w, concurrency=64), card=h100, gpu_count=1, weights=weights)
    assert engine_check(workload=replace(w, concurrency=64, context=longest), card=h100, gpu_count=1).fits
    assert not engine_check(workload=replace(w, concurrency=64, context=longest + 16), card=h100, gpu_count=1).fits
    full = engine_check(workload=w, card=h100, gpu_count=1, solve=True)
    assert full.engine.max_concurrency == most
    assert full.engine.max_context == max_context(workload=w, card=h100, gpu_count=1, weights=weights)
    assert 32768 < full.engine.max_context < w.arch.max_context  # 4 x 131k do not fit one H100


# --- Speed ----------------------------------------------------------------------------------------------


def test_aggregate_decode_bound():
    w = vllm("llama-3.1-8b", context=8192, concurrency=32)
    t = throughput_compute(workload=w, card=card("h100-sxm"), gpu_count=1)
    assert isinstance(t, Throughput)
    kv = 32 * 4096 * 131072 // 32 * 32  # half the context read per step, every layer
    assert t.kv_bytes_read_per_sequence_per_gpu == 4096 * 131072 and kv
    expected = int(Decimal(32 * 3350 * 10**9) / (t.active_weight_bytes_per_gpu + 32 * 4096 * 131072))
    assert t.aggregate_tokens_per_s == expected
    one = throughput_compute(workload=replace(w, concurrency=1), card=card("h100-sxm"), gpu_count=1)
    assert one.aggregate_tokens_per_s == t.single_stream_tokens_per_s
    assert t.aggregate_tokens_per_s > 10 * one.aggregate_tokens_per_s  # batching shares the weight reads


def test_moe_reads_only_the_routed_experts():
    w = vllm("gpt-oss-120b", "mxfp4", context=8192)
    t = throughput_compute(workload=w, card=card("h100-sxm"), gpu_count=1)
    total = budget_compute(workload=w, card=card("h100-sxm"), gpu_count=1).weights
    assert t.active_weight_bytes_per_gpu < total / 10


def test_pcie_without_peer_to_peer_is_discounted():
    w = vllm("llama-3.1-8b", context=8192, concurrency=8)
    rtx = throughput_compute(workload=w, card=card("rtx-4090"), gpu_count=2)
    ada = throughput_compute(workload=w, card=card("rtx-6000-ada"), gpu_count=2)
    assert rtx.pcie_without_p2p and rtx.tp_efficiency == Decimal("0.75")
    assert not ada.pcie_without_p2p and ada.tp_efficiency == 1
    check = engine_check(workload=w, card=card("rtx-4090"), gpu_count=2)
    assert any("peer-to-peer" in n for n in check.engine.notes)


# --- The launch line ------------------------------------------------------------------------------------


def test_launch_line_for_a_published_checkpoint():
    check = engine_check(
        workload=vllm("llama-3.1-70b", "awq", context=16384, concurrency=8, kv_precision="fp8"),
        card=card("l40s"),
        gpu_count=2,
    )
    assert check.fits
    launch = check.engine.launch
    assert launch.model == "hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4" and launch.checkpoint_known
    assert launch.command.startswith("vllm serve hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4 ")
    for flag in (
        "--tensor-parallel-size 2",
        "--max-model-len 16384",
        "--max-num-seqs 8",
        "--kv-cache-dtype fp8",
        f"--gpu-memory-utilization {launch.args['gpu-memory-utilization']}",
    ):
        assert flag in launch.command
    assert Decimal(launch.args["gpu-memory-utilization"]) >= check.engine.utilization_min


def test_launch_line_quantizes_a_bf16_checkpoint_to_fp8_at_load():
    check = engine_check(workload=vllm("qwen2.5-7b", "fp8", context=8192), card=card("l4"), gpu_count=1)
    assert check.fits
    assert check.engine.launch.model == "Qwen/Qwen2.5-7B-Instruct"
    assert check.engine.launch.args["quantization"] == "fp8"


def test_launch_line_without_a_known_checkpoint_says_so():
    check = engine_check(workload=vllm("qwen2.5-14b", "gptq", context=8192), card=card("l4"), gpu_count=1)
    assert check.fits and not check.engine.launch.checkpoint_known
    assert "GPTQ" in check.engine.launch.notes[0]


def test_no_launch_line_when_it_does_not_fit():
    check = engine_check(workload=vllm("llama-3.1-70b", context=8192), card=card("l4"), gpu_count=1)
    assert not check.fits and check.engine.launch is None
