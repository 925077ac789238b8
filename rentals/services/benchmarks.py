"""The benchmark plan of an order or rental, and the results customers upload
for a rental: measured against predicted, and the cost of a million accepted
output tokens at the rental's real price.

The arithmetic is sizing.benchmarks' (pure); this module reads the order's
workload and price and writes the uploads. docs/sizing.md walks through it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from accounts.models import Account
from catalog.models import TERM_HOURS
from catalog.selectors import catalog_current, catalog_memo
from core.audit import AuditAction, audit_record
from core.db import locked_or_404
from core.errors import Conflict, DomainError
from core.money import cents
from rentals.models import BenchmarkRun, Order, Rental
from rentals.selectors import order_get, rental_get

if TYPE_CHECKING:
    from sizing.arithmetic import Card, Workload

# The most a rental keeps: enough for each trace again and again over a term.
BENCHMARKS_PER_RENTAL = 100
MILLION = Decimal(10**6)
SECONDS_PER_HOUR = Decimal(3600)


@dataclass(frozen=True)
class PlanContext:
    """A plan and what it was made for."""

    plan: Any  # sizing.benchmarks.Plan
    order: Order
    rental: Rental | None
    price_per_hour_usd: Decimal
    notes: list[str] = field(default_factory=list)


def price_per_hour(order: Order) -> Decimal:
    """What the order pays per hour it runs, add-ons and discounts included:
    its total over the hours of the terms it buys (unrounded; round where shown)."""
    return order.total_usd / (TERM_HOURS[order.term] * order.terms)


def _workload(order: Order) -> Workload:
    """The order's workload as sizing reads it (the order keeps what sizing reads: rentals.serializers)."""
    from sizing.serializers import OrderWorkloadInput

    if not order.workload:
        raise Conflict(
            "workload_missing",
            "The order was placed without a workload: the plan needs the model, its precision, context and "
            "concurrency. Size it with POST /api/v1/sizing/check and run the bench lines by hand, or order with "
            "`workload`.",
            details={"order": order.pk},
        )
    kept = dict(order.workload)
    # Orders placed before the workload kept its lengths and release: the sizing's answer has them.
    sizing = order.sizing or {}
    speed, engine = sizing.get("throughput") or {}, sizing.get("engine") or {}
    for name, value in (
        ("input_tokens", speed.get("input_tokens")),
        ("output_tokens", speed.get("output_tokens")),
        ("engine_version", engine.get("engine_version")),
    ):
        if name not in kept and value is not None:
            kept[name] = value
    data = OrderWorkloadInput(data=kept)
    if not data.is_valid():
        raise Conflict(
            "workload_unreadable",
            "The order's workload no longer sizes (its model left the catalog?).",
            details={"order": order.pk, "fields": data.errors},
        )
    workload: Workload = data.validated_data["workload"]
    return workload


def _card(order: Order) -> Card:
    from sizing.services import card_from_gpu

    return card_from_gpu(order.gpu)


def _plan(order: Order, rental: Rental | None) -> PlanContext:
    from sizing.benchmarks import benchmark_plan

    # Sized once per order, catalog version and what the order keeps of its workload
    # (sizing it takes 8-13 ms of CPU, and a `read` token may ask as often as it likes).
    kept = json.dumps([order.workload, order.sizing], sort_keys=True, default=str)
    plan = catalog_memo(
        catalog_current(),
        ("benchmark-plan", order.pk, kept),
        lambda: benchmark_plan(workload=_workload(order), card=_card(order), gpu_count=order.gpu_count),
    )
    notes = []
    if not order.template_slug.startswith("vllm-"):
        notes.append(
            f"The {order.template_slug} template has no vLLM: install vLLM {plan.release} "
            f"(pip install vllm=={plan.release}) to run these lines."
        )
    return PlanContext(plan=plan, order=order, rental=rental, price_per_hour_usd=price_per_hour(order), notes=notes)


def order_benchmark_plan(*, account: Account, order_id: int) -> PlanContext:
    """The plan of one of the account's orders (before paying, too)."""
    return _plan(order_get(account=account, order_id=order_id), None)


def rental_benchmark_plan(*, account: Account, rental_id: int) -> PlanContext:
    rental = rental_get(account=account, rental_id=rental_id)
    return _plan(rental.order, rental)


# --- Uploads ----------------------------------------------------------------------------------


ENVIRONMENT_FIELDS = ("gpu_sku", "driver_version", "cuda_version", "vllm_version")


def benchmark_upload(
    *,
    account: Account,
    rental_id: int,
    result: Any,
    trace: str | None = None,
    environment: dict[str, str] | None = None,
    now: datetime | None = None,
) -> BenchmarkRun:
    """Keep a `--save-result` file for one of the account's rentals, with the
    prediction for the same run. A file that is not one is refused (400
    `invalid_bench_result`, naming the field); the BENCHMARKS_PER_RENTAL-th
    upload is the last (409 `benchmark_limit`)."""
    from sizing.benchmarks import RESULT_MAX_BYTES, TRACES, prediction_for_result, result_parse

    now = now or timezone.now()
    try:
        size = len(json.dumps(result, separators=(",", ":"), ensure_ascii=False).encode())
    except UnicodeEncodeError as exc:  # a lone surrogate ("\udc80" in the JSON): no file holds one
        raise DomainError(
            "invalid_bench_result",
            "result: text with a lone surrogate, which no UTF-8 file holds.",
            details={"field": "result", "fields": {"result": ["UTF-8 text"]}},
        ) from exc
    except (ValueError, RecursionError):  # not JSON a client could send: refused as too large
        size = RESULT_MAX_BYTES + 1
    if size > RESULT_MAX_BYTES:
        raise DomainError(
            "bench_result_too_large",
            f"The result takes {size:,} bytes; at most {RESULT_MAX_BYTES:,}. Upload the file --save-result writes "
            "without --save-detailed.",
            details={"field": "result", "result_bytes": size, "max_result_bytes": RESULT_MAX_BYTES},
        )
    parsed = result_parse(result)
    trace = trace or parsed.fields.get("label")
    if trace not in TRACES:
        raise DomainError(
            "invalid",
            f"trace: one of {', '.join(TRACES)} (the result's label is {parsed.fields.get('label')!r}).",
            details={"field": "trace", "fields": {"trace": [f"one of {', '.join(TRACES)}"]}},
        )
    from sizing.benchmarks import bench_release
    from sizing.engine import engine_check, workload_format_name

    # The sizing first, outside the lock: it reads nothing the upload changes.
    rental = rental_get(account=account, rental_id=rental_id)
    order = rental.order
    workload = _workload(order)
    card = _card(order)
    check = engine_check(workload=workload, card=card, gpu_count=order.gpu_count)
    launch = check.engine.launch if check.engine is not None else None
    predicted = prediction_for_result(
        workload=workload, card=card, gpu_count=order.gpu_count, trace=trace, result=parsed
    )
    duration = parsed.duration
    with transaction.atomic():
        # One upload at a time per rental, for its cap (FOR NO KEY UPDATE: the run's row may reference it).
        locked_or_404(Rental.objects.filter(account=account), pk=rental_id, message="No such rental.", no_key=True)
        held = BenchmarkRun.objects.filter(rental=rental).count()
        if held >= BENCHMARKS_PER_RENTAL:
            raise Conflict(
                "benchmark_limit",
                f"A rental keeps at most {BENCHMARKS_PER_RENTAL} benchmark results.",
                details={"max_benchmarks": BENCHMARKS_PER_RENTAL},
            )
        run = BenchmarkRun.objects.create(
            rental=rental,
            trace=trace,
            uploaded_at=now,
            uploaded_by=account,
            gpu_slug=rental.gpu_slug,
            gpu_count=rental.gpu_count,
            weight_format=workload_format_name(workload),
            model_name=launch.model if launch is not None else (workload.arch.hf_repo or workload.arch.slug),
            engine_version=bench_release(workload.engine_version),
            num_prompts=parsed.num_prompts,
            completed=parsed.completed,
            output_tokens=parsed.accepted_output_tokens,
            duration_s=duration.quantize(Decimal("0.001")),
            output_tokens_per_s=(Decimal(parsed.accepted_output_tokens) / duration).quantize(Decimal("0.01")),
            predicted_output_tokens_per_s=(
                None
                if predicted is None
                else Decimal(str(predicted.figures["output_throughput"])).quantize(Decimal("0.01"))
            ),
            result=parsed.fields,
            predicted=None if predicted is None else predicted.figures,
            environment={k: str(v)[:200] for k, v in (environment or {}).items() if k in ENVIRONMENT_FIELDS},
        )
        audit_record(
            actor=account,
            action=AuditAction.RENTAL_BENCHMARK_UPLOAD,
            obj=rental,
            changes={"benchmark": run.pk, "trace": trace, "completed": run.completed, "failed": run.failed},
        )
    return run


def rental_benchmarks(*, account: Account, rental_id: int) -> tuple[Rental, QuerySet[BenchmarkRun]]:
    """The rental's uploads (the caller pages them, oldest first)."""
    rental = rental_get(account=account, rental_id=rental_id)
    return rental, BenchmarkRun.objects.filter(rental=rental)


# --- Reading a run ----------------------------------------------------------------------------


def cost_per_million_accepted(*, price_per_hour_usd: Decimal, tokens_per_s: Decimal | None) -> Decimal | None:
    """USD per 1M accepted output tokens: the hourly price over the accepted tokens an hour, x 1e6."""
    if not tokens_per_s or tokens_per_s <= 0:
        return None
    return cents(price_per_hour_usd * MILLION / (tokens_per_s * SECONDS_PER_HOUR))


def run_view(run: BenchmarkRun, *, order: Order) -> dict[str, Any]:
    """A run as the API lists it: measured beside predicted, the ratio, the cost."""
    from sizing.benchmarks import comparison

    price = price_per_hour(order)
    measured_rate = Decimal(run.output_tokens) / run.duration_s
    notes = []
    if run.failed:
        notes.append(
            f"{run.failed} of {run.num_prompts} requests failed: their tokens are not accepted output and "
            "are not counted."
        )
    model_id = run.result.get("model_id")
    if model_id and model_id != run.model_name:
        notes.append(f"The file ran {model_id}; the server line serves {run.model_name}.")
    if run.predicted is None:
        notes.append("No request completed: there is nothing to compare.")
    return {
        "id": run.pk,
        "trace": run.trace,
        "uploaded_at": run.uploaded_at,
        "model_id": model_id,
        "num_prompts": run.num_prompts,
        "completed": run.completed,
        "failed": run.failed,
        "accepted_output_tokens": run.output_tokens,
        "duration_s": float(run.duration_s),
        "accepted_output_tokens_per_hour": int(measured_rate * SECONDS_PER_HOUR),
        "price_per_hour_usd": cents(price),
        "cost_per_million_accepted_output_tokens_usd": cost_per_million_accepted(
            price_per_hour_usd=price, tokens_per_s=measured_rate
        ),
        "predicted_cost_per_million_output_tokens_usd": cost_per_million_accepted(
            price_per_hour_usd=price, tokens_per_s=run.predicted_output_tokens_per_s
        ),
        "figures": comparison(measured=run.result, predicted=run.predicted),
        "environment": run.environment,
        "notes": notes,
    }


def plan_view(context: PlanContext) -> dict[str, Any]:
    """A plan as the API shows it."""
    plan, order = context.plan, context.order
    price = context.price_per_hour_usd
    upload = (
        f"POST /api/v1/rentals/{context.rental.pk}/benchmarks"
        if context.rental is not None
        else "POST /api/v1/rentals/{id}/benchmarks once the order is a rental (GET /api/v1/orders/{id} names it)"
    )
    traces = []
    for item in plan.traces:
        trace, predicted = item.trace, item.predicted
        rate = predicted.figures["output_throughput"]
        traces.append(
            {
                "name": trace.name,
                "title": trace.title,
                "command": item.command,
                "result_file": item.result_file,
                "input_tokens": trace.input_tokens,
                "output_tokens": trace.output_tokens,
                "range_ratio": trace.range_ratio,
                "num_prompts": item.num_prompts,
                "request_rate": "inf",
                "max_concurrency": trace.max_concurrency,
                "in_flight": predicted.in_flight,
                "limited_by": predicted.limited_by,
                "predicted": predicted.figures,
                "predicted_cost_per_million_output_tokens_usd": cost_per_million_accepted(
                    price_per_hour_usd=price, tokens_per_s=Decimal(str(rate)) if rate else None
                ),
            }
        )
    return {
        "order_id": order.pk,
        "rental_id": context.rental.pk if context.rental is not None else None,
        "gpu": order.gpu_slug,
        "gpu_count": order.gpu_count,
        "weight_format": plan.weight_format,
        "release": plan.release,
        "bench_available": plan.bench_available,
        "serve_command": plan.serve_command,
        "model": plan.model,
        "price_per_hour_usd": cents(price),
        "traces": traces,
        "record": [{"field": f, "label": label, "command": command} for f, label, command in plan.record],
        "upload": upload,
        "notes": context.notes + plan.notes,
    }
