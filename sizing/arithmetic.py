"""Memory and speed arithmetic for serving an LLM on N GPUs: pure functions, no
database. Everything is exact: bytes are integers, and rounding (half up)
happens only where a figure is shown.

Required VRAM per GPU = weights / N + KV cache held by that GPU + overhead.
Tensor parallelism follows vLLM: query heads split over N; each GPU holds 1/N
of the weights; KV heads per GPU = max(1, KV heads / N) (replicated once N
exceeds them); an MLA latent cache is replicated on every GPU. The GPU with the
least room bounds the group; the cards of one instance are identical, so every
GPU of the group is that GPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from functools import lru_cache
from typing import Any

GB = 10**9  # sizing speaks decimal gigabytes, as the seed's tables do

PRECISION_BYTES: dict[str, Fraction] = {
    "bf16": Fraction(2),
    "fp16": Fraction(2),
    "fp8": Fraction(1),
    "int8": Fraction(1),
    "int4": Fraction(1, 2),
    # The 4-bit formats by name: the guide counts them as 4-bit (half a byte a
    # parameter); the vllm profile counts their scales and 16-bit parts too.
    "awq": Fraction(1, 2),
    "gptq": Fraction(1, 2),
    "mxfp4": Fraction(1, 2),
    "nvfp4": Fraction(1, 2),
}
# (numerator, denominator) of the above: the hot paths stay in integers.
_PRECISION_RATIO: dict[str, tuple[int, int]] = {k: (v.numerator, v.denominator) for k, v in PRECISION_BYTES.items()}
KV_PRECISION_BYTES: dict[str, int] = {"bf16": 2, "fp8": 1}
FP8_PRECISIONS = frozenset({"fp8"})

ATTENTION_MHA = "mha"
ATTENTION_GQA = "gqa"
ATTENTION_MQA = "mqa"
ATTENTION_MLA = "mla"

DEFAULT_OVERHEAD_GB = Decimal(2)

# Reason codes of a check that does not pass (stable words clients rely on).
REASON_TP_INDIVISIBLE = "tp_indivisible"
REASON_FP8_UNSUPPORTED = "fp8_unsupported"
REASON_DOES_NOT_FIT = "does_not_fit"


@dataclass(frozen=True)
class Arch:
    """The shape of a model as far as serving memory and speed go."""

    slug: str
    name: str
    total_params: int
    layers: int
    hidden_size: int
    attention_heads: int
    kv_heads: int
    head_dim: int
    max_context: int
    attention_kind: str = ATTENTION_GQA
    active_params: int | None = None  # MoE: parameters read per token
    mla_latent_dim: int = 0  # MLA: compressed KV latent per token per layer
    mla_rope_dim: int = 0  # MLA: decoupled rope key per token per layer
    sliding_window: int | None = None
    sliding_window_layers: int = 0
    experts: int = 0
    experts_per_token: int = 0
    layout: Any = None  # sizing.weights.Layout from the config.json (None: estimated from the counts)
    hf_repo: str = ""  # the checkpoint's Hugging Face repo, for the launch line
    checkpoint: dict[str, Any] | None = None  # the format a config's quantization_config declares
    native_context: int | None = None  # max_position_embeddings before rope scaling
    notes: tuple[str, ...] = ()  # what the answer should say about the model itself
    family: str = ""  # the config's model_type (gpt_oss, llama4_text, ...)
    attention_chunk: int | None = None  # Llama 4: chunked local attention's chunk, tokens
    chunked_attention_layers: int = 0  # layers that attend within chunks (the others globally)

    @property
    def is_moe(self) -> bool:
        return self.active_params is not None and self.active_params < self.total_params

    @property
    def params_read_per_token(self) -> int:
        """Parameters a decode step reads: all of them, or the active ones of a MoE."""
        return self.active_params if self.active_params is not None else self.total_params

    @property
    def full_attention_layers(self) -> int:
        return self.layers - self.sliding_window_layers


@dataclass(frozen=True)
class Card:
    """One GPU model as the arithmetic needs it."""

    slug: str
    name: str
    memory_gb: int
    bandwidth_gbps: int
    fp8: bool
    architecture: str = ""
    vendor: str = ""

    @property
    def capacity_bytes(self) -> int:
        return self.memory_gb * GB


@dataclass(frozen=True)
class Workload:
    """What is to be served: a model at a precision, a context and a concurrency."""

    arch: Arch
    precision: str
    kv_precision: str = "bf16"
    context: int = 8192
    concurrency: int = 1
    overhead_gb: Decimal = DEFAULT_OVERHEAD_GB
    profile: str = "guide"  # "guide": the guide's arithmetic; "vllm": what the engine loads and admits
    max_gpu_memory_utilization: Decimal = Decimal("0.95")  # vllm profile: the highest it may be set to
    engine_version: str = "0.9.2"  # vllm profile: the vLLM release sized for (the template's by default)
    input_tokens: int | None = None  # vllm profile: mean prompt length (None: performance.default_lengths)
    output_tokens: int | None = None  # vllm profile: mean output length

    @property
    def overhead_bytes(self) -> int:
        return int(self.overhead_gb * GB)

    @property
    def uses_fp8(self) -> bool:
        return self.precision in FP8_PRECISIONS or self.kv_precision in FP8_PRECISIONS


@dataclass(frozen=True)
class Reason:
    code: str
    message: str
    details: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "details": dict(self.details)}


@dataclass(frozen=True)
class Requirement:
    """Bytes one GPU of a group of `gpu_count` must hold, and what the group holds."""

    gpu_count: int
    weights_per_gpu: int
    kv_cache_per_gpu: int
    overhead_per_gpu: int
    kv_heads_per_gpu: int
    weights_total: int
    kv_cache_logical: int  # one copy of the cache, before any replication

    @property
    def required_per_gpu(self) -> int:
        return self.weights_per_gpu + self.kv_cache_per_gpu + self.overhead_per_gpu

    @property
    def kv_cache_total(self) -> int:
        """What the whole group holds for the cache, replicas included."""
        return self.kv_cache_per_gpu * self.gpu_count

    @property
    def overhead_total(self) -> int:
        return self.overhead_per_gpu * self.gpu_count

    @property
    def required_total(self) -> int:
        return self.weights_total + self.kv_cache_total + self.overhead_total


@dataclass(frozen=True)
class Check:
    """A workload against `gpu_count` cards of one kind: a report, not a refusal."""

    workload: Workload
    card: Card
    gpu_count: int
    requirement: Requirement
    reasons: tuple[Reason, ...]
    decode_ceiling_tokens_per_s: int
    capacity_bytes: int | None = None  # vllm profile: what vLLM may use of one card
    engine: Any = None  # vllm profile: sizing.engine.EngineDetail

    @property
    def fits(self) -> bool:
        return not self.reasons

    @property
    def capacity_per_gpu(self) -> int:
        return self.card.capacity_bytes if self.capacity_bytes is None else self.capacity_bytes

    @property
    def headroom_per_gpu(self) -> int:
        return self.capacity_per_gpu - self.requirement.required_per_gpu


def _half_up_units(numerator: int, denominator: int, places: int) -> int:
    """numerator / denominator / GB in units of 10^-places GB, half away from zero."""
    magnitude = (abs(numerator) * 10**places * 2 + GB * denominator) // (2 * GB * denominator)
    return -magnitude if numerator < 0 else magnitude


def to_gb(nbytes: int | Fraction, places: int = 2) -> Decimal:
    """Bytes as decimal GB, half up (away from zero) to `places` decimals."""
    if isinstance(nbytes, int):
        return Decimal(_half_up_units(nbytes, 1, places)).scaleb(-places)
    value = Fraction(nbytes)
    return Decimal(_half_up_units(value.numerator, value.denominator, places)).scaleb(-places)


def gb_number(nbytes: int) -> float:
    """Bytes as GB to two decimals, for JSON (the same value `to_gb` gives)."""
    return _half_up_units(nbytes, 1, 2) / 100


def round_half_up(value: Fraction) -> int:
    """The nearest whole number, halves going up (the seed's 58.5 t/s is 59)."""
    return math.floor(value + Fraction(1, 2))


def weights_bytes(*, params: int, precision: str) -> int:
    """Bytes of the weights: parameters x bytes per parameter (a half byte rounds up)."""
    num, den = _PRECISION_RATIO[precision]
    return -(-params * num // den)


def kv_heads_per_gpu(*, arch: Arch, gpu_count: int) -> int:
    """KV heads one GPU holds under tensor parallelism: max(1, KV heads / N)."""
    if arch.attention_kind == ATTENTION_MLA:
        return 1  # the latent is not split by heads: each GPU holds all of it
    return max(1, arch.kv_heads // gpu_count)


def tp_indivisible_reason(*, arch: Arch, gpu_count: int) -> Reason | None:
    """Why `gpu_count` GPUs cannot split this model by heads, or None."""
    if arch.attention_heads % gpu_count:
        return Reason(
            REASON_TP_INDIVISIBLE,
            f"{arch.attention_heads} attention heads do not divide over {gpu_count} GPUs.",
            {"attention_heads": arch.attention_heads, "gpu_count": gpu_count},
        )
    if arch.attention_kind != ATTENTION_MLA:
        kv = arch.kv_heads
        if (kv >= gpu_count and kv % gpu_count) or (kv < gpu_count and gpu_count % kv):
            return Reason(
                REASON_TP_INDIVISIBLE,
                f"{kv} KV heads neither divide over nor replicate evenly across {gpu_count} GPUs.",
                {"kv_heads": kv, "gpu_count": gpu_count},
            )
    return None


def kv_cache_bytes_per_token_layer(*, arch: Arch, kv_precision: str, kv_heads: int | None = None) -> int:
    """Bytes one token adds to one layer's cache. Regular attention keeps K and V
    for each KV head; MLA keeps one latent plus its rope key, shared by K and V."""
    kv_bytes = KV_PRECISION_BYTES[kv_precision]
    if arch.attention_kind == ATTENTION_MLA:
        return (arch.mla_latent_dim + arch.mla_rope_dim) * kv_bytes
    heads = arch.kv_heads if kv_heads is None else kv_heads
    return 2 * heads * arch.head_dim * kv_bytes


def kv_cache_bytes_per_token(*, arch: Arch, kv_precision: str) -> int:
    """Bytes one token adds to the whole model's cache (one copy, all layers)."""
    return kv_cache_bytes_per_token_layer(arch=arch, kv_precision=kv_precision) * arch.layers


def kv_cache_token_slots(*, arch: Arch, context: int) -> int:
    """Token positions summed over layers: full layers hold the whole context,
    sliding-window layers min(context, window)."""
    full = arch.full_attention_layers * context
    if arch.sliding_window_layers and arch.sliding_window:
        return full + arch.sliding_window_layers * min(context, arch.sliding_window)
    return full + arch.sliding_window_layers * context


def kv_cache_bytes(*, arch: Arch, kv_precision: str, context: int, concurrency: int, gpu_count: int = 1) -> int:
    """Bytes of KV cache ONE GPU of a group of `gpu_count` holds for `concurrency`
    sequences of `context` tokens (gpu_count=1: the whole cache, one copy)."""
    per_slot = kv_cache_bytes_per_token_layer(
        arch=arch, kv_precision=kv_precision, kv_heads=kv_heads_per_gpu(arch=arch, gpu_count=gpu_count)
    )
    return per_slot * kv_cache_token_slots(arch=arch, context=context) * concurrency


def requirement_compute(*, workload: Workload, gpu_count: int) -> Requirement:
    """What each GPU of a tensor-parallel group of `gpu_count` must hold."""
    arch = workload.arch
    weights_total = weights_bytes(params=arch.total_params, precision=workload.precision)
    return Requirement(
        gpu_count=gpu_count,
        weights_per_gpu=-(-weights_total // gpu_count),
        kv_cache_per_gpu=kv_cache_bytes(
            arch=arch,
            kv_precision=workload.kv_precision,
            context=workload.context,
            concurrency=workload.concurrency,
            gpu_count=gpu_count,
        ),
        overhead_per_gpu=workload.overhead_bytes,
        kv_heads_per_gpu=kv_heads_per_gpu(arch=arch, gpu_count=gpu_count),
        weights_total=weights_total,
        kv_cache_logical=kv_cache_bytes(
            arch=arch,
            kv_precision=workload.kv_precision,
            context=workload.context,
            concurrency=workload.concurrency,
        ),
    )


def decode_ceiling(*, arch: Arch, precision: str, bandwidth_gbps: int, gpu_count: int = 1) -> int:
    """Tokens/s upper bound of one sequence: aggregate memory bandwidth / bytes of
    weights read per token (the active parameters of a MoE), half up."""
    return _decode_ceiling(arch.params_read_per_token, precision, bandwidth_gbps, gpu_count)


@lru_cache(maxsize=4096)
def _decode_ceiling(params: int, precision: str, bandwidth_gbps: int, gpu_count: int) -> int:
    num, den = _PRECISION_RATIO[precision]
    # bandwidth / (params x num / den), half up, in integers: (2 top + bottom) // (2 bottom).
    top, bottom = bandwidth_gbps * GB * gpu_count * den, params * num
    return (2 * top + bottom) // (2 * bottom)


def fit_check(*, workload: Workload, card: Card, gpu_count: int, requirement: Requirement | None = None) -> Check:
    """Every reason `gpu_count` x `card` cannot serve `workload` (none: it fits).
    `requirement` may be passed by callers that check many cards at one count
    (it does not depend on the card)."""
    reasons: list[Reason] = []
    if workload.uses_fp8 and not card.fp8:
        which = [
            name
            for name, value in (("precision", workload.precision), ("kv_precision", workload.kv_precision))
            if value in FP8_PRECISIONS
        ]
        reasons.append(
            Reason(
                REASON_FP8_UNSUPPORTED,
                f"{card.name} ({card.architecture or 'this architecture'}) has no FP8 in silicon; "
                f"use bf16, int8 or int4 weights and a bf16 KV cache.",
                {"gpu": card.slug, "fields": which},
            )
        )
    tp = tp_indivisible_reason(arch=workload.arch, gpu_count=gpu_count)
    if tp is not None:
        reasons.append(tp)
    # The figures are reported even when the split is impossible: they say what
    # each GPU would hold, which is what a customer weighing another count needs.
    if requirement is None:
        requirement = requirement_compute(workload=workload, gpu_count=gpu_count)
    shortfall = requirement.required_per_gpu - card.capacity_bytes
    if shortfall > 0:
        reasons.append(
            Reason(
                REASON_DOES_NOT_FIT,
                f"Each GPU needs {to_gb(requirement.required_per_gpu)} GB; the {card.name} has "
                f"{card.memory_gb} GB: {to_gb(shortfall)} GB short.",
                {
                    "required_gb": float(to_gb(requirement.required_per_gpu)),
                    "capacity_gb": card.memory_gb,
                    "shortfall_gb": float(to_gb(shortfall)),
                },
            )
        )
    return Check(
        workload=workload,
        card=card,
        gpu_count=gpu_count,
        requirement=requirement,
        reasons=tuple(reasons),
        decode_ceiling_tokens_per_s=decode_ceiling(
            arch=workload.arch, precision=workload.precision, bandwidth_gbps=card.bandwidth_gbps, gpu_count=gpu_count
        ),
    )


def attention_kind_infer(*, attention_heads: int, kv_heads: int) -> str:
    if kv_heads == attention_heads:
        return ATTENTION_MHA
    if kv_heads == 1:
        return ATTENTION_MQA
    return ATTENTION_GQA
