"""How fast vLLM serves a workload: a step-time model and the steady state of a
closed loop of clients. Pure functions, no database; docs/sizing.md (Speed)
says where each figure comes from and how the model is calibrated.

One engine step (one forward pass over the sequences scheduled together) takes

    max(bytes read / achievable bandwidth, FLOPs / achievable compute)
      + a fixed cost: the step's own (scheduler, sampler) and kernel launches
        per layer, and at tensor parallelism two all-reduces per layer over
        the card's interconnect (latency + bytes / link bandwidth)

Bytes read per GPU: the weights every token uses, the experts the step's
tokens are routed to (a MoE touches more experts as the batch grows, toward
all of them), and each decoding sequence's KV cache at the mean context in
flight, read at a rate of its own (paged blocks per sequence and KV head,
which reach less of the bandwidth than the weights' long tiles: a family's
kv_bandwidth). FLOPs per GPU: two per active parameter per token, plus attention.
The quantized layers' weights are read no faster than their GEMM kernel
(Marlin, Machete, CUTLASS scaled_mm) streams them per SM and clock.

vLLM's scheduler (V1, chunked prefill) fills each step with every decoding
sequence first and spends what is left of `max_num_batched_tokens` on
prompts. In steady state `d` sequences decode while prompts wait or run in
chunks; requests in flight are capped by `max_num_seqs` and by the KV cache
(at the mean context in flight); clients beyond that wait outside.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent / "data" / "performance.json"

BLOCK_SIZE = 16
ACTIVATION_BYTES = 2  # BF16 hidden states, what each all-reduce carries per element
# vLLM's custom all-reduce takes messages up to 8 MiB (its max_size); larger ones go
# through NCCL, which reaches more of the link on large messages.
SMALL_MESSAGE_BYTES = 8 * 2**20
# A card with no speed facts in the data file (staff added it): a BF16 peak of this
# many FLOPs per byte of its catalog bandwidth (the cards listed have 150-400), an
# FP32 vector rate of an eighth of that, PCIe Gen4, and its family's fractions (a
# family not listed: CDNA 3's, whose bandwidth share is the lowest).
UNKNOWN_FLOPS_PER_BYTE = 150
# Each format's compute on a card without tensor cores for it: vLLM's weight-only
# kernels (Marlin) dequantize to BF16 and multiply in BF16.
COMPUTE_FORMAT = {
    "bf16": ("bf16",),
    "fp16": ("bf16",),
    "awq": ("bf16",),
    "gptq": ("bf16",),
    "fp8": ("fp8", "bf16"),
    "int8": ("int8", "bf16"),
    "mxfp4": ("fp8", "bf16"),  # MXFP4 x MXFP8 on Blackwell; weight-only elsewhere
    "nvfp4": ("fp4", "bf16"),
}
# Percentiles come from a grid of quantiles of each random part (prompt length,
# wait behind other prompts, output length): deterministic, no sampling.
# E2E combines TTFT's quantiles with the output lengths'.
GRID = 21
OUTPUT_GRID = 41
# Halvings of the interval the steady state's decoding sequences are searched in.
DECODING_HALVINGS = 60


# A request when the workload names no lengths: 1,000 prompt tokens and 1,000
# output tokens (TensorRT-LLM's and vLLM's 1000/1000 benchmark case), scaled down
# to fit a shorter context.
DEFAULT_INPUT_TOKENS = 1000
DEFAULT_OUTPUT_TOKENS = 1000


def default_lengths(*, context: int, input_tokens: int | None, output_tokens: int | None) -> tuple[int, int]:
    """(input, output) tokens of the mean request."""
    if input_tokens is not None and output_tokens is not None:
        return input_tokens, output_tokens
    if input_tokens is not None:
        return input_tokens, max(1, min(DEFAULT_OUTPUT_TOKENS, context - input_tokens))
    if output_tokens is not None:
        return max(1, min(DEFAULT_INPUT_TOKENS, context - output_tokens)), output_tokens
    if context >= DEFAULT_INPUT_TOKENS + DEFAULT_OUTPUT_TOKENS:
        return DEFAULT_INPUT_TOKENS, DEFAULT_OUTPUT_TOKENS
    prompt = max(1, context // 2)
    return prompt, max(1, context - prompt)


@lru_cache(maxsize=1)
def data() -> dict[str, Any]:
    return json.loads(DATA.read_text())


# --- What the model needs ----------------------------------------------------------------


@dataclass(frozen=True)
class Hardware:
    """One GPU of a tensor-parallel group of `gpu_count`, as the step model sees it."""

    gpu_count: int
    compute_format: str
    peak_bandwidth: float  # bytes/s, the vendor's
    peak_flops: float  # dense FLOP/s in the compute format, the vendor's
    bandwidth_fraction: float
    compute_fraction: float
    interconnect: str
    link_bytes_s: float  # per GPU, one direction, what an all-reduce of a large message reaches
    link_latency_s: float
    step_s: float
    layer_s: float
    attention_flops: float = 0.0  # achievable BF16 tensor-core FLOP/s: prefill attention (FlashAttention)
    small_link_bytes_s: float = 0.0  # the same for a message up to SMALL_MESSAGE_BYTES (custom all-reduce)
    vector_flops: float = 0.0  # achievable FP32 FLOP/s of the CUDA cores / vector units (decode attention)
    moe_fraction: float = 0.0  # of the dense peak, what the routed experts' grouped GEMMs reach
    head_s: float = 0.0  # decode attention's fixed cost per sequence, layer and query head
    # Of the peak bandwidth, what decode attention reaches reading the KV cache (paged
    # blocks per sequence and KV head, not the weights' long tiles). 0 (a family with no
    # kv_bandwidth): the weights' fraction.
    kv_fraction: float = 0.0
    # What the format's GEMM kernel (Marlin, Machete, CUTLASS scaled_mm) streams of the
    # quantized layers' weights per second, bytes/s: the family's bytes per SM and clock x
    # the card's SMs x its boost clock. 0: no such limit (BF16, or no data).
    kernel_bytes_s: float = 0.0
    kernel: str = ""  # that kernel's name

    @property
    def bandwidth(self) -> float:
        return self.peak_bandwidth * self.bandwidth_fraction

    @property
    def flops(self) -> float:
        return self.peak_flops * self.compute_fraction


@dataclass(frozen=True)
class ModelCost:
    """What one GPU reads and computes per token (all figures per GPU)."""

    layers: int
    hidden: int
    shared_bytes: int  # weights read by every step whatever its tokens (all but the routed experts)
    expert_bytes: int  # one routed expert across all MoE layers (0: dense)
    experts: int
    experts_per_token: int
    params_per_token: int  # multiply-adds per token in the linear layers (active ones)
    kv_bytes_per_token_layer: int
    full_layers: int  # layers attending to the whole context
    sliding_layers: int
    window: int | None
    attention_width: int  # query heads per GPU x head dim
    head_dim: int = 0
    expert_params_per_token: int = 0  # of params_per_token, those in the routed experts
    # Of shared_bytes, the quantized linear layers' weights and scales (not the 16-bit LM
    # head, norms or biases): what the format's GEMM kernel reads (Hardware.kernel_bytes_s).
    kernel_bytes: int = 0
    # Llama 4: layers that attend within chunks of `chunk` tokens (not in full_layers).
    chunked_layers: int = 0
    chunk: int | None = None


@dataclass(frozen=True)
class Serving:
    """The engine's limits and the traffic: a closed loop of `concurrency` clients
    each sending a request as soon as its last one finished."""

    concurrency: int
    input_tokens: int
    output_tokens: int
    max_num_seqs: int
    batched_tokens: int
    kv_tokens: int  # tokens the KV cache holds (every layer at full rate)
    range_ratio: float = 0.0  # lengths uniform in [mean x (1 - r), mean x (1 + r)]


def hardware(*, slug: str, family: str, weight_format: str, gpu_count: int, catalog_bandwidth_gbps: int) -> Hardware:
    facts = data()
    card = facts["cards"].get(slug)
    fam = facts["families"].get(family) or facts["families"]["cdna3"]
    if card is None:
        peak_bw = catalog_bandwidth_gbps * 1e9
        peaks = {"bf16": peak_bw * UNKNOWN_FLOPS_PER_BYTE / 1e12}
        vector = peaks["bf16"] / 8
        link = facts["interconnects"]["pcie"]
        link_gbps, kind = 32, "pcie"
    else:
        peak_bw = card["bandwidth_gbps"] * 1e9
        peaks = card["dense_tflops"]
        vector = card["vector_tflops"]
        kind = card["interconnect"]
        link, link_gbps = facts["interconnects"][kind], card["link_gbps"]
    compute = next(f for f in COMPUTE_FORMAT.get(weight_format, ("bf16",)) if f in peaks)
    link_bytes = link_gbps * 1e9 * link["bandwidth_fraction"]
    small_link_bytes = link_gbps * 1e9 * link["small_message_fraction"]
    if link["topology"] == "mesh":  # one link to each peer: a direct all-reduce uses all of them
        link_bytes *= max(1, gpu_count - 1)
        small_link_bytes *= max(1, gpu_count - 1)
    fractions = fam["compute"]
    kernel = fam.get("kernel_stream", {}).get(weight_format)
    kernel_bytes_s = 0.0
    if kernel is not None and card is not None and "sms" in card:
        kernel_bytes_s = kernel["bytes_per_sm_cycle"] * card["sms"] * card["boost_mhz"] * 1e6
    return Hardware(
        gpu_count=gpu_count,
        compute_format=compute,
        peak_bandwidth=peak_bw,
        peak_flops=peaks[compute] * 1e12,
        bandwidth_fraction=fam["bandwidth"],
        compute_fraction=fractions.get(compute, fractions["bf16"]),
        interconnect=kind,
        link_bytes_s=link_bytes,
        small_link_bytes_s=small_link_bytes,
        attention_flops=peaks["bf16"] * 1e12 * fractions["bf16"],
        link_latency_s=link["latency_us"] * 1e-6,
        step_s=fam["step_us"] * 1e-6,
        layer_s=fam["layer_us"] * 1e-6,
        vector_flops=vector * 1e12 * fam["attention"],
        moe_fraction=fam["moe_compute"].get(compute, fam["moe_compute"]["bf16"]),
        head_s=fam["head_ns"] * 1e-9,
        kv_fraction=fam.get("kv_bandwidth", 0.0),
        kernel_bytes_s=kernel_bytes_s,
        kernel=kernel["kernel"] if kernel_bytes_s else "",
    )


# --- One step -----------------------------------------------------------------------------


def experts_touched(*, tokens: float, experts: int, per_token: int) -> float:
    """Distinct experts a layer reads for `tokens` tokens routed uniformly at
    random, `per_token` each: E x (1 - (1 - k/E)^tokens)."""
    if not experts or tokens <= 0:
        return 0.0
    return experts * (1 - (1 - per_token / experts) ** tokens)


def chunk_span(chunk: int, low: float, high: float) -> float:
    """Mean tokens a chunked-attention layer attends for a query at a position
    spread evenly over [low, high]: those of its own chunk up to it, the position
    modulo the chunk (vLLM's chunked local attention splits each sequence into
    chunk-aligned virtual sequences: `make_local_attention_virtual_batches` in
    `vllm/v1/attention/backends/utils.py`). A single position when low == high."""

    def below(x: float) -> float:  # the integral of (p mod chunk) dp from 0 to x
        whole, part = divmod(x, chunk)
        return whole * chunk * chunk / 2 + part * part / 2

    if high <= low:  # one position: the tokens of its chunk so far, a whole chunk at its end
        return (low - 1) % chunk + 1 if low >= 1 else 0.0
    return (below(high) - below(low)) / (high - low)


def kv_read_bytes(model: ModelCost, context: float, *, positions: tuple[float, float] | None = None) -> float:
    """KV bytes one GPU reads per decode step for a sequence at `context` tokens
    (mean); `positions`: the range the decoding sequences' positions spread over,
    for the chunked layers (default: all at `context`)."""
    tokens = model.full_layers * context
    if model.sliding_layers:
        tokens += model.sliding_layers * min(context, model.window or context)
    if model.chunked_layers and model.chunk:
        low, high = positions or (context, context)
        tokens += model.chunked_layers * chunk_span(model.chunk, low, high)
    return tokens * model.kv_bytes_per_token_layer


@dataclass(frozen=True)
class Step:
    seconds: float
    linear_s: float  # the linear layers: max(weight bytes / bandwidth, FLOPs / compute)
    attention_s: float  # attention: max(KV bytes / KV bandwidth, FLOPs / its rate)
    fixed_s: float
    bytes: float
    flops: float
    compute_bound: bool  # the linear layers wait on compute, not on memory


def step(*, model: ModelCost, hw: Hardware, decode: float, prefill: float, context: float, prompt: float) -> Step:
    """One step of `decode` sequences at `context` tokens each and `prefill`
    prompt tokens (prompts of `prompt` tokens, so at mean position prompt / 2).

    The linear layers and attention run one after the other, each bound by
    memory or compute. Decode attention is a batch of matrix-vector products
    (a few query heads per KV head): it runs on the CUDA cores / vector units,
    not the tensor cores; prefill attention (FlashAttention) on the tensor
    cores, in BF16 whatever the weights' format."""
    return Step(*_Stepper(model, hw, context).parts(decode, prefill, prompt))


class _Stepper:
    """One model's steps on one card group with its decoding sequences at one
    context (step() says what a step costs): a steady state times a few hundred
    steps that differ only in how many sequences decode and how many prompt
    tokens ride along, so the terms that do not change are worked out once."""

    __slots__ = (
        "attended",
        "attention_per_token",
        "bandwidth",
        "chunk",
        "chunked",
        "expert_bytes",
        "expert_per_token",
        "experts",
        "fixed",
        "flops",
        "head_s",
        "heads",
        "kernel_s",
        "kv_bandwidth",
        "kv_per_sequence",
        "layers",
        "linear_per_token",
        "moe_flops",
        "per_token",
        "prefill_rate",
        "reduce",
        "shared_bytes",
        "vector",
    )

    def __init__(self, model: ModelCost, hw: Hardware, context: float, positions: tuple[float, float] | None = None):
        self.experts, self.per_token = model.experts, model.experts_per_token
        self.shared_bytes, self.expert_bytes = model.shared_bytes, model.expert_bytes
        self.linear_per_token = 2 * model.params_per_token
        self.expert_per_token = 2 * model.expert_params_per_token
        self.flops = hw.flops
        self.moe_flops = hw.peak_flops * (hw.moe_fraction or hw.compute_fraction)
        self.bandwidth = hw.bandwidth
        self.kv_bandwidth = hw.peak_bandwidth * hw.kv_fraction if hw.kv_fraction else hw.bandwidth
        # The quantized layers' kernel streams their weights no faster than its own rate
        # (hw.kernel_bytes_s), however many tokens share them: kernel_s is what that adds to
        # reading them at the bandwidth. A step's GEMMs still wait on compute once their FLOPs
        # take longer (large batches: as before).
        self.kernel_s = 0.0
        if hw.kernel_bytes_s and model.kernel_bytes:
            self.kernel_s = max(0.0, model.kernel_bytes / hw.kernel_bytes_s - model.kernel_bytes / hw.bandwidth)
        self.kv_per_sequence = kv_read_bytes(model, context, positions=positions)
        self.attention_per_token = 4 * model.layers * model.attention_width
        # Chunked layers (Llama 4) attend within their chunk: the tokens a decoding query
        # attends, over all layers, and the same for a prompt's tokens in parts().
        self.chunked: int = model.chunked_layers if model.chunk else 0
        self.chunk: int | None = model.chunk
        self.layers = model.layers
        self.attended = self._attended(context, *(positions or (context, context)))
        self.vector = hw.vector_flops or hw.flops
        self.prefill_rate = hw.attention_flops or hw.flops
        self.heads = model.attention_width / model.head_dim if model.head_dim else None
        self.head_s = hw.head_s
        self.fixed = hw.step_s + model.layers * hw.layer_s
        # At tensor parallelism: two all-reduces per layer of each token's hidden state.
        self.reduce = None
        if hw.gpu_count > 1:
            n = hw.gpu_count
            self.reduce = (n, model.hidden, 2 * model.layers, hw.link_latency_s, hw.small_link_bytes_s, hw.link_bytes_s)

    def _attended(self, whole: float, low: float, high: float) -> float:
        """Tokens a query attends, averaged over the layers: `whole` in a full layer,
        its chunk's part (queries at positions over [low, high]) in a chunked one."""
        if not self.chunked or not self.chunk or high <= self.chunk:
            return whole  # no chunked layer, or every query inside the first chunk
        span = chunk_span(self.chunk, low, high)
        return (whole * (self.layers - self.chunked) + span * self.chunked) / self.layers

    def parts(self, decode: float, prefill: float, prompt: float) -> tuple:
        """Step's fields, in its order, for `decode` sequences and `prefill` prompt
        tokens (prompts of `prompt` tokens)."""
        tokens = decode + prefill
        touched = experts_touched(tokens=tokens, experts=self.experts, per_token=self.per_token)
        weight_bytes = self.shared_bytes + self.expert_bytes * touched
        linear_flops = self.linear_per_token * tokens
        expert_flops = self.expert_per_token * tokens
        compute_s = (linear_flops - expert_flops) / self.flops
        if expert_flops:
            compute_s += expert_flops / self.moe_flops
        memory_s = weight_bytes / self.bandwidth + self.kernel_s
        linear_s = max(memory_s, compute_s)
        kv_bytes = decode * self.kv_per_sequence
        decode_flops = self.attention_per_token * decode * self.attended
        prefill_flops = self.attention_per_token * prefill * self._attended(prompt / 2, 0, prompt)
        attention_s = max(kv_bytes / self.kv_bandwidth, decode_flops / self.vector) + prefill_flops / self.prefill_rate
        if self.heads is not None:
            attention_s += decode * self.layers * self.heads * self.head_s
        fixed = self.fixed
        if self.reduce is not None:
            n, hidden, reduces, latency, small_link, link = self.reduce
            message = tokens * hidden * ACTIVATION_BYTES
            bytes_s = small_link if message <= SMALL_MESSAGE_BYTES and small_link else link
            fixed += reduces * (latency + message * 2 * (n - 1) / n / bytes_s)
        return (
            linear_s + attention_s + fixed,
            linear_s,
            attention_s,
            fixed,
            weight_bytes + kv_bytes,
            linear_flops + decode_flops + prefill_flops,
            compute_s > memory_s,
        )

    def seconds(self, decode: float, prefill: float, prompt: float) -> float:
        return self.parts(decode, prefill, prompt)[0]


# --- The steady state -------------------------------------------------------------------------


@dataclass(frozen=True)
class Performance:
    concurrency: int
    in_flight: int  # requests the engine holds at once (the rest wait outside)
    decoding: float  # sequences decoding in a mean step
    output_tokens_per_s: float
    requests_per_s: float
    ttft_mean_s: float
    ttft_p50_s: float
    ttft_p95_s: float
    tpot_p50_s: float
    e2e_p50_s: float
    e2e_p95_s: float
    e2e_p99_s: float
    decode_step: Step
    mixed_step: Step
    prefill_share: float  # of the time, in steps that carry prompt tokens
    limited_by: str  # "concurrency", "max_num_seqs" or "kv_cache"
    bound: str  # "memory" or "compute": what the decode step's linear layers wait on
    # The grids the percentiles are read from (serve(grids=True) only: kept
    # answers stay small): TTFT at GRID quantiles, and the decode time of
    # OUTPUT_GRID output lengths; a request of the grid takes one of each
    # (E2E = TTFT + decode), every pair equally likely.
    ttft_grid: tuple[float, ...] = ()
    decode_grid: tuple[float, ...] = ()

    def share_within(self, *, ttft_s: float | None = None, e2e_s: float | None = None) -> float:
        """The share of requests whose TTFT is at most `ttft_s` and whose E2E
        is at most `e2e_s` (None: no bound), read off the same grids as the
        percentiles."""
        if not self.ttft_grid or not self.decode_grid:
            raise ValueError("computed without its grids: serve(..., grids=True)")
        within = sum(
            1
            for t in self.ttft_grid
            if ttft_s is None or t <= ttft_s
            for o in self.decode_grid
            if e2e_s is None or t + o <= e2e_s
        )
        return within / (len(self.ttft_grid) * len(self.decode_grid))


def footprint_tokens(serving: Serving) -> int:
    """KV tokens the cache must keep per request in flight, in blocks. Requests
    of spread lengths come and go at random moments: on average each holds its
    prompt and half its output. Requests that all have the same length and
    start together (range ratio 0: a benchmark's fixed lengths) stay in step
    and finish together, so the cache must hold each at its full length."""
    if serving.range_ratio > 0:
        tokens = serving.input_tokens + serving.output_tokens / 2
    else:
        tokens = serving.input_tokens + serving.output_tokens
    return math.ceil(tokens / BLOCK_SIZE) * BLOCK_SIZE


def in_flight_cap(serving: Serving) -> tuple[int, str]:
    by_kv = serving.kv_tokens // footprint_tokens(serving)
    cap, why = serving.concurrency, "concurrency"
    if serving.max_num_seqs < cap:
        cap, why = serving.max_num_seqs, "max_num_seqs"
    if by_kv < cap:
        cap, why = by_kv, "kv_cache"
    return max(cap, 0), why


def finite_run_rate(*, requests: int, output_tokens: int, in_flight: int, full_rate: float, last_rate: float) -> float:
    """Output tokens per second over the whole run of `requests` equal requests
    sent at once, as a benchmark reports it (all output tokens over the run's
    duration). The engine holds `in_flight` of them; requests of one length
    started together finish together, so they go through in rounds: every full
    round at `full_rate` (output tokens per second with `in_flight` decoding),
    then one round of the rest at `last_rate` (with that many decoding), which
    takes as long as a full round for fewer tokens. 0 when none is held."""
    if in_flight <= 0 or full_rate <= 0:
        return 0.0
    rounds, rest = divmod(requests, in_flight)
    seconds = rounds * output_tokens * in_flight / full_rate
    if rest:
        seconds += output_tokens * rest / last_rate
    return requests * output_tokens / seconds


@dataclass(frozen=True)
class _Flow:
    rate: float  # requests per second
    mean: Step  # the mean step: d decoding sequences and the prompt tokens that keep them coming
    pure: Step  # a step of the d decoding sequences alone
    prefill_share: float  # prompt tokens per step over the room the step leaves for them
    service_s: float  # one prompt's own prefill (its chunks, beside the decoding sequences)
    wait_s: float  # mean wait behind other prompts
    room: float


def _rates(stepper: _Stepper, serving: Serving, d: float) -> tuple[float, float, float, float, float]:
    """The steady state with `d` sequences decoding: each step carries them and,
    on average, the prompt tokens of the requests that replace the finished ones.
    (requests per second, one prompt's own prefill, the mean wait behind other
    prompts, the prompt tokens' share of the room a step leaves them, that room)."""
    prompt, decode_steps = serving.input_tokens, serving.output_tokens - 1
    room = max(1.0, serving.batched_tokens - d)
    first_s = stepper.seconds(d, min(room, prompt), prompt)
    service = max(1.0, prompt / room) * first_s
    if decode_steps <= 0:  # one output token: prompts only, back to back
        return min(room, prompt) / (prompt * first_s), service, 0.0, 1.0, room
    needed = d * prompt / decode_steps
    rate = d / (decode_steps * stepper.seconds(d, needed, prompt))
    share = needed / room
    wait = math.inf if share >= 1 else share / (1 - share) * service / 2  # M/D/1: waiting behind prompts
    return rate, service, wait, share, room


def _flow(stepper: _Stepper, serving: Serving, d: float) -> _Flow:
    """`_rates` with the steps themselves: the mean one and the decoding sequences' alone."""
    rate, service, wait, share, room = _rates(stepper, serving, d)
    prompt = serving.input_tokens
    if serving.output_tokens - 1 <= 0:
        first = Step(*stepper.parts(d, min(room, prompt), prompt))
        return _Flow(rate, first, first, share, service, wait, room)
    mean = Step(*stepper.parts(d, d * prompt / (serving.output_tokens - 1), prompt))
    pure = Step(*stepper.parts(d, 0, prompt))
    return _Flow(rate, mean, pure, share, service, wait, room)


def _quantiles(low: float, high: float, n: int) -> list[float]:
    return [low + (high - low) * (i + 0.5) / n for i in range(n)]


def _percentile(ordered: list[float], p: float) -> float:
    """The p-th percentile of values already in order (nearest rank)."""
    k = min(len(ordered) - 1, max(0, math.ceil(p / 100 * len(ordered)) - 1))
    return ordered[k]


def _decoding(stepper: _Stepper, serving: Serving, cap: int, most: float) -> float:
    """The most sequences that can decode while the requests waiting for their
    first token fill the engine's other places (d + R x TTFT < cap, Little's
    law): DECODING_HALVINGS halvings of [0, most]. A step's time jumps where
    its all-reduces change method, so requests in the engine do not always
    grow with d; the halvings pick one crossing, the same every time.

    Once the middle of the interval is one of its ends (no float lies between
    them) no halving changes anything but this: a middle at the upper end
    that holds becomes the lower end. So the search ends there, with what the
    remaining halvings would have given, about 8 tries early."""
    low, high = 0.0, most
    for _ in range(DECODING_HALVINGS):
        mid = (low + high) / 2
        if mid == low:
            return low
        rate, service, wait, _, _ = _rates(stepper, serving, mid)
        holds = mid + rate * (service + wait) < cap
        if mid == high:
            return mid if holds else low
        if holds:
            low = mid
        else:
            high = mid
    return low


def serve(*, model: ModelCost, hw: Hardware, serving: Serving, grids: bool = False) -> Performance:
    """The steady state of `serving.concurrency` clients in a closed loop.
    `grids`: keep the grids the percentiles come from (Performance.share_within)."""
    cap, limited = in_flight_cap(serving)
    decode_steps = serving.output_tokens - 1
    prompt = serving.input_tokens
    if cap <= 0:
        raise ValueError("not one request fits in the KV cache")
    stepper = _Stepper(
        model, hw, prompt + serving.output_tokens / 2, positions=(prompt, prompt + serving.output_tokens)
    )
    backlog = 0.0  # requests in the engine waiting for their prefill when prompts are the bottleneck
    if decode_steps <= 0:
        d = 0.0
        flow = _flow(stepper, serving, 0.0)
        backlog = max(0.0, cap - flow.rate * flow.service_s)
    else:
        # d decoding + R x (time to first token) = requests in the engine (Little's law).
        most = min(float(cap), serving.batched_tokens * decode_steps / (prompt + decode_steps))
        d = max(_decoding(stepper, serving, cap, most), 1e-9)
        flow = _flow(stepper, serving, d)
        if not math.isfinite(flow.wait_s):
            backlog = max(0.0, cap - d - flow.rate * flow.service_s)
            flow = _Flow(flow.rate, flow.mean, flow.pure, 1.0, flow.service_s, 0.0, flow.room)
    rate = flow.rate
    extra_wait = backlog / rate
    outside = max(0, serving.concurrency - cap) / rate  # clients the engine cannot hold yet
    tpot = flow.mean.seconds if decode_steps > 0 else 0.0
    ttft_mean = flow.service_s + flow.wait_s + extra_wait + outside

    # Percentiles: a prompt's own prefill scales with its length (one step at
    # least); the wait behind other prompts is zero with probability 1 - share,
    # else exponential (M/D/1's tail); the backlog and the closed loop's excess
    # clients are waited in order, the same for every request.
    r = serving.range_ratio
    share = min(flow.prefill_share, 1.0) if flow.wait_s > 0 else 0.0
    waits = []
    for u in _quantiles(0, 1, GRID):
        if share <= 0 or u < 1 - share:
            waits.append(0.0)
        else:
            waits.append(-(flow.wait_s / share) * math.log((1 - u) / share))
    own = []  # each prompt length's own prefill: its chunks, each a step beside the decoding sequences
    for x in _quantiles(1 - r, 1 + r, GRID):
        length = max(1.0, x * prompt)
        chunk = min(flow.room, length)
        own.append(max(1.0, length / flow.room) * stepper.seconds(d, chunk, length))
    ttfts = sorted(t + w + extra_wait + outside for t in own for w in waits)
    # E2E: the TTFT distribution (by its quantiles) plus each output length's steps.
    ttft_q = [ttfts[min(len(ttfts) - 1, int(u * len(ttfts)))] for u in _quantiles(0, 1, GRID)]
    outs = [max(0.0, y * serving.output_tokens - 1) * tpot for y in _quantiles(1 - r, 1 + r, OUTPUT_GRID)]
    e2es = sorted(t + o for t in ttft_q for o in outs)
    return Performance(
        concurrency=serving.concurrency,
        in_flight=cap,
        decoding=d,
        output_tokens_per_s=rate * serving.output_tokens,
        requests_per_s=rate,
        ttft_mean_s=ttft_mean,
        ttft_p50_s=_percentile(ttfts, 50),
        ttft_p95_s=_percentile(ttfts, 95),
        tpot_p50_s=tpot,
        e2e_p50_s=_percentile(e2es, 50),
        e2e_p95_s=_percentile(e2es, 95),
        e2e_p99_s=_percentile(e2es, 99),
        decode_step=flow.pure,
        mixed_step=flow.mean,
        prefill_share=flow.prefill_share,
        limited_by=limited,
        bound="compute" if flow.pure.compute_bound else "memory",
        ttft_grid=tuple(ttft_q) if grids else (),
        decode_grid=tuple(outs) if grids else (),
    )
