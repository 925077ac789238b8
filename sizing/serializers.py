"""Sizing API inputs: one serializer per request body.

`WorkloadInput` is the workload part of a sizing body (model or architecture,
precision, context, concurrency); orders validate their `workload` with it and
get a `Workload` in `validated_data["workload"]`, with the same error codes.
The answers' shapes, and what builds them, are in sizing/payloads.py.
"""

from __future__ import annotations

import json
from dataclasses import replace
from decimal import Decimal
from typing import Any

from django.conf import settings
from rest_framework import serializers

from catalog.models import ALLOWED_COUNTS, TERM_CHOICES, TERM_MONTHLY, Vendor
from core.errors import DomainError

from .arithmetic import KV_PRECISION_BYTES, PRECISION_BYTES, Workload
from .engine import PROFILE_VLLM, PROFILES, engine_versions, newest_version, template_version
from .hf_config import architecture_from_hf_config
from .matrix import USES
from .selectors import architecture_get
from .weights import FORMAT_ALIASES, FORMATS

MAX_CONTEXT = 10_000_000
# A config.json as published takes a few KiB (the largest known, with a list per layer, some 20);
# what is larger is refused before it is read (an order's whole workload has the same bound).
ARCHITECTURE_MAX_BYTES = 64 * 1024
MAX_CONCURRENCY = 100_000
MAX_GPUS = 64
MAX_GPUS_PER_INSTANCE = max(ALLOWED_COUNTS)


def overhead_default() -> Decimal:
    return Decimal(str(settings.SIZING_OVERHEAD_GB))


def max_utilization() -> Decimal:
    return Decimal(str(settings.SIZING_MAX_GPU_MEMORY_UTILIZATION))


# --- Inputs -------------------------------------------------------------------


def _lone_surrogate(value: Any) -> bool:
    """Whether a string of `value` (a key or a value, at any depth) holds a lone surrogate."""
    if isinstance(value, str):
        return any("\ud800" <= ch <= "\udfff" for ch in value)
    if isinstance(value, dict):
        return any(_lone_surrogate(k) or _lone_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_lone_surrogate(item) for item in value)
    return False


class WorkloadInput(serializers.Serializer):
    model = serializers.CharField(required=False, max_length=64, help_text="A slug from GET /sizing/models.")
    architecture = serializers.JSONField(
        required=False,
        help_text="The contents of a Hugging Face config.json, instead of `model`; at most 64 KiB "
        "(`workload_too_large`).",
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
    # Any field: a body sized only with the vllm profile hides it (OrderWorkloadInput, CompareInput).
    profile: serializers.Field = serializers.ChoiceField(
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
    context = serializers.IntegerField(  # type: ignore[assignment]  # the body's field, not Field.context
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

    def validate_architecture(self, value: Any) -> Any:
        try:
            size = len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode(errors="surrogatepass"))
        except (ValueError, RecursionError):  # not JSON a client could send; refused as too large
            size = ARCHITECTURE_MAX_BYTES + 1
        if size <= ARCHITECTURE_MAX_BYTES and _lone_surrogate(value):
            # A JSON escape like "\udc80": no UTF-8 text carries it, the answer (which names
            # the model by its `_name_or_path`) included, so it failed to render (a 500).
            raise serializers.ValidationError("A config.json is UTF-8 text: a lone surrogate escape is none.")
        if size > ARCHITECTURE_MAX_BYTES:
            raise DomainError(
                "workload_too_large",
                f"The config.json takes {size:,} bytes; at most {ARCHITECTURE_MAX_BYTES:,}. Send it as it is "
                "published, or a `model` slug.",
                details={"workload_bytes": size, "max_workload_bytes": ARCHITECTURE_MAX_BYTES},
            )
        return value

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
    candidates: serializers.ListSerializer[Any] = serializers.ListSerializer(
        child=CompareCandidateInput(), min_length=2, max_length=5
    )
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
