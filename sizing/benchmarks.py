"""The benchmark plan of a workload on a configuration, and the files
`vllm bench serve --save-result` writes. Pure functions, no database.

The plan is the inference guide's three traffic traces (short chat,
long-context RAG, batch/offline) as `vllm bench serve` lines of the release the
workload is sized for, run against the launch line (`vllm serve ...`) the
sizing writes, each with the speed model's prediction (sizing.performance) for
the same lengths, load and server limits.

The bench's flags and the result's field names are the release's own:
sizing/data/vllm_bench_<release>.json, generated from the wheel by
devtools/vllm_bench.py (vllm/benchmarks/serve.py add_cli_args, benchmark,
main; the datasets module's add_dataset_parser). docs/sizing.md walks
through it.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field, replace
from decimal import ROUND_FLOOR, Decimal
from functools import lru_cache
from typing import Any

from core.errors import DomainError

from .arithmetic import Card, Workload
from .engine import (
    API_RANGE_RATIO,
    BLOCK_SIZE,
    DATA,
    budget_compute,
    card_hardware,
    engine_check,
    kv_tokens_capacity,
    launch_utilization,
    model_cost,
    template_version,
    workload_format_name,
    workload_lengths,
)

TRACE_CHAT = "chat"
TRACE_RAG = "rag"
TRACE_BATCH = "batch"
TRACES = (TRACE_CHAT, TRACE_RAG, TRACE_BATCH)
TRACE_TITLES = {
    TRACE_CHAT: "Short chat: the workload's request lengths, its concurrency in a closed loop",
    TRACE_RAG: "Long-context RAG: prompts that fill the context, short answers",
    TRACE_BATCH: "Batch / offline: every prompt sent at once, the server's own limit on sequences",
}
# The guide's metrics: p50, p95 and p99 of time to first token, time per output
# token, inter-token latency and end-to-end latency.
PERCENTILE_METRICS = ("ttft", "tpot", "itl", "e2el")
PERCENTILES = (50, 95, 99)
# A run long enough to reach the steady state the prediction is for: about this
# many seconds at the predicted rate, at least two rounds of the concurrency,
# at most MAX_PROMPTS (or two rounds, when that is more).
TARGET_SECONDS = 300
MIN_PROMPTS = 10
MAX_PROMPTS = 2000
# The RAG trace's answers, and the room it leaves under the context: the server
# tokenizes the bench's random prompt again, and a prompt plus max_tokens past
# --max-model-len is refused (a failed request).
RAG_OUTPUT_TOKENS = 256
RAG_MARGIN_SHARE = Decimal("0.01")
SERVER_HOST = "127.0.0.1"
SERVER_PORT = 8000  # vllm serve's default --port (vllm/entrypoints/openai/cli_args.py make_arg_parser)

# What the guide says to record beside the figures, and how to read each on the server
# (`vllm --version`: vllm/entrypoints/cli/main.py, the version of the installed package).
RECORD = (
    ("gpu_sku", "GPU SKU", "nvidia-smi --query-gpu=name --format=csv,noheader"),
    ("driver_version", "Driver", "nvidia-smi --query-gpu=driver_version --format=csv,noheader"),
    ("cuda_version", "CUDA", "nvidia-smi | grep -o 'CUDA Version: [0-9.]*'"),
    ("vllm_version", "vLLM", "vllm --version"),
)
RECORD_AMD = (
    ("gpu_sku", "GPU SKU", "rocm-smi --showproductname"),
    ("driver_version", "Driver", "rocm-smi --showdriverversion"),
    ("cuda_version", "ROCm", "cat /opt/rocm/.info/version"),
    ("vllm_version", "vLLM", "vllm --version"),
)


# --- The release's bench ------------------------------------------------------------------


@lru_cache(maxsize=4)
def bench_table(release: str) -> dict[str, Any] | None:
    """The release's `vllm bench serve` arguments and result fields, or None when not generated."""
    path = DATA / f"vllm_bench_{release}.json"
    if not path.exists():
        return None
    return json.loads(path.read_text())


def bench_release(engine_version: str) -> str:
    """The release whose bench the plan writes: the workload's, when its table exists; else the template's."""
    return engine_version if bench_table(engine_version) is not None else template_version()


# --- Traces -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Trace:
    name: str
    input_tokens: int
    output_tokens: int
    range_ratio: Decimal
    max_concurrency: int | None  # None: every prompt at once (the server holds --max-num-seqs)

    @property
    def title(self) -> str:
        return TRACE_TITLES[self.name]


def range_ratio_for(*, context: int, input_tokens: int, output_tokens: int) -> Decimal:
    """The spread of the random dataset's lengths: the API's (+-50 %), less where
    the longest request, both lengths x (1 + r), would pass the context
    (vllm/benchmarks/datasets.py RandomDataset.sample draws each length
    uniformly in [len x (1 - r), len x (1 + r)])."""
    room = Decimal(context) / Decimal(input_tokens + output_tokens) - 1
    ratio = min(Decimal(str(API_RANGE_RATIO)), max(Decimal(0), room))
    return ratio.quantize(Decimal("0.01"), rounding=ROUND_FLOOR)


def traces_for(workload: Workload) -> list[Trace]:
    """The three traces of the guide for a workload (its context, concurrency and mean lengths)."""
    prompt, output = workload_lengths(workload)
    context = workload.context
    same = range_ratio_for(context=context, input_tokens=prompt, output_tokens=output)
    rag_output = min(output, RAG_OUTPUT_TOKENS)
    margin = max(BLOCK_SIZE, int(context * RAG_MARGIN_SHARE))
    rag_input = max(1, context - rag_output - margin)
    return [
        Trace(TRACE_CHAT, prompt, output, same, workload.concurrency),
        Trace(TRACE_RAG, rag_input, rag_output, Decimal("0.00"), workload.concurrency),
        Trace(TRACE_BATCH, prompt, output, same, None),
    ]


# --- Predictions --------------------------------------------------------------------------


@dataclass(frozen=True)
class Prediction:
    """The speed model's figures for one run, named as the result file names them."""

    figures: dict[str, float | None]
    in_flight: int
    limited_by: str

    def get(self, name: str) -> float | None:
        return self.figures.get(name)


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 1)


def predict(
    *,
    workload: Workload,
    card: Card,
    gpu_count: int,
    input_tokens: int,
    output_tokens: int,
    range_ratio: Decimal,
    clients: int | None,
    num_prompts: int,
) -> Prediction:
    """What the launch line (the workload's --max-num-seqs, --max-model-len and
    scheduling step) serves for requests of these mean lengths: `clients`
    in a closed loop (--max-concurrency), or, when None, all `num_prompts`
    at once. Latencies are left out for the batch: there each request's
    wait is its place in the queue, not a steady state."""
    from .performance import Serving, serve

    budget = budget_compute(workload=workload, card=card, gpu_count=gpu_count)
    utilization = launch_utilization(budget.utilization_min(), workload.max_gpu_memory_utilization)
    kv_tokens = kv_tokens_capacity(
        arch=workload.arch,
        kv_precision=workload.kv_precision,
        gpu_count=gpu_count,
        kv_bytes=budget.kv_available(utilization),
    )
    serving = Serving(
        concurrency=clients or num_prompts,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        max_num_seqs=workload.concurrency,
        batched_tokens=budget.batched_tokens,
        kv_tokens=max(kv_tokens, input_tokens + output_tokens + BLOCK_SIZE),
        range_ratio=float(range_ratio),
    )
    perf = serve(
        model=model_cost(workload=workload, gpu_count=gpu_count, card=card),
        hw=card_hardware(workload=workload, card=card, gpu_count=gpu_count),
        serving=serving,
    )
    steady = clients is not None
    figures: dict[str, float | None] = {
        "output_throughput": round(perf.output_tokens_per_s, 1),
        "request_throughput": round(perf.requests_per_s, 3),
        "duration": round(num_prompts / perf.requests_per_s, 1),
        "median_tpot_ms": _ms(perf.tpot_p50_s),
        "median_ttft_ms": _ms(perf.ttft_p50_s) if steady else None,
        "p95_ttft_ms": _ms(perf.ttft_p95_s) if steady else None,
        "median_e2el_ms": _ms(perf.e2e_p50_s) if steady else None,
        "p95_e2el_ms": _ms(perf.e2e_p95_s) if steady else None,
        "p99_e2el_ms": _ms(perf.e2e_p99_s) if steady else None,
    }
    return Prediction(figures=figures, in_flight=perf.in_flight, limited_by=perf.limited_by)


def prompts_for(*, requests_per_s: float, concurrency: int) -> int:
    """--num-prompts: about TARGET_SECONDS at the predicted rate, at least two rounds of the concurrency."""
    by_time = min(MAX_PROMPTS, math.ceil(requests_per_s * TARGET_SECONDS))
    return max(MIN_PROMPTS, 2 * concurrency, by_time)


# --- The plan -----------------------------------------------------------------------------


@dataclass(frozen=True)
class PlannedTrace:
    trace: Trace
    num_prompts: int
    command: str
    result_file: str
    predicted: Prediction


@dataclass(frozen=True)
class Plan:
    release: str
    bench_available: bool
    serve_command: str
    model: str
    weight_format: str
    traces: list[PlannedTrace]
    record: tuple[tuple[str, str, str], ...]
    notes: list[str] = field(default_factory=list)


def bench_command(*, trace: Trace, model: str, num_prompts: int) -> str:
    """The `vllm bench serve` line of a trace (flags checked against the release's table in the tests)."""
    args: list[tuple[str, Any]] = [
        ("model", model),
        ("host", SERVER_HOST),
        ("port", SERVER_PORT),
        ("dataset-name", "random"),
        ("random-input-len", trace.input_tokens),
        ("random-output-len", trace.output_tokens),
        ("random-range-ratio", trace.range_ratio),
        ("num-prompts", num_prompts),
        ("request-rate", "inf"),
    ]
    if trace.max_concurrency is not None:
        args.append(("max-concurrency", trace.max_concurrency))
    args += [
        ("ignore-eos", None),  # the output lengths asked, not where a random prompt happens to stop
        ("seed", 0),
        ("percentile-metrics", ",".join(PERCENTILE_METRICS)),
        ("metric-percentiles", ",".join(str(p) for p in PERCENTILES)),
        ("label", trace.name),
        ("save-result", None),
        ("result-filename", f"{trace.name}.json"),
    ]
    parts = ["vllm", "bench", "serve"]
    for flag, value in args:
        parts.append(f"--{flag}")
        if value is not None:
            parts.append(str(value))
    return " ".join(parts)


def benchmark_plan(*, workload: Workload, card: Card, gpu_count: int) -> Plan:
    """The launch line, the three bench lines with their predictions, and what to record."""
    check = engine_check(workload=workload, card=card, gpu_count=gpu_count)
    if check.engine is None or check.engine.launch is None:
        first = check.reasons[0] if check.reasons else None
        raise DomainError(
            first.code if first else "does_not_fit",
            "The workload does not run on this configuration, so there is no server line to benchmark"
            + (f": {first.message}" if first else "."),
            status=409,
            details={"reasons": [r.as_dict() for r in check.reasons]},
        )
    launch = check.engine.launch
    release = bench_release(workload.engine_version)
    table = bench_table(release) or {}
    notes: list[str] = []
    available = bool(table.get("bench_serve"))
    if not available:
        notes.append(
            f"vLLM {release} has no `vllm bench serve`: install a release that has one on the client side "
            "and point it at this server."
        )
    if release != workload.engine_version:
        notes.append(f"No bench table for vLLM {workload.engine_version}: the lines are vLLM {release}'s.")
    planned: list[PlannedTrace] = []
    for trace in traces_for(workload):
        probe = predict(
            workload=workload,
            card=card,
            gpu_count=gpu_count,
            input_tokens=trace.input_tokens,
            output_tokens=trace.output_tokens,
            range_ratio=trace.range_ratio,
            clients=trace.max_concurrency or workload.concurrency,
            num_prompts=1,
        )
        count = prompts_for(requests_per_s=probe.figures["request_throughput"] or 0.0, concurrency=workload.concurrency)
        predicted = predict(
            workload=workload,
            card=card,
            gpu_count=gpu_count,
            input_tokens=trace.input_tokens,
            output_tokens=trace.output_tokens,
            range_ratio=trace.range_ratio,
            clients=trace.max_concurrency,
            num_prompts=count,
        )
        planned.append(
            PlannedTrace(
                trace=trace,
                num_prompts=count,
                command=bench_command(trace=trace, model=launch.model, num_prompts=count),
                result_file=f"{trace.name}.json",
                predicted=predicted,
            )
        )
    return Plan(
        release=release,
        bench_available=available,
        serve_command=launch.command,
        model=launch.model,
        weight_format=workload_format_name(workload),
        traces=planned,
        record=RECORD_AMD if card.vendor == "amd" else RECORD,
        notes=notes + list(launch.notes),
    )


# --- Result files ------------------------------------------------------------------------

# `--save-result` without --save-detailed is about 2 KB; --save-detailed adds
# every request's text and timings.
RESULT_MAX_BYTES = 64 * 1024
STATISTIC = re.compile(r"^(mean|median|std|p\d+(?:\.\d+)?)_(ttft|tpot|itl|e2el)_ms$")
TEXT_FIELDS = ("date", "label", "model_id", "tokenizer_id", "endpoint_type", "backend")
# Integer counts: vllm/benchmarks/serve.py calculate_metrics counts `completed`
# and sums the output lengths of the successful requests only (a failed one
# counts 0 tokens); later releases also write `failed`.
COUNT_FIELDS = ("num_prompts", "completed", "total_input_tokens", "total_output_tokens")
RATE_FIELDS = ("duration", "request_throughput", "output_throughput", "total_token_throughput")
REQUIRED = ("model_id", "num_prompts", "completed", "duration", "total_input_tokens", "total_output_tokens")
# output_throughput = total_output_tokens / duration exactly in the release
# (calculate_metrics, with benchmark_duration); what JSON's floats may round.
THROUGHPUT_TOLERANCE = Decimal("0.001")


@dataclass(frozen=True)
class BenchResult:
    """The fields of a result file this system reads (the rest of the file is not kept)."""

    fields: dict[str, Any]

    @property
    def num_prompts(self) -> int:
        return self.fields["num_prompts"]

    @property
    def completed(self) -> int:
        return self.fields["completed"]

    @property
    def failed(self) -> int:
        return self.fields.get("failed", self.num_prompts - self.completed)

    @property
    def accepted_output_tokens(self) -> int:
        return self.fields["total_output_tokens"]

    @property
    def duration(self) -> Decimal:
        return Decimal(str(self.fields["duration"]))

    @property
    def max_concurrency(self) -> int | None:
        return self.fields.get("max_concurrency")

    def mean_lengths(self) -> tuple[int, int] | None:
        """(input, output) tokens of the mean completed request."""
        if not self.completed:
            return None
        return (
            max(1, round(self.fields["total_input_tokens"] / self.completed)),
            max(1, round(self.fields["total_output_tokens"] / self.completed)),
        )


def _refuse(name: str, message: str) -> DomainError:
    return DomainError(
        "invalid_bench_result",
        f"result.{name}: {message}",
        status=400,
        details={"field": f"result.{name}", "fields": {f"result.{name}": [message]}},
    )


# The largest figure a result may hold: a billion (seconds, milliseconds, tokens or
# requests a second) is past any run, and what is kept of it fits its column
# (numeric(14, 3) seconds, numeric(14, 2) tokens a second) and a comparison's ratio.
MAX_FIGURE = 10**9
# Counts: requests in a PositiveIntegerField, tokens in a BigIntegerField (with room).
MAX_REQUESTS = 2**31 - 1
MAX_TOKENS = 10**15


def _number(data: dict[str, Any], name: str) -> float:
    value = data[name]
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise _refuse(name, "a number, 0 or more")
    if value > MAX_FIGURE:
        raise _refuse(name, f"at most {MAX_FIGURE:,}")
    return value


def result_parse(data: Any) -> BenchResult:
    """The fields this system reads from a `--save-result` file, each checked;
    a bad one is refused as `invalid_bench_result` naming it."""
    if not isinstance(data, dict):
        raise DomainError(
            "invalid_bench_result",
            "result: the JSON object `vllm bench serve --save-result` writes.",
            status=400,
            details={"field": "result", "fields": {"result": ["a JSON object"]}},
        )
    for name in REQUIRED:
        if name not in data:
            raise _refuse(name, "missing: is this a `vllm bench serve --save-result` file?")
    kept: dict[str, Any] = {}
    for name in TEXT_FIELDS:
        if name in data and data[name] is not None:
            if not isinstance(data[name], str) or len(data[name]) > 200:
                raise _refuse(name, "text, at most 200 characters")
            if "\x00" in data[name]:
                raise _refuse(name, "text without NUL characters")
            kept[name] = data[name]
    for name in (*COUNT_FIELDS, "failed"):
        if name in data:
            value = data[name]
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise _refuse(name, "a whole number, 0 or more")
            most = MAX_TOKENS if name.endswith("_tokens") else MAX_REQUESTS
            if value > most:
                raise _refuse(name, f"at most {most:,}")
            kept[name] = value
    if kept["num_prompts"] < 1:
        raise _refuse("num_prompts", "at least 1")
    if kept["completed"] > kept["num_prompts"]:
        raise _refuse("completed", f"more than num_prompts ({kept['num_prompts']})")
    if "failed" in kept and kept["completed"] + kept["failed"] != kept["num_prompts"]:
        raise _refuse("failed", "completed + failed is not num_prompts")
    for name in RATE_FIELDS:
        if name in data:
            kept[name] = _number(data, name)
    if kept["duration"] <= 0:
        raise _refuse("duration", "more than 0 seconds")
    if "output_throughput" not in kept:
        raise _refuse("output_throughput", "missing")
    expected = Decimal(kept["total_output_tokens"]) / Decimal(str(kept["duration"]))
    measured = Decimal(str(kept["output_throughput"]))
    if abs(measured - expected) > THROUGHPUT_TOLERANCE * max(expected, Decimal(1)):
        raise _refuse("output_throughput", f"is not total_output_tokens / duration ({expected:.2f})")
    rate = data.get("request_rate", "inf")
    if rate != "inf" and (
        isinstance(rate, bool) or not isinstance(rate, int | float) or not math.isfinite(rate) or rate <= 0
    ):
        raise _refuse("request_rate", '"inf" or a number of requests per second')
    kept["request_rate"] = rate
    concurrency = data.get("max_concurrency")
    if concurrency is not None and (
        isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1
    ):
        raise _refuse("max_concurrency", "null or a whole number, 1 or more")
    kept["max_concurrency"] = concurrency
    for name in data:
        if STATISTIC.match(name):
            kept[name] = _number(data, name)
    return BenchResult(fields=kept)


# --- Measured against predicted -------------------------------------------------------------

COMPARED = (
    "output_throughput",
    "request_throughput",
    "duration",
    "median_ttft_ms",
    "p95_ttft_ms",
    "median_tpot_ms",
    "median_e2el_ms",
    "p95_e2el_ms",
    "p99_e2el_ms",
)


def prediction_for_result(
    *, workload: Workload, card: Card, gpu_count: int, trace: str, result: BenchResult
) -> Prediction | None:
    """The prediction for what the file ran: its mean lengths, its concurrency
    (or all its prompts at once) and its number of prompts, with the trace's
    spread of lengths, on the rental's server line. None when no request completed."""
    lengths = result.mean_lengths()
    if lengths is None:
        return None
    prompt, output = lengths
    context = max(workload.context, prompt + output)
    planned = {t.name: t for t in traces_for(workload)}[trace]
    ratio = min(planned.range_ratio, range_ratio_for(context=context, input_tokens=prompt, output_tokens=output))
    return predict(
        workload=replace(workload, context=context),
        card=card,
        gpu_count=gpu_count,
        input_tokens=prompt,
        output_tokens=output,
        range_ratio=ratio,
        clients=result.max_concurrency,
        num_prompts=result.num_prompts,
    )


def comparison(*, measured: dict[str, Any], predicted: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Each figure both sides have: measured, predicted, and measured / predicted."""
    rows = []
    for name in COMPARED:
        value = measured.get(name)
        guess = (predicted or {}).get(name)
        if value is None:
            continue
        ratio = None
        if guess:
            ratio = float((Decimal(str(value)) / Decimal(str(guess))).quantize(Decimal("0.01")))
        rows.append({"metric": name, "measured": value, "predicted": guess, "ratio": ratio})
    return rows
