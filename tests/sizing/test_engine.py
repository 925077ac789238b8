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
    checkpoint_bytes,
    engine_check,
    formats_that_run,
    kv_bytes_per_sequence,
    kv_tokens_capacity,
    max_concurrency,
    max_context,
    newest_version,
    release_get,
    throughput_compute,
)
from sizing.hf_config import architecture_from_hf_config
from sizing.weights import format_get

from .conftest import CARDS, card, hf_config

GIB = 2**30


def parsed(slug: str):
    return architecture_from_hf_config(hf_config(slug), slug=slug)


def vllm(slug_or_arch, precision="bf16", **kw):
    a = parsed(slug_or_arch) if isinstance(slug_or_arch, str) else slug_or_arch
    kw.setdefault("max_gpu_memory_utilization", Decimal("0.95"))
    return Workload(arch=a, precision=precision, profile="vllm", **kw)


# --- Evidence: vLLM's start-up log -------------------------------------------------------

# vLLM's start-up logs on one or two H100s (79.18 GiB each), --max-model-len 16000, gpu_memory_utilization
# 0.9, its defaults of max_num_seqs 1024 and max_num_batched_tokens 8192: "Available KV cache memory" per GPU.
# Source: https://github.com/llm-d/llm-d-benchmark/blob/main/config_explorer/empirical-vllm-memory-results.md
# (model, weight format, GPUs, logged GiB). Those runs captured CUDA graphs after sizing the cache, as vLLM 0.9 does.
LOGGED = [
    ("gpt-oss-20b", "mxfp4", 1, Decimal("50.28")),
    ("gpt-oss-120b", "mxfp4", 1, Decimal("3.33")),
    ("llama-3.1-70b", "fp8", 2, Decimal("32.00")),  # RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic: the same shapes
    ("llama-3.1-8b", "bf16", 1, Decimal("51.38")),
    ("qwen3-32b", "bf16", 1, Decimal("4.45")),
    ("qwen3-32b", "bf16", 2, Decimal("34.49")),
]
LOGGED_TOTAL_GIB = Decimal("79.18")


def test_h100_memory_is_what_vllm_reports():
    assert card_facts(card("h100-sxm")).memory_bytes == int(LOGGED_TOTAL_GIB * GIB) // 2**20 * 2**20


def _logged_kv(slug, fmt, gpus):
    w = vllm(slug, fmt, context=16000, concurrency=1024)
    budget = budget_compute(workload=w, card=card("h100-sxm"), gpu_count=gpus)
    return budget, budget.kv_available(Decimal("0.9"))


def test_kv_room_on_h100_within_0_25_gib_on_average_of_vllms_logs():
    errors = []
    for slug, fmt, gpus, logged in LOGGED:
        _, ours = _logged_kv(slug, fmt, gpus)
        error = Decimal(ours) / GIB - logged
        assert abs(error) < 1, (slug, gpus, error)
        errors.append(abs(error))
    assert sum(errors) / len(errors) < Decimal("0.25"), errors


def test_activation_peak_is_the_same_on_every_rank():
    # Qwen3-32B: vLLM logged a 5.64 GiB torch peak at TP 1 and at TP 2.
    one, _ = _logged_kv("qwen3-32b", "bf16", 1)
    two, _ = _logged_kv("qwen3-32b", "bf16", 2)
    assert one.activation == two.activation
    assert abs(Decimal(one.activation) / GIB - Decimal("5.64")) < Decimal("0.1")


def test_cuda_graphs_are_outside_the_utilization_in_vllm_0_9():
    budget, ours = _logged_kv("llama-3.1-8b", "bf16", 1)
    assert not budget.graphs_inside and budget.cuda_graphs > 0
    assert ours == int(budget.memory_bytes * Decimal("0.9")) - budget.weights - budget.non_torch - budget.activation
    # The weights term is the checkpoint's bytes: vLLM logged 14.99 GiB.
    assert round(budget.weights / GIB, 2) == pytest.approx(14.96, abs=0.05)
    # The graphs must still fit in what the utilization leaves: it can go no higher than that.
    assert budget.utilization_ceiling() == Decimal(1 - budget.cuda_graphs / budget.memory_bytes).quantize(
        Decimal("0.01"), rounding="ROUND_FLOOR"
    )
    # The newest release estimates the graphs first and takes them out of the cache.
    newer = budget_compute(
        workload=vllm("llama-3.1-8b", context=16000, concurrency=1024, engine_version=newest_version()),
        card=card("h100-sxm"),
        gpu_count=1,
    )
    assert newer.graphs_inside and newer.kv_available(Decimal("0.9")) == ours - newer.cuda_graphs
    # In tokens, as vLLM logs its KV cache size: 131,072 bytes a token for Llama 3.1 8B in BF16.
    tokens = kv_tokens_capacity(arch=parsed("llama-3.1-8b"), kv_precision="bf16", gpu_count=1, kv_bytes=ours)
    assert abs(tokens / (int(Decimal("51.38") * GIB) // 131072) - 1) < 0.01


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
    # embeddings and head) and vLLM keeps its own memory outside the cache: it needs 0.92 of the card
    # (vLLM 0.9 captures its CUDA graphs in what the utilization leaves).
    w = vllm("llama-3.1-70b", precision="fp8", context=8192, max_gpu_memory_utilization=Decimal("0.90"))
    h100 = card("h100-sxm")
    check = engine_check(workload=w, card=h100, gpu_count=1)
    assert not check.fits and [r.code for r in check.reasons] == ["does_not_fit"]
    details = check.reasons[0].details
    assert details["gpu_memory_utilization_needed"] == 0.92 and details["gpu_memory_utilization_max"] == 0.9
    assert check.engine.utilization_min == Decimal("0.92")
    # The default setting (0.95) lets it start; the launch line gives vLLM all of it, not the bare 0.92,
    # so an engine a little larger than estimated still keeps the cache the order was sold on.
    loose = engine_check(workload=replace(w, max_gpu_memory_utilization=Decimal("0.95")), card=h100, gpu_count=1)
    assert loose.fits and loose.engine.launch.args["gpu-memory-utilization"] == "0.95"
    # And the capacity it reports is at that utilization.
    assert loose.capacity_per_gpu == int(loose.engine.budget.memory_bytes * Decimal("0.95"))
    # Three times the context does not fit at all.
    long = engine_check(
        workload=replace(w, context=24576, max_gpu_memory_utilization=Decimal("0.95")), card=h100, gpu_count=1
    )
    assert not long.fits
    assert engine_check(workload=replace(w, context=24576), card=h100, gpu_count=2).fits


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
    ("llama-3.1-8b", "awq", "bf16", "mi300x", "format_unsupported"),
    ("llama-3.1-8b", "gptq", "bf16", "mi300x", "format_unsupported"),
    ("llama-3.1-8b", "int8", "bf16", "mi300x", "format_unsupported"),
    ("llama-3.1-8b", "nvfp4", "bf16", "mi300x", "format_unsupported"),
    ("gpt-oss-20b", "mxfp4", "bf16", "a100-sxm", "format_unsupported"),  # vLLM 0.9.2 has no MXFP4 at all
    ("gpt-oss-20b", "mxfp4", "bf16", "h100-sxm", "format_unsupported"),
    ("gpt-oss-20b", "mxfp4", "bf16", "mi300x", "format_unsupported"),
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
    ("llama-3.1-8b", "nvfp4", "h100-sxm"),  # weight-only (Marlin) below Blackwell
    ("llama-3.1-8b", "nvfp4", "l40s"),
    ("llama-3.1-8b", "nvfp4", "a100-sxm"),
    ("mixtral-8x7b", "fp8", "l40s"),
    ("mixtral-8x7b", "fp8", "a100-sxm"),  # FP8 experts weight-only through Marlin's MoE kernel on Ampere
    ("mixtral-8x7b", "fp8", "rtx-a6000"),
]
WEIGHT_ONLY = {("fp8", "Ampere"), ("nvfp4", "Ampere"), ("nvfp4", "Ada"), ("nvfp4", "Hopper"), ("mxfp4", "Ampere")}
WEIGHT_ONLY |= {("mxfp4", "Ada")}
NEWEST_ONLY = [
    ("gpt-oss-20b", "mxfp4", "h100-sxm"),
    ("gpt-oss-20b", "mxfp4", "b200"),
    ("gpt-oss-20b", "mxfp4", "mi300x"),
    ("gpt-oss-20b", "mxfp4", "a100-sxm"),  # Marlin in the newest release
    ("gpt-oss-20b", "mxfp4", "l40s"),
]


@pytest.mark.parametrize("model,fmt,gpu", ALLOWED + NEWEST_ONLY)
def test_combinations_that_run(model, fmt, gpu):
    version = newest_version() if (model, fmt, gpu) in NEWEST_ONLY else "0.9.2"
    check = engine_check(workload=vllm(model, fmt, context=4096, engine_version=version), card=card(gpu), gpu_count=2)
    assert not [r for r in check.reasons if r.code in ("format_unsupported", "fp8_unsupported", "model_unsupported")]
    weight_only = (fmt, CARDS[gpu][4]) in WEIGHT_ONLY
    assert any("weight-only" in n for n in check.engine.notes) == weight_only


@pytest.mark.parametrize("version", ["0.9.2", "0.34.0"])
def test_fp8_experts_run_weight_only_on_ampere_in_each_release(version):
    # 0.9.2: fp8.py Fp8MoEMethod / CompressedTensorsW8A8Fp8MoEMethod set use_marlin below
    # capability 8.9 and call fused_marlin_moe; 0.34.0: oracle/fp8.py select_fp8_moe_backend
    # falls through to MARLIN where Triton needs FP8 silicon.
    release = release_get(version)
    assert not release.moe_refused.get("fp8") and "ampere" in release.weight_only["fp8"]
    assert "fp8" in formats_that_run(family="ampere", is_moe=True, release=release)
    check = engine_check(
        workload=vllm("mixtral-8x7b", "fp8", context=4096, engine_version=version), card=card("a100-sxm"), gpu_count=2
    )
    assert not [r for r in check.reasons if r.code in ("format_unsupported", "fp8_unsupported")]
    assert any("weight-only" in n and "Marlin MoE" in n for n in check.engine.notes)


def test_gpt_oss_needs_vllm_0_10_1():
    check = engine_check(workload=vllm("gpt-oss-20b", "mxfp4", context=4096), card=card("h100-sxm"), gpu_count=1)
    reason = next(r for r in check.reasons if r.code == "model_unsupported")
    assert reason.details["needs"] == "0.10.1" and "0.10.1" in reason.message
    assert check.engine is None or check.engine.launch is None


def test_fp8_kv_cache_runs_on_ampere_as_v0_in_vllm_0_9():
    w = vllm("llama-3.1-8b", "bf16", kv_precision="fp8", context=16384)
    check = engine_check(workload=w, card=card("a100-sxm"), gpu_count=1)
    assert check.fits
    launch = check.engine.launch
    assert launch.args["kv-cache-dtype"] == "fp8" and launch.command.startswith("VLLM_USE_V1=0 vllm serve ")
    # V0 refuses fewer batched tokens than the context: the step is sized (and profiled) at the context.
    assert launch.args["max-num-batched-tokens"] == 16384 == check.engine.budget.batched_tokens
    assert any("V0" in n for n in check.engine.notes)
    # Hopper keeps it on V1; so does the newest release everywhere.
    hopper = engine_check(workload=w, card=card("h100-sxm"), gpu_count=1).engine.launch
    assert not hopper.env and hopper.args["max-num-batched-tokens"] == 8192
    newest = engine_check(workload=replace(w, engine_version=newest_version()), card=card("a100-sxm"), gpu_count=1)
    assert not newest.engine.launch.env


def test_per_card_scheduling_defaults_as_the_release_sets_them():
    w = vllm("llama-3.1-8b", context=8192)

    def step(gpu, version="0.9.2"):
        return budget_compute(workload=replace(w, engine_version=version), card=card(gpu), gpu_count=1).batched_tokens

    # vLLM 0.9.2: 8192 on cards of 70 GiB or more except the A100 (by name), 2048 elsewhere.
    assert (step("h100-sxm"), step("a100-sxm"), step("l40s"), step("b200")) == (8192, 2048, 2048, 8192)
    # The newest release: 16384 from 160 GiB.
    assert (step("b200", newest_version()), step("mi300x", newest_version())) == (16384, 16384)
    assert step("a100-sxm", newest_version()) == 2048


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


def test_throughput_is_the_step_models_steady_state():
    w = vllm("llama-3.1-8b", context=8192, concurrency=32, input_tokens=1000, output_tokens=500)
    t = throughput_compute(workload=w, card=card("h100-sxm"), gpu_count=1)
    assert isinstance(t, Throughput)
    # The KV a decoding sequence reads per step: every layer, at the mean context in flight (1,000 + 250).
    assert t.kv_bytes_read_per_sequence_per_gpu == 32 * 8 * 128 * 2 * 2 * 1250
    assert t.aggregate_tokens_per_s == int(t.performance.output_tokens_per_s)
    assert t.performance.requests_per_s * 500 == pytest.approx(t.performance.output_tokens_per_s)
    one = throughput_compute(workload=replace(w, concurrency=1), card=card("h100-sxm"), gpu_count=1)
    assert one.single_stream_tokens_per_s == t.single_stream_tokens_per_s
    assert t.aggregate_tokens_per_s > 10 * one.aggregate_tokens_per_s  # batching shares the weight reads
    assert t.per_sequence_tokens_per_s < one.per_sequence_tokens_per_s  # each sequence waits on bigger steps


def test_moe_reads_only_the_routed_experts():
    w = vllm("gpt-oss-120b", "mxfp4", context=8192)
    t = throughput_compute(workload=w, card=card("h100-sxm"), gpu_count=1)
    total = budget_compute(workload=w, card=card("h100-sxm"), gpu_count=1).weights
    assert t.active_weight_bytes_per_gpu < total / 10


def test_pcie_without_peer_to_peer_is_discounted():
    w = vllm("llama-3.1-8b", context=8192, concurrency=8)
    rtx = throughput_compute(workload=w, card=card("rtx-4090"), gpu_count=2)
    ada = throughput_compute(workload=w, card=card("rtx-6000-ada"), gpu_count=2)
    # All-reduces through host memory take a larger share of each step than peer-to-peer ones.
    assert rtx.pcie_without_p2p and not ada.pcie_without_p2p
    assert rtx.tp_efficiency < ada.tp_efficiency < 1
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
    # An FP8 KV cache on an Ada card: vLLM 0.9 runs V0, and the line says so.
    assert launch.command.startswith("VLLM_USE_V1=0 vllm serve hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4 ")
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


def test_a_4bit_format_without_a_known_checkpoint_is_refused_with_what_to_upload():
    check = engine_check(workload=vllm("qwen2.5-14b", "gptq", context=8192), card=card("l4"), gpu_count=1)
    assert not check.fits and check.engine.launch is None
    reason = next(r for r in check.reasons if r.code == "checkpoint_unknown")
    assert (
        "GPTQ" in reason.message
        and "Qwen/Qwen2.5-14B-Instruct" in reason.message
        and "upload" in reason.message.lower()
    )
    assert reason.details["repo"] == "Qwen/Qwen2.5-14B-Instruct"
    # Posting the checkpoint's own config (its quantization_config says GPTQ) sizes and launches it.
    cfg = {**hf_config("qwen2.5-14b"), "_name_or_path": "someone/Qwen2.5-14B-Instruct-GPTQ-Int4"}
    cfg["quantization_config"] = {"quant_method": "gptq", "bits": 4, "group_size": 128}
    posted = engine_check(workload=vllm(architecture_from_hf_config(cfg), "gptq"), card=card("l4"), gpu_count=1)
    assert posted.fits and posted.engine.launch.model == "someone/Qwen2.5-14B-Instruct-GPTQ-Int4"


def test_fp8_at_load_only_when_the_16bit_shard_fits():
    # 405B on 8 x H100: the BF16 shard is ~101.5 GB per GPU, more than an 80 GB card holds while loading;
    # the published FP8 checkpoint is launched instead.
    check = engine_check(workload=vllm("llama-3.1-405b", "fp8", context=8192), card=card("h100-sxm"), gpu_count=8)
    assert check.fits, check.reasons
    assert "quantization" not in check.engine.launch.args
    assert check.engine.launch.model == "RedHatAI/Meta-Llama-3.1-405B-Instruct-FP8"
    # Without a known checkpoint (a posted config of another repo) it is refused, and says why.
    cfg = {**hf_config("llama-3.1-405b"), "_name_or_path": "someone/Llama-405B-finetune"}
    posted = engine_check(
        workload=vllm(architecture_from_hf_config(cfg), "fp8", context=8192), card=card("h100-sxm"), gpu_count=8
    )
    reason = next(r for r in posted.reasons if r.code == "fp8_load_does_not_fit")
    assert reason.details["bf16_shard_gb"] == pytest.approx(101.5, abs=0.2)
    # Qwen3-235B on 4 x H100: 117.5 GB per GPU in BF16.
    qwen = engine_check(workload=vllm("qwen3-235b-a22b", "fp8", context=8192), card=card("h100-sxm"), gpu_count=4)
    assert qwen.engine.launch.model == "Qwen/Qwen3-235B-A22B-FP8"
    shard = checkpoint_bytes(arch=parsed("qwen3-235b-a22b"), fmt=format_get("bf16"), gpu_count=4).total
    assert round(shard / 1e9, 1) == pytest.approx(117.5, abs=0.3)
    # A 16-bit shard that fits is quantized at load.
    small = engine_check(workload=vllm("qwen2.5-7b", "fp8", context=8192), card=card("l4"), gpu_count=1)
    assert small.engine.launch.args["quantization"] == "fp8"


def test_awq_splits_checked_for_marlin_alignment():
    # Qwen2.5-72B's MLP is 29568 wide: over 8 GPUs each holds 3696 of it (gate and up: 7392 columns, not a
    # multiple of 64; down: 3696 input rows, not a multiple of 128); over 2, 14784 (not a multiple of 128).
    cfg = {**hf_config("qwen2.5-72b"), "_name_or_path": "someone/Qwen2.5-72B-Instruct-AWQ"}
    cfg["quantization_config"] = {"quant_method": "awq", "bits": 4, "group_size": 128}
    a = architecture_from_hf_config(cfg)
    eight = engine_check(workload=vllm(a, "awq", context=8192), card=card("h100-sxm"), gpu_count=8)
    reason = next(r for r in eight.reasons if r.code == "tp_misaligned")
    assert reason.details["out_per_gpu"] == 2 * 3696 and "Use fewer GPUs" in reason.message
    two = engine_check(workload=vllm(a, "awq", context=8192), card=card("h100-sxm"), gpu_count=2)
    assert next(r for r in two.reasons if r.code == "tp_misaligned").details["in_per_gpu"] == 14784
    # Qwen's own AWQ checkpoint pads the MLP to 29696 for this reason: it splits over 2, 4 and 8.
    padded = architecture_from_hf_config({**cfg, "intermediate_size": 29696})
    for n in (2, 4, 8):
        assert engine_check(workload=vllm(padded, "awq", context=8192), card=card("h100-sxm"), gpu_count=n).fits


def test_no_launch_line_when_it_does_not_fit():
    check = engine_check(workload=vllm("llama-3.1-70b", context=8192), card=card("l4"), gpu_count=1)
    assert not check.fits and check.engine.launch is None


def test_llama4_chunked_layers_hold_the_whole_context_in_0_9_and_a_chunk_in_the_newest():
    a = parsed("llama-4-scout")  # 36 of 48 layers attend within 8192-token chunks
    per_token_layer = 2 * 8 * 128 * 2
    old = kv_bytes_per_sequence(arch=a, kv_precision="bf16", context=131072, gpu_count=1, batched_tokens=8192)
    assert old == 48 * 131072 * per_token_layer  # vLLM 0.9.2: FullAttentionSpec on every layer
    new = kv_bytes_per_sequence(
        arch=a, kv_precision="bf16", context=131072, gpu_count=1, batched_tokens=8192, chunk_held=True
    )
    # ChunkedLocalAttentionSpec: min(chunk + batched tokens, context) tokens on a chunked layer.
    assert new == (12 * 131072 + 36 * (8192 + 8192)) * per_token_layer
    w = vllm(a, context=131072, concurrency=1)
    template = engine_check(workload=w, card=card("h100-sxm"), gpu_count=4, solve=True)
    newest = engine_check(
        workload=replace(w, engine_version=newest_version()), card=card("h100-sxm"), gpu_count=4, solve=True
    )
    assert newest.engine.max_concurrency > 2 * template.engine.max_concurrency > 0
