"""Sizing any model from its config.json."""

import pytest

from core.errors import DomainError
from sizing.arithmetic import kv_cache_bytes
from sizing.hf_config import architecture_from_hf_config

from .conftest import HF_CONFIGS, arch, hf_config

REAL_MODELS = sorted(p.stem for p in HF_CONFIGS.glob("*.json"))


def test_every_seeded_real_model_has_a_config():
    assert len(REAL_MODELS) == 20


@pytest.mark.parametrize("slug", REAL_MODELS)
def test_estimate_from_config_within_two_percent_of_published(slug):
    parsed = architecture_from_hf_config(hf_config(slug), slug=slug)
    published = arch(slug)
    assert abs(parsed.total_params / published.total_params - 1) < 0.02
    if published.active_params is not None:
        assert parsed.active_params is not None
        assert abs(parsed.active_params / published.active_params - 1) < 0.02
    else:
        assert parsed.active_params is None


@pytest.mark.parametrize("slug", REAL_MODELS)
def test_config_shape_matches_published_shape(slug):
    parsed = architecture_from_hf_config(hf_config(slug), slug=slug)
    published = arch(slug)
    for field in (
        "layers",
        "hidden_size",
        "attention_heads",
        "kv_heads",
        "head_dim",
        "max_context",
        "attention_kind",
        "mla_latent_dim",
        "mla_rope_dim",
        "sliding_window",
        "sliding_window_layers",
        "experts",
        "experts_per_token",
    ):
        assert getattr(parsed, field) == getattr(published, field), field
    # Same shape, same cache.
    for context in (1000, 8192):
        assert kv_cache_bytes(arch=parsed, kv_precision="bf16", context=context, concurrency=3) == kv_cache_bytes(
            arch=published, kv_precision="bf16", context=context, concurrency=3
        )


def test_gemma2_explicit_head_dim_is_honoured():
    parsed = architecture_from_hf_config(hf_config("gemma-2-27b"))
    assert parsed.head_dim == 128 != 4608 // 32


def test_head_dim_defaults_to_hidden_over_heads():
    cfg = hf_config("llama-3.1-8b")
    assert "head_dim" not in cfg
    assert architecture_from_hf_config(cfg).head_dim == 4096 // 32


def test_tied_embeddings_counted_once():
    cfg = hf_config("llama-3.1-8b")
    untied = architecture_from_hf_config(cfg).total_params
    tied = architecture_from_hf_config({**cfg, "tie_word_embeddings": True}).total_params
    assert untied - tied == 128256 * 4096


def test_explicit_params_b_wins():
    parsed = architecture_from_hf_config(hf_config("llama-3.1-8b"), params_b="8")
    assert parsed.total_params == 8 * 10**9
    in_config = architecture_from_hf_config({**hf_config("llama-3.1-8b"), "params_b": 7.5})
    assert in_config.total_params == 7_500_000_000
    moe = architecture_from_hf_config(hf_config("mixtral-8x7b"), params_b=46.7, active_params_b=12.9)
    assert (moe.total_params, moe.active_params) == (46_700_000_000, 12_900_000_000)


def test_multimodal_wrapper_reads_text_config():
    wrapped = {"model_type": "llava", "text_config": hf_config("mistral-7b-v0.3"), "vision_config": {"hidden_size": 1}}
    assert (
        architecture_from_hf_config(wrapped).total_params
        == architecture_from_hf_config(hf_config("mistral-7b-v0.3")).total_params
    )


def test_qwen_window_only_when_enabled():
    cfg = {**hf_config("qwen2.5-7b"), "use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 20}
    parsed = architecture_from_hf_config(cfg)
    assert (parsed.sliding_window, parsed.sliding_window_layers) == (4096, 8)
    assert architecture_from_hf_config(hf_config("qwen2.5-7b")).sliding_window_layers == 0


def test_mistral_style_window_covers_every_layer():
    cfg = {**hf_config("mistral-7b-v0.3"), "sliding_window": 4096}
    parsed = architecture_from_hf_config(cfg)
    assert (parsed.sliding_window, parsed.sliding_window_layers) == (4096, 32)


@pytest.mark.parametrize(
    "config,field",
    [
        ("not a dict", None),
        ({}, "num_hidden_layers"),
        ({**hf_config("llama-3.1-8b"), "num_hidden_layers": 0}, "num_hidden_layers"),
        ({**hf_config("llama-3.1-8b"), "num_hidden_layers": "32"}, "num_hidden_layers"),
        ({**hf_config("llama-3.1-8b"), "num_hidden_layers": 3.5}, "num_hidden_layers"),
        ({**hf_config("llama-3.1-8b"), "hidden_size": True}, "hidden_size"),
        ({**hf_config("llama-3.1-8b"), "num_key_value_heads": 5}, "num_key_value_heads"),
        ({**hf_config("llama-3.1-8b"), "num_key_value_heads": 64}, "num_key_value_heads"),
        ({**hf_config("llama-3.1-8b"), "hidden_size": 4097}, "head_dim"),
        ({**hf_config("llama-3.1-8b"), "vocab_size": -1}, "vocab_size"),
        ({**hf_config("llama-3.1-8b"), "tie_word_embeddings": "yes"}, "tie_word_embeddings"),
        ({**hf_config("llama-3.1-8b"), "params_b": "lots"}, "params_b"),
        ({**hf_config("llama-3.1-8b"), "params_b": 0}, "params_b"),
        ({**hf_config("llama-3.1-8b"), "params_b": "NaN"}, "params_b"),
        ({**hf_config("mixtral-8x7b"), "num_experts_per_tok": 9}, "num_experts_per_tok"),
        ({**hf_config("gpt-oss-20b"), "layer_types": ["full_attention"]}, "layer_types"),
        ({**hf_config("llama-3.1-8b"), "hidden_size": 10**12}, "hidden_size"),
    ],
)
def test_malformed_config_refused_with_its_field(config, field):
    with pytest.raises(DomainError) as err:
        architecture_from_hf_config(config)
    assert err.value.code == "malformed_config" and err.value.status == 400
    if field:
        assert err.value.details["field"] == field


# --- Llama 4 and DeepSeek's MTP layer -------------------------------------------------------------


@pytest.mark.parametrize(
    "slug,total_b,moe_layers,experts",
    [("llama-4-scout", 109, 48, 16), ("llama-4-maverick", 400, 24, 128)],
)
def test_llama4_is_read_from_its_own_keys(slug, total_b, moe_layers, experts):
    a = architecture_from_hf_config(hf_config(slug), slug=slug)
    # Published: 109B / 400B total, 17B active (Meta's model cards).
    assert abs(a.total_params / (total_b * 10**9) - 1) < 0.01
    assert abs(a.active_params / (17 * 10**9) - 1) < 0.02
    roles = {(lin.role, lin.in_features, lin.out_features): lin.count for lin in a.layout.linears}
    # Experts are intermediate_size (8192) wide; the dense layers intermediate_size_mlp (16384).
    assert roles[("expert", 5120, 2 * 8192)] == moe_layers * experts
    assert roles.get(("mlp", 5120, 2 * 16384), 0) == 48 - moe_layers
    assert roles[("shared_expert", 5120, 2 * 8192)] == moe_layers  # one shared expert per MoE layer
    # The vision tower (34 layers of 1408) is in the checkpoint, in 16-bit.
    vision = sum(lin.in_features * lin.out_features * lin.count for lin in a.layout.linears if lin.role == "vision")
    assert 0.8e9 < vision < 0.9e9
    # Chunked local attention on 3 of every 4 layers (no_rope_layer_interval 4), 8192-token chunks.
    assert (a.attention_chunk, a.chunked_attention_layers) == (8192, 36)
    assert a.notes == ()


def test_llama4_no_rope_layers_list_is_honoured_and_checked():
    cfg = hf_config("llama-4-scout")
    flags = [1, 1, 0] * 16
    a = architecture_from_hf_config({**cfg, "text_config": {**cfg["text_config"], "no_rope_layers": flags}})
    assert a.chunked_attention_layers == 32
    with pytest.raises(DomainError) as err:
        architecture_from_hf_config({**cfg, "text_config": {**cfg["text_config"], "no_rope_layers": [1, 2]}})
    assert err.value.details["field"] == "no_rope_layers"


def test_a_config_far_from_its_published_count_says_so():
    cfg = hf_config("llama-4-maverick")
    # Read as the old parser did (every layer MoE), Maverick would come out near 785B.
    wrong = {**cfg, "text_config": {**cfg["text_config"], "interleave_moe_layer_step": 1}}
    (note,) = architecture_from_hf_config(wrong).notes
    assert "400.0B published" in note and "above" in note
    # Stating the count silences it; an unknown repo has nothing to compare with.
    assert architecture_from_hf_config(wrong, params_b=400).notes == ()
    assert architecture_from_hf_config({**wrong, "_name_or_path": "someone/else"}).notes == ()


def test_deepseek_mtp_layer_is_in_the_checkpoint_not_in_what_vllm_loads():
    a = architecture_from_hf_config(hf_config("deepseek-v3"), slug="deepseek-v3")
    # DeepSeek: 671B main model + 14B MTP module = 685B on Hugging Face.
    assert abs(a.total_params / 671e9 - 1) < 0.01
    assert abs(a.layout.checkpoint_params / 685e9 - 1) < 0.01
    assert a.layout.total_params == a.total_params
    no_mtp = architecture_from_hf_config({**hf_config("deepseek-v3"), "num_nextn_predict_layers": 0})
    assert no_mtp.layout.checkpoint_params == no_mtp.total_params == a.total_params
