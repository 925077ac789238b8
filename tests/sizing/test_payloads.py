"""Every answer builder makes exactly the shape its output serializer declares.

sizing/payloads.py describes each sizing answer once, as an output serializer
(the schema's source), with the builder of that shape beside it. Here every
builder in BUILDERS runs on real results, each call's dict walked field by field
against its serializer, both ways (payload_errors): a field added to the
serializer or to the builder alone fails, so does a null or a JSON type the
serializer does not admit. And every output serializer must be one a builder
makes, or a part of one.
"""

from __future__ import annotations

import functools
from collections import Counter
from decimal import Decimal

import pytest
from rest_framework import serializers as drf

from catalog.selectors import gpu_get
from sizing import compare, payloads, services
from sizing.payloads import BUILDERS, CandidateOutput, CheckOutput, payload_errors
from sizing.serializers import CheckInput, CompareInput, RecommendInput

pytestmark = pytest.mark.django_db

LLAMA = {"model": "llama-3.1-70b", "precision": "fp8", "context": 8192}
EIGHT = {**LLAMA, "concurrency": 8}


@pytest.fixture(autouse=True)
def _seeded(catalog, seeded_architectures):
    pass


def _validated(serializer_class, body):
    data = serializer_class(data=body)
    data.is_valid(raise_exception=True)
    return data.validated_data


def _check(body):
    v = _validated(CheckInput, body)
    result = services.sizing_check(
        request=v["workload"], gpu=gpu_get(slug=v["gpu"]), gpu_count=v["gpu_count"], term=v["term"], solve=True
    )
    return payloads.check_payload(result)


def _recommend(body):
    v = _validated(RecommendInput, body)
    rec = services.sizing_recommend(
        request=v["workload"],
        region=v.get("region"),
        term=v["term"],
        tokens_per_month=v.get("tokens_per_month"),
        use=v.get("use"),
    )
    return payloads.recommend_payload(rec)


def _compare(body):
    v = _validated(CompareInput, body)
    api_price = None
    if "api_usd_per_million_output" in v:
        api_price = compare.ApiPrice(
            usd_per_million_input=v.get("api_usd_per_million_input", Decimal(0)),
            usd_per_million_output=v["api_usd_per_million_output"],
        )
    rate = v.get("requests_per_s")
    result = compare.sizing_compare(
        request=v["workload"],
        candidates=[(c["gpu"], c.get("gpu_count")) for c in v["candidates"]],
        load=compare.Load(concurrency=None if rate is not None else v["concurrency"], requests_per_s=rate),
        targets=compare.Targets(ttft_p95_ms=v.get("ttft_p95_ms"), e2e_p95_ms=v.get("e2e_p95_ms")),
        utilization=Decimal(str(v["utilization"])),
        term=v["term"],
        region=v.get("region"),
        api_price=api_price,
        output_tokens_per_month=v.get("output_tokens_per_month"),
    )
    return payloads.compare_payload(result)


# Answers that take every branch of the builders: vllm and guide, fitting and
# not, a region (stock counts), advice, a winner and an API price, and neither.
ANSWERS = [
    (_check, {**EIGHT, "input_tokens": 1000, "output_tokens": 500, "gpu": "h100-sxm", "gpu_count": 2}),
    (_check, {**EIGHT, "gpu": "h100-sxm", "gpu_count": 1}),
    (_check, {**EIGHT, "gpu": "h100-sxm", "gpu_count": 2, "profile": "guide"}),
    (_recommend, {**EIGHT, "region": "DFW-1", "tokens_per_month": 5}),
    (_recommend, {**EIGHT, "profile": "guide"}),
    (
        _compare,
        {
            **LLAMA,
            "input_tokens": 1000,
            "output_tokens": 500,
            "concurrency": 32,
            "ttft_p95_ms": 1000,
            "e2e_p95_ms": 20000,
            "utilization": 0.5,
            "candidates": [{"gpu": "h100-sxm", "gpu_count": 2}, {"gpu": "h200-sxm"}, {"gpu": "l40s"}],
            "api_usd_per_million_input": "0.60",
            "api_usd_per_million_output": "0.80",
            "output_tokens_per_month": 2_000_000_000,
        },
    ),
    (_compare, {**LLAMA, "requests_per_s": 2, "candidates": [{"gpu": "h100-sxm"}, {"gpu": "a40", "gpu_count": 1}]}),
    (_compare, {**LLAMA, "context": 131072, "candidates": [{"gpu": "l4", "gpu_count": 1}, {"gpu": "rtx-4090"}]}),
]


def test_every_builder_call_has_its_serializers_shape(monkeypatch):
    """Each builder, wherever it is called from (the answers' builders call the
    parts' builders by name), is checked against its own serializer."""
    calls: Counter[tuple[str, str]] = Counter()
    errors: list[str] = []

    def checked(builder, function):
        @functools.wraps(function)
        def call(*args, **kwargs):
            value = function(*args, **kwargs)
            label = f"{function.__name__} -> {builder.output.__name__}"
            calls[(function.__name__, builder.output.__name__)] += 1
            errors.extend(f"{label}: {e}" for e in payload_errors(value, builder.output(), part=builder.part))
            return value

        return call

    by_name: dict[str, list] = {}
    for builder in BUILDERS:
        by_name.setdefault(builder.function.__name__, []).append(builder)
    for name, builders in by_name.items():
        assert getattr(payloads, name) is builders[0].function, name  # called by this name here
        function = builders[0].function
        for builder in builders:
            function = checked(builder, function)
        monkeypatch.setattr(payloads, name, function)

    bodies = []
    for answer, body in ANSWERS:
        bodies.append(answer(body))
    assert errors == []
    never = {(b.function.__name__, b.output.__name__) for b in BUILDERS} - set(calls)
    assert never == set(), "builders no answer above called"
    # The branches the answers were chosen for were taken.
    fits, short, guide, in_region, recommended_guide, with_api, without_api, none_fit = bodies
    assert fits["launch"] is not None and short["fits"] is False and short["launch"] is None
    assert guide["engine"] is None and recommended_guide["candidates"][0]["launch_command"] is None
    assert all("available" in c for c in in_region["candidates"]) and in_region["advice"]
    assert with_api["winner"] is not None and with_api["api"] is not None
    assert without_api["api"] is None and any(row["rent_or_api"] is None for row in without_api["rows"])
    assert any(row["memory"] is None or not row["fits"] for row in none_fit["rows"])


def _serializers_within(serializer, seen: set[type]) -> None:
    seen.add(type(serializer))
    for field in serializer.fields.values():
        child = field.child if isinstance(field, drf.ListSerializer) else field
        if isinstance(child, drf.Serializer) and type(child) not in seen:
            _serializers_within(child, seen)


def test_every_output_serializer_is_built():
    """An output serializer no builder makes (nor a part of one) is a shape
    described but never answered."""
    declared = {
        cls
        for cls in vars(payloads).values()
        if isinstance(cls, type)
        and issubclass(cls, drf.Serializer)
        and not issubclass(cls, drf.ModelSerializer)  # rendered by DRF from the model
        and cls.__module__ == payloads.__name__
    }
    built: set[type] = set()
    for builder in BUILDERS:
        _serializers_within(builder.output(), built)
    assert declared - built == set()


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (lambda d: d.update(extra=1), ".extra: not declared by CandidateOutput"),
        (lambda d: d.pop("gpu_name"), ".gpu_name: declared by CandidateOutput, not built"),
        (lambda d: d.update(gpu_count=None), ".gpu_count: null, not nullable"),
        (lambda d: d.update(capacity_gb="80"), ".capacity_gb: str for a FloatField"),
        (lambda d: d.update(notes=[1]), ".notes[0]: int for a CharField"),
    ],
)
def test_payload_errors_names_each_departure(change, error):
    v = _validated(RecommendInput, {**EIGHT, "region": "DFW-1"})
    rec = services.sizing_recommend(request=v["workload"], region=v["region"], term=v["term"])
    candidate = payloads.recommend_payload(rec)["candidates"][0]
    assert payload_errors(candidate, CandidateOutput()) == []
    change(candidate)
    assert payload_errors(candidate, CandidateOutput()) == [error]


def test_a_field_on_one_side_alone_fails_the_answer():
    """Nested: a field the check's engine part lacks, and one only the part has."""
    body = _check({**EIGHT, "gpu": "h100-sxm", "gpu_count": 2})
    del body["engine"]["block_size"]
    body["throughput"]["speed"] = 1.0
    assert payload_errors(body, CheckOutput()) == [
        ".engine.block_size: declared by EngineOutput, not built",
        ".throughput.speed: not declared by ThroughputOutput",
    ]
