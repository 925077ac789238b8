"""Sizing API shapes: one serializer per input and per output.

`WorkloadInput` is the workload part of a sizing body (model or architecture,
precision, context, concurrency); orders validate their `workload` with it and
get a `Workload` in `validated_data["workload"]`, with the same error codes.
"""

from __future__ import annotations

from dataclasses import replace
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from django.conf import settings
from rest_framework import serializers

from catalog.models import ALLOWED_COUNTS, TERM_CHOICES, TERM_MONTHLY, Vendor
from core.errors import DomainError
from core.money import usd_str

from .arithmetic import (
    KV_PRECISION_BYTES,
    PRECISION_BYTES,
    Workload,
    gb_number,
    kv_cache_bytes_per_token,
    requirement_compute,
)
from .compare import OOM_LOW, OOM_NEAR, OOM_OVER, Comparison
from .engine import (
    PROFILE_GUIDE,
    PROFILE_VLLM,
    PROFILES,
    engine_versions,
    newest_version,
    requirement_one_gpu,
    template_version,
    workload_lengths,
)
from .hf_config import architecture_from_hf_config
from .matrix import USES, placement_payload
from .models import Architecture, AttentionKind
from .selectors import architecture_get
from .services import breakdown_per_gpu, breakdown_total
from .weights import FORMAT_ALIASES, FORMATS

MAX_CONTEXT = 10_000_000
MAX_CONCURRENCY = 100_000
MAX_GPUS = 64
MAX_GPUS_PER_INSTANCE = max(ALLOWED_COUNTS)


def params_in_billions(params: int | None) -> float | None:
    if params is None:
        return None
    return float((Decimal(params) / 10**9).quantize(Decimal("0.001")))


def overhead_default() -> Decimal:
    return Decimal(str(settings.SIZING_OVERHEAD_GB))


def max_utilization() -> Decimal:
    return Decimal(str(settings.SIZING_MAX_GPU_MEMORY_UTILIZATION))


# --- Inputs -------------------------------------------------------------------


class WorkloadInput(serializers.Serializer):
    model = serializers.CharField(required=False, max_length=64, help_text="A slug from GET /sizing/models.")
    architecture = serializers.JSONField(
        required=False, help_text="The contents of a Hugging Face config.json, instead of `model`."
    )
    params_b = serializers.DecimalField(
        required=False,
        max_digits=12,
        decimal_places=4,
        min_value=Decimal("0.0001"),
        help_text="Total parameters in billions: overrides the estimate from `architecture`.",
    )
    active_params_b = serializers.DecimalField(
        required=False,
        max_digits=12,
        decimal_places=4,
        min_value=Decimal("0.0001"),
        help_text="MoE: parameters read per token, in billions.",
    )
    precision = serializers.ChoiceField(
        choices=list(PRECISION_BYTES),
        required=False,
        help_text="Weight format: bf16, fp16, fp8 (W8A8), int8 (W8A8), awq, gptq (4-bit, group 128), mxfp4 "
        "(experts in MXFP4, as gpt-oss ships), nvfp4; int4 is awq. Optional when `architecture` carries a "
        "quantization_config: the checkpoint's format is used.",
    )
    kv_precision = serializers.ChoiceField(choices=list(KV_PRECISION_BYTES), default="bf16")
    profile = serializers.ChoiceField(
        choices=list(PROFILES),
        default=PROFILE_VLLM,
        help_text="vllm (default): what vLLM really loads and admits, with its launch line; guide: the inference "
        "guide's arithmetic (weights + KV cache + 2 GB).",
    )
    engine_version = serializers.ChoiceField(
        choices=list(engine_versions()),
        default=template_version(),
        help_text=f"vllm profile: the vLLM release sized for: {template_version()} (the template's, default) or "
        f"{newest_version()} (the newest, installed by the customer).",
    )
    context = serializers.IntegerField(
        min_value=1, max_value=MAX_CONTEXT, default=8192, help_text="Tokens per sequence."
    )
    concurrency = serializers.IntegerField(
        min_value=1, max_value=MAX_CONCURRENCY, default=1, help_text="Sequences in flight at once."
    )
    input_tokens = serializers.IntegerField(
        min_value=1,
        max_value=MAX_CONTEXT,
        required=False,
        help_text="vllm profile: mean prompt length of a request, tokens (default 1,000, less in a short context).",
    )
    output_tokens = serializers.IntegerField(
        min_value=1,
        max_value=MAX_CONTEXT,
        required=False,
        help_text="vllm profile: mean output length of a request, tokens (default 1,000, less in a short context).",
    )
    overhead_gb = serializers.DecimalField(
        required=False,
        max_digits=6,
        decimal_places=2,
        min_value=Decimal(0),
        max_value=Decimal(1000),
        help_text="Runtime overhead per GPU, GB (default: the SIZING_OVERHEAD_GB setting, 2).",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        has_model, has_arch = "model" in attrs, "architecture" in attrs
        if has_model == has_arch:
            raise serializers.ValidationError(
                {"model": ["Give either `model` (a slug) or `architecture` (a config.json), not both."]}
            )
        params_b, active_b = attrs.get("params_b"), attrs.get("active_params_b")
        if has_model:
            arch = architecture_get(slug=attrs["model"]).to_arch()
            if params_b is not None or active_b is not None:
                total = int(params_b * 10**9) if params_b is not None else arch.total_params
                active = int(active_b * 10**9) if active_b is not None else arch.active_params
                if active is not None and active > total:
                    raise DomainError(
                        "invalid",
                        "`active_params_b` exceeds `params_b`.",
                        status=400,
                        details={"fields": {"active_params_b": ["exceeds params_b"]}},
                    )
                # The stated counts are not the config's checkpoint: its layout no longer applies.
                arch = replace(arch, total_params=total, active_params=None if active == total else active, layout=None)
        else:
            arch = architecture_from_hf_config(attrs["architecture"], params_b=params_b, active_params_b=active_b)
        precision = attrs.get("precision")
        declared = (arch.checkpoint or {}).get("format")
        if precision is None:
            if declared is None:
                raise DomainError(
                    "invalid",
                    "Give `precision` (the weight format).",
                    status=400,
                    details={"fields": {"precision": ["This field is required."]}},
                )
            precision = declared
        elif declared is not None and FORMAT_ALIASES.get(precision, precision) != declared:
            raise DomainError(
                "format_mismatch",
                f"The config's quantization_config says the checkpoint is {FORMATS[declared].label}; "
                f"{precision} was asked. Leave `precision` out to size the checkpoint as it is.",
                status=400,
                details={"precision": precision, "checkpoint_format": declared},
            )
        if attrs["context"] > arch.max_context:
            raise DomainError(
                "context_too_long",
                f"{arch.name} takes at most {arch.max_context:,} tokens of context; {attrs['context']:,} asked.",
                status=400,
                details={"context": attrs["context"], "max_context": arch.max_context, "model": arch.slug},
            )
        lengths = attrs.get("input_tokens", 0) + attrs.get("output_tokens", 0)
        if lengths > attrs["context"]:
            raise DomainError(
                "lengths_exceed_context",
                f"input_tokens + output_tokens ({lengths:,}) exceed the context ({attrs['context']:,}): "
                "`context` is the longest a request may be, the lengths are its mean.",
                status=400,
                details={
                    "context": attrs["context"],
                    "input_tokens": attrs.get("input_tokens"),
                    "output_tokens": attrs.get("output_tokens"),
                },
            )
        attrs["precision"] = precision
        attrs["workload"] = Workload(
            arch=arch,
            precision=precision,
            kv_precision=attrs["kv_precision"],
            context=attrs["context"],
            concurrency=attrs["concurrency"],
            overhead_gb=attrs.get("overhead_gb", overhead_default()),
            profile=attrs["profile"],
            max_gpu_memory_utilization=max_utilization(),
            engine_version=attrs["engine_version"],
            input_tokens=attrs.get("input_tokens"),
            output_tokens=attrs.get("output_tokens"),
        )
        return attrs


class OrderWorkloadInput(WorkloadInput):
    """An order's workload: always sized as the engine loads and admits it (the
    vllm profile). The guide's arithmetic is for reading, not for gating an
    order: a `profile` sent with an order is ignored."""

    profile = serializers.HiddenField(default=PROFILE_VLLM)


class CheckInput(WorkloadInput):
    gpu = serializers.CharField(max_length=32, help_text="A card slug, e.g. h100-sxm.")
    gpu_count = serializers.IntegerField(min_value=1, max_value=MAX_GPUS, default=1)
    term = serializers.ChoiceField(
        choices=[c for c, _ in TERM_CHOICES], default=TERM_MONTHLY, help_text="Prices the cost per token."
    )


class RecommendInput(WorkloadInput):
    vendor = serializers.ChoiceField(choices=Vendor.choices, required=False)
    region = serializers.CharField(max_length=16, required=False, help_text="Only what this region can supply now.")
    max_gpus = serializers.IntegerField(min_value=1, max_value=MAX_GPUS, required=False)
    gpu_count = serializers.IntegerField(
        min_value=1, max_value=MAX_GPUS, required=False, help_text="Exactly this many."
    )
    term = serializers.ChoiceField(
        choices=[c for c, _ in TERM_CHOICES], default=TERM_MONTHLY, help_text="Ranks by this term's price."
    )
    tokens_per_month = serializers.IntegerField(
        min_value=0, max_value=10**16, required=False, help_text="Expected volume, for the advice."
    )
    traffic = serializers.ChoiceField(choices=["steady", "bursty"], required=False)
    use = serializers.ChoiceField(
        choices=list(USES),
        required=False,
        help_text="What the workload is for, for the guide's decision-matrix class (`workload_class`).",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs = super().validate(attrs)
        count = attrs.get("gpu_count")
        if count is not None and count not in ALLOWED_COUNTS:
            raise DomainError(
                "invalid_gpu_count",
                f"Instances have {', '.join(map(str, ALLOWED_COUNTS))} cards; not {count}.",
                status=400,
                details={"gpu_count": count, "allowed_counts": list(ALLOWED_COUNTS)},
            )
        return attrs


class CompareCandidateInput(serializers.Serializer):
    gpu = serializers.CharField(max_length=32, help_text="A card slug, e.g. h100-sxm.")
    gpu_count = serializers.IntegerField(
        min_value=1,
        max_value=MAX_GPUS_PER_INSTANCE,
        required=False,
        help_text="Leave out for the card's cheapest count that carries the load within the targets. A count the "
        "card does not come in is answered in its row (fits false, reason invalid_gpu_count or min_gpus).",
    )


class CompareInput(WorkloadInput):
    """A workload (always sized as the engine serves it: the vllm profile), its
    load (`concurrency` clients, or `requests_per_s`), p95 targets, the busy
    share of the hours, and 2-5 candidates."""

    profile = serializers.HiddenField(default=PROFILE_VLLM)
    requests_per_s = serializers.FloatField(
        required=False,
        min_value=0.001,
        max_value=100_000,
        help_text="A target request rate instead of `concurrency` (give one of them).",
    )
    ttft_p95_ms = serializers.IntegerField(
        required=False, min_value=1, max_value=3_600_000, help_text="Time-to-first-token target, p95, ms."
    )
    e2e_p95_ms = serializers.IntegerField(
        required=False, min_value=1, max_value=86_400_000, help_text="End-to-end latency target, p95, ms."
    )
    utilization = serializers.FloatField(
        default=1.0,
        min_value=0.01,
        max_value=1.0,
        help_text="The share of the hours the configuration is busy (1: every hour). Effective hourly cost = "
        "hourly price / utilization.",
    )
    term = serializers.ChoiceField(
        choices=[c for c, _ in TERM_CHOICES], default=TERM_MONTHLY, help_text="Prices the hours."
    )
    region = serializers.CharField(max_length=16, required=False, help_text="Stock in this region (default: all).")
    candidates = CompareCandidateInput(many=True, min_length=2, max_length=5)
    api_usd_per_million_input = serializers.DecimalField(
        max_digits=10,
        decimal_places=4,
        min_value=Decimal(0),
        required=False,
        help_text="A per-token API's price per million prompt tokens (with either API price: rent or call an API).",
    )
    api_usd_per_million_output = serializers.DecimalField(
        max_digits=10,
        decimal_places=4,
        min_value=Decimal(0),
        required=False,
        help_text="The same per million output tokens (the other one left out counts as 0).",
    )
    output_tokens_per_month = serializers.IntegerField(
        min_value=1,
        max_value=10**15,
        required=False,
        help_text="Your monthly volume, output tokens (default with `requests_per_s`: that rate over the busy hours).",
    )
    use = serializers.ChoiceField(
        choices=list(USES), required=False, help_text="What the workload is for, for the guide's class."
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if "requests_per_s" in attrs and "concurrency" in self.initial_data:
            raise DomainError(
                "invalid",
                "Give `concurrency` or `requests_per_s`, not both.",
                status=400,
                details={"fields": {"requests_per_s": ["Give concurrency or requests_per_s, not both."]}},
            )
        return super().validate(attrs)


# --- Outputs ------------------------------------------------------------------


class ArchitectureOutput(serializers.ModelSerializer):
    # A plain string: model slugs carry dots (llama-3.1-8b), which a slug pattern refuses.
    slug = serializers.CharField(max_length=64)
    params_b = serializers.SerializerMethodField()
    active_params_b = serializers.SerializerMethodField()

    class Meta:
        model = Architecture
        fields = [
            "slug",
            "name",
            "params_b",
            "active_params_b",
            "total_params",
            "active_params",
            "layers",
            "hidden_size",
            "attention_heads",
            "kv_heads",
            "head_dim",
            "attention_kind",
            "mla_latent_dim",
            "mla_rope_dim",
            "sliding_window",
            "sliding_window_layers",
            "max_context",
            "experts",
            "experts_per_token",
            "is_reference",
            "source",
        ]

    def get_params_b(self, obj: Architecture) -> float:
        return params_in_billions(obj.total_params)

    def get_active_params_b(self, obj: Architecture) -> float | None:
        return params_in_billions(obj.active_params)


class ModelSummaryOutput(serializers.Serializer):
    slug = serializers.CharField()
    name = serializers.CharField()
    params_b = serializers.FloatField()
    active_params_b = serializers.FloatField(allow_null=True)
    attention_kind = serializers.ChoiceField(choices=AttentionKind.choices)
    layers = serializers.IntegerField()
    kv_heads = serializers.IntegerField()
    head_dim = serializers.IntegerField()
    max_context = serializers.IntegerField()
    kv_cache_bytes_per_token = serializers.IntegerField(help_text="At the request's KV precision, one copy.")


def model_summary(workload: Workload) -> dict[str, Any]:
    arch = workload.arch
    return {
        "slug": arch.slug,
        "name": arch.name,
        "params_b": params_in_billions(arch.total_params),
        "active_params_b": params_in_billions(arch.active_params),
        "attention_kind": arch.attention_kind,
        "layers": arch.layers,
        "kv_heads": arch.kv_heads,
        "head_dim": arch.head_dim,
        "max_context": arch.max_context,
        "kv_cache_bytes_per_token": kv_cache_bytes_per_token(arch=arch, kv_precision=workload.kv_precision),
    }


class ReasonOutput(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()
    details = serializers.DictField()


class TotalOutput(serializers.Serializer):
    weights_gb = serializers.FloatField()
    kv_cache_gb = serializers.FloatField(help_text="What the group holds, replicas included.")
    overhead_gb = serializers.FloatField()
    required_gb = serializers.FloatField()
    capacity_gb = serializers.FloatField()
    headroom_gb = serializers.FloatField()
    kv_cache_one_copy_gb = serializers.FloatField()


class PerGpuOutput(serializers.Serializer):
    weights_gb = serializers.FloatField()
    kv_cache_gb = serializers.FloatField()
    overhead_gb = serializers.FloatField()
    required_gb = serializers.FloatField()
    capacity_gb = serializers.FloatField()
    headroom_gb = serializers.FloatField()
    kv_heads = serializers.IntegerField(help_text="KV heads each GPU holds (1 for an MLA latent).")


class WeightsSplitOutput(serializers.Serializer):
    linear_gb = serializers.FloatField(help_text="Linear layers in their stored precision (quantized or 16-bit).")
    scales_gb = serializers.FloatField(help_text="Scales, zero points and group indices of quantized layers.")
    embeddings_gb = serializers.FloatField(help_text="Input embeddings and LM head, 16-bit (tied: once).")
    other_gb = serializers.FloatField(help_text="Norms, biases, attention sinks, MoE routers.")
    total_gb = serializers.FloatField()


class WeightsOutput(serializers.Serializer):
    format = serializers.CharField()
    layout = serializers.ChoiceField(
        choices=["config", "estimated"],
        help_text="config: from the model's config.json; estimated: the parameter count spread over linear layers.",
    )
    total = WeightsSplitOutput(help_text="The whole checkpoint.")
    per_gpu = WeightsSplitOutput(help_text="What one GPU of the group holds.")


class EngineOutput(serializers.Serializer):
    memory_gb = serializers.FloatField(help_text="The card's memory as CUDA/ROCm report it.")
    gpu_memory_utilization_min = serializers.FloatField(help_text="The lowest setting at which it fits.")
    gpu_memory_utilization_max = serializers.FloatField(
        help_text="SIZING_MAX_GPU_MEMORY_UTILIZATION (less where CUDA graphs, captured outside it, need the rest)."
    )
    engine_version = serializers.CharField(help_text="The vLLM release sized for.")
    non_torch_gb = serializers.FloatField(help_text="CUDA context and NCCL buffers.")
    activation_gb = serializers.FloatField(help_text="Peak of the profile run (max_num_batched_tokens, sampler).")
    cuda_graphs_gb = serializers.FloatField()
    kv_cache_needed_gb = serializers.FloatField(help_text="The requested sequences, in whole blocks.")
    kv_cache_per_sequence_gb = serializers.FloatField()
    kv_cache_available_gb = serializers.FloatField(
        help_text="At the launch line's gpu_memory_utilization (gpu_memory_utilization_max when it does not fit)."
    )
    kv_cache_tokens = serializers.IntegerField(help_text="Tokens that KV cache holds (what vLLM logs as its size).")
    block_size = serializers.IntegerField()
    max_num_batched_tokens = serializers.IntegerField()
    max_concurrency = serializers.IntegerField(
        allow_null=True, help_text="The most sequences of this context that fit (check only)."
    )
    max_context = serializers.IntegerField(
        allow_null=True, help_text="The longest context at this concurrency that fits (check only)."
    )


class ThroughputOutput(serializers.Serializer):
    concurrency = serializers.IntegerField()
    input_tokens = serializers.IntegerField(help_text="Mean prompt length the figures are for.")
    output_tokens = serializers.IntegerField(help_text="Mean output length the figures are for.")
    output_tokens_per_s = serializers.FloatField(
        help_text="Output tokens per second of all sequences together, steady state, `concurrency` clients."
    )
    requests_per_s = serializers.FloatField()
    aggregate_tokens_per_s = serializers.IntegerField(help_text="output_tokens_per_s, whole.")
    per_sequence_tokens_per_s = serializers.IntegerField(help_text="What one client sees while decoding: 1 / TPOT.")
    single_stream_tokens_per_s = serializers.IntegerField(help_text="The same at concurrency 1.")
    in_flight = serializers.IntegerField(help_text="Requests the engine holds at once (the rest wait).")
    limited_by = serializers.CharField(help_text="concurrency, max_num_seqs or kv_cache: what caps in_flight.")
    bound = serializers.CharField(help_text="memory or compute: what a decode step's linear layers wait on.")
    compute_format = serializers.CharField(help_text="The tensor-core format the card multiplies in.")
    active_weights_gb = serializers.FloatField(help_text="Bytes one GPU reads per token (routed experts only).")
    pcie_without_p2p = serializers.BooleanField()
    tp_efficiency = serializers.FloatField(help_text="Share of a decode step not spent in all-reduces.")


class TtftOutput(serializers.Serializer):
    p50 = serializers.FloatField()
    p95 = serializers.FloatField()


class TpotOutput(serializers.Serializer):
    p50 = serializers.FloatField()


class E2eOutput(serializers.Serializer):
    p50 = serializers.FloatField()
    p95 = serializers.FloatField()
    p99 = serializers.FloatField()


class LatencyOutput(serializers.Serializer):
    ttft_ms = TtftOutput(help_text="Time to first token, ms.")
    tpot_ms = TpotOutput(help_text="Time per output token, ms.")
    e2e_ms = E2eOutput(help_text="The whole request, ms.")


class LaunchOutput(serializers.Serializer):
    command = serializers.CharField(help_text="The `vllm serve` line (vllm-0.9-ubuntu-24.04 template).")
    model = serializers.CharField()
    args = serializers.DictField()
    checkpoint_known = serializers.BooleanField(help_text="False: point the command at a checkpoint in this format.")
    notes = serializers.ListField(child=serializers.CharField())


class CheckOutput(serializers.Serializer):
    model = ModelSummaryOutput()
    profile = serializers.CharField()
    precision = serializers.CharField()
    kv_precision = serializers.CharField()
    context = serializers.IntegerField()
    concurrency = serializers.IntegerField()
    gpu = serializers.CharField()
    gpu_count = serializers.IntegerField()
    fits = serializers.BooleanField()
    reasons = ReasonOutput(many=True)
    total = TotalOutput()
    per_gpu = PerGpuOutput()
    decode_ceiling_tokens_per_s = serializers.IntegerField()
    term = serializers.CharField()
    price_usd = serializers.CharField(allow_null=True, help_text="The term's price after discounts.")
    monthly_usd = serializers.CharField(allow_null=True)
    cost_per_million_tokens_usd = serializers.CharField(
        allow_null=True,
        help_text="The term's price over the tokens it yields: at the steady-state output rate of the "
        "requested concurrency (vllm), at the single-stream ceiling (guide).",
    )
    weights = WeightsOutput(allow_null=True, help_text="vllm profile: checkpoint-true weight bytes.")
    engine = EngineOutput(allow_null=True, help_text="vllm profile: the memory budget per GPU.")
    throughput = ThroughputOutput(allow_null=True, help_text="vllm profile.")
    latency = LatencyOutput(allow_null=True, help_text="vllm profile: at the same concurrency, steady state.")
    launch = LaunchOutput(allow_null=True, help_text="vllm profile, when it fits.")
    notes = serializers.ListField(child=serializers.CharField())


class CandidateOutput(serializers.Serializer):
    gpu = serializers.CharField()
    gpu_name = serializers.CharField()
    vendor = serializers.CharField()
    gpu_count = serializers.IntegerField()
    term = serializers.CharField()
    price_usd = serializers.CharField()
    monthly_usd = serializers.CharField()
    discount_pct = serializers.CharField()
    per_gpu_hour_usd = serializers.CharField()
    capacity_gb = serializers.FloatField(help_text="Per GPU.")
    required_gb = serializers.FloatField(help_text="Per GPU.")
    headroom_gb = serializers.FloatField(help_text="Per GPU: the least room of any GPU in the group.")
    decode_ceiling_tokens_per_s = serializers.IntegerField()
    cost_per_million_tokens_usd = serializers.CharField(allow_null=True)
    gpu_memory_utilization_min = serializers.FloatField(allow_null=True, help_text="vllm profile.")
    aggregate_tokens_per_s = serializers.IntegerField(allow_null=True, help_text="vllm profile.")
    launch_command = serializers.CharField(allow_null=True, help_text="vllm profile.")
    notes = serializers.ListField(child=serializers.CharField())
    available = serializers.IntegerField(required=False, help_text="Free cards in the region (region filter only).")


class RequirementOutput(serializers.Serializer):
    weights_gb = serializers.FloatField()
    kv_cache_gb = serializers.FloatField()
    overhead_gb = serializers.FloatField()
    required_gb = serializers.FloatField()
    kv_cache_one_copy_gb = serializers.FloatField()


class AdviceOutput(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()
    details = serializers.DictField()


class WorkloadClassAlsoOutput(serializers.Serializer):
    code = serializers.CharField()
    workload = serializers.CharField()
    watch_point = serializers.CharField()


class WorkloadClassOutput(serializers.Serializer):
    code = serializers.CharField(help_text="A row of the guide's decision matrix (docs/sizing.md).")
    workload = serializers.CharField()
    guide_gpus = serializers.CharField(help_text="The guide's column, as written.")
    start_with = serializers.ListField(child=serializers.CharField(), help_text="Those cards in this catalog.")
    why = serializers.CharField()
    watch_point = serializers.CharField()
    because = serializers.CharField(help_text="What put the workload in this class.")
    also = WorkloadClassAlsoOutput(many=True, help_text="The size class, when another was chosen.")


class RecommendOutput(serializers.Serializer):
    model = ModelSummaryOutput()
    profile = serializers.CharField()
    precision = serializers.CharField()
    kv_precision = serializers.CharField()
    context = serializers.IntegerField()
    concurrency = serializers.IntegerField()
    region = serializers.CharField(allow_null=True)
    term = serializers.CharField()
    requirement = RequirementOutput(help_text="On one GPU.")
    considered = serializers.IntegerField(help_text="Configurations checked.")
    candidates = CandidateOutput(many=True)
    advice = AdviceOutput(many=True)
    workload_class = WorkloadClassOutput(help_text="The guide's decision-matrix class of the workload.")


class LoadOutput(serializers.Serializer):
    concurrency = serializers.IntegerField(allow_null=True)
    requests_per_s = serializers.FloatField(allow_null=True)


class TargetsOutput(serializers.Serializer):
    ttft_p95_ms = serializers.IntegerField(allow_null=True)
    e2e_p95_ms = serializers.IntegerField(allow_null=True)


class CompareMemoryOutput(serializers.Serializer):
    headroom_gb = serializers.FloatField(
        help_text="Per GPU: what vLLM may use at the launch line's setting, less "
        "what it needs at the operating concurrency."
    )
    kv_cache_needed_gb = serializers.FloatField(help_text="Per GPU: the operating concurrency at the full context.")
    kv_cache_available_gb = serializers.FloatField(help_text="Per GPU: what the launch line leaves the KV cache.")
    kv_cache_share = serializers.FloatField(help_text="needed / available.")
    gpu_memory_utilization = serializers.FloatField(help_text="The launch line's setting.")
    oom_risk = serializers.ChoiceField(
        choices=[OOM_LOW, OOM_NEAR, OOM_OVER],
        help_text="low; near_limit: the KV cache takes 80 % or more of its room, or the line sets "
        "gpu_memory_utilization above vLLM's default 0.90; over_limit: it does not fit.",
    )


class CompareStockOutput(serializers.Serializer):
    region = serializers.CharField(allow_null=True, help_text="null: every region together.")
    available = serializers.IntegerField(help_text="Free cards of this kind now.")
    max_per_host = serializers.IntegerField(help_text="The largest instance one host can give now.")
    deliverable_now = serializers.BooleanField(help_text="A host has this many free now.")
    regions = serializers.ListField(child=serializers.CharField(), help_text="Regions that can deliver it now.")


class RentOrApiOutput(serializers.Serializer):
    api_usd_per_million_output = serializers.CharField(
        help_text="The API's price per million output tokens, the prompts' tokens included (4 decimals)."
    )
    rent_usd_per_month = serializers.CharField(help_text="The term's hourly price x 720.")
    break_even_output_tokens_per_month = serializers.IntegerField(
        allow_null=True, help_text="Above this monthly volume renting is cheaper (null: the API is free)."
    )
    break_even_utilization = serializers.FloatField(
        allow_null=True,
        help_text="Busy share of the hours above which renting is cheaper; above 1: never on one instance.",
    )
    renting_can_win = serializers.BooleanField()
    cheaper_at_utilization = serializers.CharField(
        allow_null=True, help_text="rent, api or same, at the stated utilization."
    )
    volume_output_tokens_per_month = serializers.IntegerField(allow_null=True)
    instances_at_volume = serializers.IntegerField(allow_null=True, help_text="Instances that volume needs.")
    rent_usd_at_volume = serializers.CharField(allow_null=True)
    api_usd_at_volume = serializers.CharField(allow_null=True)
    cheaper_at_volume = serializers.CharField(allow_null=True, help_text="rent, api or same (null: no volume).")


class CompareRowOutput(serializers.Serializer):
    index = serializers.IntegerField(help_text="The candidate's place in the request, from 0.")
    gpu = serializers.CharField()
    gpu_name = serializers.CharField()
    vendor = serializers.CharField()
    gpu_count = serializers.IntegerField()
    count_chosen = serializers.BooleanField(help_text="The candidate named a card alone: this count was chosen.")
    fits = serializers.BooleanField(help_text="Runs the workload (at least one sequence of its context).")
    reasons = ReasonOutput(many=True)
    term = serializers.CharField()
    price_usd = serializers.CharField(allow_null=True, help_text="The term's price after discounts.")
    hourly_usd = serializers.CharField(allow_null=True, help_text="The term's price over its hours.")
    effective_hourly_usd = serializers.CharField(allow_null=True, help_text="hourly_usd / utilization.")
    concurrency = serializers.IntegerField(allow_null=True, help_text="The operating concurrency.")
    limited_by = serializers.CharField(allow_null=True, help_text="load, targets or memory.")
    meets_targets = serializers.BooleanField(allow_null=True)
    meets_load = serializers.BooleanField(allow_null=True)
    most_that_fit = serializers.IntegerField(allow_null=True, help_text="Sequences of the context memory holds.")
    accepted_share = serializers.FloatField(allow_null=True, help_text="Requests inside the targets.")
    output_tokens_per_s = serializers.FloatField(allow_null=True, help_text="At the operating concurrency.")
    accepted_output_tokens_per_hour = serializers.IntegerField()
    cost_per_million_accepted_usd = serializers.CharField(allow_null=True)
    latency = LatencyOutput(allow_null=True, help_text="At the operating concurrency.")
    memory = CompareMemoryOutput(allow_null=True)
    stock = CompareStockOutput()
    interconnect = serializers.CharField(help_text="nvswitch, infinity_fabric, pcie or pcie_no_p2p.")
    templates = serializers.ListField(child=serializers.CharField())
    in_guide_shortlist = serializers.BooleanField(help_text="Among the cards the guide starts this class with.")
    launch_command = serializers.CharField(allow_null=True)
    notes = serializers.ListField(child=serializers.CharField())
    rent_or_api = RentOrApiOutput(allow_null=True, help_text="With an API price.")


class CompareVersusOutput(serializers.Serializer):
    index = serializers.IntegerField()
    gpu = serializers.CharField()
    gpu_count = serializers.IntegerField()
    price_ratio = serializers.FloatField(help_text="The winner's hourly price over this row's, 1 decimal.")
    accepted_throughput_ratio = serializers.FloatField()
    cost_per_million_ratio = serializers.FloatField()


class CompareWinnerOutput(serializers.Serializer):
    index = serializers.IntegerField()
    gpu = serializers.CharField()
    gpu_count = serializers.IntegerField()
    reason = serializers.CharField()
    versus = CompareVersusOutput(many=True)


class CompareApiOutput(serializers.Serializer):
    usd_per_million_input = serializers.CharField()
    usd_per_million_output = serializers.CharField()
    usd_per_million_output_with_prompts = serializers.CharField()
    volume_output_tokens_per_month = serializers.IntegerField(allow_null=True)
    volume_source = serializers.CharField(allow_null=True, help_text="stated, request_rate, or null.")


class CompareOutput(serializers.Serializer):
    model = ModelSummaryOutput()
    profile = serializers.CharField()
    precision = serializers.CharField()
    kv_precision = serializers.CharField()
    context = serializers.IntegerField()
    input_tokens = serializers.IntegerField()
    output_tokens = serializers.IntegerField()
    load = LoadOutput()
    targets = TargetsOutput()
    utilization = serializers.FloatField()
    term = serializers.CharField()
    region = serializers.CharField(allow_null=True)
    workload_class = WorkloadClassOutput()
    rows = CompareRowOutput(many=True)
    winner = CompareWinnerOutput(allow_null=True)
    no_winner_reason = serializers.CharField(allow_null=True)
    api = CompareApiOutput(allow_null=True)


def money(amount: Decimal | None) -> str | None:
    return None if amount is None else usd_str(amount)


# --- Payloads (what the output serializers render) ------------------------------


def _workload_fields(workload: Workload) -> dict[str, Any]:
    return {
        "model": model_summary(workload),
        "profile": workload.profile,
        "precision": workload.precision,
        "kv_precision": workload.kv_precision,
        "context": workload.context,
        "concurrency": workload.concurrency,
    }


def check_payload(result) -> dict[str, Any]:
    check = result.check
    return {
        **_workload_fields(check.workload),
        "gpu": result.gpu.slug,
        "gpu_count": result.gpu_count,
        "fits": result.fits,
        "reasons": [r.as_dict() for r in result.reasons],
        "total": breakdown_total(check),
        "per_gpu": breakdown_per_gpu(check),
        "decode_ceiling_tokens_per_s": check.decode_ceiling_tokens_per_s,
        "term": result.term,
        "price_usd": money(result.quote.total_usd) if result.quote else None,
        "monthly_usd": money(result.monthly_quote.total_usd) if result.monthly_quote else None,
        "cost_per_million_tokens_usd": money(result.cost_per_million_tokens_usd),
        **engine_payload(check),
    }


def _split(wb) -> dict[str, float]:
    return {
        "linear_gb": gb_number(wb.linear),
        "scales_gb": gb_number(wb.scales),
        "embeddings_gb": gb_number(wb.embeddings),
        "other_gb": gb_number(wb.other),
        "total_gb": gb_number(wb.total),
    }


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 1)


def latency_payload(perf) -> dict[str, Any]:
    """LatencyOutput of a sizing.performance.Performance."""
    return {
        "ttft_ms": {"p50": _ms(perf.ttft_p50_s), "p95": _ms(perf.ttft_p95_s)},
        "tpot_ms": {"p50": _ms(perf.tpot_p50_s)},
        "e2e_ms": {"p50": _ms(perf.e2e_p50_s), "p95": _ms(perf.e2e_p95_s), "p99": _ms(perf.e2e_p99_s)},
    }


def engine_payload(check) -> dict[str, Any]:
    """The vllm profile's parts of a check (nulls for the guide profile)."""
    detail = check.engine
    if detail is None:
        return {"weights": None, "engine": None, "throughput": None, "latency": None, "launch": None, "notes": []}
    from .engine import BLOCK_SIZE, arch_layout, kv_tokens_capacity, workload_format_name

    budget, speed, launch = detail.budget, detail.throughput, detail.launch
    perf = speed.performance
    workload = check.workload
    return {
        "weights": {
            "format": workload_format_name(workload),
            "layout": "estimated" if arch_layout(workload.arch).estimated else "config",
            "total": _split(detail.weights_total),
            "per_gpu": _split(detail.weights_per_gpu),
        },
        "engine": {
            "memory_gb": gb_number(budget.memory_bytes),
            "gpu_memory_utilization_min": float(detail.utilization_min),
            "gpu_memory_utilization_max": float(detail.utilization_max),
            "engine_version": workload.engine_version,
            "non_torch_gb": gb_number(budget.non_torch),
            "activation_gb": gb_number(budget.activation),
            "cuda_graphs_gb": gb_number(budget.cuda_graphs),
            "kv_cache_needed_gb": gb_number(budget.kv_needed),
            "kv_cache_per_sequence_gb": gb_number(budget.kv_per_sequence),
            "kv_cache_available_gb": gb_number(detail.kv_available),
            "kv_cache_tokens": kv_tokens_capacity(
                arch=workload.arch,
                kv_precision=workload.kv_precision,
                gpu_count=check.gpu_count,
                kv_bytes=detail.kv_available,
            ),
            "block_size": BLOCK_SIZE,
            "max_num_batched_tokens": budget.batched_tokens,
            "max_concurrency": detail.max_concurrency,
            "max_context": detail.max_context,
        },
        "throughput": {
            "concurrency": speed.concurrency,
            "input_tokens": speed.input_tokens,
            "output_tokens": speed.output_tokens,
            "output_tokens_per_s": round(perf.output_tokens_per_s, 1),
            "requests_per_s": round(perf.requests_per_s, 3),
            "aggregate_tokens_per_s": speed.aggregate_tokens_per_s,
            "per_sequence_tokens_per_s": speed.per_sequence_tokens_per_s,
            "single_stream_tokens_per_s": speed.single_stream_tokens_per_s,
            "in_flight": perf.in_flight,
            "limited_by": perf.limited_by,
            "bound": perf.bound,
            "compute_format": speed.compute_format,
            "active_weights_gb": gb_number(speed.active_weight_bytes_per_gpu),
            "pcie_without_p2p": speed.pcie_without_p2p,
            "tp_efficiency": float(speed.tp_efficiency),
        },
        "latency": latency_payload(perf),
        "launch": None
        if launch is None
        else {
            "command": launch.command,
            "model": launch.model,
            "args": dict(launch.args),
            "checkpoint_known": launch.checkpoint_known,
            "notes": list(launch.notes),
        },
        "notes": list(detail.notes),
    }


def candidate_payload(result, stock_row=None) -> dict[str, Any]:
    check, q = result.check, result.quote
    out = {
        "gpu": result.gpu.slug,
        "gpu_name": result.gpu.name,
        "vendor": result.gpu.vendor,
        "gpu_count": result.gpu_count,
        "term": q.term,
        "price_usd": money(q.total_usd),
        "monthly_usd": money(result.monthly_quote.total_usd),
        "discount_pct": f"{q.discount_pct:.2f}",
        "per_gpu_hour_usd": money(q.per_gpu_hour_usd),
        "capacity_gb": gb_number(check.capacity_per_gpu),
        "required_gb": gb_number(check.requirement.required_per_gpu),
        "headroom_gb": gb_number(check.headroom_per_gpu),
        "decode_ceiling_tokens_per_s": check.decode_ceiling_tokens_per_s,
        "cost_per_million_tokens_usd": money(result.cost_per_million_tokens_usd),
        "gpu_memory_utilization_min": None,
        "aggregate_tokens_per_s": None,
        "launch_command": None,
        "notes": [],
    }
    detail = check.engine
    if detail is not None:
        out["gpu_memory_utilization_min"] = float(detail.utilization_min)
        out["aggregate_tokens_per_s"] = detail.throughput.aggregate_tokens_per_s
        out["launch_command"] = detail.launch.command if detail.launch is not None else None
        out["notes"] = list(detail.notes)
    if stock_row is not None:
        out["available"] = stock_row.available
    return out


def recommend_payload(rec) -> dict[str, Any]:
    workload = rec.workload
    one = (
        requirement_compute(workload=workload, gpu_count=1)
        if workload.profile == PROFILE_GUIDE
        else requirement_one_gpu(workload=workload)
    )
    stock = rec.stock or {}
    return {
        **_workload_fields(workload),
        "region": rec.region,
        "term": rec.term,
        "requirement": {
            "weights_gb": gb_number(one.weights_total),
            "kv_cache_gb": gb_number(one.kv_cache_total),
            "overhead_gb": gb_number(one.overhead_total),
            "required_gb": gb_number(one.required_total),
            "kv_cache_one_copy_gb": gb_number(one.kv_cache_logical),
        },
        "considered": rec.considered,
        "candidates": [
            candidate_payload(c, stock.get(c.gpu.slug) if rec.stock is not None else None) for c in rec.candidates
        ],
        "advice": [a.as_dict() for a in rec.advice],
        "workload_class": placement_payload(rec.placement),
    }


def _usd4(amount: Decimal) -> str:
    """A per-million API price: to 4 decimals, half up (they run below a cent)."""
    return f"{amount.quantize(Decimal('0.0001'), ROUND_HALF_UP):.4f}"


def _ratio(value: Decimal | None, places: str = "0.001") -> float | None:
    return None if value is None else float(value.quantize(Decimal(places), ROUND_HALF_UP))


def _compare_row(row, term: str) -> dict[str, Any]:
    result, point, memory, supply = row.result, row.point, row.memory, row.supply
    detail = result.check.engine
    rent = row.rent_or_api
    return {
        "index": row.index,
        "gpu": row.gpu.slug,
        "gpu_name": row.gpu.name,
        "vendor": row.gpu.vendor,
        "gpu_count": row.gpu_count,
        "count_chosen": row.count_chosen,
        "fits": row.fits,
        "reasons": [r.as_dict() for r in result.reasons] if not row.fits else [],
        "term": term,
        "price_usd": money(result.quote.total_usd) if result.quote else None,
        "hourly_usd": money(row.hourly_usd),
        "effective_hourly_usd": money(row.effective_hourly_usd),
        "concurrency": point.concurrency if point else None,
        "limited_by": point.limited_by if point else None,
        "meets_targets": point.meets_targets if point else None,
        "meets_load": point.meets_load if point else None,
        "most_that_fit": point.most_that_fit if point else None,
        "accepted_share": round(point.accepted_share, 3) if point else None,
        "output_tokens_per_s": round(point.performance.output_tokens_per_s, 1) if point else None,
        "accepted_output_tokens_per_hour": row.accepted_tokens_per_hour,
        "cost_per_million_accepted_usd": money(row.cost_per_million_accepted_usd),
        "latency": latency_payload(point.performance) if point else None,
        "memory": None
        if memory is None
        else {
            "headroom_gb": gb_number(memory.headroom_bytes),
            "kv_cache_needed_gb": gb_number(memory.kv_needed_bytes),
            "kv_cache_available_gb": gb_number(memory.kv_available_bytes),
            "kv_cache_share": _ratio(memory.kv_share, "0.01"),
            "gpu_memory_utilization": float(memory.utilization),
            "oom_risk": memory.oom_risk,
        },
        "stock": {
            "region": supply.region,
            "available": supply.available,
            "max_per_host": supply.max_per_host,
            "deliverable_now": bool(supply.regions),
            "regions": list(supply.regions),
        },
        "interconnect": row.interconnect,
        "templates": list(row.templates),
        "in_guide_shortlist": row.in_guide_shortlist,
        "launch_command": detail.launch.command if point and detail and detail.launch else None,
        "notes": list(row.notes),
        "rent_or_api": None
        if rent is None
        else {
            "api_usd_per_million_output": _usd4(rent.api_usd_per_million_output),
            "rent_usd_per_month": money(rent.rent_usd_per_month),
            "break_even_output_tokens_per_month": rent.break_even_output_tokens_per_month,
            "break_even_utilization": _ratio(rent.break_even_utilization),
            "renting_can_win": rent.renting_can_win,
            "cheaper_at_utilization": rent.cheaper_at_utilization,
            "volume_output_tokens_per_month": rent.volume_output_tokens_per_month,
            "instances_at_volume": rent.instances_at_volume,
            "rent_usd_at_volume": money(rent.rent_usd_at_volume),
            "api_usd_at_volume": money(rent.api_usd_at_volume),
            "cheaper_at_volume": rent.cheaper_at_volume,
        },
    }


def compare_payload(comparison: Comparison) -> dict[str, Any]:
    """CompareOutput of a sizing.compare.Comparison."""
    workload = comparison.workload
    input_tokens, output_tokens = workload_lengths(workload)
    winner = comparison.winner
    api = comparison.api_price
    return {
        "model": model_summary(workload),
        "profile": workload.profile,
        "precision": workload.precision,
        "kv_precision": workload.kv_precision,
        "context": workload.context,
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "load": {"concurrency": comparison.load.concurrency, "requests_per_s": comparison.load.requests_per_s},
        "targets": {"ttft_p95_ms": comparison.targets.ttft_p95_ms, "e2e_p95_ms": comparison.targets.e2e_p95_ms},
        "utilization": float(comparison.utilization),
        "term": comparison.term,
        "region": comparison.region,
        "workload_class": placement_payload(comparison.placement),
        "rows": [_compare_row(row, comparison.term) for row in comparison.rows],
        "winner": None
        if winner is None
        else {
            "index": winner.row.index,
            "gpu": winner.row.gpu.slug,
            "gpu_count": winner.row.gpu_count,
            "reason": winner.reason,
            "versus": [
                {
                    "index": v["index"],
                    "gpu": v["gpu"],
                    "gpu_count": v["gpu_count"],
                    "price_ratio": float(v["price_ratio"]),
                    "accepted_throughput_ratio": float(v["accepted_throughput_ratio"]),
                    "cost_per_million_ratio": float(v["cost_per_million_ratio"]),
                }
                for v in winner.versus
            ],
        },
        "no_winner_reason": comparison.no_winner_reason,
        "api": None
        if api is None
        else {
            "usd_per_million_input": _usd4(api.usd_per_million_input),
            "usd_per_million_output": _usd4(api.usd_per_million_output),
            "usd_per_million_output_with_prompts": _usd4(comparison.api_per_million_output),
            "volume_output_tokens_per_month": comparison.volume,
            "volume_source": comparison.volume_source,
        },
    }
