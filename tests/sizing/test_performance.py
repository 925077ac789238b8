"""The step-time model (sizing/performance.py) and what the API answers with it."""

from dataclasses import replace

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sizing.arithmetic import Workload
from sizing.engine import card_hardware, model_cost, throughput_compute
from sizing.hf_config import architecture_from_hf_config
from sizing.performance import (
    Serving,
    _decoding,
    _rates,
    _Stepper,
    chunk_span,
    default_lengths,
    experts_touched,
    finite_run_rate,
    in_flight_cap,
    kv_read_bytes,
    serve,
    step,
)

from .conftest import card, hf_config


def workload(slug="llama-3.1-8b", precision="bf16", **kw):
    arch = architecture_from_hf_config(hf_config(slug), slug=slug)
    kw.setdefault("context", 8192)
    return Workload(arch=arch, precision=precision, profile="vllm", **kw)


def test_default_lengths_fit_the_context():
    assert default_lengths(context=8192, input_tokens=None, output_tokens=None) == (1000, 1000)
    assert default_lengths(context=1024, input_tokens=None, output_tokens=None) == (512, 512)
    assert default_lengths(context=4096, input_tokens=3500, output_tokens=None) == (3500, 596)


def test_a_moe_step_touches_more_experts_as_the_batch_grows():
    assert experts_touched(tokens=1, experts=128, per_token=8) == pytest.approx(8)
    assert experts_touched(tokens=16, experts=128, per_token=8) < 128
    assert experts_touched(tokens=4096, experts=128, per_token=8) == pytest.approx(128)


def test_single_stream_decode_is_memory_bound_at_the_achievable_bandwidth():
    w = workload(concurrency=1, input_tokens=128, output_tokens=1000)
    cost, hw = model_cost(workload=w, gpu_count=1), card_hardware(workload=w, card=card("h100-sxm"), gpu_count=1)
    s = step(model=cost, hw=hw, decode=1, prefill=0, context=628, prompt=128)
    assert not s.compute_bound
    assert s.linear_s == pytest.approx(cost.shared_bytes / (3350e9 * hw.bandwidth_fraction))
    # 16 GB of BF16 weights over 3.35 TB/s: never faster than the bandwidth allows.
    assert s.seconds > 16.06e9 / 3350e9


def test_prefill_is_compute_bound_and_never_above_the_dense_peak():
    w = workload(precision="fp8", concurrency=64)
    cost, hw = model_cost(workload=w, gpu_count=1), card_hardware(workload=w, card=card("h100-sxm"), gpu_count=1)
    assert hw.compute_format == "fp8" and 0.4 <= hw.compute_fraction <= 0.8
    s = step(model=cost, hw=hw, decode=0, prefill=8192, context=0, prompt=8192)
    assert s.compute_bound
    assert s.flops / s.seconds < hw.peak_flops


def single_stream_tpot(slug, precision, gpu):
    w = workload(slug, precision, concurrency=1, input_tokens=1024, output_tokens=1024)
    return throughput_compute(workload=w, card=card(gpu), gpu_count=1).performance.tpot_p50_s


def test_four_bit_weights_decode_one_sequence_at_the_kernels_rate_not_the_bandwidths():
    """Neural Magic's single-stream figures (vLLM 0.7.2, 1024/1024): W4A16 Llama 8B against BF16
    takes 5.7 s against 7.7 s on an H100 and 6.6 s against 12.4 s on an A100 (Machete and Marlin
    stream a fixed number of weight bytes per SM and clock), but 9.5 s against 24.0 s on an
    A6000, whose bandwidth is the tighter limit. Reading 3.5x fewer bytes alone would make all
    three about 3x faster."""
    h100 = single_stream_tpot("llama-3.1-8b", "bf16", "h100-sxm") / single_stream_tpot(
        "llama-3.1-8b", "gptq", "h100-sxm"
    )
    a100 = single_stream_tpot("llama-3.1-8b", "bf16", "a100-sxm") / single_stream_tpot(
        "llama-3.1-8b", "gptq", "a100-sxm"
    )
    a6000 = single_stream_tpot("llama-3.1-8b", "bf16", "rtx-a6000") / single_stream_tpot(
        "llama-3.1-8b", "gptq", "rtx-a6000"
    )
    assert 1.2 < h100 < 1.8
    assert 1.5 < a100 < 2.4
    assert a6000 > 2.4


def test_int8_w8a8_decodes_one_sequence_at_cutlass_scaled_mms_rate_on_an_a100():
    """INT8 W8A8 Llama 8B on an A100: 9.2 s against BF16's 12.4 s (Neural Magic, 1024/1024, 1.35x),
    not the halved bytes' 2x; on an A6000, whose bandwidth binds first, 15.5 s against 24.0 s
    (1.55x): the gain is larger where the kernel's rate is not the limit."""
    a100 = single_stream_tpot("llama-3.1-8b", "bf16", "a100-sxm") / single_stream_tpot(
        "llama-3.1-8b", "int8", "a100-sxm"
    )
    a6000 = single_stream_tpot("llama-3.1-8b", "bf16", "rtx-a6000") / single_stream_tpot(
        "llama-3.1-8b", "int8", "rtx-a6000"
    )
    assert 1.1 < a100 < 1.6
    assert a6000 > a100


def test_the_kernels_rate_holds_until_the_gemms_compute_takes_longer():
    w = workload(precision="gptq", concurrency=64)
    cost, hw = model_cost(workload=w, gpu_count=1), card_hardware(workload=w, card=card("h100-sxm"), gpu_count=1)
    assert hw.kernel.startswith("Machete") and 0 < hw.kernel_bytes_s < hw.bandwidth
    assert 0 < cost.kernel_bytes < cost.shared_bytes  # the 16-bit LM head is not the kernel's
    head = cost.shared_bytes - cost.kernel_bytes
    streamed = cost.kernel_bytes / hw.kernel_bytes_s + head / hw.bandwidth
    one = step(model=cost, hw=hw, decode=1, prefill=0, context=1024, prompt=1024)
    assert one.linear_s == pytest.approx(streamed) and not one.compute_bound
    # More tokens share the weights the kernel streams: never a faster step.
    steps = [step(model=cost, hw=hw, decode=d, prefill=0, context=1024, prompt=1024).seconds for d in range(1, 600, 7)]
    assert steps == sorted(steps)
    # A large batch waits on the GEMMs' compute, as without the kernel's rate.
    big = step(model=cost, hw=hw, decode=0, prefill=8192, context=0, prompt=8192)
    assert big.compute_bound and big.linear_s == pytest.approx(2 * cost.params_per_token * 8192 / hw.flops)
    # BF16, Hopper's FP8 (docs/sizing.md says why) and cards whose kernels have no published
    # figures (MI300X, B200) read at the bandwidth.
    assert card_hardware(workload=workload(), card=card("h100-sxm"), gpu_count=1).kernel_bytes_s == 0
    for gpu in ("h100-sxm", "mi300x", "b200"):
        assert card_hardware(workload=workload(precision="fp8"), card=card(gpu), gpu_count=1).kernel_bytes_s == 0
    # On Ada the carried-over rates stay above the achievable bandwidth: they never bind.
    for gpu in ("l4", "l40s", "rtx-4090"):
        for fmt in ("gptq", "awq"):
            ada = card_hardware(workload=workload(precision=fmt), card=card(gpu), gpu_count=1)
            assert ada.kernel_bytes_s > ada.bandwidth


def test_card_sms_and_clocks_match_the_datasheets_fp32_rate():
    """SMs x FP32 lanes per SM (64 on the A100's GA100, 128 on the others) x 2 x boost clock is
    the FP32 rate each card's datasheet gives (vector_tflops)."""
    from sizing.performance import data

    cards = {slug: c for slug, c in data()["cards"].items() if "sms" in c}
    assert {"h100-sxm", "a100-sxm", "rtx-a6000"} <= set(cards)
    for slug, c in cards.items():
        lanes = 64 if slug == "a100-sxm" else 128
        assert c["sms"] * lanes * 2 * c["boost_mhz"] * 1e6 / 1e12 == pytest.approx(c["vector_tflops"], rel=0.01), slug


def test_ampere_runs_fp8_weights_in_bf16():
    w = workload(precision="fp8")
    assert card_hardware(workload=w, card=card("a100-sxm"), gpu_count=1).compute_format == "bf16"


def test_closed_loop_obeys_littles_law():
    w = workload(precision="fp8")
    cost, hw = model_cost(workload=w, gpu_count=1), card_hardware(workload=w, card=card("h100-sxm"), gpu_count=1)
    serving = Serving(
        concurrency=64, input_tokens=1000, output_tokens=500, max_num_seqs=64, batched_tokens=8192, kv_tokens=500_000
    )
    p = serve(model=cost, hw=hw, serving=serving)
    # Fixed lengths: every request takes its time to first token plus 499 steps.
    assert p.requests_per_s * (p.ttft_mean_s + 499 * p.tpot_p50_s) == pytest.approx(64, rel=0.01)
    assert p.ttft_p50_s <= p.ttft_p95_s and p.e2e_p50_s <= p.e2e_p95_s <= p.e2e_p99_s
    # Clients beyond what the KV cache holds wait outside: the same rate, a longer first token.
    small = serve(model=cost, hw=hw, serving=replace(serving, kv_tokens=1504 * 32))  # 1,500 tokens in whole blocks
    assert small.in_flight == 32 and small.limited_by == "kv_cache"
    more = serve(model=cost, hw=hw, serving=replace(serving, concurrency=128, max_num_seqs=32))
    assert more.limited_by == "max_num_seqs" and more.ttft_mean_s > p.ttft_mean_s


def test_tensor_parallelism_pays_all_reduces_over_the_interconnect():
    w = workload("llama-3.1-70b", "fp8", concurrency=32)
    nvlink = throughput_compute(workload=w, card=card("h100-sxm"), gpu_count=2)
    pcie = throughput_compute(workload=w, card=card("h100-pcie"), gpu_count=2)
    assert 0 < pcie.tp_efficiency < 1 and 0 < nvlink.tp_efficiency < 1
    # The same all-reduces cost more over PCIe than over NVLink.
    assert pcie.performance.decode_step.fixed_s > nvlink.performance.decode_step.fixed_s
    four = throughput_compute(workload=w, card=card("h100-sxm"), gpu_count=4)
    assert nvlink.aggregate_tokens_per_s < four.aggregate_tokens_per_s < 2 * nvlink.aggregate_tokens_per_s


def test_spread_lengths_give_percentiles_apart():
    w = workload(concurrency=16, input_tokens=2000, output_tokens=500)
    p = throughput_compute(workload=w, card=card("l40s"), gpu_count=1).performance
    assert p.ttft_p95_s > p.ttft_p50_s and p.e2e_p99_s > p.e2e_p50_s


def test_a_finite_run_counts_its_short_last_round():
    # Whole rounds only: the steady state's rate.
    assert finite_run_rate(requests=3000, output_tokens=100, in_flight=1000, full_rate=5000, last_rate=1) == 5000
    # 1,500 requests, 1,000 held: a round of 1,000 at 10,000 tokens/s (10 s for 100 tokens each), then
    # 500 at 8,000 tokens/s (6.25 s): 150,000 tokens in 16.25 s.
    rate = finite_run_rate(requests=1500, output_tokens=100, in_flight=1000, full_rate=10_000, last_rate=8_000)
    assert abs(rate - 150_000 / 16.25) < 1e-6
    assert rate < 10_000
    # Fewer requests than the engine holds: one round.
    assert finite_run_rate(requests=1500, output_tokens=100, in_flight=1500, full_rate=9_000, last_rate=1) == 9_000


def bisected(stepper, serving, cap, most):
    """The search the steady state's decoding sequences were first found by: 60 halvings of [0, most]."""
    low, high = 0.0, most
    for _ in range(60):
        mid = (low + high) / 2
        rate, service, wait, _, _ = _rates(stepper, serving, mid)
        if mid + rate * (service + wait) < cap:
            low = mid
        else:
            high = mid
    return low


@settings(max_examples=300, deadline=None)
@given(
    slug=st.sampled_from(["llama-3.1-8b", "llama-3.1-70b", "mixtral-8x7b", "qwen3-235b-a22b", "llama-4-scout"]),
    gpu=st.sampled_from(["h100-sxm", "b200", "l4", "a100-sxm", "mi300x"]),
    gpu_count=st.sampled_from([1, 2, 4, 8]),
    precision=st.sampled_from(["bf16", "fp8"]),
    concurrency=st.integers(1, 4096),
    input_tokens=st.integers(1, 20_000),
    output_tokens=st.integers(2, 8_000),
    batched_tokens=st.sampled_from([2048, 8192, 16384]),
    kv_tokens=st.integers(30_000, 5_000_000),
)
# Steps of 1,024 tokens or more all-reduce by NCCL, not the custom all-reduce, and take less time:
# requests in the engine fall, then rise again, as d passes 1,000 (two crossings).
@example("llama-3.1-8b", "b200", 8, "fp8", 1819, 1, 2, 16384, 30_000)
def test_the_decoding_search_ends_early_on_the_float_all_halvings_find(
    slug, gpu, gpu_count, precision, concurrency, input_tokens, output_tokens, batched_tokens, kv_tokens
):
    """The search that stops once no float lies between its ends finds, to the
    last bit, what all 60 halvings find, steps whose time jumps included."""
    w = workload(slug, precision)
    cost, hw = (
        model_cost(workload=w, gpu_count=gpu_count),
        card_hardware(workload=w, card=card(gpu), gpu_count=gpu_count),
    )
    serving = Serving(
        concurrency=concurrency,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        max_num_seqs=concurrency,
        batched_tokens=batched_tokens,
        kv_tokens=kv_tokens + input_tokens + output_tokens,
    )
    cap, _ = in_flight_cap(serving)
    decode_steps = output_tokens - 1
    most = min(float(cap), batched_tokens * decode_steps / (input_tokens + decode_steps))
    stepper = _Stepper(cost, hw, input_tokens + output_tokens / 2)
    assert _decoding(stepper, serving, cap, most) == bisected(stepper, serving, cap, most)


def test_a_chunked_layer_attends_the_part_of_its_chunk_up_to_the_query():
    # vLLM's chunked local attention (Llama 4): a query attends its own chunk up to itself.
    assert chunk_span(8192, 5000, 5000) == 5000  # inside the first chunk: the whole context
    assert chunk_span(8192, 8192, 8192) == 8192  # the chunk's last position
    assert chunk_span(8192, 8193, 8193) == 1  # the next chunk's first
    assert chunk_span(8192, 20000, 20000) == 20000 - 2 * 8192
    # Positions spread over a range: the mean, exactly (20,000-22,000: 3,616-5,616).
    assert chunk_span(8192, 20000, 22000) == pytest.approx((20000 + 22000) / 2 - 2 * 8192)
    assert chunk_span(8192, 0, 8192 * 10) == pytest.approx(8192 / 2)  # across many chunks: half a chunk
    assert chunk_span(8192, 0, 4096) == pytest.approx(2048)  # the first chunk: as a full layer


def test_llama_4_decode_past_the_chunk_reads_the_full_layers_whole_and_the_chunked_ones_in_part():
    w = workload(slug="llama-4-scout", precision="fp8", kv_precision="fp8", context=32768)
    cost = model_cost(workload=w, gpu_count=1)
    assert (cost.chunk, cost.chunked_layers, cost.full_layers) == (8192, 36, 12)
    per = cost.kv_bytes_per_token_layer
    assert kv_read_bytes(cost, 4000) == 48 * 4000 * per  # inside the first chunk: every layer alike
    read = kv_read_bytes(cost, 21000, positions=(20000, 22000))
    assert read == pytest.approx((12 * 21000 + 36 * 4616) * per)
    # The step's attention reads and computes that much, not the whole context in every layer.
    hw = card_hardware(workload=w, card=card("h200-sxm"), gpu_count=1)
    whole = replace(cost, full_layers=48, chunked_layers=0)
    chunked = _Stepper(cost, hw, 21000, positions=(20000, 22000)).parts(64, 0, 20000)
    full = _Stepper(whole, hw, 21000, positions=(20000, 22000)).parts(64, 0, 20000)
    assert chunked[4] < full[4] and chunked[2] < full[2] / 2
    # Below the chunk nothing changes.
    assert _Stepper(cost, hw, 3000).parts(64, 0, 2000) == _Stepper(whole, hw, 3000).parts(64, 0, 2000)


def test_chunked_layers_count_in_part_only_where_the_release_attends_them_so():
    from sizing.engine import chunked_attention_kept, newest_version

    def kept(gpu, version="0.9.2", kv="fp8"):
        w = workload(slug="llama-4-scout", precision="fp8", kv_precision=kv, engine_version=version, context=32768)
        return chunked_attention_kept(workload=w, card=card(gpu))

    assert kept("h200-sxm") and kept("h100-sxm")  # V1's FlashAttention builds the chunks
    assert not kept("a100-sxm")  # an FP8 cache starts 0.9.2's V0 engine, which attends globally
    assert kept("a100-sxm", kv="auto")
    assert not kept("b200")  # 0.9.2 prefers FlashInfer on Blackwell, which attends globally
    assert kept("b200", version=newest_version()) and kept("a100-sxm", version=newest_version())
    # What the answer says a step reads follows it: the whole context where it is not kept.
    w = workload(slug="llama-4-scout", precision="fp8", kv_precision="fp8", context=32768, concurrency=8)
    w = replace(w, input_tokens=20000, output_tokens=2000)
    on_h200 = throughput_compute(workload=w, card=card("h200-sxm"), gpu_count=4)
    on_b200 = throughput_compute(workload=w, card=card("b200"), gpu_count=4)
    per = model_cost(workload=w, gpu_count=4).kv_bytes_per_token_layer
    assert on_b200.kv_bytes_read_per_sequence_per_gpu == 48 * 21000 * per
    assert on_h200.kv_bytes_read_per_sequence_per_gpu == (12 * 21000 + 36 * 4616) * per


def test_decode_attention_reads_the_kv_cache_at_its_own_share_of_the_bandwidth():
    # Scout (40 query heads over 8 KV heads) and Llama 3 70B (64 over 8) read as much KV per
    # token and layer; Scout does 5/8 of the attention FLOPs per byte, so on a B200 its decode
    # attention waits on the bytes, read at the family's KV share, not the weights' share.
    def attention(slug, precision, gpu, sequences, context):
        w = workload(slug=slug, precision=precision, kv_precision="fp8", context=8192)
        cost, hw = model_cost(workload=w, gpu_count=1), card_hardware(workload=w, card=card(gpu), gpu_count=1)
        return cost, hw, step(model=cost, hw=hw, decode=sequences, prefill=0, context=context, prompt=128)

    scout, hw, s = attention("llama-4-scout", "nvfp4", "b200", 456, 1100)
    assert hw.kv_fraction == 0.4 and hw.bandwidth_fraction == 0.75
    kv_bytes = 456 * kv_read_bytes(scout, 1100)
    assert s.attention_s == pytest.approx(kv_bytes / (8000e9 * 0.4))
    # At the weights' share the same bytes would take 0.4 / 0.75 of that.
    assert s.attention_s > kv_bytes / (8000e9 * hw.bandwidth_fraction) * 1.8
    # The 70B's attention, 8 query heads to a KV head, is held by its FLOPs or its bytes alike.
    big, hw70, s70 = attention("llama-3.1-70b", "nvfp4", "b200", 348, 1100)
    by_bytes = 348 * kv_read_bytes(big, 1100) / (8000e9 * 0.4)
    by_flops = 4 * big.layers * big.attention_width * 348 * 1100 / hw70.vector_flops
    assert by_bytes * 0.9 < by_flops < by_bytes * 1.1
    assert s70.attention_s == pytest.approx(max(by_bytes, by_flops))
    # Scout's FLOPs, 5/8 of the 70B's per KV byte, are well under its bytes.
    assert 4 * scout.layers * scout.attention_width * 456 * 1100 / hw.vector_flops < s.attention_s * 0.7
    # Hopper reads KV at 0.60 of its bandwidth; the families without a published row that tells
    # the two apart (Ampere, Ada, CDNA 3) at the weights' share.
    assert attention("llama-3.1-8b", "fp8", "h200-sxm", 64, 1100)[1].kv_fraction == 0.6
    for gpu in ("a100-sxm", "l40s", "mi300x"):
        small, other, _ = attention("llama-3.1-8b", "bf16", gpu, 64, 1100)
        assert other.kv_fraction == 0 and _Stepper(small, other, 1100).kv_bandwidth == other.bandwidth
