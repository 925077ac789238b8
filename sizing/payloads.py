"""Sizing answers: each one's shape, described once, and what builds it.

An output serializer here is the answer's description: the OpenAPI schema is
generated from it, and check and compare render through it. Beside each one is
the builder that makes that shape as a plain dict from the sizing result
(recommend sends its builder's dict as it is: re-rendering up to sixty
candidates through DRF fields would cost more than the sizing itself).

Each builder names the serializer it builds with `@builds(...)`, and
`payload_errors` walks a built dict against that serializer's declared fields,
nested and listed, both ways: a key the serializer lacks, a field the dict
lacks (unless the field is not required), a null where the field admits none,
or a value of the wrong JSON type. tests/sizing/test_payloads.py runs every
builder listed in `BUILDERS` on real results through it, and holds that every
output serializer here is built by one, so a field added on one side alone fails.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, TypeVar

from rest_framework import serializers

from core.money import usd_str

from .arithmetic import Workload, gb_number, kv_cache_bytes_per_token, requirement_compute
from .compare import OOM_LOW, OOM_NEAR, OOM_OVER, Comparison
from .engine import PROFILE_GUIDE, requirement_one_gpu, workload_lengths
from .matrix import placement_payload
from .models import Architecture, AttentionKind
from .services import breakdown_per_gpu, breakdown_total

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Builder:
    """A function that builds `output`'s shape; `part`: some of its fields only
    (those it names must match, the others are another builder's)."""

    function: Callable[..., Any]
    output: type[serializers.Serializer]
    part: bool = False


BUILDERS: list[Builder] = []


def builds(output: type[serializers.Serializer], *, part: bool = False) -> Callable[[F], F]:
    """Lists the decorated function in BUILDERS as the builder of `output`'s
    shape, and gives it back unchanged (nothing is added to a call)."""

    def mark(function: F) -> F:
        BUILDERS.append(Builder(function, output, part))
        return function

    return mark


# JSON types a built value may have, by field class (the first match, most derived first).
_JSON_TYPES: tuple[tuple[type[serializers.Field], tuple[type, ...]], ...] = (
    (serializers.BooleanField, (bool,)),
    (serializers.IntegerField, (int,)),
    (serializers.FloatField, (float, int)),
    (serializers.ChoiceField, (str,)),
    (serializers.CharField, (str,)),
    (serializers.DictField, (dict,)),
)


def payload_errors(value: Any, field: serializers.Field, path: str = "", *, part: bool = False) -> list[str]:
    """Where `value` departs from what `field` (an output serializer, a list
    of them, or a plain field) declares; empty when it matches. `part`: the
    top level may leave fields out."""
    if value is None:
        return [] if field.allow_null else [f"{path or '.'}: null, not nullable"]
    if isinstance(field, serializers.ListSerializer):
        if not isinstance(value, list):
            return [f"{path or '.'}: {type(value).__name__}, not a list"]
        return _items_errors(value, field.child, path)
    if isinstance(field, serializers.Serializer):
        if not isinstance(value, dict):
            return [f"{path or '.'}: {type(value).__name__}, not an object"]
        declared = field.fields
        errors = [f"{path}.{key}: not declared by {type(field).__name__}" for key in value if key not in declared]
        for name, child in declared.items():
            if name in value:
                errors += payload_errors(value[name], child, f"{path}.{name}")
            elif child.required and not part:
                errors.append(f"{path}.{name}: declared by {type(field).__name__}, not built")
        return errors
    if isinstance(field, serializers.ListField):
        if not isinstance(value, list):
            return [f"{path}: {type(value).__name__}, not a list"]
        return _items_errors(value, field.child, path)
    if isinstance(value, bool) and not isinstance(field, serializers.BooleanField):
        return [f"{path}: a boolean for a {type(field).__name__}"]
    for field_class, types in _JSON_TYPES:
        if isinstance(field, field_class):
            if not isinstance(value, types):
                return [f"{path}: {type(value).__name__} for a {type(field).__name__}"]
            if isinstance(field, serializers.ChoiceField) and value not in field.choices:
                return [f"{path}: {value!r} is not one of {type(field).__name__}'s choices"]
            return []
    return [f"{path}: {type(field).__name__} has no JSON type here"]


def _items_errors(items: list[Any], child: serializers.Field | None, path: str) -> list[str]:
    if child is None:
        return [f"{path}: a list of nothing declared"]
    return [e for i, item in enumerate(items) for e in payload_errors(item, child, f"{path}[{i}]")]


def params_in_billions(params: int | None) -> float | None:
    if params is None:
        return None
    return float((Decimal(params) / 10**9).quantize(Decimal("0.001")))


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
        return params_in_billions(obj.total_params) or 0.0  # total_params: not null, above 0

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


@builds(ModelSummaryOutput)
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
    context = serializers.IntegerField()  # type: ignore[assignment]  # the answer's field, not Field.context
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
    context = serializers.IntegerField()  # type: ignore[assignment]  # the answer's field, not Field.context
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
    context = serializers.IntegerField()  # type: ignore[assignment]  # the answer's field, not Field.context
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

# Built beside the sizing they report (sizing.services, sizing.matrix), which
# cannot import this module; listed here all the same.
builds(TotalOutput)(breakdown_total)
builds(PerGpuOutput)(breakdown_per_gpu)
builds(WorkloadClassOutput)(placement_payload)


@builds(CheckOutput, part=True)
@builds(RecommendOutput, part=True)
def _workload_fields(workload: Workload) -> dict[str, Any]:
    return {
        "model": model_summary(workload),
        "profile": workload.profile,
        "precision": workload.precision,
        "kv_precision": workload.kv_precision,
        "context": workload.context,
        "concurrency": workload.concurrency,
    }


@builds(CheckOutput)
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


@builds(WeightsSplitOutput)
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


@builds(LatencyOutput)
def latency_payload(perf) -> dict[str, Any]:
    """LatencyOutput of a sizing.performance.Performance."""
    return {
        "ttft_ms": {"p50": _ms(perf.ttft_p50_s), "p95": _ms(perf.ttft_p95_s)},
        "tpot_ms": {"p50": _ms(perf.tpot_p50_s)},
        "e2e_ms": {"p50": _ms(perf.e2e_p50_s), "p95": _ms(perf.e2e_p95_s), "p99": _ms(perf.e2e_p99_s)},
    }


@builds(CheckOutput, part=True)
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


@builds(CandidateOutput)
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


@builds(RecommendOutput)
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


@builds(CompareRowOutput)
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


@builds(CompareOutput)
def compare_payload(comparison: Comparison) -> dict[str, Any]:
    """CompareOutput of a sizing.compare.Comparison."""
    workload = comparison.workload
    input_tokens, output_tokens = workload_lengths(workload)
    winner = comparison.winner
    api, api_out = comparison.api_price, comparison.api_per_million_output  # both set, or neither
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
        if api is None or api_out is None
        else {
            "usd_per_million_input": _usd4(api.usd_per_million_input),
            "usd_per_million_output": _usd4(api.usd_per_million_output),
            "usd_per_million_output_with_prompts": _usd4(api_out),
            "volume_output_tokens_per_month": comparison.volume,
            "volume_source": comparison.volume_source,
        },
    }
