"""The buyer's table of our inference guide (seeds/003): two to five candidate
configurations for one workload, side by side, by cost per accepted output
token under a latency target, with the memory headroom, the stock, what
renting costs against a per-token API, and the guide's decision-matrix class.

The figures come from the step-time model (sizing/performance.py) through the
vllm profile's launch line (sizing/engine.py): for each candidate the highest
concurrency, up to the customer's load and what the memory holds, whose
predicted p95 meets the targets. Tokens per second are model estimates
(floats); money is Decimal, rounded to cents only where it is shown.

Pure functions over a Workload and catalog objects; nothing here writes.
`sizing_compare` is the service the endpoint calls.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from decimal import ROUND_CEILING, ROUND_HALF_UP, Decimal
from typing import Any

from catalog.models import TERM_HOURS, TERM_MONTHLY, GpuModel, SoftwareStack
from catalog.selectors import CatalogSnapshot, StockRow, catalog_current, stock
from core.errors import DomainError

from .arithmetic import Workload
from .engine import LAUNCH_UTILIZATION_FLOOR, budget_compute, max_concurrency, throughput_compute, workload_lengths
from .matrix import Placement, workload_class
from .performance import Performance
from .performance import data as performance_data
from .services import SizingResult, card_from_gpu, sizing_check

HOURS_PER_MONTH = TERM_HOURS[TERM_MONTHLY]  # 720: a month is 30 x 24 h
SECONDS_PER_HOUR = 3600
MILLION = Decimal(10**6)
MIN_CANDIDATES, MAX_CANDIDATES = 2, 5
# The most sequences a search tries (the serializers' MAX_CONCURRENCY).
CONCURRENCY_LIMIT = 100_000

# Memory condition of the launch line at the operating concurrency, in the guide's
# words ("holgura suficiente", "cerca del limite", "por encima del limite").
# decided: near the limit once the sequences' KV cache takes this share of what the
# launch line leaves for it, or the line must raise gpu_memory_utilization past
# vLLM's own default (0.90: vllm/engine/arg_utils.py, EngineArgs.gpu_memory_utilization;
# the launch line's floor): no room left for a longer request or a larger engine.
OOM_NEAR_SHARE = Decimal("0.80")
VLLM_DEFAULT_UTILIZATION = LAUNCH_UTILIZATION_FLOOR
OOM_LOW, OOM_NEAR, OOM_OVER = "low", "near_limit", "over_limit"

# What stopped the search for the operating concurrency.
LIMIT_LOAD, LIMIT_TARGETS, LIMIT_MEMORY = "load", "targets", "memory"

# --- Load, targets, prices ----------------------------------------------------------------------


@dataclass(frozen=True)
class Load:
    """The customer's traffic: `concurrency` clients in a closed loop, or a
    target of `requests_per_s` (exactly one of them)."""

    concurrency: int | None = None
    requests_per_s: float | None = None

    def __post_init__(self):
        if (self.concurrency is None) == (self.requests_per_s is None):
            raise ValueError("a load is a concurrency or a request rate")


@dataclass(frozen=True)
class Targets:
    """p95 latency targets, ms (None: no target)."""

    ttft_p95_ms: float | None = None
    e2e_p95_ms: float | None = None

    @property
    def any(self) -> bool:
        return self.ttft_p95_ms is not None or self.e2e_p95_ms is not None

    def met_by(self, perf: Performance) -> bool:
        if self.ttft_p95_ms is not None and perf.ttft_p95_s * 1000 > self.ttft_p95_ms:
            return False
        return not (self.e2e_p95_ms is not None and perf.e2e_p95_s * 1000 > self.e2e_p95_ms)

    def share_within(self, perf: Performance) -> float:
        """The share of requests inside both targets: the rest are not accepted."""
        return perf.share_within(
            ttft_s=None if self.ttft_p95_ms is None else self.ttft_p95_ms / 1000,
            e2e_s=None if self.e2e_p95_ms is None else self.e2e_p95_ms / 1000,
        )


@dataclass(frozen=True)
class ApiPrice:
    usd_per_million_input: Decimal
    usd_per_million_output: Decimal

    def per_million_output(self, *, input_tokens: int, output_tokens: int) -> Decimal:
        """What the API charges per million output tokens of this workload, its
        prompts included (input_tokens of prompt per output_tokens of answer)."""
        return self.usd_per_million_output + self.usd_per_million_input * Decimal(input_tokens) / Decimal(output_tokens)


# --- The operating point ------------------------------------------------------------------------


@dataclass(frozen=True)
class OperatingPoint:
    concurrency: int  # the clients the row's figures are for
    performance: Performance
    meets_targets: bool  # its p95s meet the targets (no targets: True)
    accepted_share: float  # of its requests, those inside the targets
    accepted_tokens_per_s: float  # output tokens/s of accepted requests (0 when it misses the targets)
    limited_by: str  # load, targets or memory: what kept it from going higher
    load_concurrency: int  # the concurrency that carries the customer's load (capped by memory)
    most_that_fit: int  # sequences of the workload's context the memory holds
    meets_load: bool  # carries all of the customer's load within the targets


def _highest(low: int, high: int, ok) -> int:
    """The highest n in [low, high] with ok(n), given ok(low) and that ok holds
    up to some n and not after (latency grows with concurrency)."""
    while low < high:
        mid = (low + high + 1) // 2
        if ok(mid):
            low = mid
        else:
            high = mid - 1
    return low


def operating_point(
    *,
    workload: Workload,
    gpu: GpuModel,
    gpu_count: int,
    load: Load,
    targets: Targets,
    weights_per_gpu: int,
) -> OperatingPoint:
    """Where a configuration serves the load: the highest concurrency, up to
    the customer's load (its concurrency, or the fewest clients whose requests
    reach its rate) and up to what the memory holds at the workload's context,
    whose predicted TTFT and E2E p95 meet the targets. The launch line at each
    concurrency is the vllm profile's (--max-num-seqs set to it)."""
    card = card_from_gpu(gpu)
    cache: dict[int, Performance] = {}

    def at(c: int) -> Performance:
        if c not in cache:
            w = replace(workload, concurrency=c)
            budget = budget_compute(workload=w, card=card, gpu_count=gpu_count, weights_per_gpu=weights_per_gpu)
            cache[c] = throughput_compute(
                workload=w, card=card, gpu_count=gpu_count, budget=budget, single=False, grids=True
            ).performance
        return cache[c]

    limit = load.concurrency if load.concurrency is not None else CONCURRENCY_LIMIT
    most = max_concurrency(workload=workload, card=card, gpu_count=gpu_count, weights=weights_per_gpu, limit=limit)
    if most < 1:
        raise ValueError("not one sequence fits: check the configuration first")
    if load.concurrency is not None:
        reached = load.concurrency <= most
        top = min(load.concurrency, most)
    else:
        rate = load.requests_per_s
        reached = at(most).requests_per_s >= rate
        # The fewest clients whose requests reach the rate (the rate grows with them).
        top = most if not reached else most - _highest(0, most - 1, lambda n: at(most - n).requests_per_s >= rate)
    if not targets.any or targets.met_by(at(top)):
        chosen, meets = top, True
    elif not targets.met_by(at(1)):
        chosen, meets = 1, False
    else:
        chosen, meets = _highest(1, top, lambda n: targets.met_by(at(n))), True
    perf = at(chosen)
    share = targets.share_within(perf) if meets else 0.0
    rps = perf.requests_per_s
    if load.requests_per_s is not None:
        rps = min(rps, load.requests_per_s)  # the customer sends no more than the rate
    _, output_tokens = workload_lengths(workload)
    limited = LIMIT_TARGETS if not meets or chosen < top else LIMIT_LOAD if reached else LIMIT_MEMORY
    return OperatingPoint(
        concurrency=chosen,
        performance=perf,
        meets_targets=meets,
        accepted_share=share,
        accepted_tokens_per_s=rps * output_tokens * share,
        limited_by=limited,
        load_concurrency=top,
        most_that_fit=most,
        meets_load=meets and chosen == top and reached,
    )


# --- Rows ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Memory:
    headroom_bytes: int  # per GPU: what vLLM may use at the launch line's setting, less what it needs
    kv_needed_bytes: int  # per GPU: the operating concurrency's sequences at the full context
    kv_available_bytes: int  # per GPU: what the launch line leaves the KV cache
    utilization: Decimal  # the launch line's --gpu-memory-utilization
    kv_share: Decimal
    oom_risk: str


def memory_condition(result: SizingResult) -> Memory:
    """How close the KV cache of the operating concurrency comes to what the
    launch line leaves it (the guide's memory conditions)."""
    detail = result.check.engine
    needed, available = detail.budget.kv_needed, detail.kv_available
    launched = detail.launch.args.get("gpu-memory-utilization") if detail.launch is not None else None
    utilization = Decimal(str(launched)) if launched is not None else detail.utilization_max
    share = Decimal(needed) / Decimal(available) if available > 0 else Decimal(1)
    if not result.fits:
        risk = OOM_OVER
    elif share >= OOM_NEAR_SHARE or utilization > VLLM_DEFAULT_UTILIZATION:
        risk = OOM_NEAR
    else:
        risk = OOM_LOW
    return Memory(
        headroom_bytes=result.check.headroom_per_gpu,
        kv_needed_bytes=needed,
        kv_available_bytes=available,
        utilization=utilization,
        kv_share=share,
        oom_risk=risk,
    )


@dataclass(frozen=True)
class Supply:
    region: str | None
    available: int  # free cards of this kind (in the region, or in all together)
    max_per_host: int  # the largest instance one host can give now
    regions: tuple[str, ...]  # regions that can deliver this count now


def supply_of(*, gpu: GpuModel, gpu_count: int, region: str | None, rows: list[StockRow]) -> Supply:
    mine = [r for r in rows if r.gpu == gpu.slug and (region is None or r.region == region)]
    return Supply(
        region=region,
        available=sum(r.available for r in mine),
        max_per_host=max((r.max_per_host for r in mine), default=0),
        regions=tuple(r.region for r in mine if r.max_per_host >= gpu_count),
    )


def _interconnect_note(gpu: GpuModel, gpu_count: int) -> tuple[str, str]:
    """(kind, note): the board and the link between the cards of one instance."""
    facts = performance_data()
    card = facts["cards"].get(gpu.slug)
    if card is None:
        return "pcie", f"{gpu.name}: no interconnect facts on file; sized as a PCIe card."
    kind, link = card["interconnect"], card["link_gbps"]
    between = "" if gpu_count == 1 else f" Tensor parallelism over {gpu_count} cards runs over it."
    notes = {
        "nvswitch": f"SXM board: NVLink through NVSwitch, {link} GB/s per GPU each way.",
        "infinity_fabric": f"OAM board: Infinity Fabric, {link} GB/s to each of the other cards of the node.",
        "pcie": f"PCIe card with peer-to-peer, {link} GB/s per GPU each way (no NVLink).",
        "pcie_no_p2p": f"PCIe consumer card without peer-to-peer: all-reduces go through host memory "
        f"({link} GB/s per GPU each way, about twice the latency of PCIe data-center cards).",
    }
    return kind, notes.get(kind, f"Interconnect: {kind}.") + between


def _template_note(gpu: GpuModel, templates: list[str]) -> str | None:
    if gpu.software_stack == SoftwareStack.ROCM:
        return (
            f"ROCm card: templates {', '.join(templates)}; the vLLM template is CUDA-only, so install vLLM's "
            "ROCm build (the launch line is the same)."
        )
    return None


@dataclass(frozen=True)
class RentOrApi:
    api_usd_per_million_output: Decimal  # the API's price per million output tokens, prompts included
    rent_usd_per_month: Decimal  # the term's hourly price x 720
    break_even_output_tokens_per_month: int | None  # renting is cheaper above it (None: the API is free)
    break_even_utilization: Decimal | None  # share of the hours busy above which renting is cheaper
    renting_can_win: bool  # break-even within what one instance accepts (utilization at most 1)
    cheaper_at_utilization: str | None  # rent, api or same: at the customer's stated utilization
    volume_output_tokens_per_month: int | None
    instances_at_volume: int | None
    rent_usd_at_volume: Decimal | None
    api_usd_at_volume: Decimal | None
    cheaper_at_volume: str | None


def _cheaper(rent: Decimal, api: Decimal) -> str:
    rent, api = rent.quantize(Decimal("0.01"), ROUND_HALF_UP), api.quantize(Decimal("0.01"), ROUND_HALF_UP)
    return "rent" if rent < api else "api" if api < rent else "same"


def rent_or_api(
    *,
    hourly_usd: Decimal,
    accepted_tokens_per_hour: int,
    utilization: Decimal,
    api_per_million_output: Decimal,
    volume: int | None,
) -> RentOrApi:
    """Renting a configuration (paid for every hour) against an API paid per
    token: the monthly volume and the busy share above which renting is
    cheaper, and which is cheaper at the customer's volume (as many instances
    as that volume needs, each at most as busy as its accepted throughput)."""
    monthly = hourly_usd * HOURS_PER_MONTH
    per_month_full = accepted_tokens_per_hour * HOURS_PER_MONTH  # one instance busy every hour
    break_even = share = None
    can_win = False
    cheaper_now = None
    if api_per_million_output > 0:
        break_even = int((monthly * MILLION / api_per_million_output).to_integral_value(ROUND_CEILING))
        if per_month_full > 0:
            share = monthly * MILLION / api_per_million_output / per_month_full
            can_win = share <= 1
            rent_per_million = hourly_usd / utilization * MILLION / accepted_tokens_per_hour
            cheaper_now = _cheaper(rent_per_million, api_per_million_output)
    elif per_month_full > 0:
        cheaper_now = "api"
    instances = rent_at = api_at = cheaper_at = None
    if volume is not None and per_month_full > 0:
        instances = max(1, math.ceil(volume / per_month_full))
        rent_at = monthly * instances
        api_at = api_per_million_output * volume / MILLION
        cheaper_at = _cheaper(rent_at, api_at)
    return RentOrApi(
        api_usd_per_million_output=api_per_million_output,
        rent_usd_per_month=monthly,
        break_even_output_tokens_per_month=break_even,
        break_even_utilization=share,
        renting_can_win=can_win,
        cheaper_at_utilization=cheaper_now,
        volume_output_tokens_per_month=volume,
        instances_at_volume=instances,
        rent_usd_at_volume=rent_at,
        api_usd_at_volume=api_at,
        cheaper_at_volume=cheaper_at,
    )


@dataclass(frozen=True)
class Row:
    index: int  # the candidate's place in the request
    gpu: GpuModel
    gpu_count: int
    count_chosen: bool  # the count was chosen here (the candidate named a card alone)
    result: SizingResult  # at the operating concurrency (at one sequence when it does not run)
    point: OperatingPoint | None  # None: the configuration does not run the workload
    hourly_usd: Decimal | None  # the term's price over its hours, the instance after discounts
    effective_hourly_usd: Decimal | None  # hourly / utilization: what a busy hour costs
    accepted_tokens_per_hour: int
    cost_per_million_accepted_usd: Decimal | None
    memory: Memory | None
    supply: Supply
    interconnect: str
    templates: tuple[str, ...]
    in_guide_shortlist: bool
    notes: tuple[str, ...]
    rent_or_api: RentOrApi | None

    @property
    def fits(self) -> bool:
        return self.point is not None

    @property
    def label(self) -> str:
        return f"{self.gpu_count} x {self.gpu.name}"


@dataclass(frozen=True)
class Winner:
    row: Row
    reason: str
    versus: tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class Comparison:
    workload: Workload
    load: Load
    targets: Targets
    utilization: Decimal
    term: str
    region: str | None
    placement: Placement
    rows: list[Row]
    winner: Winner | None
    no_winner_reason: str | None
    api_price: ApiPrice | None
    api_per_million_output: Decimal | None
    volume: int | None
    volume_source: str | None  # stated, request_rate or None


def _ratio(a: Decimal, b: Decimal, places: str = "0.01") -> Decimal:
    return (a / b).quantize(Decimal(places), ROUND_HALF_UP)


def _times(price: Decimal, throughput: Decimal) -> tuple[str, str]:
    """The two ratios as the guide writes them ("1.4x"), to two decimals where
    one would make them look the same."""
    one = (price.quantize(Decimal("0.1"), ROUND_HALF_UP), throughput.quantize(Decimal("0.1"), ROUND_HALF_UP))
    if one[0] == one[1] and price != throughput:
        return f"{price}x", f"{throughput}x"
    return f"{one[0]}x", f"{one[1]}x"


def winner_pick(rows: list[Row]) -> tuple[Winner | None, str | None]:
    """The row with the lowest cost per million accepted output tokens (ties:
    more accepted throughput, then the lower price, then the earlier row), with
    the reason in the guide's terms against the runner-up."""
    ranked = sorted(
        (r for r in rows if r.cost_per_million_accepted_usd is not None),
        key=lambda r: (r.cost_per_million_accepted_usd, -r.accepted_tokens_per_hour, r.hourly_usd, r.index),
    )
    if not ranked:
        if not any(r.fits for r in rows):
            return None, "No candidate runs the workload: see each row's reasons."
        return None, "No candidate meets the latency targets, even with one request at a time."
    best = ranked[0]
    versus = []
    for other in ranked[1:]:
        versus.append(
            {
                "index": other.index,
                "gpu": other.gpu.slug,
                "gpu_count": other.gpu_count,
                "price_ratio": _ratio(best.hourly_usd, other.hourly_usd),
                "accepted_throughput_ratio": _ratio(
                    Decimal(best.accepted_tokens_per_hour), Decimal(other.accepted_tokens_per_hour)
                ),
                "cost_per_million_ratio": (
                    best.cost_per_million_accepted_usd / other.cost_per_million_accepted_usd
                ).quantize(Decimal("0.01"), ROUND_HALF_UP),
            }
        )
    cost = f"${best.cost_per_million_accepted_usd.quantize(Decimal('0.01'), ROUND_HALF_UP)}"
    if not versus:
        others = "meets the targets" if any(r.fits for r in rows if r is not best) else "runs the workload"
        reason = f"{best.label} is the only candidate that {others}: {cost} per million accepted output tokens."
    else:
        runner, first = ranked[1], versus[0]
        price, throughput = _times(first["price_ratio"], first["accepted_throughput_ratio"])
        reason = (
            f"{best.label}: {price} the price of {runner.label} for "
            f"{throughput} the accepted throughput, {cost} against "
            f"${runner.cost_per_million_accepted_usd.quantize(Decimal('0.01'), ROUND_HALF_UP)} "
            "per million accepted output tokens."
        )
    return Winner(row=best, reason=reason, versus=tuple(versus)), None


# --- The comparison ---------------------------------------------------------------------------------


def _row(
    *,
    index: int,
    workload: Workload,
    gpu: GpuModel,
    gpu_count: int,
    count_chosen: bool,
    load: Load,
    targets: Targets,
    utilization: Decimal,
    term: str,
    catalog_now: CatalogSnapshot,
    region: str | None,
    stock_rows: list[StockRow],
    shortlist: tuple[str, ...],
    api_per_million_output: Decimal | None,
    volume: int | None,
) -> Row:
    tiers = {t: list(catalog_now.term_tiers.get(t, ())) for t in TERM_HOURS}

    def sized(concurrency: int) -> SizingResult:
        return sizing_check(
            request=replace(workload, concurrency=concurrency),
            gpu=gpu,
            gpu_count=gpu_count,
            term=term,
            multi_gpu_tiers=catalog_now.multi_gpu_tiers,
            term_tiers=tiers,
        )

    result = sized(1)
    point = None
    if result.fits:
        point = operating_point(
            workload=workload,
            gpu=gpu,
            gpu_count=gpu_count,
            load=load,
            targets=targets,
            weights_per_gpu=result.check.engine.weights_per_gpu.total,
        )
        if point.concurrency != 1:
            result = sized(point.concurrency)
    hourly = effective = cost = None
    accepted = 0
    if result.quote is not None:
        hourly = result.quote.total_usd / result.quote.hours
        effective = hourly / utilization
    if point is not None:
        accepted = int(point.accepted_tokens_per_s * SECONDS_PER_HOUR)
        if accepted > 0 and effective is not None:
            cost = effective * MILLION / accepted
    kind, link_note = _interconnect_note(gpu, gpu_count)
    templates = tuple(t.slug for t in catalog_now.templates.values() if t.runs_on(gpu))
    notes = [link_note]
    template_note = _template_note(gpu, list(templates))
    if template_note:
        notes.append(template_note)
    if point is not None and not point.meets_load:
        if point.limited_by == LIMIT_MEMORY:
            notes.append(
                f"Holds {point.most_that_fit} sequences of {workload.context:,} tokens: less than the load asked."
            )
        elif not point.meets_targets:
            notes.append("Misses the latency targets even with one request at a time: nothing is accepted.")
        else:
            notes.append(
                f"Meets the latency targets up to {point.concurrency} concurrent requests: the rest of the load "
                "would wait past them."
            )
    if result.check.engine is not None:
        notes += list(result.check.engine.notes)
    comparison = None
    if api_per_million_output is not None and hourly is not None and point is not None:
        comparison = rent_or_api(
            hourly_usd=hourly,
            accepted_tokens_per_hour=accepted,
            utilization=utilization,
            api_per_million_output=api_per_million_output,
            volume=volume,
        )
    return Row(
        index=index,
        gpu=gpu,
        gpu_count=gpu_count,
        count_chosen=count_chosen,
        result=result,
        point=point,
        hourly_usd=hourly,
        effective_hourly_usd=effective,
        accepted_tokens_per_hour=accepted,
        cost_per_million_accepted_usd=cost,
        memory=memory_condition(result) if point is not None else None,
        supply=supply_of(gpu=gpu, gpu_count=gpu_count, region=region, rows=stock_rows),
        interconnect=kind,
        templates=templates,
        in_guide_shortlist=gpu.slug in shortlist,
        notes=tuple(notes),
        rent_or_api=comparison,
    )


def _card_alone(rows: list[Row]) -> Row:
    """A card named without a count: its cheapest count that carries the whole
    load within the targets; else the count that accepts the most (the
    cheaper on a tie); else, when none runs it, the largest count with its reasons."""
    carrying = [r for r in rows if r.point is not None and r.point.meets_load and r.hourly_usd is not None]
    if carrying:
        return min(carrying, key=lambda r: (r.hourly_usd, r.gpu_count))
    accepting = [r for r in rows if r.accepted_tokens_per_hour > 0 and r.hourly_usd is not None]
    if accepting:
        return min(accepting, key=lambda r: (-r.accepted_tokens_per_hour, r.hourly_usd, r.gpu_count))
    running = [r for r in rows if r.fits and r.hourly_usd is not None]
    if running:
        return min(running, key=lambda r: (r.hourly_usd, r.gpu_count))
    return rows[-1]


def sizing_compare(
    *,
    request: Workload,
    candidates: list[tuple[str, int | None]],
    load: Load,
    targets: Targets | None = None,
    utilization: Decimal = Decimal(1),
    term: str = TERM_MONTHLY,
    region: str | None = None,
    api_price: ApiPrice | None = None,
    output_tokens_per_month: int | None = None,
    use: str | None = None,
    catalog_now: CatalogSnapshot | None = None,
    stock_rows: list[StockRow] | None = None,
) -> Comparison:
    """The guide's benchmark table for 2-5 candidates (a card and a count, or
    a card alone for its cheapest count that carries the load): one row each,
    in the order asked, and the winner. A candidate that does not run the
    workload is a row that says why, not a refusal of the call."""
    targets = targets or Targets()
    if not MIN_CANDIDATES <= len(candidates) <= MAX_CANDIDATES:
        raise DomainError(
            "invalid",
            f"Compare {MIN_CANDIDATES} to {MAX_CANDIDATES} candidates; {len(candidates)} given.",
            details={"fields": {"candidates": [f"{MIN_CANDIDATES} to {MAX_CANDIDATES} candidates"]}},
        )
    if term not in TERM_HOURS:
        raise DomainError("invalid_term", f"Terms are {', '.join(TERM_HOURS)}.", details={"term": term})
    if not Decimal(0) < utilization <= Decimal(1):
        raise DomainError(
            "invalid",
            "`utilization` is the busy share of the hours: above 0, at most 1.",
            details={"fields": {"utilization": ["above 0, at most 1"]}},
        )
    catalog_now = catalog_now or catalog_current()
    gpus = [catalog_now.gpu(slug) for slug, _ in candidates]  # unknown_gpu before any arithmetic
    if region is not None:
        region = catalog_now.region(region).code
    if stock_rows is None:
        stock_rows = stock(region=region, catalog_now=catalog_now)
    input_tokens, output_tokens = workload_lengths(request)
    api_per_million = (
        api_price.per_million_output(input_tokens=input_tokens, output_tokens=output_tokens)
        if api_price is not None
        else None
    )
    volume, volume_source = output_tokens_per_month, "stated" if output_tokens_per_month is not None else None
    if volume is None and load.requests_per_s is not None:
        volume = int(
            Decimal(str(load.requests_per_s)) * output_tokens * SECONDS_PER_HOUR * HOURS_PER_MONTH * utilization
        )
        volume_source = "request_rate"
    placement = workload_class(workload=request, use=use, latency_target=targets.any)
    rows: list[Row] = []
    for index, ((_, count), gpu) in enumerate(zip(candidates, gpus, strict=True)):
        counts = [count] if count is not None else (gpu.allowed_counts or [gpu.min_gpus])
        options = [
            _row(
                index=index,
                workload=request,
                gpu=gpu,
                gpu_count=n,
                count_chosen=count is None,
                load=load,
                targets=targets,
                utilization=utilization,
                term=term,
                catalog_now=catalog_now,
                region=region,
                stock_rows=stock_rows,
                shortlist=placement.workload_class.start_with,
                api_per_million_output=api_per_million,
                volume=volume,
            )
            for n in counts
        ]
        rows.append(options[0] if count is not None else _card_alone(options))
    winner, no_winner = winner_pick(rows)
    return Comparison(
        workload=request,
        load=load,
        targets=targets,
        utilization=utilization,
        term=term,
        region=region,
        placement=placement,
        rows=rows,
        winner=winner,
        no_winner_reason=no_winner,
        api_price=api_price,
        api_per_million_output=api_per_million,
        volume=volume,
        volume_source=volume_source,
    )
