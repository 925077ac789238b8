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
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
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
# vLLM's scheduling step for `vllm serve` comes from the release's per-card
# defaults (sizing/data/vllm_versions.json); this one sizes a workload without a card.
BATCHED_TOKENS_LARGE = 8192
# Non-torch memory: the CUDA context and allocator (0.13-0.14 GiB at TP 1 in
# vLLM's logs on an H100), plus NCCL's buffers once GPUs talk (0.55 GiB at TP 2).
NON_TORCH_BYTES = 160 * MIB
NON_TORCH_TP_BYTES = 300 * MIB
NON_TORCH_PER_GPU_BYTES = 50 * MIB
# The activation peak: a fixed workspace (cuBLAS, attention, the kept hidden
# states), plus the larger of the forward pass of the batched tokens and the
# sampler step: profile_run runs _dummy_run, frees its intermediates, then
# _dummy_sampler_run over max_num_seqs rows of logits (float32 logits,
# probabilities, log-probabilities, random draws, sort values and indices and
# their copies). Both constants are fitted to vLLM's logged torch peaks (4.76 GiB
# for Llama 3.1 8B, 5.64 for Qwen3-32B, 5.56 for Qwen3-0.6B, 7.38 for gpt-oss,
# all at 1024 sequences): 0.43 GiB + 36 bytes per vocabulary entry per sequence.
WORKSPACE_BYTES = 440 * MIB
SAMPLER_BYTES_PER_ENTRY = 36
ASSUMED_VOCAB = 128_256  # for shapes without a config.json
# CUDA graphs: vLLM 0.9 captures them after allocating the KV cache, out of the
# memory gpu_memory_utilization leaves (the answer checks that they fit there);
# newer releases estimate them first and take them out of the cache.
CUDA_GRAPH_BYTES = 512 * MIB
CUDA_GRAPH_PER_LAYER_BYTES = 10 * MIB
# The launch line's gpu_memory_utilization: vLLM's own default when that is
# enough, else the lowest that fits.
LAUNCH_UTILIZATION_FLOOR = Decimal("0.90")

REASON_FORMAT_UNSUPPORTED = "format_unsupported"
REASON_FP8_UNSUPPORTED = "fp8_unsupported"
REASON_DOES_NOT_FIT = "does_not_fit"
REASON_NO_KV_ROOM = "no_kv_cache_room"


# --- Formats by hardware ----------------------------------------------------------

# The card architecture each catalog architecture is, for the release tables.
FAMILIES = {"Ampere": "ampere", "Ada": "ada", "Hopper": "hopper", "Blackwell": "blackwell", "CDNA 3": "cdna3"}
ALL = frozenset(FAMILIES.values())
NVIDIA = ALL - {"cdna3"}
# FP8 KV cache: every architecture here (Ampere stores it and dequantizes in attention).
KV_SUPPORT: dict[str, frozenset[str]] = {"bf16": ALL, "fp8": ALL}

REASON_MODEL_UNSUPPORTED = "model_unsupported"
REASON_CHECKPOINT_UNKNOWN = "checkpoint_unknown"
REASON_FP8_LOAD = "fp8_load_does_not_fit"
REASON_TP_MISALIGNED = "tp_misaligned"


@dataclass(frozen=True)
class CardDefaults:
    """vLLM's per-device scheduling defaults for `vllm serve`."""

    min_memory_bytes: int
    except_named: tuple[str, ...]
    max_num_batched_tokens: int
    max_num_seqs: int


@dataclass(frozen=True)
class Release:
    """What one vLLM release runs and how it spends memory (sizing/data/vllm_versions.json)."""

    version: str
    label: str
    weights: dict[str, frozenset[str]]
    weight_only: dict[str, frozenset[str]]
    moe_refused: dict[str, frozenset[str]]
    families_missing: dict[str, str]
    fp8_kv_v0: frozenset[str]
    graphs_inside: bool
    chunk_held: bool
    chunk_global: frozenset[str]  # families whose default attention backend attends chunked layers globally
    defaults: tuple[CardDefaults, ...]  # largest cards first; the last is the fallback


@lru_cache(maxsize=1)
def _releases() -> tuple[str, str, dict[str, Release]]:
    data = json.loads((DATA / "vllm_versions.json").read_text())
    out = {}
    for version, row in data["releases"].items():
        rules = []
        for key in ("largest_card", "large_card"):
            rule = row.get(key)
            if rule:
                rules.append(
                    CardDefaults(
                        rule["min_memory_gib"] * GIB,
                        tuple(rule.get("except_named", ())),
                        rule["max_num_batched_tokens"],
                        rule["max_num_seqs"],
                    )
                )
        small = row["small_card"]
        rules.append(CardDefaults(0, (), small["max_num_batched_tokens"], small["max_num_seqs"]))
        out[version] = Release(
            version=version,
            label=row["label"],
            weights={k: frozenset(v) for k, v in row["weights"].items()},
            weight_only={k: frozenset(v) for k, v in row["weight_only"].items()},
            moe_refused={k: frozenset(v) for k, v in row.get("moe_refused", {}).items()},
            families_missing=dict(row["model_families_missing"]),
            fp8_kv_v0=frozenset(row["fp8_kv_falls_back_to_v0"]),
            graphs_inside=row["cuda_graphs_inside_utilization"],
            chunk_held=row["chunked_attention_held_per_chunk"],
            chunk_global=frozenset(row["chunked_attention_global_on"]),
            defaults=tuple(rules),
        )
    return data["template"], data["newest"], out


def engine_versions() -> tuple[str, ...]:
    return tuple(_releases()[2])


def template_version() -> str:
    return _releases()[0]


def newest_version() -> str:
    return _releases()[1]


def release_get(version: str) -> Release:
    releases = _releases()[2]
    return releases.get(version) or releases[template_version()]


def card_family(card: Card) -> str:
    family = FAMILIES.get(card.architecture)
    if family is None:  # a card staff added with another name: the strictest of its vendor
        family = "cdna3" if card.vendor == "amd" else "ampere"
    return family


def _runs(release: Release, fmt: str, family: str, is_moe: bool) -> bool:
    return family in release.weights.get(fmt, frozenset()) and not (
        is_moe and family in release.moe_refused.get(fmt, frozenset())
    )


def formats_that_run(*, family: str, is_moe: bool, release: Release | None = None) -> list[str]:
    release = release or release_get(template_version())
    return [name for name in release.weights if _runs(release, name, family, is_moe)]


def falls_back_to_v0(*, workload: Workload, card: Card) -> bool:
    """vLLM 0.9 keeps an FP8 KV cache on its V1 engine only on Hopper and ROCm:
    elsewhere it starts its V0 engine instead."""
    return workload.kv_precision == "fp8" and card_family(card) in release_get(workload.engine_version).fp8_kv_v0


def chunked_attention_kept(*, workload: Workload, card: Card) -> bool:
    """Whether vLLM attends Llama 4's chunked layers within their chunk on this card:
    V1 with a backend that builds the chunks' virtual batches; not on V0 (the FP8 KV
    fallback) nor where the release's default backend attends them globally."""
    release = release_get(workload.engine_version)
    return not falls_back_to_v0(workload=workload, card=card) and card_family(card) not in release.chunk_global


def format_reasons(*, workload: Workload, card: Card) -> tuple[list[Reason], list[str]]:
    """(refusals, notes) for the model, the weight format and KV dtype on this card."""
    family = card_family(card)
    release = release_get(workload.engine_version)
    fmt = workload_format_name(workload)
    is_moe = workload.arch.is_moe
    reasons: list[Reason] = []
    notes: list[str] = []
    needs = release.families_missing.get(workload.arch.family)
    if needs:
        reasons.append(
            Reason(
                REASON_MODEL_UNSUPPORTED,
                f"{release.label} cannot load {workload.arch.name} ({workload.arch.family} models need vLLM "
                f"{needs} or later); the template installs {release_get(template_version()).label}. Size it with "
                f"engine_version {newest_version()} and install that release on the instance.",
                {"engine_version": release.version, "needs": needs, "engine_versions": list(engine_versions())},
            )
        )
    if not _runs(release, fmt, family, is_moe):
        code = REASON_FP8_UNSUPPORTED if fmt == "fp8" else REASON_FORMAT_UNSUPPORTED
        if fmt == "fp8":
            why = "FP8 mixture-of-experts kernels need Ada, Hopper or newer"
        elif not release.weights.get(fmt):
            why = f"{release.label} has no {FORMATS[fmt].label} kernels at all"
        else:
            why = f"{release.label} has no {FORMATS[fmt].label} kernels for {card.architecture or family}"
        alternatives = formats_that_run(family=family, is_moe=is_moe, release=release)
        reasons.append(
            Reason(
                code,
                f"{FORMATS[fmt].label} weights do not run on the {card.name} ({card.architecture}) in "
                f"{release.label}: {why}. Formats that do: {', '.join(alternatives)}.",
                {
                    "gpu": card.slug,
                    "architecture": card.architecture,
                    "weight_format": fmt,
                    "formats": alternatives,
                    "engine_version": release.version,
                },
            )
        )
    elif fmt == "fp8" and family in release.weight_only.get("fp8", ()):
        notes.append(
            f"The {card.name} has no FP8 tensor cores: vLLM runs FP8 weights weight-only (W8A16, Marlin"
            + (", the experts through its fused Marlin MoE kernel" if is_moe else "")
            + "), so they save memory but decode no faster than 8-bit weights would, and prefill is slower than BF16."
        )
    elif family in release.weight_only.get(fmt, ()):
        notes.append(
            f"The {card.name} has no {FORMATS[fmt].label.split()[0]} tensor cores: {release.label} runs these "
            "weights weight-only (Marlin): they save memory, compute stays 16-bit."
        )
    if family not in KV_SUPPORT[workload.kv_precision]:
        reasons.append(
            Reason(
                REASON_FORMAT_UNSUPPORTED,
                f"A {workload.kv_precision} KV cache does not run on the {card.name}.",
                {"gpu": card.slug, "kv_precision": workload.kv_precision, "kv_precisions": ["bf16"]},
            )
        )
    if falls_back_to_v0(workload=workload, card=card):
        notes.append(
            f"{release.label} keeps an FP8 KV cache on its V1 engine only on Hopper (FlashAttention 3) and ROCm: "
            f"on the {card.name} it runs its V0 engine, so the line says VLLM_USE_V1=0 and batches at least "
            "--max-model-len tokens a step (V0 refuses fewer without chunked prefill)."
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


@lru_cache(maxsize=1)
def _slugs_by_repo() -> dict[str, str]:
    data = json.loads((DATA / "architectures.json").read_text())
    out = {}
    for row in data["architectures"]:
        source = str(row.get("source") or "")
        if source.startswith("https://huggingface.co/"):
            out["/".join(source.removeprefix("https://huggingface.co/").split("/")[:2]).lower()] = row["slug"]
    return out


def published_checkpoint(*, slug: str, fmt: str, repo: str = "") -> dict[str, Any] | None:
    """The known checkpoint of a model in a format: by the model's slug, or by
    the Hugging Face repo of a posted config.json."""
    found = _checkpoints().get((slug, fmt))
    if found is None and repo:
        found = _checkpoints().get((_slugs_by_repo().get(repo.lower(), ""), fmt))
    return found


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


def card_defaults(*, card: Card, facts: CardFacts, release: Release) -> CardDefaults:
    """The release's `vllm serve` defaults for this card (by memory, and by name for the A100)."""
    name = f"{card.slug} {card.name}".lower()
    for rule in release.defaults:
        if facts.memory_bytes >= rule.min_memory_bytes and not any(n in name for n in rule.except_named):
            return rule
    return release.defaults[-1]


def batched_tokens_for(*, card: Card, facts: CardFacts, workload: Workload, context: int | None = None) -> int:
    """The launch line's --max-num-batched-tokens: the release's default for the card;
    on the V0 fallback, at least the context (V0 refuses less without chunked prefill)."""
    tokens = card_defaults(card=card, facts=facts, release=release_get(workload.engine_version)).max_num_batched_tokens
    if falls_back_to_v0(workload=workload, card=card):
        tokens = max(tokens, workload.context if context is None else context)
    return tokens


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


def activation_bytes(*, arch: Arch, layout: Layout, batched_tokens: int, max_num_seqs: int) -> int:
    """The peak of vLLM's profile run on one GPU (gpu_model_runner.py
    GPUModelRunner.profile_run): the forward pass of `batched_tokens` tokens,
    then, once its intermediates are freed, a sampler step over `max_num_seqs`
    sequences; the peak is the larger of the two over a fixed workspace. vLLM
    measures the same peak on every rank of a tensor-parallel group (the
    workspaces and the gathered logits do not shrink with N), so it is not
    divided by the group size."""
    hidden = arch.hidden_size
    q_width = arch.attention_heads * arch.head_dim
    kv_width = 2 * arch.kv_heads * arch.head_dim
    dense, expert = _ffn_width(layout, arch)
    ffn = 3 * dense
    if layout.experts and layout.experts_per_token:
        ffn = max(ffn, layout.experts_per_token * (3 * expert + hidden))
    forward = batched_tokens * 2 * (4 * hidden + q_width + kv_width + ffn)
    vocab = layout.vocab_size or ASSUMED_VOCAB
    sampler = max_num_seqs * vocab * SAMPLER_BYTES_PER_ENTRY
    return WORKSPACE_BYTES + max(forward, sampler)


def cuda_graph_bytes(arch: Arch) -> int:
    return CUDA_GRAPH_BYTES + CUDA_GRAPH_PER_LAYER_BYTES * arch.layers


def kv_bytes_per_sequence(
    *, arch: Arch, kv_precision: str, context: int, gpu_count: int, batched_tokens: int, chunk_held: bool = False
) -> int:
    """KV bytes one GPU books to admit one sequence of `context` tokens, in whole
    blocks; a sliding layer books its window plus one step of tokens, plus a block.
    `chunk_held`: the release books a chunked-attention layer (Llama 4) its chunk
    plus one step of tokens (ChunkedLocalAttentionSpec); otherwise, as vLLM 0.9
    does, the whole context like any full-attention layer."""
    per_token = kv_cache_bytes_per_token_layer(
        arch=arch, kv_precision=kv_precision, kv_heads=kv_heads_per_gpu(arch=arch, gpu_count=gpu_count)
    )
    full_blocks = -(-context // BLOCK_SIZE)
    full_layers = arch.full_attention_layers
    blocks = 0
    if chunk_held and arch.chunked_attention_layers and arch.attention_chunk:
        full_layers -= arch.chunked_attention_layers
        tokens = min(arch.attention_chunk + batched_tokens, context)
        blocks += arch.chunked_attention_layers * -(-tokens // BLOCK_SIZE)
    blocks += full_layers * full_blocks
    if arch.sliding_window_layers:
        window = arch.sliding_window or context
        tokens = min(window - 1 + batched_tokens, context)
        blocks += arch.sliding_window_layers * min(full_blocks, -(-tokens // BLOCK_SIZE) + 1)
    return blocks * BLOCK_SIZE * per_token


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
    graphs_inside: bool = False  # the release takes CUDA graphs out of gpu_memory_utilization

    @property
    def engine(self) -> int:
        return self.non_torch + self.activation + self.cuda_graphs

    @property
    def outside_kv(self) -> int:
        """What gpu_memory_utilization must hold besides the KV cache."""
        return self.weights + self.non_torch + self.activation + (self.cuda_graphs if self.graphs_inside else 0)

    @property
    def required(self) -> int:
        return self.outside_kv + self.kv_needed

    def kv_available(self, utilization: Decimal) -> int:
        return int(self.memory_bytes * utilization) - self.outside_kv

    def utilization_ceiling(self) -> Decimal:
        """The highest utilization that still leaves the CUDA graphs room when the
        release captures them outside it (2 decimals, rounded down); 1 otherwise."""
        if self.graphs_inside:
            return Decimal(1)
        return (Decimal(self.memory_bytes - self.cuda_graphs) / Decimal(self.memory_bytes)).quantize(
            Decimal("0.01"), ROUND_FLOOR
        )

    def utilization_usable(self, maximum: Decimal) -> Decimal:
        return min(maximum, self.utilization_ceiling())

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
    release = release_get(workload.engine_version)
    context = workload.context if context is None else context
    concurrency = workload.concurrency if concurrency is None else concurrency
    batched = batched_tokens_for(card=card, facts=facts, workload=workload, context=context)
    if weights_per_gpu is None:
        weights_per_gpu = layout_weight_bytes(layout=layout, fmt=workload_format(workload), gpu_count=gpu_count).total
    per_seq = kv_bytes_per_sequence(
        arch=arch,
        kv_precision=workload.kv_precision,
        context=context,
        gpu_count=gpu_count,
        batched_tokens=batched,
        chunk_held=release.chunk_held,
    )
    return Budget(
        memory_bytes=facts.memory_bytes,
        weights=weights_per_gpu,
        non_torch=non_torch_bytes(gpu_count),
        activation=activation_bytes(arch=arch, layout=layout, batched_tokens=batched, max_num_seqs=concurrency),
        cuda_graphs=cuda_graph_bytes(arch),
        kv_needed=per_seq * concurrency,
        kv_per_sequence=per_seq,
        batched_tokens=batched,
        max_num_seqs=concurrency,
        graphs_inside=release.graphs_inside,
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
    return b.required <= int(b.memory_bytes * b.utilization_usable(workload.max_gpu_memory_utilization))


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
# The step-time model is sizing/performance.py; here the workload, the card and
# the memory budget become its inputs.

# The API's percentiles assume request lengths spread uniformly over +-50 % of
# the means given (vLLM bench's random dataset with --random-range-ratio 0.5).
API_RANGE_RATIO = 0.5


@dataclass(frozen=True)
class Throughput:
    concurrency: int
    aggregate_tokens_per_s: int  # output tokens/s of the group at that concurrency, steady state
    per_sequence_tokens_per_s: int  # what one client sees while its request decodes (1 / TPOT)
    single_stream_tokens_per_s: int  # the same at concurrency 1
    active_weight_bytes_per_gpu: int
    kv_bytes_read_per_sequence_per_gpu: int
    tp_efficiency: Decimal  # share of a decode step not spent in all-reduces
    pcie_without_p2p: bool
    input_tokens: int = 0
    output_tokens: int = 0
    performance: Any = None  # sizing.performance.Performance at the concurrency
    single: Any = None  # the same at concurrency 1
    compute_format: str = ""


def workload_lengths(workload: Workload) -> tuple[int, int]:
    """(input, output) tokens of a mean request: the workload's, else 1,000 and
    1,000, scaled down to fit the context when it is shorter."""
    from .performance import default_lengths

    return default_lengths(
        context=workload.context, input_tokens=workload.input_tokens, output_tokens=workload.output_tokens
    )


def tp_efficiency(*, step: Any, hw: Any, layers: int) -> Decimal:
    """The share of a decode step that is not all-reduce time (1 on one GPU)."""
    if hw.gpu_count == 1 or step.seconds <= 0:
        return Decimal(1)
    allreduce = step.fixed_s - hw.step_s - layers * hw.layer_s
    return Decimal(1 - allreduce / step.seconds).quantize(Decimal("0.01"))


def model_cost(*, workload: Workload, gpu_count: int, card: Card | None = None) -> Any:
    """What one GPU of the group of `card`s reads and computes per token
    (performance.ModelCost). Llama 4's chunked layers attend within their chunk where
    the release does so on that card (`chunked_attention_kept`; with no card, as V1's
    backends do), otherwise they count as full-attention layers."""
    from .performance import ModelCost

    arch = workload.arch
    chunked = card is None or chunked_attention_kept(workload=workload, card=card)
    chunked_layers = arch.chunked_attention_layers if chunked and arch.attention_chunk else 0
    layout = arch_layout(arch)
    fmt = workload_format(workload)
    active = active_weight_bytes(layout=layout, fmt=fmt, gpu_count=gpu_count)
    expert = 0
    if layout.experts and layout.experts_per_token:
        every = layout_weight_bytes(layout=layout, fmt=fmt, gpu_count=gpu_count, experts_read=layout.experts)
        none = layout_weight_bytes(layout=layout, fmt=fmt, gpu_count=gpu_count, experts_read=0)
        expert = (every.linear + every.scales - none.linear - none.scales) // layout.experts
    bf16 = FORMATS["bf16"]
    params = active_weight_bytes(layout=layout, fmt=bf16, gpu_count=gpu_count) // 2
    expert_params = 0
    if expert:
        every = layout_weight_bytes(layout=layout, fmt=bf16, gpu_count=gpu_count, experts_read=layout.experts)
        none = layout_weight_bytes(layout=layout, fmt=bf16, gpu_count=gpu_count, experts_read=0)
        expert_params = (every.linear - none.linear) // 2 // layout.experts * layout.experts_per_token
    # The quantized linear layers every step reads (a MoE's routed experts run in its own
    # fused kernels): what the format's GEMM kernel streams (performance.Hardware.kernel_bytes_s).
    own = layout_weight_bytes(layout=layout, fmt=fmt, gpu_count=gpu_count, experts_read=0 if expert else None)
    return ModelCost(
        kernel_bytes=own.linear + own.scales,
        layers=arch.layers,
        hidden=arch.hidden_size,
        shared_bytes=max(0, active - expert * layout.experts_per_token),
        expert_bytes=expert,
        experts=layout.experts if expert else 0,
        experts_per_token=layout.experts_per_token if expert else 0,
        params_per_token=params,
        expert_params_per_token=expert_params,
        kv_bytes_per_token_layer=kv_cache_bytes_per_token_layer(
            arch=arch, kv_precision=workload.kv_precision, kv_heads=kv_heads_per_gpu(arch=arch, gpu_count=gpu_count)
        ),
        full_layers=arch.full_attention_layers - chunked_layers,
        sliding_layers=arch.sliding_window_layers,
        window=arch.sliding_window,
        attention_width=arch.attention_heads * arch.head_dim // gpu_count,
        head_dim=arch.head_dim,
        chunked_layers=chunked_layers,
        chunk=arch.attention_chunk,
    )


def card_hardware(*, workload: Workload, card: Card, gpu_count: int) -> Any:
    from .performance import hardware

    return hardware(
        slug=card.slug,
        family=card_family(card),
        weight_format=workload_format_name(workload),
        gpu_count=gpu_count,
        catalog_bandwidth_gbps=card.bandwidth_gbps,
    )


def throughput_compute(
    *,
    workload: Workload,
    card: Card,
    gpu_count: int,
    concurrency: int | None = None,
    budget: Budget | None = None,
    single: bool = True,
    grids: bool = False,
) -> Throughput:
    """Steady-state speed of the launch line at `concurrency` clients (the
    workload's by default): vLLM holds at most that many sequences
    (--max-num-seqs) and what its KV cache holds at the mean context in flight.
    `single=False` skips the single-stream figure (a search over concurrencies
    reads only `performance`): it is then the figure at `concurrency`.
    `grids`: the performance keeps its percentile grids (share_within)."""
    from .performance import Serving, kv_read_bytes, serve

    c = workload.concurrency if concurrency is None else concurrency
    facts = card_facts(card)
    if budget is None:
        budget = budget_compute(workload=workload, card=card, gpu_count=gpu_count, concurrency=c)
    utilization = launch_utilization(budget.utilization_min(), workload.max_gpu_memory_utilization)
    kv_tokens = kv_tokens_capacity(
        arch=workload.arch,
        kv_precision=workload.kv_precision,
        gpu_count=gpu_count,
        kv_bytes=budget.kv_available(utilization),
    )
    prompt, output = workload_lengths(workload)
    model = model_cost(workload=workload, gpu_count=gpu_count, card=card)
    hw = card_hardware(workload=workload, card=card, gpu_count=gpu_count)

    def at(clients: int):
        serving = Serving(
            concurrency=clients,
            input_tokens=prompt,
            output_tokens=output,
            max_num_seqs=c,
            batched_tokens=budget.batched_tokens,
            # A configuration that does not fit is still timed, as if one request fit.
            kv_tokens=max(kv_tokens, prompt + output + BLOCK_SIZE),
            # The spread stops where the longest request would pass the context.
            range_ratio=max(0.0, min(API_RANGE_RATIO, workload.context / (prompt + output) - 1)),
        )
        return serve(model=model, hw=hw, serving=serving, grids=grids)

    perf = at(c)
    alone = perf if c == 1 or not single else at(1)
    kv_read = int(kv_read_bytes(model, prompt + output / 2, positions=(prompt, prompt + output)))
    return Throughput(
        concurrency=c,
        aggregate_tokens_per_s=int(perf.output_tokens_per_s),
        per_sequence_tokens_per_s=int(1 / perf.tpot_p50_s) if perf.tpot_p50_s > 0 else 0,
        single_stream_tokens_per_s=int(1 / alone.tpot_p50_s) if alone.tpot_p50_s > 0 else 0,
        active_weight_bytes_per_gpu=int(model.shared_bytes + model.expert_bytes * model.experts_per_token),
        kv_bytes_read_per_sequence_per_gpu=kv_read,
        tp_efficiency=tp_efficiency(step=perf.decode_step, hw=hw, layers=model.layers),
        pcie_without_p2p=gpu_count > 1 and not facts.peer_to_peer,
        input_tokens=prompt,
        output_tokens=output,
        performance=perf,
        single=alone,
        compute_format=hw.compute_format,
    )


# --- The launch line -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Launch:
    model: str
    args: dict[str, Any]
    checkpoint_known: bool
    notes: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)

    @property
    def command(self) -> str:
        parts = [f"{k}={v}" for k, v in self.env.items()] + ["vllm", "serve", self.model]
        for flag, value in self.args.items():
            parts += [f"--{flag}", str(value)]
        return " ".join(parts)


# Formats vLLM cannot make from a 16-bit checkpoint as it loads it: their checkpoint must exist.
PREQUANTIZED_ONLY = frozenset({"int8", "awq", "gptq", "mxfp4", "nvfp4"})
# Marlin's tiles (vllm/model_executor/layers/quantization/utils/marlin_utils.py
# verify_marlin_supports_shape): a rank's output width a multiple of 64 and its
# input width a multiple of 128 and of the group size.
MARLIN_MIN_N = 64
MARLIN_MIN_K = 128


def _shard_widths(lin, gpu_count: int, kv_heads: int) -> tuple[int, int]:
    from .weights import SPLIT_KV, SPLIT_REPLICATE, SPLIT_ROW

    if gpu_count == 1 or lin.split == SPLIT_REPLICATE:
        return lin.in_features, lin.out_features
    if lin.split == SPLIT_ROW:
        return lin.in_features // gpu_count, lin.out_features
    if lin.split == SPLIT_KV:
        return lin.in_features, lin.out_features // max(1, kv_heads) * max(1, kv_heads // gpu_count)
    return lin.in_features, lin.out_features // gpu_count


def checkpoint_reasons(*, workload: Workload, card: Card, gpu_count: int) -> list[Reason]:
    """Why the launch line could not start: no checkpoint in the asked format,
    a 16-bit shard too large to quantize at load, or a 4-bit split Marlin cannot tile."""
    arch = workload.arch
    fmt_name = workload_format_name(workload)
    declared = (arch.checkpoint or {}).get("format")
    known = published_checkpoint(slug=arch.slug, fmt=fmt_name, repo=arch.hf_repo)
    reasons: list[Reason] = []
    fmt = FORMATS[fmt_name]
    if fmt_name in PREQUANTIZED_ONLY and known is None and declared != fmt_name and arch.hf_repo:
        group = f", group size {fmt.group_size}" if fmt.group_size else ""
        reasons.append(
            Reason(
                REASON_CHECKPOINT_UNKNOWN,
                f"No {fmt.label} checkpoint of {arch.hf_repo} is known, and vLLM cannot quantize to it as it "
                f"loads. Upload one (a {fmt.label} quantization of {arch.hf_repo}{group}) and size it by posting "
                "its config.json, with its quantization_config, as `architecture`.",
                {"weight_format": fmt_name, "repo": arch.hf_repo, "checkpoints_known": _formats_known(arch.slug)},
            )
        )
    if fmt_name == "fp8" and known is None and declared is None:
        # vLLM loads the 16-bit weights, then quantizes them (fp8.py Fp8LinearMethod.create_weights keeps
        # params_dtype when the checkpoint is not FP8; process_weights_after_loading quantizes).
        facts = card_facts(card)
        shard = layout_weight_bytes(layout=arch_layout(arch), fmt=FORMATS["bf16"], gpu_count=gpu_count).total
        need = shard + non_torch_bytes(gpu_count)
        if need > facts.memory_bytes:
            reasons.append(
                Reason(
                    REASON_FP8_LOAD,
                    f"--quantization fp8 loads the 16-bit checkpoint first: {_gb(shard)} GB per GPU, more than the "
                    f"{card.name}'s {_gb(facts.memory_bytes)} GB. No pre-quantized FP8 checkpoint of "
                    f"{arch.hf_repo or arch.name} is known: use one (post its config.json as `architecture`) or more GPUs.",
                    {"bf16_shard_gb": float(_gb(shard)), "memory_gb": float(_gb(facts.memory_bytes))},
                )
            )
    if fmt_name in ("awq", "gptq") and gpu_count > 1 and not arch_layout(arch).estimated:
        layout = arch_layout(arch)
        group = workload_format(workload).group_size
        for lin in layout.linears:
            if lin.role not in fmt.quantized_roles or not lin.loaded:
                continue
            k, n = _shard_widths(lin, gpu_count, layout.kv_heads)
            bad = n % MARLIN_MIN_N or k % MARLIN_MIN_K or (group and group < lin.in_features and k % group)
            if bad:
                reasons.append(
                    Reason(
                        REASON_TP_MISALIGNED,
                        f"Split over {gpu_count} GPUs, a {lin.in_features} x {lin.out_features} {lin.role} layer "
                        f"leaves each GPU {k} x {n}: vLLM's 4-bit kernels (Marlin) need the input width per GPU "
                        f"a multiple of {MARLIN_MIN_K} and of the group size {group}, the output width a multiple "
                        f"of {MARLIN_MIN_N}. Use fewer GPUs.",
                        {"in_per_gpu": k, "out_per_gpu": n, "group_size": group, "gpu_count": gpu_count},
                    )
                )
                break
    return reasons


def _formats_known(slug: str) -> list[str]:
    return sorted(fmt for (model, fmt) in _checkpoints() if model == slug)


def launch_line(*, workload: Workload, card: Card, gpu_count: int, utilization: Decimal, batched_tokens: int) -> Launch:
    arch = workload.arch
    fmt = workload_format_name(workload)
    repo = arch.hf_repo or arch.slug
    notes: list[str] = []
    known = published_checkpoint(slug=arch.slug, fmt=fmt, repo=arch.hf_repo)
    args: dict[str, Any] = {
        "tensor-parallel-size": gpu_count,
        "max-model-len": workload.context,
        "max-num-seqs": workload.concurrency,
        "max-num-batched-tokens": batched_tokens,
        "gpu-memory-utilization": f"{utilization:.2f}",
        "kv-cache-dtype": "fp8" if workload.kv_precision == "fp8" else "auto",
    }
    env = {"VLLM_USE_V1": "0"} if falls_back_to_v0(workload=workload, card=card) else {}
    checkpoint_format = (arch.checkpoint or {}).get("format")
    if known is not None:
        model, checkpoint_known = known["repo"], True
    elif checkpoint_format == fmt or (checkpoint_format is None and fmt in ("bf16", "fp16")):
        model, checkpoint_known = repo, bool(arch.hf_repo)
        if fmt == "fp16" and checkpoint_format is None:
            args["dtype"] = "float16"
    elif fmt == "fp8" and checkpoint_format is None:
        # vLLM quantizes a 16-bit checkpoint to FP8 as it loads it (checked to fit: checkpoint_reasons).
        model, checkpoint_known = repo, bool(arch.hf_repo)
        args["quantization"] = "fp8"
    else:
        # Only a nominal shape gets here (a real repo without the checkpoint is refused).
        model, checkpoint_known = repo, False
        notes.append(f"Point the command at a {FORMATS[fmt].label} checkpoint of {repo}.")
    if not arch.hf_repo and known is None:
        checkpoint_known = False
        notes.append(f"{arch.name} is a nominal shape: put the checkpoint's Hugging Face repo in place of {repo}.")
    if arch.native_context and workload.context > arch.native_context:
        notes.append(
            f"{workload.context:,} tokens is past the checkpoint's {arch.native_context:,}: the rope scaling of the "
            "config you posted must be in the checkpoint's config.json (or passed with --hf-overrides)."
        )
    return Launch(model=model, args=args, checkpoint_known=checkpoint_known, notes=tuple(notes), env=env)


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
    kv_available: int  # at the launch line's utilization (utilization_max when it does not fit)
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
        f"{_gb(budget.kv_needed)}, engine {_gb(budget.outside_kv - budget.weights)}); "
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
    reasons += checkpoint_reasons(workload=workload, card=card, gpu_count=gpu_count)
    notes += arch.notes
    if brief and reasons:
        return _brief(workload, card, gpu_count, reasons, per_gpu.total, total.total)
    budget = budget_compute(workload=workload, card=card, gpu_count=gpu_count, weights_per_gpu=per_gpu.total)
    # The most gpu_memory_utilization may be: the setting, and, where CUDA graphs are
    # captured outside it, no more than leaves them room.
    maximum = budget.utilization_usable(workload.max_gpu_memory_utilization)
    if budget.required > int(budget.memory_bytes * maximum):
        reasons.append(utilization_needed_reason(card=card, budget=budget, maximum=maximum))
        if brief:
            return _brief(workload, card, gpu_count, reasons, per_gpu.total, total.total)
    speed = throughput_compute(workload=workload, card=card, gpu_count=gpu_count, budget=budget)
    if speed.pcie_without_p2p:
        notes.append(
            f"{card.name} cards reach each other over PCIe without peer-to-peer: each all-reduce goes through "
            f"host memory, and at {gpu_count} of them all-reduces take {1 - speed.tp_efficiency:.0%} of a decode step."
        )
    need = budget.utilization_min()
    fits = not reasons
    launch = None
    # Capacity is reported at the utilization the line launches with (the most allowed when it does not fit).
    launched_at = launch_utilization(need, maximum) if fits else maximum
    usable = int(budget.memory_bytes * launched_at)
    if fits:
        launch = launch_line(
            workload=workload,
            card=card,
            gpu_count=gpu_count,
            utilization=launched_at,
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
        chunk_held=release_get(workload.engine_version).chunk_held,
    )
    requirement = Requirement(
        gpu_count=gpu_count,
        weights_per_gpu=per_gpu.total,
        kv_cache_per_gpu=budget.kv_needed,
        overhead_per_gpu=budget.outside_kv - budget.weights,
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
        kv_available=budget.kv_available(launched_at),
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
        chunk_held=release_get(workload.engine_version).chunk_held,
    )
    engine = (
        non_torch_bytes(1)
        + activation_bytes(
            arch=arch,
            layout=layout,
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
