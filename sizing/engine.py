"""The `vllm` sizing profile: what vLLM (the `vllm-0.9-ubuntu-24.04` template)
really loads and admits on a card. Pure functions, no database.

Per GPU of a tensor-parallel group of N:

    budget      = card memory (bytes, as CUDA/ROCm report it) x gpu_memory_utilization
    outside     = weights (checkpoint-true, 1/N of the sharded parts)
                + non-torch memory (CUDA context; NCCL buffers when N > 1)
                + the activation peak of a profile run of max_num_batched_tokens
                  tokens and a sampler step over max_num_seqs sequences
                + CUDA graph memory
    KV cache    = budget - outside, in blocks of 16 tokens

A workload fits when its sequences' blocks fit in that KV cache at a
gpu_memory_utilization no higher than the SIZING_MAX_GPU_MEMORY_UTILIZATION
setting. Sliding-window layers are booked as vLLM admits a sequence: the
window plus one scheduling step of tokens, not only the window.

The overhead terms are estimates calibrated against vLLM's own start-up
figures (docs/sizing.md names them); the weights and the KV cache are exact.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Decimal
from functools import lru_cache
from pathlib import Path
from typing import Any

from .arithmetic import (
    Arch,
    Card,
    Check,
    Reason,
    Requirement,
    Workload,
    decode_ceiling,
    kv_cache_bytes_per_token_layer,
    kv_heads_per_gpu,
    tp_indivisible_reason,
)
from .weights import (
    FORMATS,
    EstimatedShape,
    Layout,
    WeightBytes,
    WeightFormat,
    active_weight_bytes,
    format_get,
    layout_estimate,
)
from .weights import weight_bytes as layout_weight_bytes

PROFILE_GUIDE = "guide"
PROFILE_VLLM = "vllm"
PROFILES = (PROFILE_VLLM, PROFILE_GUIDE)

GIB = 2**30
MIB = 2**20
DATA = Path(__file__).resolve().parent / "data"

BLOCK_SIZE = 16  # vLLM's default KV block, tokens
# vLLM's scheduling step for `vllm serve`: 8192 tokens on cards of 70 GiB and
# more, 2048 below (its usage-context defaults). The launch line states it.
BATCHED_TOKENS_LARGE = 8192
BATCHED_TOKENS_SMALL = 2048
LARGE_CARD_BYTES = 70 * GIB
# Non-torch memory: the CUDA context and allocator (0.13-0.14 GiB at TP 1 in
# vLLM's logs on an H100), plus NCCL's buffers once GPUs talk (0.55 GiB at TP 2).
NON_TORCH_BYTES = 160 * MIB
NON_TORCH_TP_BYTES = 300 * MIB
NON_TORCH_PER_GPU_BYTES = 50 * MIB
# The activation peak: a fixed workspace (cuBLAS, attention), the forward pass
# of the batched tokens, and the sampler: float32 logits, probabilities,
# log-probabilities and random draws plus the sort's values (4 bytes each) and
# int64 indices (8) = 28 bytes per vocabulary entry per sequence.
WORKSPACE_BYTES = 256 * MIB
SAMPLER_BYTES_PER_ENTRY = 28
ASSUMED_VOCAB = 128_256  # for shapes without a config.json
# CUDA graphs: captured after the KV cache is allocated, so vLLM 0.9 takes them
# from the memory gpu_memory_utilization leaves; counted here so the answer
# fits inside the utilization it names.
CUDA_GRAPH_BYTES = 512 * MIB
CUDA_GRAPH_PER_LAYER_BYTES = 10 * MIB
# The launch line's gpu_memory_utilization: vLLM's own default when that is
# enough, else the lowest that fits.
LAUNCH_UTILIZATION_FLOOR = Decimal("0.90")
# Tensor parallelism over PCIe without peer-to-peer: each step's all-reduces go
# through host memory, so the group does not decode N times faster. The bound is
# discounted by these factors (by group size).
NO_P2P_TP_EFFICIENCY = {2: Decimal("0.75"), 4: Decimal("0.60"), 8: Decimal("0.50")}

REASON_FORMAT_UNSUPPORTED = "format_unsupported"
REASON_FP8_UNSUPPORTED = "fp8_unsupported"
REASON_DOES_NOT_FIT = "does_not_fit"
REASON_NO_KV_ROOM = "no_kv_cache_room"


# --- Formats by hardware ----------------------------------------------------------

# The card architecture each catalog architecture is, for the table below.
FAMILIES = {"Ampere": "ampere", "Ada": "ada", "Hopper": "hopper", "Blackwell": "blackwell", "CDNA 3": "cdna3"}
ALL = frozenset(FAMILIES.values())
NVIDIA = ALL - {"cdna3"}
# Where each weight format runs in vLLM. Source: vLLM's quantization hardware
# table https://docs.vllm.ai/en/v0.9.2/features/quantization/supported_hardware.html
# (AWQ, GPTQ and INT8 W8A8: NVIDIA only; FP8 W8A8 from Ada/Hopper and on AMD),
# its FP8 page (Ampere runs FP8 checkpoints weight-only through Marlin:
# https://docs.vllm.ai/en/v0.9.2/features/quantization/fp8.html; FP8 MoE needs
# SM 8.9+: https://huggingface.co/neuralmagic/DeepSeek-Coder-V2-Instruct-FP8/discussions/1),
# the gpt-oss recipe for MXFP4 (Hopper, Blackwell, MI300X:
# https://docs.vllm.ai/projects/recipes/en/latest/OpenAI/GPT-OSS.html) and
# NVFP4's FP4 tensor cores (Blackwell only).
WEIGHT_SUPPORT: dict[str, frozenset[str]] = {
    "bf16": ALL,
    "fp16": ALL,
    "fp8": ALL,  # Ampere weight-only (dense models only), see format_reasons
    "int8": NVIDIA,
    "awq": NVIDIA,
    "gptq": NVIDIA,
    "mxfp4": frozenset({"hopper", "blackwell", "cdna3"}),
    "nvfp4": frozenset({"blackwell"}),
}
# FP8 KV cache: every architecture here (Ampere stores it and dequantizes in attention).
KV_SUPPORT: dict[str, frozenset[str]] = {"bf16": ALL, "fp8": ALL}


def card_family(card: Card) -> str:
    family = FAMILIES.get(card.architecture)
    if family is None:  # a card staff added with another name: the strictest of its vendor
        family = "cdna3" if card.vendor == "amd" else "ampere"
    return family


def formats_that_run(*, family: str, is_moe: bool) -> list[str]:
    out = [name for name, where in WEIGHT_SUPPORT.items() if family in where]
    if family == "ampere" and is_moe:
        out.remove("fp8")
    return out


def format_reasons(*, workload: Workload, card: Card) -> tuple[list[Reason], list[str]]:
    """(refusals, notes) for the weight format and KV dtype on this card."""
    family = card_family(card)
    fmt = workload_format_name(workload)
    is_moe = workload.arch.is_moe
    reasons: list[Reason] = []
    notes: list[str] = []
    runs = family in WEIGHT_SUPPORT[fmt] and not (fmt == "fp8" and family == "ampere" and is_moe)
    if not runs:
        code = REASON_FP8_UNSUPPORTED if fmt == "fp8" else REASON_FORMAT_UNSUPPORTED
        why = {
            "fp8": "FP8 mixture-of-experts kernels need Ada, Hopper or newer",
            "mxfp4": "MXFP4 runs on Hopper, Blackwell and MI300X",
            "nvfp4": "NVFP4 needs Blackwell's FP4 tensor cores",
        }.get(fmt, f"vLLM has no {FORMATS[fmt].label} kernels for {card.architecture or family}")
        alternatives = formats_that_run(family=family, is_moe=is_moe)
        reasons.append(
            Reason(
                code,
                f"{FORMATS[fmt].label} weights do not run on the {card.name} ({card.architecture}): {why}. "
                f"Formats that do: {', '.join(alternatives)}.",
                {"gpu": card.slug, "architecture": card.architecture, "weight_format": fmt, "formats": alternatives},
            )
        )
    elif fmt == "fp8" and family == "ampere":
        notes.append(
            f"The {card.name} has no FP8 tensor cores: vLLM runs FP8 weights weight-only (W8A16, Marlin), "
            "so they save memory but decode no faster than 8-bit weights would, and prefill is slower than BF16."
        )
    if family not in KV_SUPPORT[workload.kv_precision]:
        reasons.append(
            Reason(
                REASON_FORMAT_UNSUPPORTED,
                f"A {workload.kv_precision} KV cache does not run on the {card.name}.",
                {"gpu": card.slug, "kv_precision": workload.kv_precision, "kv_precisions": ["bf16"]},
            )
        )
    return reasons, notes


# --- Cards --------------------------------------------------------------------------


@dataclass(frozen=True)
class CardFacts:
    memory_bytes: int
    peer_to_peer: bool
    source: str


@lru_cache(maxsize=1)
def _card_facts() -> dict[str, CardFacts]:
    data = json.loads((DATA / "cards.json").read_text())
    return {
        row["gpu"]: CardFacts(row["memory_bytes"], row["peer_to_peer"], row["memory_source"]) for row in data["cards"]
    }


def card_facts(card: Card) -> CardFacts:
    """The engine's view of a card; a card the data file does not list counts
    its catalog GB as decimal bytes (less than any real card reports) and
    peer-to-peer."""
    facts = _card_facts().get(card.slug)
    if facts is None:
        return CardFacts(card.memory_gb * 10**9, True, "catalog memory_gb (decimal)")
    return facts


# --- Checkpoints ----------------------------------------------------------------------


@lru_cache(maxsize=1)
def _checkpoints() -> dict[tuple[str, str], dict[str, Any]]:
    data = json.loads((DATA / "checkpoints.json").read_text())
    return {(row["model"], row["format"]): row for row in data["checkpoints"]}


def published_checkpoint(*, slug: str, fmt: str) -> dict[str, Any] | None:
    return _checkpoints().get((slug, fmt))


# --- Weights ----------------------------------------------------------------------------


def workload_format_name(workload: Workload) -> str:
    from .weights import FORMAT_ALIASES

    return FORMAT_ALIASES.get(workload.precision, workload.precision)


def workload_format(workload: Workload) -> WeightFormat:
    group = (workload.arch.checkpoint or {}).get("group_size")
    return format_get(workload_format_name(workload), group_size=group)


def arch_layout(arch: Arch) -> Layout:
    if arch.layout is not None:
        return arch.layout
    return _estimated_layout(
        arch.total_params, arch.hidden_size, arch.kv_heads, arch.active_params, arch.experts, arch.experts_per_token
    )


@lru_cache(maxsize=256)
def _estimated_layout(total, hidden, kv_heads, active, experts, top_k) -> Layout:
    return layout_estimate(
        EstimatedShape(
            total_params=total,
            hidden_size=hidden,
            kv_heads=kv_heads,
            active_params=active,
            experts=experts,
            experts_per_token=top_k,
        )
    )


def checkpoint_bytes(*, arch: Arch, fmt: WeightFormat, gpu_count: int = 1) -> WeightBytes:
    """The checkpoint's files (gpu_count 1), with the parts vLLM does not load
    (DeepSeek's MTP layer); over N GPUs, what one of them loads."""
    return layout_weight_bytes(layout=arch_layout(arch), fmt=fmt, gpu_count=gpu_count, checkpoint=gpu_count == 1)


# --- The memory budget -----------------------------------------------------------------------


def batched_tokens_for(facts: CardFacts) -> int:
    return BATCHED_TOKENS_LARGE if facts.memory_bytes >= LARGE_CARD_BYTES else BATCHED_TOKENS_SMALL


def non_torch_bytes(gpu_count: int) -> int:
    if gpu_count == 1:
        return NON_TORCH_BYTES
    return NON_TORCH_BYTES + NON_TORCH_TP_BYTES + NON_TORCH_PER_GPU_BYTES * gpu_count


def _ffn_width(layout: Layout, arch: Arch) -> tuple[int, int]:
    """(dense MLP width, one expert's width) from the layout's gate/up layers."""
    dense = expert = 0
    for lin in layout.linears:
        if lin.role == "mlp" and lin.in_features == layout.hidden_size and not layout.estimated:
            dense = lin.out_features // 2
        elif lin.role == "expert" and lin.in_features == layout.hidden_size and not layout.estimated:
            expert = lin.out_features // 2
    if layout.estimated:
        dense = 4 * arch.hidden_size
    return dense, expert


def activation_bytes(*, arch: Arch, layout: Layout, gpu_count: int, batched_tokens: int, max_num_seqs: int) -> int:
    """The peak of vLLM's profile run on one GPU: the forward pass of
    `batched_tokens` tokens and a sampler step over `max_num_seqs` sequences."""
    hidden = arch.hidden_size
    q_width = arch.attention_heads * arch.head_dim // gpu_count
    kv_width = 2 * kv_heads_per_gpu(arch=arch, gpu_count=gpu_count) * arch.head_dim
    dense, expert = _ffn_width(layout, arch)
    ffn = 3 * dense // gpu_count
    if layout.experts and layout.experts_per_token:
        ffn = max(ffn, layout.experts_per_token * (3 * expert // gpu_count + hidden))
    forward = batched_tokens * 2 * (4 * hidden + q_width + kv_width + ffn)
    vocab = layout.vocab_size or ASSUMED_VOCAB
    sampler = max_num_seqs * -(-vocab // gpu_count) * SAMPLER_BYTES_PER_ENTRY
    return WORKSPACE_BYTES + forward + sampler


def cuda_graph_bytes(arch: Arch) -> int:
    return CUDA_GRAPH_BYTES + CUDA_GRAPH_PER_LAYER_BYTES * arch.layers


def kv_bytes_per_sequence(*, arch: Arch, kv_precision: str, context: int, gpu_count: int, batched_tokens: int) -> int:
    """KV bytes one GPU books to admit one sequence of `context` tokens, in whole
    blocks; a sliding layer books its window plus one step of tokens, plus a block."""
    per_token = kv_cache_bytes_per_token_layer(
        arch=arch, kv_precision=kv_precision, kv_heads=kv_heads_per_gpu(arch=arch, gpu_count=gpu_count)
    )
    full_blocks = -(-context // BLOCK_SIZE)
    blocks = arch.full_attention_layers * full_blocks
    if arch.sliding_window_layers:
        window = arch.sliding_window or context
        tokens = min(window - 1 + batched_tokens, context)
        blocks += arch.sliding_window_layers * min(full_blocks, -(-tokens // BLOCK_SIZE) + 1)
    return blocks * BLOCK_SIZE * per_token


def kv_bytes_read_per_step(*, arch: Arch, kv_precision: str, context: int, gpu_count: int) -> int:
    """KV bytes one GPU reads for one sequence per decode step, on average over
    the sequence's life (half its context; a sliding layer at most its window)."""
    per_token = kv_cache_bytes_per_token_layer(
        arch=arch, kv_precision=kv_precision, kv_heads=kv_heads_per_gpu(arch=arch, gpu_count=gpu_count)
    )
    half = -(-context // 2)
    tokens = arch.full_attention_layers * half
    if arch.sliding_window_layers:
        tokens += arch.sliding_window_layers * min(half, arch.sliding_window or half)
    return tokens * per_token


@dataclass(frozen=True)
class Budget:
    """One GPU's memory as vLLM spends it, for a workload."""

    memory_bytes: int
    weights: int
    non_torch: int
    activation: int
    cuda_graphs: int
    kv_needed: int  # the workload's sequences, in blocks
    kv_per_sequence: int
    batched_tokens: int
    max_num_seqs: int

    @property
    def outside_kv(self) -> int:
        return self.weights + self.non_torch + self.activation + self.cuda_graphs

    @property
    def required(self) -> int:
        return self.outside_kv + self.kv_needed

    def kv_available(self, utilization: Decimal) -> int:
        return int(self.memory_bytes * utilization) - self.outside_kv

    def utilization_min(self) -> Decimal:
        """The lowest gpu_memory_utilization (2 decimals, rounded up) that holds it."""
        return (Decimal(self.required) / Decimal(self.memory_bytes)).quantize(Decimal("0.01"), ROUND_CEILING)


def budget_compute(
    *,
    workload: Workload,
    card: Card,
    gpu_count: int,
    context: int | None = None,
    concurrency: int | None = None,
    weights_per_gpu: int | None = None,
) -> Budget:
    arch = workload.arch
    facts = card_facts(card)
    layout = arch_layout(arch)
    context = workload.context if context is None else context
    concurrency = workload.concurrency if concurrency is None else concurrency
    batched = batched_tokens_for(facts)
    if weights_per_gpu is None:
        weights_per_gpu = layout_weight_bytes(layout=layout, fmt=workload_format(workload), gpu_count=gpu_count).total
    per_seq = kv_bytes_per_sequence(
        arch=arch, kv_precision=workload.kv_precision, context=context, gpu_count=gpu_count, batched_tokens=batched
    )
    return Budget(
        memory_bytes=facts.memory_bytes,
        weights=weights_per_gpu,
        non_torch=non_torch_bytes(gpu_count),
        activation=activation_bytes(
            arch=arch, layout=layout, gpu_count=gpu_count, batched_tokens=batched, max_num_seqs=concurrency
        ),
        cuda_graphs=cuda_graph_bytes(arch),
        kv_needed=per_seq * concurrency,
        kv_per_sequence=per_seq,
        batched_tokens=batched,
        max_num_seqs=concurrency,
    )


def _fits(workload: Workload, card: Card, gpu_count: int, context: int, concurrency: int, weights: int) -> bool:
    b = budget_compute(
        workload=workload,
        card=card,
        gpu_count=gpu_count,
        context=context,
        concurrency=concurrency,
        weights_per_gpu=weights,
    )
    return b.required <= int(b.memory_bytes * workload.max_gpu_memory_utilization)


def max_concurrency(*, workload: Workload, card: Card, gpu_count: int, weights: int, limit: int = 100_000) -> int:
    """The most sequences of the workload's context that fit (0: not one)."""
    lo, hi = 0, limit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _fits(workload, card, gpu_count, workload.context, mid, weights):
            lo = mid
        else:
            hi = mid - 1
    return lo


def max_context(*, workload: Workload, card: Card, gpu_count: int, weights: int) -> int:
    """The longest context (up to the model's) at which the workload's
    concurrency fits (0: not even one token)."""
    lo, hi = 0, workload.arch.max_context
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _fits(workload, card, gpu_count, mid, workload.concurrency, weights):
            lo = mid
        else:
            hi = mid - 1
    return lo


# --- Speed -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Throughput:
    concurrency: int
    aggregate_tokens_per_s: int  # decode bound of the whole group at that concurrency
    per_sequence_tokens_per_s: int
    single_stream_tokens_per_s: int
    active_weight_bytes_per_gpu: int
    kv_bytes_read_per_sequence_per_gpu: int
    tp_efficiency: Decimal
    pcie_without_p2p: bool


def tp_efficiency(*, facts: CardFacts, gpu_count: int) -> Decimal:
    if gpu_count == 1 or facts.peer_to_peer:
        return Decimal(1)
    return NO_P2P_TP_EFFICIENCY.get(gpu_count, min(NO_P2P_TP_EFFICIENCY.values()))


def decode_bound(*, concurrency: int, bandwidth_bytes: int, active: int, kv_per_seq: int, efficiency: Decimal) -> int:
    """tokens/s = concurrency x bandwidth / (active weight bytes + concurrency x KV bytes per sequence)."""
    top = Decimal(concurrency * bandwidth_bytes) * efficiency
    return int(top / (active + concurrency * kv_per_seq))


def throughput_compute(*, workload: Workload, card: Card, gpu_count: int, concurrency: int | None = None) -> Throughput:
    arch = workload.arch
    facts = card_facts(card)
    c = workload.concurrency if concurrency is None else concurrency
    active = active_weight_bytes(layout=arch_layout(arch), fmt=workload_format(workload), gpu_count=gpu_count)
    kv = kv_bytes_read_per_step(
        arch=arch, kv_precision=workload.kv_precision, context=workload.context, gpu_count=gpu_count
    )
    eff = tp_efficiency(facts=facts, gpu_count=gpu_count)
    bandwidth = card.bandwidth_gbps * 10**9
    aggregate = decode_bound(concurrency=c, bandwidth_bytes=bandwidth, active=active, kv_per_seq=kv, efficiency=eff)
    single = decode_bound(concurrency=1, bandwidth_bytes=bandwidth, active=active, kv_per_seq=kv, efficiency=eff)
    return Throughput(
        concurrency=c,
        aggregate_tokens_per_s=aggregate,
        per_sequence_tokens_per_s=aggregate // c if c else 0,
        single_stream_tokens_per_s=single,
        active_weight_bytes_per_gpu=active,
        kv_bytes_read_per_sequence_per_gpu=kv,
        tp_efficiency=eff,
        pcie_without_p2p=gpu_count > 1 and not facts.peer_to_peer,
    )


# --- The launch line -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Launch:
    model: str
    args: dict[str, Any]
    checkpoint_known: bool
    notes: tuple[str, ...] = ()

    @property
    def command(self) -> str:
        parts = ["vllm", "serve", self.model]
        for flag, value in self.args.items():
            parts += [f"--{flag}", str(value)]
        return " ".join(parts)


def launch_line(*, workload: Workload, gpu_count: int, utilization: Decimal, batched_tokens: int) -> Launch:
    arch = workload.arch
    fmt = workload_format_name(workload)
    repo = arch.hf_repo or arch.slug
    notes: list[str] = []
    known = published_checkpoint(slug=arch.slug, fmt=fmt)
    args: dict[str, Any] = {
        "tensor-parallel-size": gpu_count,
        "max-model-len": workload.context,
        "max-num-seqs": workload.concurrency,
        "max-num-batched-tokens": batched_tokens,
        "gpu-memory-utilization": f"{utilization:.2f}",
        "kv-cache-dtype": "fp8" if workload.kv_precision == "fp8" else "auto",
    }
    checkpoint_format = (arch.checkpoint or {}).get("format")
    if known is not None:
        model, checkpoint_known = known["repo"], True
    elif checkpoint_format == fmt or (checkpoint_format is None and fmt in ("bf16", "fp16")):
        model, checkpoint_known = repo, bool(arch.hf_repo)
        if fmt == "fp16" and checkpoint_format is None:
            args["dtype"] = "float16"
    elif fmt == "fp8" and checkpoint_format is None:
        # vLLM quantizes a 16-bit checkpoint to FP8 as it loads it.
        model, checkpoint_known = repo, bool(arch.hf_repo)
        args["quantization"] = "fp8"
    else:
        model, checkpoint_known = repo, False
        notes.append(
            f"vLLM reads the weight format from the checkpoint: point the command at a {FORMATS[fmt].label} "
            f"checkpoint of {repo}."
        )
    if not arch.hf_repo and known is None:
        checkpoint_known = False
        notes.append(f"{arch.name} is a nominal shape: put the checkpoint's Hugging Face repo in place of {repo}.")
    if arch.native_context and workload.context > arch.native_context:
        notes.append(
            f"{workload.context:,} tokens is past the checkpoint's {arch.native_context:,}: the rope scaling of the "
            "config you posted must be in the checkpoint's config.json (or passed with --hf-overrides)."
        )
    return Launch(model=model, args=args, checkpoint_known=checkpoint_known, notes=tuple(notes))


def launch_utilization(required_min: Decimal, maximum: Decimal) -> Decimal:
    """The --gpu-memory-utilization of the launch line: vLLM's own default (0.90)
    when the workload fits under it; above it, the most the setting allows, not
    the bare minimum, so that an engine whose own memory comes out a little
    larger than estimated still keeps the KV cache the workload was sold on."""
    if required_min <= LAUNCH_UTILIZATION_FLOOR:
        return min(maximum, LAUNCH_UTILIZATION_FLOOR)
    return maximum


# --- The check ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EngineDetail:
    budget: Budget
    utilization_min: Decimal
    utilization_max: Decimal
    weights_total: WeightBytes
    weights_per_gpu: WeightBytes
    kv_available: int  # at utilization_max
    max_concurrency: int | None
    max_context: int | None
    throughput: Throughput
    launch: Launch | None
    notes: tuple[str, ...] = field(default_factory=tuple)


def utilization_needed_reason(*, card: Card, budget: Budget, maximum: Decimal) -> Reason:
    need = budget.utilization_min()
    usable = int(budget.memory_bytes * maximum)
    short = budget.required - usable
    return Reason(
        REASON_DOES_NOT_FIT,
        f"Each GPU needs {_gb(budget.required)} GB (weights {_gb(budget.weights)}, KV cache "
        f"{_gb(budget.kv_needed)}, engine {_gb(budget.non_torch + budget.activation + budget.cuda_graphs)}); "
        f"vLLM may use {_gb(usable)} GB of the {card.name} at gpu_memory_utilization {maximum}: "
        f"{_gb(short)} GB short (it would need {need}).",
        {
            "required_gb": float(_gb(budget.required)),
            "capacity_gb": float(_gb(usable)),
            "shortfall_gb": float(_gb(short)),
            "gpu_memory_utilization_needed": float(need),
            "gpu_memory_utilization_max": float(maximum),
        },
    )


def _gb(nbytes: int) -> Decimal:
    from .arithmetic import to_gb

    return to_gb(nbytes)


def _brief(workload: Workload, card: Card, gpu_count: int, reasons: list, per_gpu: int, total: int) -> Check:
    """A refusal without the rest of the answer (recommend drops it)."""
    return Check(
        workload=workload,
        card=card,
        gpu_count=gpu_count,
        requirement=Requirement(gpu_count, per_gpu, 0, 0, 0, total, 0),
        reasons=tuple(reasons),
        decode_ceiling_tokens_per_s=0,
    )


def engine_check(
    *,
    workload: Workload,
    card: Card,
    gpu_count: int,
    weights: dict | None = None,
    solve: bool = False,
    brief: bool = False,
) -> Check:
    """The vllm profile's answer for `gpu_count` x `card`: every reason it will
    not run, the memory budget, the speed, and the launch line when it fits.
    `weights` caches (total, per GPU) weight bytes by GPU count across cards;
    `solve` adds the longest context and the most sequences it would hold;
    `brief` stops at the first refusal (recommend drops those anyway) and
    answers without the budget, the speed or the launch line."""
    arch = workload.arch
    fmt = workload_format(workload)
    layout = arch_layout(arch)
    cache = weights if weights is not None else {}
    if gpu_count not in cache:
        cache[gpu_count] = (
            layout_weight_bytes(layout=layout, fmt=fmt, checkpoint=True),
            layout_weight_bytes(layout=layout, fmt=fmt, gpu_count=gpu_count),
        )
    total, per_gpu = cache[gpu_count]
    reasons, notes = format_reasons(workload=workload, card=card)
    tp = tp_indivisible_reason(arch=arch, gpu_count=gpu_count)
    if tp is not None:
        reasons.append(tp)
    maximum = workload.max_gpu_memory_utilization
    if brief and reasons:
        return _brief(workload, card, gpu_count, reasons, per_gpu.total, total.total)
    budget = budget_compute(workload=workload, card=card, gpu_count=gpu_count, weights_per_gpu=per_gpu.total)
    usable = int(budget.memory_bytes * maximum)
    if budget.required > usable:
        reasons.append(utilization_needed_reason(card=card, budget=budget, maximum=maximum))
        if brief:
            return _brief(workload, card, gpu_count, reasons, per_gpu.total, total.total)
    speed = throughput_compute(workload=workload, card=card, gpu_count=gpu_count)
    if speed.pcie_without_p2p:
        notes.append(
            f"{card.name} cards reach each other over PCIe without peer-to-peer: the decode bound of "
            f"{gpu_count} of them is discounted to {speed.tp_efficiency:.0%} of linear scaling."
        )
    need = budget.utilization_min()
    fits = not reasons
    launch = None
    if fits:
        launch = launch_line(
            workload=workload,
            gpu_count=gpu_count,
            utilization=launch_utilization(need, maximum),
            batched_tokens=budget.batched_tokens,
        )
    most = longest = None
    if solve and not any(r.code != REASON_DOES_NOT_FIT for r in reasons):
        most = max_concurrency(workload=workload, card=card, gpu_count=gpu_count, weights=per_gpu.total)
        longest = max_context(workload=workload, card=card, gpu_count=gpu_count, weights=per_gpu.total)
    one_copy = kv_bytes_per_sequence(
        arch=arch,
        kv_precision=workload.kv_precision,
        context=workload.context,
        gpu_count=1,
        batched_tokens=budget.batched_tokens,
    )
    requirement = Requirement(
        gpu_count=gpu_count,
        weights_per_gpu=per_gpu.total,
        kv_cache_per_gpu=budget.kv_needed,
        overhead_per_gpu=budget.non_torch + budget.activation + budget.cuda_graphs,
        kv_heads_per_gpu=kv_heads_per_gpu(arch=arch, gpu_count=gpu_count),
        weights_total=total.total,
        kv_cache_logical=one_copy * workload.concurrency,
    )
    detail = EngineDetail(
        budget=budget,
        utilization_min=need,
        utilization_max=maximum,
        weights_total=total,
        weights_per_gpu=per_gpu,
        kv_available=budget.kv_available(maximum),
        max_concurrency=most,
        max_context=longest,
        throughput=speed,
        launch=launch,
        notes=tuple(notes),
    )
    return Check(
        workload=workload,
        card=card,
        gpu_count=gpu_count,
        requirement=requirement,
        reasons=tuple(reasons),
        decode_ceiling_tokens_per_s=decode_ceiling(
            arch=arch, precision=workload.precision, bandwidth_gbps=card.bandwidth_gbps, gpu_count=gpu_count
        ),
        capacity_bytes=usable,
        engine=detail,
    )


def kv_tokens_capacity(*, arch: Arch, kv_precision: str, gpu_count: int, kv_bytes: int) -> int:
    """Tokens a KV cache of `kv_bytes` per GPU holds at full rate in every layer,
    in whole blocks: the figure vLLM logs as "GPU KV cache size"."""
    per_token = (
        kv_cache_bytes_per_token_layer(
            arch=arch, kv_precision=kv_precision, kv_heads=kv_heads_per_gpu(arch=arch, gpu_count=gpu_count)
        )
        * arch.layers
    )
    if kv_bytes <= 0:
        return 0
    return kv_bytes // (per_token * BLOCK_SIZE) * BLOCK_SIZE


def requirement_one_gpu(*, workload: Workload) -> Requirement:
    """What the workload asks of one GPU large enough for vLLM's 8192-token step:
    checkpoint-true weights, its sequences' blocks, and the engine's own memory."""
    arch = workload.arch
    layout = arch_layout(arch)
    weights = layout_weight_bytes(layout=layout, fmt=workload_format(workload)).total
    kv = workload.concurrency * kv_bytes_per_sequence(
        arch=arch,
        kv_precision=workload.kv_precision,
        context=workload.context,
        gpu_count=1,
        batched_tokens=BATCHED_TOKENS_LARGE,
    )
    engine = (
        non_torch_bytes(1)
        + activation_bytes(
            arch=arch,
            layout=layout,
            gpu_count=1,
            batched_tokens=BATCHED_TOKENS_LARGE,
            max_num_seqs=workload.concurrency,
        )
        + cuda_graph_bytes(arch)
    )
    return Requirement(
        gpu_count=1,
        weights_per_gpu=weights,
        kv_cache_per_gpu=kv,
        overhead_per_gpu=engine,
        kv_heads_per_gpu=kv_heads_per_gpu(arch=arch, gpu_count=1),
        weights_total=weights,
        kv_cache_logical=kv,
    )
