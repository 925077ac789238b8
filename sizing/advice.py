"""Plain-language advice drawn from the seeds, attached to a recommendation
where it applies. Each piece has a stable code so clients can act on it."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from core.money import cents

from .arithmetic import Workload, requirement_compute, to_gb
from .engine import release_get

if TYPE_CHECKING:
    from catalog.models import GpuModel

    from .services import SizingResult

# Below about ten million tokens a month a hosted token API is cheaper (the seed).
HOSTED_API_THRESHOLD_TOKENS = 10_000_000
# The KV cache "dominates" once it is at least half the weights.
KV_DOMINANT_SHARE = Decimal("0.5")
NODE_SIZE = 8


@dataclass(frozen=True)
class Advice:
    code: str
    message: str
    details: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "details": dict(self.details)}


def _usd(amount: Decimal) -> str:
    return f"${cents(amount):,.2f}"


def _per(term: str) -> str:
    return "week" if term == "weekly" else "month"


def _label(result: SizingResult) -> str:
    return f"{result.gpu_count} x {result.gpu.name}"


def advice_for(
    *,
    workload: Workload,
    candidates: list[SizingResult],
    gpus: list[GpuModel],
    gpu_count: int | None,
    max_gpus: int | None,
    tokens_per_month: int | None,
    traffic: str | None,
) -> list[Advice]:
    out: list[Advice] = []
    cheapest = candidates[0] if candidates else None

    if tokens_per_month is not None and tokens_per_month < HOSTED_API_THRESHOLD_TOKENS:
        details: dict[str, Any] = {"tokens_per_month": tokens_per_month, "threshold": HOSTED_API_THRESHOLD_TOKENS}
        message = (
            "Below about 10 million tokens a month a hosted token API is cheaper than a dedicated card: "
            "a 7B model on an L4 at 10 million tokens costs $25 per million, and per-token prices of "
            "comparable open models are lower."
        )
        if cheapest is not None and cheapest.quote is not None and tokens_per_month > 0:
            monthly = cheapest.quote.total_usd * 720 / cheapest.quote.hours
            per_million = cents(monthly * 10**6 / tokens_per_month)
            details.update(
                {
                    "gpu": cheapest.gpu.slug,
                    "gpu_count": cheapest.gpu_count,
                    "cost_per_million_tokens_usd": f"{per_million:.2f}",
                }
            )
            message += (
                f" At {tokens_per_month:,} tokens a month the cheapest fit here, {_label(cheapest)}, "
                f"costs {_usd(per_million)} per million tokens."
            )
        out.append(Advice("hosted_api_cheaper", message, details))

    no_fp8 = sorted({g.name for g in gpus if not g.fp8})
    if workload.profile == "vllm":
        if workload.precision == "fp8" and no_fp8:
            # Whether the release refuses FP8 experts on cards without FP8 (neither release
            # the sizing knows does: both run them weight-only through Marlin).
            moe = workload.arch.is_moe and bool(release_get(workload.engine_version).moe_refused.get("fp8"))
            out.append(
                Advice(
                    "ampere_no_fp8" if moe else "fp8_weight_only",
                    (
                        "FP8 mixture-of-experts kernels need Ada, Hopper or newer: Ampere cards ("
                        + ", ".join(no_fp8)
                        + ") are left out; with bf16, int8, awq or gptq weights they are candidates again."
                    )
                    if moe
                    else (
                        "Ampere cards ("
                        + ", ".join(no_fp8)
                        + ") have no FP8 tensor cores: vLLM runs FP8 weights on them weight-only (W8A16, "
                        "Marlin, experts included). They hold the model in the same memory but decode no faster "
                        "than 8-bit weights."
                    ),
                    {"gpus": sorted(g.slug for g in gpus if not g.fp8)},
                )
            )
    elif workload.uses_fp8 and no_fp8:
        out.append(
            Advice(
                "ampere_no_fp8",
                "FP8 needs Hopper, Ada, Blackwell or CDNA 3: Ampere cards ("
                + ", ".join(no_fp8)
                + ") have no FP8 in silicon and are left out. With bf16, int8 or int4 weights and a bf16 KV "
                "cache they are candidates again; 4-bit serving is what they still do well.",
                {"gpus": sorted(g.slug for g in gpus if not g.fp8)},
            )
        )

    one = requirement_compute(workload=workload, gpu_count=1)
    if one.weights_total and one.kv_cache_logical >= one.weights_total * KV_DOMINANT_SHARE:
        message = (
            f"The KV cache ({to_gb(one.kv_cache_logical)} GB for {workload.concurrency} x "
            f"{workload.context:,} tokens) is {int(100 * one.kv_cache_logical / one.weights_total)} % of the "
            f"weights ({to_gb(one.weights_total)} GB): long contexts and concurrency, not the model, set the "
            "memory. It grows with context x concurrent sequences."
        )
        if workload.kv_precision != "fp8":
            message += " An FP8 KV cache halves it."
        out.append(
            Advice(
                "kv_cache_dominates",
                message,
                {"kv_cache_gb": float(to_gb(one.kv_cache_logical)), "weights_gb": float(to_gb(one.weights_total))},
            )
        )

    if traffic == "bursty":
        out.append(
            Advice(
                "bursty_traffic",
                "Bursty traffic belongs on an hourly provider: a term here is paid whether or not traffic "
                "comes, the shortest is 7 days and compute is not metered. $1,690 a month for an H100 SXM "
                "against a $2.49-$3.49 hourly meter breaks even at about 480-680 busy hours a month.",
            )
        )

    if cheapest is not None and gpu_count is None:
        singles = [c for c in candidates if c.gpu_count == 1]
        nodes = [c for c in candidates if c.gpu_count == NODE_SIZE]
        if not singles and nodes and cheapest.gpu_count < NODE_SIZE:
            node = nodes[0]
            per = _per(cheapest.quote.term)
            out.append(
                Advice(
                    "smaller_than_a_node",
                    f"No single card holds this model. The cheapest configuration that does is "
                    f"{_label(cheapest)} at {_usd(cheapest.quote.total_usd)} a {per}; pricing only whole "
                    f"8-GPU nodes, as our inference guide's table does, gives {_label(node)} at "
                    f"{_usd(node.quote.total_usd)} a {per}.",
                    {
                        "cheapest": {
                            "gpu": cheapest.gpu.slug,
                            "gpu_count": cheapest.gpu_count,
                            "price_usd": f"{cents(cheapest.quote.total_usd):.2f}",
                        },
                        "cheapest_node": {
                            "gpu": node.gpu.slug,
                            "gpu_count": node.gpu_count,
                            "price_usd": f"{cents(node.quote.total_usd):.2f}",
                        },
                    },
                )
            )

    if cheapest is None:
        hints = [
            "a lower precision (fp8 or int4 weights)",
            "an FP8 KV cache",
            "a shorter context",
            "fewer concurrent sequences",
        ]
        if gpu_count is not None or max_gpus is not None:
            hints.insert(0, "more GPUs")
        out.append(
            Advice(
                "nothing_fits",
                "No configuration on offer holds this workload as asked. Try " + ", ".join(hints) + ".",
            )
        )
    return out
