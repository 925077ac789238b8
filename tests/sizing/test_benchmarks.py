"""The benchmark plan's bench lines run on the release they name (each flag
checked against that release's own table), the recorded result files are what
that release's --save-result writes, and the reading of a result file refuses
what is not one, naming the field."""

import copy
import json
import shlex
from decimal import Decimal

import pytest

from core.errors import DomainError
from sizing.arithmetic import Workload
from sizing.benchmarks import (
    PERCENTILES,
    REQUIRED,
    TRACE_BATCH,
    TRACE_CHAT,
    TRACE_RAG,
    bench_table,
    benchmark_plan,
    predict,
    prediction_for_result,
    result_parse,
    traces_for,
)
from sizing.engine import engine_check, engine_versions, throughput_compute

from .bench_lines import FIXTURES, check_bench_line, written_fields
from .conftest import arch, card

MODELS = ["llama-3.1-8b", "llama-3.1-70b", "qwen2.5-7b", "mixtral-8x7b", "gpt-oss-20b", "ref-7b"]
GPUS = ["h100-sxm", "l4", "mi300x", "rtx-4090", "a100-sxm"]


def workload(slug="llama-3.1-8b", release="0.9.2", **kw) -> Workload:
    values = {
        "arch": arch(slug),
        "precision": "fp8",
        "context": 8192,
        "concurrency": 8,
        "profile": "vllm",
        "max_gpu_memory_utilization": Decimal("0.95"),
        "engine_version": release,
        "input_tokens": 1000,
        "output_tokens": 200,
    }
    return Workload(**(values | kw))


def recorded(trace: str) -> dict:
    return json.loads((FIXTURES / "0.9.2" / f"{trace}.json").read_text())


def test_both_releases_have_a_bench_table_and_vllm_bench_serve():
    for release in engine_versions():
        table = bench_table(release)
        assert table["release"] == release and table["bench_serve"] is True
        args = table["arguments"]
        assert args["random-input-len"]["type"] == "int" and args["ignore-eos"]["type"] == "flag"
        assert "random" in args["dataset-name"]["choices"]
        # The fields read from a result are fields the release writes.
        written = set(table["result"]["main"]) | set(table["result"]["benchmark"])
        assert set(REQUIRED) <= written
        assert {"ttft", "tpot", "itl", "e2el"} <= set(table["result"]["metrics"])


def test_a_flag_the_bench_lacks_is_caught():
    good = benchmark_plan(workload=workload(), card=card("l4"), gpu_count=1).traces[0].command
    check_bench_line(good, "0.9.2")
    with pytest.raises(AssertionError):
        check_bench_line(good + " --no-such-flag 1", "0.9.2")
    with pytest.raises(AssertionError):
        check_bench_line(good.replace("--dataset-name random", "--dataset-name random-mm"), "0.9.2")
    with pytest.raises(AssertionError):  # a switch given a value swallows the next flag
        check_bench_line(good.replace("--ignore-eos", "--ignore-eos --num-prompts"), "0.9.2")
    # 0.34.0 knows random-mm; 0.9.2 does not: the tables are the releases' own.
    check_bench_line(good.replace("--dataset-name random", "--dataset-name random-mm"), "0.34.0")


@pytest.mark.parametrize("release", ["0.9.2", "0.34.0"])
@pytest.mark.parametrize("gpu", GPUS)
def test_every_bench_line_passes_the_release_argument_check(release, gpu):
    lines = 0
    for slug in MODELS:
        for precision in ("bf16", "fp8"):
            for context, concurrency in ((4096, 1), (8192, 8), (32768, 16)):
                w = workload(slug, release, precision=precision, context=context, concurrency=concurrency)
                w = Workload(**{**w.__dict__, "input_tokens": None, "output_tokens": None})
                if context > w.arch.max_context or not engine_check(workload=w, card=card(gpu), gpu_count=1).fits:
                    continue
                plan = benchmark_plan(workload=w, card=card(gpu), gpu_count=1)
                assert plan.release == release and plan.bench_available
                names = [t.trace.name for t in plan.traces]
                assert names == [TRACE_CHAT, TRACE_RAG, TRACE_BATCH]
                for item in plan.traces:
                    flags = check_bench_line(item.command, release)
                    assert flags["model"] == shlex.split(plan.serve_command)[2]  # the model the server serves
                    assert "save-result" in flags and flags["label"] == item.trace.name
                    assert flags["percentile-metrics"] == "ttft,tpot,itl,e2el"
                    assert flags["metric-percentiles"] == "50,95,99"
                    prompt, output = int(flags["random-input-len"]), int(flags["random-output-len"])
                    ratio = Decimal(flags["random-range-ratio"])
                    # The longest request the random dataset draws fits --max-model-len.
                    assert int(prompt * (1 + ratio)) + int(output * (1 + ratio)) <= context
                    if item.trace.name == TRACE_BATCH:
                        assert "max-concurrency" not in flags
                    else:
                        assert flags["max-concurrency"] == str(concurrency)
                    assert int(flags["num-prompts"]) >= 2 * concurrency
                    lines += 1
    assert lines >= 9


def test_the_chat_trace_predicts_what_the_sizing_answered():
    """The chat trace is the workload the order was sized for: the same figure
    as the sizing's steady state (sizing.engine.throughput_compute)."""
    w = workload()
    plan = benchmark_plan(workload=w, card=card("l4"), gpu_count=1)
    chat = plan.traces[0]
    speed = throughput_compute(workload=w, card=card("l4"), gpu_count=1)
    assert int(chat.predicted.figures["output_throughput"]) == speed.aggregate_tokens_per_s
    assert chat.predicted.figures["median_tpot_ms"] == round(speed.performance.tpot_p50_s * 1000, 1)
    # The batch holds no client-side limit: the server's --max-num-seqs caps it, and its latencies
    # are a queue's, so none is predicted.
    batch = plan.traces[2].predicted
    assert batch.in_flight == 8 and batch.limited_by == "max_num_seqs"
    assert batch.figures["median_ttft_ms"] is None and batch.figures["output_throughput"] > 0
    # RAG: long prompts cost more per request.
    rag = plan.traces[1].predicted
    assert rag.figures["request_throughput"] < chat.predicted.figures["request_throughput"]


def test_rag_fills_the_context_and_keeps_a_margin():
    w = workload(context=32768)
    rag = {t.name: t for t in traces_for(w)}[TRACE_RAG]
    assert rag.output_tokens == 200 and rag.range_ratio == 0
    assert 32768 * 0.98 < rag.input_tokens + rag.output_tokens < 32768


@pytest.mark.parametrize("trace", [TRACE_CHAT, TRACE_RAG, TRACE_BATCH])
def test_the_recorded_files_are_what_the_release_writes(trace):
    data = recorded(trace)
    assert set(data) == written_fields("0.9.2", [str(p) for p in PERCENTILES])
    parsed = result_parse(data)
    assert parsed.completed == data["completed"] and parsed.failed == data["num_prompts"] - data["completed"]
    assert parsed.accepted_output_tokens == data["total_output_tokens"]
    # The plan's line is the line that wrote the file.
    plan = benchmark_plan(workload=workload(), card=card("l4"), gpu_count=1)
    planned = {t.trace.name: t for t in plan.traces}[trace]
    assert data["label"] == trace and data["num_prompts"] == planned.num_prompts
    assert data["max_concurrency"] == planned.trace.max_concurrency


def test_failed_requests_add_no_accepted_tokens():
    data = recorded(TRACE_RAG)
    assert data["completed"] < data["num_prompts"]  # the recording failed some
    parsed = result_parse(data)
    # Every completed request generated its 200 tokens (--ignore-eos); the failed ones none.
    assert parsed.accepted_output_tokens == parsed.completed * 200
    assert parsed.failed == data["num_prompts"] - data["completed"] > 0


def test_the_prediction_for_a_file_is_for_what_it_ran():
    data = recorded(TRACE_CHAT)
    w = workload()
    predicted = prediction_for_result(
        workload=w, card=card("l4"), gpu_count=1, trace=TRACE_CHAT, result=result_parse(data)
    )
    prompt = round(data["total_input_tokens"] / data["completed"])
    output = round(data["total_output_tokens"] / data["completed"])
    direct = predict(
        workload=w,
        card=card("l4"),
        gpu_count=1,
        input_tokens=prompt,
        output_tokens=output,
        range_ratio=Decimal("0.50"),
        clients=8,
        num_prompts=data["num_prompts"],
    )
    assert predicted.figures == direct.figures
    # A file run at another concurrency is predicted at that one.
    other = dict(data, max_concurrency=2)
    slower = prediction_for_result(
        workload=w, card=card("l4"), gpu_count=1, trace=TRACE_CHAT, result=result_parse(other)
    )
    assert slower.figures["output_throughput"] < predicted.figures["output_throughput"]
    assert slower.in_flight == 2


def refused(data) -> dict:
    with pytest.raises(DomainError) as caught:
        result_parse(data)
    assert caught.value.code == "invalid_bench_result" and caught.value.status == 400
    return caught.value.details


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda d: d.pop("completed"), "result.completed"),
        (lambda d: d.pop("total_output_tokens"), "result.total_output_tokens"),
        (lambda d: d.update(completed=d["num_prompts"] + 1), "result.completed"),
        (lambda d: d.update(completed="304"), "result.completed"),
        (lambda d: d.update(duration=0), "result.duration"),
        (lambda d: d.update(duration=-5.0), "result.duration"),
        (lambda d: d.update(output_throughput=d["output_throughput"] * 2), "result.output_throughput"),
        (lambda d: d.update(p95_ttft_ms="fast"), "result.p95_ttft_ms"),
        (lambda d: d.update(max_concurrency=0), "result.max_concurrency"),
        (lambda d: d.update(request_rate="lots"), "result.request_rate"),
        (lambda d: d.update(failed=1), "result.failed"),
        (lambda d: d.update(model_id=["x"]), "result.model_id"),
        (lambda d: d.update(num_prompts=True), "result.num_prompts"),
    ],
)
def test_a_bad_file_is_refused_naming_the_field(change, field):
    data = copy.deepcopy(recorded(TRACE_CHAT))
    change(data)
    assert refused(data)["field"] == field


def test_not_an_object_is_refused():
    assert refused([1, 2])["field"] == "result"


def test_a_later_release_file_with_failed_is_read():
    """vLLM 0.34.0 writes `failed` too (vllm/benchmarks/serve.py benchmark's result dict)."""
    data = dict(recorded(TRACE_RAG), failed=recorded(TRACE_RAG)["num_prompts"] - recorded(TRACE_RAG)["completed"])
    assert result_parse(data).failed == data["failed"]
