"""Monotonicity the arithmetic must never break, over generated shapes."""

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from sizing.arithmetic import PRECISION_BYTES, Arch, Card, Workload, fit_check, requirement_compute

from .conftest import arch

SEEDED = [
    "ref-7b",
    "ref-70b",
    "ref-405b",
    "llama-2-13b",
    "qwen2.5-7b",
    "gemma-2-27b",
    "gpt-oss-120b",
    "deepseek-v3",
    "mixtral-8x7b",
    "phi-3-mini-4k",
]
PRECISIONS = sorted(PRECISION_BYTES, key=lambda p: PRECISION_BYTES[p])


@st.composite
def archs(draw) -> Arch:
    if draw(st.booleans()):
        return arch(draw(st.sampled_from(SEEDED)))
    kv = draw(st.sampled_from([1, 2, 4, 8, 16]))
    heads = kv * draw(st.sampled_from([1, 2, 4, 8]))
    layers = draw(st.integers(1, 160))
    sliding = draw(st.integers(0, layers))
    return Arch(
        slug="gen",
        name="gen",
        total_params=draw(st.integers(10**6, 10**12)),
        layers=layers,
        hidden_size=heads * 64,
        attention_heads=heads,
        kv_heads=kv,
        head_dim=draw(st.sampled_from([64, 96, 128, 256])),
        max_context=10**6,
        sliding_window=draw(st.integers(1, 10**5)) if sliding else None,
        sliding_window_layers=sliding,
    )


gpu_counts = st.sampled_from([1, 2, 4, 8])
contexts = st.integers(1, 200_000)
concurrencies = st.integers(1, 256)


def required(arch_, precision, context, concurrency, n, kv="bf16"):
    w = Workload(arch=arch_, precision=precision, kv_precision=kv, context=context, concurrency=concurrency)
    return requirement_compute(workload=w, gpu_count=n)


@settings(max_examples=200, deadline=None)
@given(archs(), st.sampled_from(PRECISIONS), contexts, contexts, concurrencies, gpu_counts)
def test_requirement_never_falls_as_context_grows(a, precision, c1, c2, conc, n):
    lo, hi = sorted((c1, c2))
    assert required(a, precision, lo, conc, n).required_per_gpu <= required(a, precision, hi, conc, n).required_per_gpu


@settings(max_examples=200, deadline=None)
@given(archs(), st.sampled_from(PRECISIONS), contexts, concurrencies, concurrencies, gpu_counts)
def test_requirement_never_falls_as_concurrency_grows(a, precision, context, k1, k2, n):
    lo, hi = sorted((k1, k2))
    assert (
        required(a, precision, context, lo, n).required_per_gpu
        <= required(a, precision, context, hi, n).required_per_gpu
    )


@settings(max_examples=200, deadline=None)
@given(archs(), st.sampled_from(PRECISIONS), st.sampled_from(PRECISIONS), contexts, concurrencies, gpu_counts)
def test_requirement_never_falls_as_bytes_per_parameter_grow(a, p1, p2, context, conc, n):
    lo, hi = sorted((p1, p2), key=lambda p: PRECISION_BYTES[p])
    assert required(a, lo, context, conc, n).required_per_gpu <= required(a, hi, context, conc, n).required_per_gpu
    assert (
        required(a, lo, context, conc, n, "fp8").required_per_gpu <= required(a, lo, context, conc, n).required_per_gpu
    )


@settings(max_examples=200, deadline=None)
@given(archs(), st.sampled_from(PRECISIONS), contexts, concurrencies, gpu_counts, gpu_counts)
def test_weights_per_gpu_never_grow_with_more_gpus(a, precision, context, conc, n1, n2):
    lo, hi = sorted((n1, n2))
    assert (
        required(a, precision, context, conc, hi).weights_per_gpu
        <= required(a, precision, context, conc, lo).weights_per_gpu
    )


@settings(max_examples=200, deadline=None)
@given(
    archs(),
    st.sampled_from(PRECISIONS),
    contexts,
    concurrencies,
    gpu_counts,
    st.integers(1, 300),
    st.integers(0, 300),
    st.booleans(),
)
def test_what_fits_still_fits_on_a_card_with_more_memory(a, precision, context, conc, n, memory, extra, fp8):
    small = Card(slug="small", name="small", memory_gb=memory, bandwidth_gbps=1000, fp8=fp8)
    big = replace(small, slug="big", memory_gb=memory + extra)
    w = Workload(arch=a, precision=precision, context=context, concurrency=conc)
    if fit_check(workload=w, card=small, gpu_count=n).fits:
        assert fit_check(workload=w, card=big, gpu_count=n).fits
