"""Read a Hugging Face `config.json` into an `Arch`, estimating the parameter
count from the shapes when the caller does not state it.

Families read: llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe,
gemma, gemma2, phi3, gpt_oss, deepseek_v2, deepseek_v3 (and any config that
uses the same key names). A multimodal wrapper's `text_config` is read instead
of the wrapper.

The estimate counts embeddings (once when tied), attention (with MLA's
low-rank projections), the MLP or the experts (routed and shared, and the
router), biases where the family has them, and norms. The active parameters
of a MoE are those a decode step reads: everything but the experts a token is
not routed to and the input embedding table (a lookup reads one row of it).
"""

from __future__ import annotations

import json
from dataclasses import replace
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from pathlib import Path
from typing import Any

from core.errors import DomainError

from .arithmetic import ATTENTION_MLA, Arch, attention_kind_infer
from .weights import (
    ROLE_ATTENTION,
    ROLE_EXPERT,
    ROLE_KV,
    ROLE_MLP,
    ROLE_ROUTER,
    ROLE_SHARED,
    ROLE_VISION,
    SPLIT_KV,
    SPLIT_REPLICATE,
    SPLIT_ROW,
    Layout,
    Linear,
)

MALFORMED = "malformed_config"

# Families whose attention projections carry biases even when the config says nothing.
_QKV_BIAS_FAMILIES = {"qwen2", "qwen2_moe"}
# Families whose input and output embeddings are tied unless the config says otherwise.
_TIED_BY_DEFAULT = {"gemma", "gemma2", "gemma3_text"}
# Norms per decoder layer (Gemma 2 adds a norm after attention and after the MLP).
_NORMS_PER_LAYER = {"gemma2": 4, "gemma3_text": 4}
# Families that state a sliding window in config but whose serving keeps the full
# context in every layer (Phi-3 mini declares 2047; sized conservatively).
_WINDOW_IGNORED = {"phi3"}
# Llama 4's text model (and its multimodal wrapper).
_LLAMA4 = {"llama4", "llama4_text"}
# Bounds no real model comes near; they keep absurd inputs out of the arithmetic.
_MAX_DIM = 10**7  # hidden size, heads, head dim, intermediate sizes
_MAX_LAYERS = 100_000
_MAX_PARAMS_B = Decimal(100_000)  # 100 trillion parameters
_MAX_PARAMS = int(_MAX_PARAMS_B * 10**9)


def _fail(message: str, **details: Any) -> DomainError:
    return DomainError(MALFORMED, message, status=400, details=details)


def _int(cfg: dict[str, Any], *keys: str, default: int | None = None, minimum: int = 1) -> int:
    """The first of `keys` present, as a positive integer."""
    for key in keys:
        if key in cfg and cfg[key] is not None:
            value = cfg[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise _fail(f"`{key}` must be a number.", field=key)
            if isinstance(value, float):
                if not value.is_integer():
                    raise _fail(f"`{key}` must be a whole number.", field=key)
                value = int(value)
            if value < minimum or value > _MAX_DIM * 100:
                raise _fail(f"`{key}` is out of range.", field=key)
            return value
    if default is None:
        raise _fail(f"`{keys[0]}` is missing.", field=keys[0])
    return default


def _bool(cfg: dict[str, Any], key: str, default: bool) -> bool:
    value = cfg.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise _fail(f"`{key}` must be true or false.", field=key)
    return value


def _params_from_b(value: Any, key: str) -> int:
    try:
        billions = Decimal(str(value))
    except (InvalidOperation, ValueError):
        raise _fail(f"`{key}` must be a number of billions of parameters.", field=key) from None
    if isinstance(value, bool) or not billions.is_finite() or billions <= 0 or billions > _MAX_PARAMS_B:
        raise _fail(f"`{key}` must be a positive number of billions of parameters.", field=key)
    return int(billions * 10**9)


def _text_config(config: Any) -> dict[str, Any]:
    if not isinstance(config, dict):
        raise _fail("`architecture` must be the JSON object of a config.json.")
    inner = config.get("text_config")
    if isinstance(inner, dict) and "num_hidden_layers" in inner:
        merged = dict(inner)
        for key in ("params_b", "active_params_b", "_name_or_path", "quantization_config"):
            if key in config and key not in merged:
                merged[key] = config[key]
        vision = config.get("vision_config")
        if isinstance(vision, dict):
            merged["_vision_config"] = vision
        merged.setdefault("_wrapper_type", str(config.get("model_type") or ""))
        return merged
    return config


def _sliding(cfg: dict[str, Any], family: str, layers: int) -> tuple[int | None, int]:
    """(window, number of layers that use it)."""
    window = cfg.get("sliding_window")
    layer_types = cfg.get("layer_types")
    if isinstance(layer_types, list) and layer_types:
        if len(layer_types) != layers or not all(isinstance(t, str) for t in layer_types):
            raise _fail("`layer_types` must name one attention type per layer.", field="layer_types")
        count = sum(1 for t in layer_types if t == "sliding_attention")
        if count and not window:
            raise _fail("`layer_types` has sliding layers but `sliding_window` is missing.", field="sliding_window")
        return (_int(cfg, "sliding_window") if count else None), count
    if family in _WINDOW_IGNORED or window is None:
        return None, 0
    window = _int(cfg, "sliding_window")
    if family in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe"):
        if not _bool(cfg, "use_sliding_window", False):
            return None, 0
        # Layers from max_window_layers upwards use the window.
        first = _int(cfg, "max_window_layers", default=layers, minimum=0)
        return window, max(0, layers - first)
    if family in ("gemma2", "gemma3_text"):
        pattern = cfg.get("sliding_window_pattern")
        if family == "gemma2" or not isinstance(pattern, int) or pattern < 1:
            return window, (layers + 1) // 2  # Gemma 2: even-numbered layers slide
        return window, layers - layers // pattern  # every pattern-th layer is global
    return window, layers  # mistral-style: every layer slides


def architecture_from_hf_config(
    config: Any,
    *,
    slug: str = "custom",
    name: str | None = None,
    params_b: Any = None,
    active_params_b: Any = None,
) -> Arch:
    """An `Arch` from the contents of a config.json. `params_b` (billions) overrides
    the estimate of total parameters; so does a `params_b` key in the config."""
    cfg = _text_config(config)
    family = str(cfg.get("model_type") or "").lower()
    layers = _int(cfg, "num_hidden_layers", "n_layer", "num_layers")
    hidden = _int(cfg, "hidden_size", "n_embd", "d_model")
    heads = _int(cfg, "num_attention_heads", "n_head")
    kv_heads = _int(cfg, "num_key_value_heads", "num_kv_heads", default=heads)
    if kv_heads > heads or heads % kv_heads:
        raise _fail("`num_key_value_heads` must divide `num_attention_heads`.", field="num_key_value_heads")
    head_dim = _int(cfg, "head_dim", default=0, minimum=0) or 0
    if not head_dim:
        if hidden % heads:
            raise _fail("`hidden_size` does not divide by the heads and `head_dim` is not given.", field="head_dim")
        head_dim = hidden // heads
    native_context = _int(cfg, "max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")
    max_context = _rope_scaled_context(cfg, native_context)
    vocab = _int(cfg, "vocab_size")
    for key, value in (("hidden_size", hidden), ("num_attention_heads", heads), ("head_dim", head_dim)):
        if value > _MAX_DIM:
            raise _fail(f"`{key}` is out of range.", field=key)
    if layers > _MAX_LAYERS:
        raise _fail("`num_hidden_layers` is out of range.", field="num_hidden_layers")

    kv_lora = _int(cfg, "kv_lora_rank", default=0, minimum=0)
    is_mla = kv_lora > 0
    rope_dim = _int(cfg, "qk_rope_head_dim", default=0, minimum=0) if is_mla else 0

    window, sliding_layers = _sliding(cfg, family, layers)
    is_llama4 = family in _LLAMA4
    chunk, chunked_layers = _chunked(cfg, layers) if is_llama4 else (None, 0)

    # --- MoE layout -------------------------------------------------------------
    experts = _int(cfg, "num_local_experts", "n_routed_experts", "num_experts", default=0, minimum=0)
    top_k = _int(cfg, "num_experts_per_tok", "experts_per_token", "moe_topk", default=0, minimum=0)
    if experts and not top_k:
        raise _fail("A mixture of experts needs `num_experts_per_tok`.", field="num_experts_per_tok")
    if top_k > experts:
        raise _fail("`num_experts_per_tok` exceeds the number of experts.", field="num_experts_per_tok")
    intermediate = _int(cfg, "intermediate_size", "n_inner", "ffn_dim", default=4 * hidden)
    moe_intermediate = _int(cfg, "moe_intermediate_size", default=intermediate)
    shared_intermediate = 0
    if experts:
        shared_intermediate = (
            _int(cfg, "n_shared_experts", "num_shared_experts", default=0, minimum=0) * moe_intermediate
        )
        shared_intermediate += _int(cfg, "shared_expert_intermediate_size", default=0, minimum=0)
    dense_first = _int(cfg, "first_k_dense_replace", default=0, minimum=0) if experts else 0
    freq = _int(cfg, "moe_layer_freq", "decoder_sparse_step", default=1) if experts else 1
    moe_layers = 0
    if experts and is_llama4:
        # Llama 4: layer i is MoE when (i + 1) is a multiple of interleave_moe_layer_step
        # (vLLM's llama4.py Llama4DecoderLayer); the others are dense, intermediate_size_mlp wide.
        step = _int(cfg, "interleave_moe_layer_step", default=1, minimum=0)
        moe_layers = layers // step if step else 0
    elif experts:
        moe_layers = (
            sum(1 for i in range(layers) if i >= dense_first and (i - dense_first) % freq == 0)
            if freq > 1
            else max(0, layers - dense_first)
        )
    dense_layers = layers - moe_layers
    if is_llama4:
        # intermediate_size is one expert's width (and the shared expert's);
        # intermediate_size_mlp the dense layers'.
        moe_intermediate = intermediate
        intermediate = _int(cfg, "intermediate_size_mlp", default=intermediate)
        if experts:
            shared_intermediate = moe_intermediate  # one shared expert in every MoE layer

    # --- Parameter estimate -----------------------------------------------------
    tied = _bool(cfg, "tie_word_embeddings", family in _TIED_BY_DEFAULT)
    embed = vocab * hidden
    attention_bias = _bool(cfg, "attention_bias", family in _QKV_BIAS_FAMILIES)
    if is_mla:
        q_lora = _int(cfg, "q_lora_rank", default=0, minimum=0)
        nope = _int(cfg, "qk_nope_head_dim", default=head_dim)
        v_dim = _int(cfg, "v_head_dim", default=head_dim)
        q_head = nope + rope_dim
        q_proj = (hidden * q_lora + q_lora + q_lora * heads * q_head) if q_lora else hidden * heads * q_head
        kv_proj = hidden * (kv_lora + rope_dim) + kv_lora + kv_lora * heads * (nope + v_dim)
        attention = q_proj + kv_proj + heads * v_dim * hidden
    else:
        q_out, kv_out = heads * head_dim, kv_heads * head_dim
        attention = hidden * (q_out + 2 * kv_out) + q_out * hidden
        if attention_bias:
            # Families that bias attention bias q, k, v; gpt-oss biases o too.
            attention += q_out + 2 * kv_out + (hidden if family == "gpt_oss" else 0)
        if family == "gpt_oss":
            attention += heads  # one attention sink per head
    mlp_bias = family == "gpt_oss" or _bool(cfg, "mlp_bias", False)

    def ffn(width: int) -> int:
        # Every family read here uses a gated MLP (SwiGLU / GeGLU): gate, up, down.
        return 3 * hidden * width + ((2 * width + hidden) if mlp_bias else 0)

    expert = ffn(moe_intermediate)
    router = (hidden * experts + (experts if mlp_bias or family == "deepseek_v3" else 0)) if experts else 0
    shared = ffn(shared_intermediate) if shared_intermediate else 0
    norms = _NORMS_PER_LAYER.get(family, 2) * hidden + (
        kv_lora + _int(cfg, "q_lora_rank", default=0, minimum=0) if is_mla else 0
    )
    if family in ("qwen3", "qwen3_moe"):
        norms += 2 * head_dim  # q and k norms

    dense_layer = attention + ffn(intermediate) + norms
    moe_fixed = attention + router + shared + norms
    total = (
        embed * (1 if tied else 2) + hidden + dense_layers * dense_layer + moe_layers * (moe_fixed + experts * expert)
    )
    vision_linears, vision_other = _vision_tower(cfg, hidden)
    total += sum(lin.in_features * lin.out_features * lin.count for lin in vision_linears) + vision_other
    # DeepSeek's multi-token-prediction layers: in the checkpoint, skipped by vLLM's
    # loader unless MTP speculative decoding is asked for (deepseek_v2.py load_weights,
    # get_spec_layer_idx_from_weight_name). Each is a full MoE decoder layer, an
    # eh_proj (2 x hidden -> hidden), three norms, and its own copy of the embedding and head.
    mtp = _int(cfg, "num_nextn_predict_layers", default=0, minimum=0) if family.startswith("deepseek") else 0
    linears: list[Linear] = []
    if is_mla:
        if q_lora:
            linears += [
                Linear(ROLE_ATTENTION, hidden, q_lora, layers, SPLIT_REPLICATE),
                Linear(ROLE_ATTENTION, q_lora, heads * q_head, layers),
            ]
        else:
            linears.append(Linear(ROLE_ATTENTION, hidden, heads * q_head, layers))
        linears += [
            Linear(ROLE_ATTENTION, hidden, kv_lora + rope_dim, layers, SPLIT_REPLICATE),
            Linear(ROLE_ATTENTION, kv_lora, heads * (nope + v_dim), layers),
            Linear(ROLE_ATTENTION, heads * v_dim, hidden, layers, SPLIT_ROW),
        ]
    else:
        linears += [
            Linear(ROLE_ATTENTION, hidden, heads * head_dim, layers),
            Linear(ROLE_KV, hidden, 2 * kv_heads * head_dim, layers, SPLIT_KV),
            Linear(ROLE_ATTENTION, heads * head_dim, hidden, layers, SPLIT_ROW),
        ]
    if dense_layers:
        linears += [
            Linear(ROLE_MLP, hidden, 2 * intermediate, dense_layers),
            Linear(ROLE_MLP, intermediate, hidden, dense_layers, SPLIT_ROW),
        ]
    if moe_layers:
        linears += [
            Linear(ROLE_EXPERT, hidden, 2 * moe_intermediate, moe_layers * experts),
            Linear(ROLE_EXPERT, moe_intermediate, hidden, moe_layers * experts, SPLIT_ROW),
            Linear(ROLE_ROUTER, hidden, experts, moe_layers, SPLIT_REPLICATE),
        ]
        if shared_intermediate:
            linears += [
                Linear(ROLE_SHARED, hidden, 2 * shared_intermediate, moe_layers),
                Linear(ROLE_SHARED, shared_intermediate, hidden, moe_layers, SPLIT_ROW),
            ]
    linears += vision_linears
    linear_params = sum(lin.in_features * lin.out_features * lin.count for lin in linears)
    mtp_linears = _mtp_linears(linears, layers=layers, moe_layers=moe_layers, mtp=mtp) if mtp else []
    if mtp_linears:
        mtp_linears.append(Linear(ROLE_ATTENTION, 2 * hidden, hidden, mtp, SPLIT_REPLICATE, loaded=False))
    layout = Layout(
        linears=tuple(linears + mtp_linears),
        vocab_size=vocab,
        hidden_size=hidden,
        tied_embeddings=tied,
        other_params=max(0, total - linear_params - embed * (1 if tied else 2)),
        kv_heads=1 if is_mla else kv_heads,
        experts=experts if moe_layers else 0,
        experts_per_token=top_k if moe_layers else 0,
        unloaded_other_params=mtp * (norms + (experts if family == "deepseek_v3" else 0) + 3 * hidden)
        if mtp_linears
        else 0,
        unloaded_embedding_params=mtp * 2 * embed if mtp_linears else 0,
    )

    active = None
    if experts:
        output_table = embed  # read by the last projection for every token (tied or not)
        active = output_table + hidden + dense_layers * dense_layer + moe_layers * (moe_fixed + top_k * expert)
        if is_llama4 and not tied:
            active += embed  # Meta's "17B active" counts the input embedding table as well

    if total > _MAX_PARAMS and params_b is None and cfg.get("params_b") is None:
        raise _fail("These shapes make an implausible model (over 100 trillion parameters).")
    explicit_total = params_b if params_b is not None else cfg.get("params_b")
    if explicit_total is not None:
        total = _params_from_b(explicit_total, "params_b")
        if active is not None:
            active = min(active, total)
    explicit_active = active_params_b if active_params_b is not None else cfg.get("active_params_b")
    if explicit_active is not None:
        active = _params_from_b(explicit_active, "active_params_b")
        if active > total:
            raise _fail("`active_params_b` exceeds `params_b`.", field="active_params_b")

    notes = () if explicit_total is not None else _published_count_notes(cfg, total, active)
    kind = ATTENTION_MLA if is_mla else attention_kind_infer(attention_heads=heads, kv_heads=kv_heads)
    if is_mla and "head_dim" not in cfg:
        head_dim = v_dim  # the per-head width MLA expands its latent to
    if explicit_total is not None and _params_from_b(explicit_total, "params_b") != layout.total_params:
        layout = None  # the stated count is not this config's checkpoint: estimate the layout instead
    label = name or str(cfg.get("_name_or_path") or family or "custom model")
    return Arch(
        slug=slug,
        name=label[:120],
        total_params=total,
        active_params=active,
        layers=layers,
        hidden_size=hidden,
        attention_heads=heads,
        kv_heads=1 if is_mla else kv_heads,
        head_dim=head_dim,
        max_context=max_context,
        attention_kind=kind,
        mla_latent_dim=kv_lora,
        mla_rope_dim=rope_dim,
        sliding_window=window if sliding_layers else None,
        sliding_window_layers=sliding_layers,
        experts=experts,
        experts_per_token=top_k,
        layout=layout,
        hf_repo=_repo_name(cfg.get("_name_or_path")),
        checkpoint=checkpoint_format(cfg.get("quantization_config")),
        native_context=native_context,
        notes=notes,
        family=family,
        attention_chunk=chunk if chunked_layers else None,
        chunked_attention_layers=chunked_layers,
    )


def _mtp_linears(linears: list[Linear], *, layers: int, moe_layers: int, mtp: int) -> list[Linear]:
    """One MoE decoder layer's linear layers per MTP layer, marked not loaded."""
    if not moe_layers:
        return []
    out = []
    for lin in linears:
        if lin.role in (ROLE_ATTENTION, ROLE_KV):
            per_layer = lin.count // layers
        elif lin.role in (ROLE_EXPERT, ROLE_ROUTER, ROLE_SHARED):
            per_layer = lin.count // moe_layers
        else:
            continue
        out.append(replace(lin, count=per_layer * mtp, loaded=False))
    return out


def _chunked(cfg: dict[str, Any], layers: int) -> tuple[int | None, int]:
    """Llama 4's chunked local attention: (chunk, number of layers that use it).
    The RoPE layers attend within chunks of attention_chunk_size tokens; every
    no_rope_layer_interval-th layer (no_rope_layers[i] == 0) attends globally,
    as transformers' Llama4TextConfig derives the list and vLLM's llama4.py reads it."""
    chunk = cfg.get("attention_chunk_size")
    if chunk is None:
        return None, 0
    chunk = _int(cfg, "attention_chunk_size")
    flags = cfg.get("no_rope_layers")
    if isinstance(flags, list) and flags:
        if len(flags) != layers or not all(f in (0, 1) and not isinstance(f, bool) for f in flags):
            raise _fail("`no_rope_layers` must give 0 or 1 for each layer.", field="no_rope_layers")
        return chunk, sum(flags)
    interval = _int(cfg, "no_rope_layer_interval", default=4)
    return chunk, sum(1 for i in range(layers) if (i + 1) % interval != 0)


def _vision_tower(cfg: dict[str, Any], text_hidden: int) -> tuple[list[Linear], int]:
    """Llama 4's vision encoder, pixel-shuffle adapter and projector (kept 16-bit,
    split like any linear layer), and its norms, biases and embeddings; nothing
    for other families (their vision towers are not read)."""
    vision = cfg.get("_vision_config")
    if not isinstance(vision, dict) or cfg.get("_wrapper_type") != "llama4":
        return [], 0
    h = _int(vision, "hidden_size")
    inner = _int(vision, "intermediate_size")
    n = _int(vision, "num_hidden_layers", minimum=0)
    patch = _int(vision, "patch_size")
    image = _int(vision, "image_size")
    channels = _int(vision, "num_channels", default=3)
    proj_in = _int(vision, "projector_input_dim", default=_int(vision, "vision_output_dim"))
    proj_out = _int(vision, "projector_output_dim", default=proj_in)
    out_dim = _int(vision, "vision_output_dim", default=proj_out)
    linears = [
        Linear(ROLE_VISION, channels * patch * patch, h, 1, SPLIT_REPLICATE),  # patch embedding
        Linear(ROLE_VISION, h, 3 * h, n),  # q, k, v
        Linear(ROLE_VISION, h, h, n, SPLIT_ROW),  # o
        Linear(ROLE_VISION, h, inner, n),  # fc1
        Linear(ROLE_VISION, inner, h, n, SPLIT_ROW),  # fc2
        Linear(ROLE_VISION, inner, proj_in, 1),  # pixel-shuffle MLP fc1 (4 patches of h = inner)
        Linear(ROLE_VISION, proj_out, proj_out, 1, SPLIT_ROW),  # its fc2
        Linear(ROLE_VISION, out_dim, text_hidden, 1),  # multi-modal projector
    ]
    positions = (image // patch) ** 2 + 1
    # Biases of q, k, v, o, fc1, fc2; two layer norms (weight and bias) per layer;
    # the class embedding, the positions, and the pre/post layer norms.
    other = n * (4 * h + inner + h + 4 * h) + h + positions * h + 4 * h
    return linears, other


# An estimate further than this from a published count is said in the answer.
PUBLISHED_TOLERANCE = Decimal("0.02")


@lru_cache(maxsize=1)
def _published_counts() -> dict[str, tuple[str, int, int | None]]:
    """Published parameter counts by Hugging Face repo: {repo: (name, total, active)},
    from the seeded architectures (sizing/data/architectures.json names each source)."""
    data = json.loads((Path(__file__).resolve().parent / "data" / "architectures.json").read_text())
    out = {}
    for row in data["architectures"]:
        source = str(row.get("source") or "")
        if source.startswith("https://huggingface.co/") and row.get("params_b"):
            repo = "/".join(source.removeprefix("https://huggingface.co/").split("/")[:2])
            active = row.get("active_params_b")
            out[repo.lower()] = (
                row["name"],
                int(Decimal(row["params_b"]) * 10**9),
                int(Decimal(active) * 10**9) if active else None,
            )
    return out


def published_count_notes(*, name: str, total: int, active: int | None, published: tuple) -> tuple[str, ...]:
    """Notes for an estimate more than 2 % from the published total or active count."""
    label, pub_total, pub_active = published
    notes = []
    for what, ours, theirs in (("total", total, pub_total), ("active", active, pub_active)):
        if ours is None or not theirs:
            continue
        off = Decimal(ours - theirs) / theirs
        if abs(off) > PUBLISHED_TOLERANCE:
            notes.append(
                f"The {what} parameters estimated from {name}'s config ({Decimal(ours) / 10**9:.1f}B) are "
                f"{abs(off):.1%} {'above' if off > 0 else 'below'} the {Decimal(theirs) / 10**9:.1f}B published "
                f"for {label}: the sizing may be off by as much; state `params_b` to size the published count."
            )
    return tuple(notes)


def _published_count_notes(cfg: dict[str, Any], total: int, active: int | None) -> tuple[str, ...]:
    repo = _repo_name(cfg.get("_name_or_path"))
    published = _published_counts().get(repo.lower()) if repo else None
    if published is None:
        return ()
    return published_count_notes(name=repo, total=total, active=active, published=published)


# Rope scaling types whose `factor` stretches the context (vLLM multiplies the
# model's length by it); llama3 and longrope already state the stretched length.
_STRETCHING_ROPE = {"yarn", "dynamic", "linear"}


def _rope_scaled_context(cfg: dict[str, Any], native: int) -> int:
    """The longest context the config allows: its position embeddings, or what
    its rope scaling states (YaRN: original length x factor), as vLLM derives it."""
    scaling = cfg.get("rope_scaling")
    if not isinstance(scaling, dict):
        return native
    kind = scaling.get("rope_type", scaling.get("type"))
    factor = scaling.get("factor")
    if (
        not isinstance(kind, str)
        or kind not in _STRETCHING_ROPE
        or isinstance(factor, bool)
        or not isinstance(factor, (int, float))
    ):
        return native
    if not 1 <= factor <= 1024:
        raise _fail("`rope_scaling.factor` is out of range.", field="rope_scaling")
    base = native
    if kind == "yarn":
        base = _int(scaling, "original_max_position_embeddings", default=native)
    return max(native, int(base * factor))


def _repo_name(value: Any) -> str:
    """A Hugging Face repo id (owner/name) from `_name_or_path`, or empty."""
    if isinstance(value, str) and value.count("/") == 1 and len(value) <= 120 and not value.startswith((".", "/")):
        return value
    return ""


def checkpoint_format(quantization: Any) -> dict[str, Any] | None:
    """The weight format a config's `quantization_config` declares, as
    {"format": name, "group_size": n}; None for a 16-bit checkpoint. Formats
    vLLM cannot load from these keys are refused."""
    if quantization is None:
        return None
    if not isinstance(quantization, dict):
        raise _fail("`quantization_config` must be an object.", field="quantization_config")
    method = str(quantization.get("quant_method") or "").lower()
    group = quantization.get("group_size")
    group = group if isinstance(group, int) and not isinstance(group, bool) and 0 < group <= 1 << 16 else None
    if method in ("awq", "gptq", "mxfp4", "fp8"):
        return {"format": method, "group_size": group if method in ("awq", "gptq") else None}
    if method == "modelopt":
        algo = str(quantization.get("quant_algo") or "").upper()
        if algo in ("FP8", "NVFP4"):
            return {"format": algo.lower(), "group_size": None}
    if method == "compressed-tensors":
        groups = quantization.get("config_groups")
        weights = None
        if isinstance(groups, dict):
            for group_cfg in groups.values():
                if isinstance(group_cfg, dict) and isinstance(group_cfg.get("weights"), dict):
                    weights = group_cfg["weights"]
                    break
        if weights is not None:
            bits, kind = weights.get("num_bits"), str(weights.get("type") or "")
            if bits == 8:
                return {"format": "fp8" if kind == "float" else "int8", "group_size": None}
            if bits == 4 and kind == "int":
                size = weights.get("group_size")
                return {"format": "gptq", "group_size": size if isinstance(size, int) and size > 0 else 128}
            if bits == 4 and kind == "float":
                return {"format": "nvfp4", "group_size": None}
    raise DomainError(
        "unsupported_checkpoint",
        f"This config's quantization ({method or 'unnamed'}) is not one the sizing knows: "
        "bf16, fp16, fp8, int8, awq, gptq, mxfp4 or nvfp4 checkpoints.",
        status=400,
        details={"field": "quantization_config", "quant_method": method},
    )


# --- What is read -------------------------------------------------------------------
# The keys of a (text) config that architecture_from_hf_config and the helpers
# above read, and of its nested objects: an order keeps only these of the
# config it was sized from (rentals.serializers), so what it stores is bounded
# by what sizing needs, not by what a client sends. A key read above belongs here.
CONFIG_KEYS_READ = frozenset(
    {
        "_name_or_path", "_vision_config", "_wrapper_type", "active_params_b", "attention_bias",
        "attention_chunk_size", "interleave_moe_layer_step", "intermediate_size_mlp", "no_rope_layer_interval",
        "no_rope_layers", "num_nextn_predict_layers", "d_model", "decoder_sparse_step",
        "experts_per_token", "ffn_dim", "first_k_dense_replace", "head_dim", "hidden_size",
        "intermediate_size", "kv_lora_rank", "layer_types", "max_position_embeddings",
        "max_sequence_length", "max_window_layers", "mlp_bias", "model_type", "moe_intermediate_size",
        "moe_layer_freq", "moe_topk", "n_embd", "n_head", "n_inner", "n_layer", "n_positions",
        "n_routed_experts", "n_shared_experts", "num_attention_heads", "num_experts",
        "num_experts_per_tok", "num_hidden_layers", "num_key_value_heads", "num_kv_heads",
        "num_layers", "num_local_experts", "num_shared_experts", "params_b", "q_lora_rank",
        "qk_nope_head_dim", "qk_rope_head_dim", "quantization_config", "rope_scaling", "seq_length",
        "shared_expert_intermediate_size", "sliding_window", "sliding_window_pattern",
        "tie_word_embeddings", "use_sliding_window", "v_head_dim", "vocab_size",
    }
)  # fmt: skip
_ROPE_KEYS_READ = ("rope_type", "type", "factor", "original_max_position_embeddings")
_QUANTIZATION_KEYS_READ = ("quant_method", "group_size", "quant_algo")
_QUANT_WEIGHTS_KEYS_READ = ("num_bits", "type", "group_size")
_VISION_KEYS_READ = (
    "hidden_size", "intermediate_size", "num_hidden_layers", "patch_size", "image_size", "num_channels",
    "projector_input_dim", "projector_output_dim", "vision_output_dim",
)  # fmt: skip


def _picked(value: Any, keys: tuple[str, ...]) -> Any:
    return {k: value[k] for k in keys if k in value} if isinstance(value, dict) else None


def config_read_part(config: Any) -> dict[str, Any]:
    """The part of a config.json that sizing reads: the text config (a
    multimodal wrapper's `text_config`, with the wrapper's counts merged in, as
    architecture_from_hf_config takes it) cut to CONFIG_KEYS_READ, and its
    `rope_scaling` and `quantization_config` to the keys read in them. Sized
    again, it gives the same `Arch` as the whole config."""
    cfg = _text_config(config)
    kept = {k: v for k, v in cfg.items() if k in CONFIG_KEYS_READ}
    if "rope_scaling" in kept:
        kept["rope_scaling"] = _picked(kept["rope_scaling"], _ROPE_KEYS_READ)
    if "_vision_config" in kept:
        kept["_vision_config"] = _picked(kept["_vision_config"], _VISION_KEYS_READ)
    quantization = kept.get("quantization_config")
    if isinstance(quantization, dict):
        part = _picked(quantization, _QUANTIZATION_KEYS_READ)
        groups = quantization.get("config_groups")
        if isinstance(groups, dict):
            # Only a group whose `weights` is an object is ever read; the first such one decides.
            part["config_groups"] = {
                name: {"weights": _picked(group["weights"], _QUANT_WEIGHTS_KEYS_READ)}
                for name, group in groups.items()
                if isinstance(group, dict) and isinstance(group.get("weights"), dict)
            }
        kept["quantization_config"] = part
    return kept
