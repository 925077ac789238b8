"""Sizing against the catalog: does a configuration hold a workload, what does it
cost per million tokens at the rate it serves it, and which configurations are
the cheapest that hold it; and the speed model against published benchmarks.

Other apps call `sizing_check` / `sizing_require_fit` (orders refuse workloads
that do not fit) and `sizing_recommend`. Reading only: nothing here writes.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, replace
from decimal import Decimal
from pathlib import Path

from django.conf import settings

from catalog.models import TERM_HOURS, TERM_MONTHLY, GpuModel
from catalog.selectors import CatalogSnapshot, StockRow, catalog_current, catalog_memo, stock
from catalog.services import Quote, quote
from core.errors import DomainError
from core.money import cents
from core.throttle import address_bucket, rate_limit

from .advice import Advice, advice_for
from .arithmetic import Card, Check, Reason, Requirement, Workload, fit_check, requirement_compute, to_gb
from .engine import PROFILE_VLLM, Budget, engine_check
from .matrix import Placement, workload_class

# The request type of a sizing: what is served, at which precision, context and concurrency.


SECONDS_PER_HOUR = 3600
MILLION = Decimal(10**6)


def sizing_new_counted(*, client_address: str) -> None:
    """Count a sizing worked out afresh for `client_address`: a check, a
    comparison, an order's workload, or a recommendation no web worker has an
    answer kept for. Past SIZING_NEW_PER_ADDRESS from one client address (IPv6:
    its /64) in SIZING_NEW_WINDOW_SECONDS, 429 `throttled` with Retry-After. 0:
    no limit."""
    rate_limit(
        scope="sizing-new",
        ident=address_bucket(client_address),
        limit=settings.SIZING_NEW_PER_ADDRESS,
        window_seconds=settings.SIZING_NEW_WINDOW_SECONDS,
        message="Too many new sizings from this address (one asked before is still answered).",
    )


@dataclass(frozen=True)
class SizingResult:
    """`gpu_count` x `gpu` against a workload: the arithmetic, the catalog's word on
    the count, the price, and the cost of a million tokens at the decode ceiling."""

    check: Check
    gpu: GpuModel
    term: str
    catalog_reasons: tuple[Reason, ...]
    quote: Quote | None  # the asked term's price; None when the catalog refuses the configuration
    monthly_quote: Quote | None
    cost_per_million_tokens_usd: Decimal | None

    @property
    def reasons(self) -> tuple[Reason, ...]:
        return self.catalog_reasons + self.check.reasons

    @property
    def fits(self) -> bool:
        return not self.reasons

    @property
    def gpu_count(self) -> int:
        return self.check.gpu_count


@dataclass(frozen=True)
class Recommendation:
    workload: Workload
    candidates: list[SizingResult]  # every (card, count) that fits, cheapest first
    advice: list[Advice]
    considered: int  # configurations checked
    region: str | None
    term: str
    stock: dict[str, StockRow] | None  # by card slug, when a region was asked for
    placement: Placement | None = None  # the guide's decision-matrix class of the workload


def card_from_gpu(gpu: GpuModel) -> Card:
    return Card(
        slug=gpu.slug,
        name=gpu.name,
        memory_gb=gpu.memory_gb,
        bandwidth_gbps=gpu.bandwidth_gbps,
        fp8=gpu.fp8,
        architecture=gpu.architecture,
        vendor=gpu.vendor,
    )


def cost_per_million_tokens(*, price_usd: Decimal, hours: int, tokens_per_s: int) -> Decimal | None:
    """What a million output tokens cost when the configuration yields
    `tokens_per_s` for every hour of the term it is paid for (busy all term)."""
    if tokens_per_s <= 0:
        return None
    return cents(price_usd * MILLION / (tokens_per_s * hours * SECONDS_PER_HOUR))


def _result(
    *,
    workload: Workload,
    gpu: GpuModel,
    gpu_count: int,
    term: str,
    multi_gpu_tiers=None,
    term_tiers: dict[str, list] | None = None,
    requirement: Requirement | None = None,
    price_unfit: bool = True,
    weights: dict | None = None,
    solve: bool = False,
) -> SizingResult:
    card = card_from_gpu(gpu)
    if workload.profile == PROFILE_VLLM:
        check = engine_check(
            workload=workload, card=card, gpu_count=gpu_count, weights=weights, solve=solve, brief=not price_unfit
        )
    else:
        check = fit_check(workload=workload, card=card, gpu_count=gpu_count, requirement=requirement)
    catalog_reasons: tuple[Reason, ...] = ()
    priced = monthly = None
    tiers = term_tiers or {}
    if not price_unfit and not check.fits:
        return SizingResult(
            check=check,
            gpu=gpu,
            term=term,
            catalog_reasons=(),
            quote=None,
            monthly_quote=None,
            cost_per_million_tokens_usd=None,
        )
    try:
        priced = quote(
            gpu=gpu, gpu_count=gpu_count, term=term, multi_gpu_tiers=multi_gpu_tiers, term_tiers=tiers.get(term)
        )
        monthly = (
            priced
            if term == TERM_MONTHLY
            else quote(
                gpu=gpu,
                gpu_count=gpu_count,
                term=TERM_MONTHLY,
                multi_gpu_tiers=multi_gpu_tiers,
                term_tiers=tiers.get(TERM_MONTHLY),
            )
        )
    except DomainError as refusal:
        catalog_reasons = (Reason(refusal.code, refusal.message, dict(refusal.details)),)
    cost = None
    if priced is not None:
        cost = cost_per_million_tokens(price_usd=priced.total_usd, hours=priced.hours, tokens_per_s=tokens_per_s(check))
    return SizingResult(
        check=check,
        gpu=gpu,
        term=term,
        catalog_reasons=catalog_reasons,
        quote=priced,
        monthly_quote=monthly,
        cost_per_million_tokens_usd=cost,
    )


def tokens_per_s(check: Check) -> int:
    """The rate a term's tokens are counted at: the steady-state output rate of
    the requested concurrency (vllm profile, sizing.performance), the
    single-stream ceiling (guide)."""
    if check.engine is not None:
        return check.engine.throughput.aggregate_tokens_per_s
    return check.decode_ceiling_tokens_per_s


def sizing_check(
    *,
    request: Workload,
    gpu: GpuModel,
    gpu_count: int,
    term: str = TERM_MONTHLY,
    solve: bool = False,
    multi_gpu_tiers=None,
    term_tiers: dict[str, list] | None = None,
) -> SizingResult:
    """Whether `gpu_count` x `gpu` holds the workload, with the reasons when not.
    A report, not a refusal: see `sizing_require_fit` for that. `solve` adds, in
    the vllm profile, the most sequences and the longest context that fit.
    The discount tiers may be passed in by a caller that has them (they are
    read from the database otherwise)."""
    return _result(
        workload=request,
        gpu=gpu,
        gpu_count=gpu_count,
        term=term,
        solve=solve,
        multi_gpu_tiers=multi_gpu_tiers,
        term_tiers=term_tiers,
    )


def sizing_require_fit(
    *,
    request: Workload,
    gpu: GpuModel,
    gpu_count: int,
    term: str = TERM_MONTHLY,
    multi_gpu_tiers=None,
    term_tiers: dict[str, list] | None = None,
) -> SizingResult:
    """`sizing_check`, raising DomainError (the first reason's code: `does_not_fit`,
    `fp8_unsupported`, `tp_indivisible`, `invalid_gpu_count`, `min_gpus`) with
    every reason and the per-GPU breakdown in its details when it does not fit."""
    result = sizing_check(
        request=request,
        gpu=gpu,
        gpu_count=gpu_count,
        term=term,
        multi_gpu_tiers=multi_gpu_tiers,
        term_tiers=term_tiers,
    )
    if not result.fits:
        first = result.reasons[0]
        raise DomainError(
            first.code,
            f"The workload does not run on {gpu_count} x {gpu.name}: {first.message}",
            status=400,
            details={
                "gpu": gpu.slug,
                "gpu_count": gpu_count,
                "reasons": [r.as_dict() for r in result.reasons],
                "per_gpu": breakdown_per_gpu(result.check),
                "total": breakdown_total(result.check),
            },
        )
    return result


def breakdown_per_gpu(check: Check) -> dict[str, float]:
    req = check.requirement
    return {
        "weights_gb": float(to_gb(req.weights_per_gpu)),
        "kv_cache_gb": float(to_gb(req.kv_cache_per_gpu)),
        "overhead_gb": float(to_gb(req.overhead_per_gpu)),
        "required_gb": float(to_gb(req.required_per_gpu)),
        "capacity_gb": float(to_gb(check.capacity_per_gpu)),
        "headroom_gb": float(to_gb(check.headroom_per_gpu)),
        "kv_heads": req.kv_heads_per_gpu,
    }


def breakdown_total(check: Check) -> dict[str, float]:
    req = check.requirement
    capacity = check.capacity_per_gpu * check.gpu_count
    return {
        "weights_gb": float(to_gb(req.weights_total)),
        "kv_cache_gb": float(to_gb(req.kv_cache_total)),
        "overhead_gb": float(to_gb(req.overhead_total)),
        "required_gb": float(to_gb(req.required_total)),
        "capacity_gb": float(to_gb(capacity)),
        "headroom_gb": float(to_gb(capacity - req.required_total)),
        "kv_cache_one_copy_gb": float(to_gb(req.kv_cache_logical)),
    }


def _sort_key(result: SizingResult):
    # Cheapest first; on a tie fewer cards (less to go wrong), then more room.
    return (result.quote.total_usd, result.gpu_count, -result.check.headroom_per_gpu, result.gpu.sort_order)


def _configurations(
    *, request: Workload, term: str, gpus: list[GpuModel], multi_gpu_tiers, term_tiers: dict[str, list]
) -> list[SizingResult]:
    """The sizing of every allowed count of every card given, fitting or not
    (an unfit one is not priced): the arithmetic of a recommendation, before
    any filter."""
    out: list[SizingResult] = []
    requirements: dict[int, Requirement] = {}  # by GPU count: the same for every card
    weights: dict = {}  # vllm profile: weight bytes by GPU count, the same for every card
    for gpu in gpus:
        for count in gpu.allowed_counts:
            if request.profile != PROFILE_VLLM and count not in requirements:
                requirements[count] = requirement_compute(workload=request, gpu_count=count)
            out.append(
                _result(
                    workload=request,
                    gpu=gpu,
                    gpu_count=count,
                    term=term,
                    multi_gpu_tiers=multi_gpu_tiers,
                    term_tiers=term_tiers,
                    requirement=requirements.get(count),
                    price_unfit=False,
                    weights=weights,
                )
            )
    return out


def sizing_recommend(
    *,
    request: Workload,
    region: str | None = None,
    vendor: str | None = None,
    max_gpus: int | None = None,
    gpu_count: int | None = None,
    term: str = TERM_MONTHLY,
    tokens_per_month: int | None = None,
    traffic: str | None = None,
    use: str | None = None,
    memo_key: str | None = None,
    catalog_now: CatalogSnapshot | None = None,
    stock_rows: list[StockRow] | None = None,
) -> Recommendation:
    """Every (card, count) that holds the workload, cheapest first by the term's
    price after discounts. `region` keeps what that region can supply now (an
    instance lives on one host, so a count needs a host with that many free);
    `gpu_count` asks for exactly that many cards, `max_gpus` for at most that many.

    `memo_key` names the workload (e.g. its request body without the filters):
    with it, the arithmetic of every configuration is kept per workload, term
    and catalog version in this process, and a repeated request only filters it
    by what is free now. `use` (chat, rag, batch, local, regulated) helps
    place the workload in the guide's decision matrix. `catalog_now`: the caller's catalog_current(), and
    `stock_rows`: the region's stock, when the caller has read them."""
    if term not in TERM_HOURS:
        raise DomainError("invalid_term", f"Terms are {', '.join(TERM_HOURS)}.", details={"term": term})
    catalog_now = catalog_now or catalog_current()
    all_gpus = [g for g in catalog_now.gpus.values() if g.is_active]
    gpus = [g for g in all_gpus if g.vendor == vendor] if vendor else all_gpus
    supply: dict[str, StockRow] | None = None
    if region is not None:
        region = catalog_now.region(region).code
        if stock_rows is None:
            stock_rows = stock(region=region, catalog_now=catalog_now)
        supply = {row.gpu: row for row in stock_rows}
    term_tiers = {t: list(catalog_now.term_tiers.get(t, ())) for t in TERM_HOURS}

    def arithmetic() -> list[SizingResult]:
        return _configurations(
            request=request,
            term=term,
            gpus=all_gpus,
            multi_gpu_tiers=catalog_now.multi_gpu_tiers,
            term_tiers=term_tiers,
        )

    configurations = (
        arithmetic()
        if memo_key is None
        # About 4 KB a configuration (the check, the engine's figures, the quote).
        else catalog_memo(catalog_now, ("recommend", memo_key, term), arithmetic, cost=lambda v: 4096 * len(v))
    )
    fitting: list[SizingResult] = []
    considered = 0
    for result in configurations:
        gpu, count = result.gpu, result.gpu_count
        if vendor and gpu.vendor != vendor:
            continue
        if gpu_count is not None and count != gpu_count:
            continue
        if max_gpus is not None and count > max_gpus:
            continue
        if supply is not None and (gpu.slug not in supply or supply[gpu.slug].max_per_host < count):
            continue
        considered += 1
        if result.fits:
            fitting.append(result)
    fitting.sort(key=_sort_key)
    advice = advice_for(
        workload=request,
        candidates=fitting,
        gpus=gpus,
        gpu_count=gpu_count,
        max_gpus=max_gpus,
        tokens_per_month=tokens_per_month,
        traffic=traffic,
    )
    if fitting and request.profile == PROFILE_VLLM:
        advice.append(cost_by_concurrency(result=fitting[0]))
    return Recommendation(
        workload=request,
        candidates=fitting,
        advice=advice,
        considered=considered,
        region=region,
        term=term,
        stock=supply,
        placement=workload_class(workload=request, use=use),
    )


def cost_by_concurrency(*, result: SizingResult) -> Advice:
    """How the cheapest configuration's cost per million tokens falls as more
    sequences share each step, up to the most that fit at the asked context."""
    from .engine import max_concurrency, throughput_compute

    check = result.check
    workload, card, count = check.workload, check.card, result.gpu_count
    most = max_concurrency(
        workload=workload, card=card, gpu_count=count, weights=check.engine.budget.weights, limit=4096
    )
    levels = sorted({c for c in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096) if c <= most} | {most})
    rows = []
    for level in levels:
        speed = throughput_compute(workload=replace(workload, concurrency=level), card=card, gpu_count=count)
        cost = cost_per_million_tokens(
            price_usd=result.quote.total_usd, hours=result.quote.hours, tokens_per_s=speed.aggregate_tokens_per_s
        )
        perf = speed.performance
        rows.append(
            {
                "concurrency": level,
                "aggregate_tokens_per_s": speed.aggregate_tokens_per_s,
                "ttft_p50_ms": round(perf.ttft_p50_s * 1000, 1),
                "tpot_p50_ms": round(perf.tpot_p50_s * 1000, 1),
                "cost_per_million_tokens_usd": None if cost is None else f"{cost:.2f}",
            }
        )
    first, last = rows[0], rows[-1]
    return Advice(
        "cost_by_concurrency",
        f"On {count} x {result.gpu.name} a million tokens cost ${first['cost_per_million_tokens_usd']} at one "
        f"sequence and ${last['cost_per_million_tokens_usd']} at {last['concurrency']} in flight "
        f"(the most {workload.context:,}-token sequences that fit): batching shares each read of the weights, "
        "while each request waits longer for its tokens.",
        {"gpu": result.gpu.slug, "gpu_count": count, "context": workload.context, "rows": rows},
    )


# --- Accuracy against published benchmarks ------------------------------------------------------

BENCHMARKS_FILE = Path(__file__).resolve().parent / "data" / "published_benchmarks.json"
# How far the prediction may sit from the published figure: vLLM runs below
# TensorRT-LLM; against vLLM's own figures, within a third (throughput) or 30 % (latency).
BANDS = {"trtllm": (Decimal("0.60"), Decimal("1.10")), "vllm": (Decimal("0.75"), Decimal("1.33"))}
LATENCY_BAND = (Decimal("0.70"), Decimal("1.30"))
# vLLM's default gpu_memory_utilization, what the predicted engine runs with.
BENCH_UTILIZATION = Decimal("0.90")
ACCURACY_START = "<!-- sizing-accuracy:start -->"
ACCURACY_END = "<!-- sizing-accuracy:end -->"


@dataclass(frozen=True)
class AccuracyRow:
    row: dict
    model_name: str
    predicted: float | None  # output tokens/s, or seconds for a latency row
    published: float
    ratio: Decimal | None
    band: tuple[Decimal, Decimal]
    separately: str  # why the row is listed apart from the bands ("" when it is held to its band here)
    in_flight: int = 0
    bound: str = ""
    peak_share: float = 0.0  # the FLOPs the prediction implies, as a share of the cards' dense peak

    @property
    def metric(self) -> str:
        return "latency" if "latency_s" in self.row else "throughput"

    @property
    def within(self) -> bool | None:
        """Whether the prediction is inside the band (None: no prediction)."""
        if self.ratio is None:
            return None
        return self.band[0] <= self.ratio <= self.band[1]

    @property
    def inside(self) -> bool | None:
        """Whether a row held to its band is inside it (None: listed apart)."""
        if self.separately:
            return None
        return self.within


def _catalog_cards() -> dict[str, Card]:
    from catalog.seed import DATA_FILE

    rows = json.loads(DATA_FILE.read_text())["gpus"]
    return {
        g["slug"]: Card(
            slug=g["slug"],
            name=g["name"],
            memory_gb=g["memory_gb"],
            bandwidth_gbps=g["bandwidth_gbps"],
            fp8=g["fp8"],
            architecture=g["architecture"],
            vendor=g["vendor"],
        )
        for g in rows
    }


# TensorRT-LLM's perf overview runs its MoE rows with attention data parallelism
# (`enable_attention_dp: true` in the llm_options it gives for MoE models, with
# --ep): tensorrt_llm/_torch/models/modeling_llama.py then keeps the attention, the
# dense MLPs and the shared expert (GatedMLP overridden_tp_size=1) and the embedding
# whole on every GPU, and splits only the routed experts; each GPU keeps every KV
# head of its own requests. Its KV cache takes up to this share of the card ("in
# many cases ... --kv_cache_free_gpu_mem_fraction 0.95"; 0.90 or lower on OOM).
TRTLLM_KV_FRACTION = Decimal("0.95")
_ATTENTION_DP = "attention-dp"  # placeholder until the rule's figures are known


def attention_dp_kv_tokens(*, workload: Workload, budget: Budget, gpu_count: int) -> int:
    """Tokens of KV cache the group holds under TensorRT-LLM's attention-DP layout
    (every layer at full rate, as `kv_tokens_capacity` counts vLLM's), with the
    same engine memory besides the weights as vLLM's budget."""
    from .engine import arch_layout, kv_tokens_capacity, layout_weight_bytes, workload_format

    layout = arch_layout(workload.arch)
    fmt = workload_format(workload)
    whole = layout_weight_bytes(layout=layout, fmt=fmt, gpu_count=1).total
    replicated = layout_weight_bytes(layout=layout, fmt=fmt, gpu_count=1, experts_read=0).total
    per_gpu = replicated + (whole - replicated) // gpu_count
    room = int(budget.memory_bytes * TRTLLM_KV_FRACTION) - per_gpu - budget.non_torch - budget.activation
    if room <= 0:
        return 0
    # Each GPU holds all KV heads of its requests: one GPU's capacity, n times.
    return gpu_count * kv_tokens_capacity(
        arch=workload.arch, kv_precision=workload.kv_precision, gpu_count=1, kv_bytes=room
    )


def _chunked_decode_reason(*, chunk: int, low: int, high: int, ratio: float) -> str:
    return (
        "TensorRT-LLM applies Llama 4's chunked attention to context requests only (the `[Chunked Attention]` note "
        "in `tensorrt_llm/_torch/modules/attention.py`): its generation steps are not held to the chunk, while vLLM's "
        "chunked layers attend within it (`make_local_attention_virtual_batches` in "
        "`vllm/v1/attention/backends/utils.py`, built by 0.9.2's FlashAttention backend and 0.34.0's chunked local "
        "attention). At this row's "
        f"decode positions ({low:,}-{high:,} tokens, past the {chunk:,}-token chunk) TensorRT-LLM reads {ratio:.1f}x "
        "the KV cache vLLM reads per sequence and step: more than the band's 1.10x, so its figure is no ceiling for "
        "vLLM's and the row is listed apart by this rule, computed from the config alone, whatever its prediction."
    )


def _attention_dp_reason(n: int, gpu: str, pairs: list[tuple[int, int]]) -> str:
    trt = sorted(p[0] for p in pairs)
    vllm = sorted(p[1] for p in pairs)

    def span(values: list[int]) -> str:
        return f"{values[0]:,}" if values[0] == values[-1] else f"{values[0]:,}-{values[-1]:,}"

    return (
        "TensorRT-LLM ran its MoE rows with attention data parallelism (the perf overview's MoE options: "
        "`enable_attention_dp: true`, `--ep`), in which `tensorrt_llm/_torch/models/modeling_llama.py` keeps the "
        "attention, the dense and shared-expert MLPs (`overridden_tp_size=1`) and the embedding whole on every GPU "
        f"and splits only the routed experts. On {n} x {gpu} that layout, even at its KV fraction of 0.95, holds "
        f"{span(trt)} of these requests at once against the {span(vllm)} the vLLM line (tensor parallel) holds: "
        "fewer by more than the band's 1.10x, so TensorRT-LLM's figure is no ceiling for vLLM's and the row is "
        "listed apart by this rule, computed from memory alone, whatever its prediction."
    )


def sizing_accuracy(*, path: Path = BENCHMARKS_FILE) -> list[AccuracyRow]:
    """Every published row against the speed model's prediction for the same
    model, cards, precision, lengths and load."""
    from .engine import (
        budget_compute,
        card_hardware,
        kv_tokens_capacity,
        model_cost,
    )
    from .hf_config import architecture_from_hf_config
    from .performance import Serving, finite_run_rate, footprint_tokens, kv_read_bytes, serve
    from .seed import published_config

    data = json.loads(path.read_text())
    cards = _catalog_cards()
    out: list[AccuracyRow] = []
    dp_held: dict[tuple[str, int, str], list[tuple[int, int]]] = defaultdict(list)
    for row in data["rows"]:
        model = data["models"][row["model"]]
        published = row.get("latency_s", row.get("output_tokens_per_s"))
        band = LATENCY_BAND if "latency_s" in row else BANDS[row["source"]]
        if model.get("separately"):
            out.append(AccuracyRow(row, model["name"], None, published, None, band, model["separately"]))
            continue
        apart = ""  # set by the rules below only
        config = model["config"]
        config = published_config(config) if isinstance(config, str) else config
        arch = architecture_from_hf_config(config, slug=row["model"], name=model["name"])
        prompt, output = row["input_tokens"], row["output_tokens"]
        load = row["concurrency"] or row["requests"]
        seqs = row.get("max_num_seqs") or data["defaults"]["trtllm"]["max_num_seqs"]
        # The vLLM release the row is predicted for: the template's unless the row or
        # its model names one (a checkpoint the template's release cannot run).
        version = row.get("engine_version") or model.get("engine_version") or Workload.engine_version
        workload = Workload(
            arch=arch,
            precision=row["precision"],
            kv_precision=row["kv_precision"],
            engine_version=version,
            context=prompt + output,
            concurrency=min(load, seqs),
            profile=PROFILE_VLLM,
            max_gpu_memory_utilization=BENCH_UTILIZATION,
            input_tokens=prompt,
            output_tokens=output,
        )
        card, count = cards[row["gpu"]], row["gpu_count"]
        budget = budget_compute(workload=workload, card=card, gpu_count=count, concurrency=min(load, seqs))
        kv_tokens = kv_tokens_capacity(
            arch=arch,
            kv_precision=row["kv_precision"],
            gpu_count=count,
            kv_bytes=budget.kv_available(BENCH_UTILIZATION),
        )
        cost = model_cost(workload=workload, gpu_count=count, card=card)
        hw = card_hardware(workload=workload, card=card, gpu_count=count)
        perf = serve(
            model=cost,
            hw=hw,
            serving=Serving(
                concurrency=load,
                input_tokens=prompt,
                output_tokens=output,
                max_num_seqs=seqs,
                batched_tokens=budget.batched_tokens,
                kv_tokens=kv_tokens,
            ),
        )
        if row["source"] == "trtllm" and arch.is_moe and count > 1 and not apart:
            footprint = footprint_tokens(
                Serving(
                    concurrency=load,
                    input_tokens=prompt,
                    output_tokens=output,
                    max_num_seqs=seqs,
                    batched_tokens=budget.batched_tokens,
                    kv_tokens=kv_tokens,
                )
            )
            held = attention_dp_kv_tokens(workload=workload, budget=budget, gpu_count=count) // footprint
            if held * BANDS["trtllm"][1] < perf.in_flight:
                dp_held[(row["model"], count, row["gpu"])].append((held, perf.in_flight))
                apart = _ATTENTION_DP
        if (
            row["source"] == "trtllm"
            and cost.chunked_layers
            and cost.chunk
            and prompt + output > cost.chunk
            and not apart
        ):
            # TensorRT-LLM's generation reads every chunked layer's whole context; vLLM its chunk.
            positions = (prompt, prompt + output)
            ours = kv_read_bytes(cost, prompt + output / 2, positions=positions)
            whole = replace(cost, full_layers=cost.full_layers + cost.chunked_layers, chunked_layers=0)
            theirs = kv_read_bytes(whole, prompt + output / 2)
            if theirs > ours * float(BANDS["trtllm"][1]):
                apart = _chunked_decode_reason(chunk=cost.chunk, low=prompt, high=prompt + output, ratio=theirs / ours)
        predicted = perf.e2e_p50_s if "latency_s" in row else perf.output_tokens_per_s
        # Every request sent at once: the published rate is the whole run's, rounds and
        # the short last round included, not the steady state's.
        rest = load % perf.in_flight if perf.in_flight else 0  # none held: no rounds to count
        if "latency_s" not in row and not row["concurrency"] and load > perf.in_flight and rest:
            last = serve(
                model=cost,
                hw=hw,
                serving=Serving(
                    concurrency=load,
                    input_tokens=prompt,
                    output_tokens=output,
                    max_num_seqs=rest,
                    batched_tokens=budget.batched_tokens,
                    kv_tokens=kv_tokens,
                ),
            )
            predicted = finite_run_rate(
                requests=load,
                output_tokens=output,
                in_flight=perf.in_flight,
                full_rate=perf.output_tokens_per_s,
                last_rate=last.output_tokens_per_s,
            )
        # The linear-layer FLOPs the predicted rate implies, against the group's dense peak.
        tokens_per_s = perf.requests_per_s * (prompt + output)
        peak_share = tokens_per_s * 2 * cost.params_per_token / hw.peak_flops
        ratio = (Decimal(str(predicted)) / Decimal(str(published))).quantize(Decimal("0.01"))
        out.append(
            AccuracyRow(
                row,
                model["name"],
                predicted,
                published,
                ratio,
                band,
                apart,
                in_flight=perf.in_flight,
                bound=perf.bound,
                peak_share=peak_share,
            )
        )
    # The attention-DP rule's reason, with its figures for each model and group of cards.
    return [
        replace(
            r,
            separately=_attention_dp_reason(
                r.row["gpu_count"], r.row["gpu"], dp_held[(r.row["model"], r.row["gpu_count"], r.row["gpu"])]
            ),
        )
        if r.separately == _ATTENTION_DP
        else r
        for r in out
    ]


def _figure(value: float | None, metric: str) -> str:
    if value is None:
        return "-"
    return f"{value:.2f} s" if metric == "latency" else f"{value:,.0f}"


def accuracy_table(rows: list[AccuracyRow]) -> str:
    """The markdown table docs/sizing.md carries between its accuracy markers."""
    checked = [r for r in rows if not r.separately]
    inside = sum(1 for r in checked if r.inside)
    apart = [r for r in rows if r.separately and r.ratio is not None]
    summary = f"{inside} of {len(checked)} rows held to their band are inside it"
    if apart:
        summary += (
            f"; {len(apart)} more are listed apart with their prediction "
            f"({sum(1 for r in apart if r.within)} of them inside the band)"
        )
    unread = len(rows) - len(checked) - len(apart)
    if unread:
        summary += f"; {unread} are checked separately, for the reason under the table"
    lines = [
        summary + ".",
        "",
        "| Source | Model | GPUs | Weights | ISL/OSL | Requests | Published | Predicted | Ratio | Band | Inside |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        row = r.row
        if "latency_s" in row:
            load = f"batch of {row['concurrency']}"
        else:
            load = f"{row['concurrency']} clients" if row["concurrency"] else f"{row['requests']:,} at once"
        band = f"{r.band[0]}-{r.band[1]}x"
        if r.separately:
            verdict = (
                "checked separately" if r.within is None else f"listed apart ({'inside' if r.within else 'outside'})"
            )
        else:
            verdict = "yes" if r.inside else "**no**"
        source = "TensorRT-LLM" if row["source"] == "trtllm" else "vLLM"
        lines.append(
            f"| [{source}]({row['url']}) | {r.model_name} | {row['gpu_count']} x {row['gpu']} | {row['precision']} | "
            f"{row['input_tokens']}/{row['output_tokens']} | {load} | {_figure(r.published, r.metric)} | "
            f"{_figure(r.predicted, r.metric)} | {'-' if r.ratio is None else r.ratio} | {band} | {verdict} |"
        )
    reasons: dict[str, list[str]] = {}
    for r in rows:
        if r.separately:
            label = f"{r.model_name} on {r.row['gpu_count']} x {r.row['gpu']}"
            if label not in reasons.setdefault(r.separately, []):
                reasons[r.separately].append(label)
    if reasons:
        lines.append("")
        lines += [f"- {', '.join(labels)}: {why}" for why, labels in reasons.items()]
    return "\n".join(lines) + "\n"


def accuracy_document(text: str, table: str) -> str:
    """`text` with the table between the accuracy markers replaced by `table`."""
    start, end = text.index(ACCURACY_START) + len(ACCURACY_START), text.index(ACCURACY_END)
    return text[:start] + "\n" + table + text[end:]
