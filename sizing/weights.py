"""Checkpoint-true weight bytes: how each weight format really lays a model out
on disk and in GPU memory. Pure functions, no database.

A model is a `Layout`: its linear layers (with their input and output widths,
how many there are, and how tensor parallelism splits them), its embedding
table and LM head, and the small rest (norms, biases, attention sinks). A
`WeightFormat` says which linear layers it quantizes and what each quantized
matrix costs: the packed weights, plus scales and zero points per group of
input columns or per output channel. Embeddings and the LM head stay 16-bit
(no format here quantizes them); tied embeddings are counted once.

The formats follow the checkpoints vLLM loads:
- fp8: compressed-tensors / llm-compressor W8A8 FP8: one byte per weight, a
  float32 scale per output channel and one per-tensor input scale.
- int8: W8A8 INT8, the same layout with int8 weights.
- awq: 4-bit weights packed in int32, fp16 scales and 4-bit zero points per
  group of `group_size` input columns (128 by default).
- gptq: as AWQ, plus an int32 `g_idx` per input column.
- mxfp4: OCP MX FP4 as gpt-oss ships it: the experts in 4-bit with one E8M0
  (one byte) scale per 32 weights; attention, router, embeddings in BF16.
- nvfp4: NVIDIA FP4: 4-bit weights, an FP8 (E4M3) scale per 16 weights and
  two float32 per-tensor scales.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

# Roles of linear layers. Tensor parallelism: "column" splits the output
# width over N GPUs, "row" the input width, "kv" splits key/value heads and
# replicates them once N exceeds them, "replicate" keeps a whole copy.
ROLE_ATTENTION = "attention"
ROLE_KV = "kv"
ROLE_MLP = "mlp"
ROLE_EXPERT = "expert"
ROLE_SHARED = "shared_expert"
ROLE_ROUTER = "router"
ROLE_VISION = "vision"  # a multimodal model's vision tower and projector: kept 16-bit by every format here
DENSE_ROLES = frozenset({ROLE_ATTENTION, ROLE_KV, ROLE_MLP, ROLE_EXPERT, ROLE_SHARED})

SPLIT_COLUMN = "column"
SPLIT_ROW = "row"
SPLIT_KV = "kv"
SPLIT_REPLICATE = "replicate"


@dataclass(frozen=True)
class Linear:
    """`count` matrices of `in_features` x `out_features` (every layer's, every expert's)."""

    role: str
    in_features: int
    out_features: int
    count: int
    split: str = SPLIT_COLUMN
    loaded: bool = True  # False: in the checkpoint but not loaded by vLLM (DeepSeek's MTP layer)


@dataclass(frozen=True)
class Layout:
    """Where a model's parameters are, as a checkpoint stores them."""

    linears: tuple[Linear, ...]
    vocab_size: int = 0
    hidden_size: int = 0
    tied_embeddings: bool = True
    other_params: int = 0  # norms, biases, attention sinks: kept 16-bit, replicated
    kv_heads: int = 1
    experts: int = 0
    experts_per_token: int = 0
    estimated: bool = False  # True: no config.json, spread from the parameter count
    # In the checkpoint, not loaded by vLLM unless speculative decoding asks for it
    # (DeepSeek's multi-token-prediction layer: its norms, embedding and head copy).
    unloaded_other_params: int = 0
    unloaded_embedding_params: int = 0

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size * (1 if self.tied_embeddings else 2)

    @property
    def linear_params(self) -> int:
        return sum(lin.in_features * lin.out_features * lin.count for lin in self.linears if lin.loaded)

    @property
    def total_params(self) -> int:
        """Parameters vLLM loads."""
        return self.linear_params + self.embedding_params + self.other_params

    @property
    def checkpoint_params(self) -> int:
        """Parameters the checkpoint holds (the loaded ones and the unloaded ones)."""
        unloaded = sum(lin.in_features * lin.out_features * lin.count for lin in self.linears if not lin.loaded)
        return self.total_params + unloaded + self.unloaded_other_params + self.unloaded_embedding_params


@dataclass(frozen=True)
class WeightFormat:
    name: str
    label: str
    bits: int  # per weight of a quantized linear layer
    quantized_roles: frozenset[str] = DENSE_ROLES
    group_size: int = 0  # input columns per scale group; 0: per output channel
    scale_bytes: int = 0  # per group (group_size > 0) or per output channel
    zero_bits: int = 0  # per group: zero points
    index_bytes_per_input: int = 0  # GPTQ's g_idx
    tensor_scale_bytes: int = 0  # per matrix: per-tensor scales
    four_bit: bool = False
    vllm_quantization: str = ""  # --quantization value for quantizing a 16-bit checkpoint at load

    @property
    def is_16bit(self) -> bool:
        return self.bits == 16


FORMATS: dict[str, WeightFormat] = {
    "bf16": WeightFormat("bf16", "BF16", 16),
    "fp16": WeightFormat("fp16", "FP16", 16),
    "fp8": WeightFormat("fp8", "FP8 W8A8", 8, scale_bytes=4, tensor_scale_bytes=4, vllm_quantization="fp8"),
    "int8": WeightFormat("int8", "INT8 W8A8", 8, scale_bytes=4, tensor_scale_bytes=4),
    "awq": WeightFormat("awq", "AWQ 4-bit", 4, group_size=128, scale_bytes=2, zero_bits=4, four_bit=True),
    "gptq": WeightFormat(
        "gptq", "GPTQ 4-bit", 4, group_size=128, scale_bytes=2, zero_bits=4, index_bytes_per_input=4, four_bit=True
    ),
    "mxfp4": WeightFormat(
        "mxfp4",
        "MXFP4 (experts)",
        4,
        quantized_roles=frozenset({ROLE_EXPERT}),
        group_size=32,
        scale_bytes=1,
        four_bit=True,
    ),
    "nvfp4": WeightFormat("nvfp4", "NVFP4", 4, group_size=16, scale_bytes=1, tensor_scale_bytes=8, four_bit=True),
}
# Names customers use for the same thing.
FORMAT_ALIASES = {"int4": "awq"}


def format_get(name: str, *, group_size: int | None = None) -> WeightFormat:
    fmt = FORMATS[FORMAT_ALIASES.get(name, name)]
    if group_size is not None and fmt.group_size and group_size != fmt.group_size:
        fmt = replace(fmt, group_size=group_size)
    return fmt


@dataclass(frozen=True)
class WeightBytes:
    """Bytes of a model in one format, split the way the answer shows them."""

    linear: int = 0  # linear layers in their stored precision (quantized or 16-bit)
    scales: int = 0  # scales, zero points and group indices of the quantized layers
    embeddings: int = 0  # input embeddings and LM head, 16-bit
    other: int = 0  # norms, biases, sinks, routers

    @property
    def total(self) -> int:
        return self.linear + self.scales + self.embeddings + self.other

    def __add__(self, other: WeightBytes) -> WeightBytes:
        return WeightBytes(
            self.linear + other.linear,
            self.scales + other.scales,
            self.embeddings + other.embeddings,
            self.other + other.other,
        )


def _shard(lin: Linear, gpu_count: int, kv_heads: int) -> tuple[int, int]:
    """(in, out) widths one GPU holds of one matrix."""
    n = gpu_count
    if n == 1 or lin.split == SPLIT_REPLICATE:
        return lin.in_features, lin.out_features
    if lin.split == SPLIT_ROW:
        return -(-lin.in_features // n), lin.out_features
    if lin.split == SPLIT_KV:
        per_head = lin.out_features // max(1, kv_heads)
        return lin.in_features, per_head * max(1, kv_heads // n)
    return lin.in_features, -(-lin.out_features // n)


def matrix_bytes(*, fmt: WeightFormat, in_features: int, out_features: int, quantized: bool) -> tuple[int, int]:
    """(weight bytes, scale bytes) of one matrix."""
    if not quantized or fmt.is_16bit:
        return in_features * out_features * 2, 0
    weights = -(-in_features * out_features * fmt.bits // 8)
    if fmt.group_size:
        groups = -(-in_features // fmt.group_size) * out_features
        scales = groups * fmt.scale_bytes + -(-groups * fmt.zero_bits // 8)
    else:
        scales = out_features * fmt.scale_bytes
    scales += in_features * fmt.index_bytes_per_input + fmt.tensor_scale_bytes
    return weights, scales


def weight_bytes(
    *,
    layout: Layout,
    fmt: WeightFormat,
    gpu_count: int = 1,
    experts_read: int | None = None,
    checkpoint: bool = False,
) -> WeightBytes:
    """Bytes one GPU of `gpu_count` holds (gpu_count=1: the whole model as vLLM
    loads it). `checkpoint`: the files as published instead, with the parts vLLM
    skips. `experts_read`: count only that many experts per MoE layer (what one
    token reads) instead of all of them."""
    linear = scales = other = 0
    for lin in layout.linears:
        if not lin.loaded and not checkpoint:
            continue
        count = lin.count
        if lin.role == ROLE_EXPERT and experts_read is not None and layout.experts:
            count = lin.count * experts_read // layout.experts
        if count == 0:
            continue
        in_f, out_f = _shard(lin, gpu_count, layout.kv_heads)
        w, s = matrix_bytes(fmt=fmt, in_features=in_f, out_features=out_f, quantized=lin.role in fmt.quantized_roles)
        if lin.role == ROLE_ROUTER:
            other += w * count
        else:
            linear += w * count
            scales += s * count
    vocab_share = -(-layout.vocab_size // gpu_count)
    embeddings = vocab_share * layout.hidden_size * 2 * (1 if layout.tied_embeddings else 2)
    other += layout.other_params * 2
    if checkpoint:
        embeddings += layout.unloaded_embedding_params * 2
        other += layout.unloaded_other_params * 2
    return WeightBytes(linear=linear, scales=scales, embeddings=embeddings, other=other)


def active_weight_bytes(*, layout: Layout, fmt: WeightFormat, gpu_count: int = 1) -> int:
    """Bytes one GPU reads per decode step for one token: every linear layer
    but the experts a token is not routed to, the LM head (the input table is
    a one-row lookup), norms and biases."""
    moe = layout.experts and layout.experts_per_token
    wb = weight_bytes(
        layout=layout, fmt=fmt, gpu_count=gpu_count, experts_read=layout.experts_per_token if moe else None
    )
    head = wb.embeddings if layout.tied_embeddings else wb.embeddings // 2
    return wb.linear + wb.scales + wb.other + head


@dataclass(frozen=True)
class EstimatedShape:
    """What an estimated layout needs: the shape without a config.json."""

    total_params: int
    hidden_size: int
    kv_heads: int
    active_params: int | None = None
    experts: int = 0
    experts_per_token: int = 0


def layout_estimate(shape: EstimatedShape) -> Layout:
    """A layout from a parameter count alone (the guide's nominal shapes, or a
    model staff entered without its config): every parameter is counted in
    linear layers whose input width is the hidden size, no separate
    embeddings. For a MoE the routed experts are what the active count leaves out."""
    hidden = shape.hidden_size
    total = shape.total_params
    linears: list[Linear] = []
    experts = shape.experts
    if shape.active_params is not None and experts > shape.experts_per_token > 0:
        inactive = total - shape.active_params
        expert_params = inactive * experts // (experts - shape.experts_per_token)
        expert_width = max(1, expert_params // (hidden * experts))
        linears.append(Linear(ROLE_EXPERT, hidden, expert_width, experts))
        total -= hidden * expert_width * experts
    else:
        experts = 0
    width = max(1, total // hidden)
    linears.append(Linear(ROLE_MLP, hidden, width, 1))
    return Layout(
        linears=tuple(linears),
        hidden_size=hidden,
        tied_embeddings=True,
        kv_heads=shape.kv_heads,
        experts=experts,
        experts_per_token=shape.experts_per_token if experts else 0,
        estimated=True,
    )
