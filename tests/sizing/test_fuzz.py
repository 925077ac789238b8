"""No input makes the sizing API answer 5xx: generated bodies, valid and not."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import HF_CONFIGS, hf_config

pytestmark = pytest.mark.django_db

CONFIGS = sorted(p.stem for p in HF_CONFIGS.glob("*.json"))
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**20), 10**20),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
    st.sampled_from(["NaN", "Infinity", "-1", "1e400", "0", ""]),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)
CONFIG_KEYS = [
    "num_hidden_layers",
    "hidden_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
    "intermediate_size",
    "max_position_embeddings",
    "num_local_experts",
    "num_experts_per_tok",
    "kv_lora_rank",
    "sliding_window",
    "layer_types",
    "tie_word_embeddings",
    "text_config",
    "params_b",
    "first_k_dense_replace",
    "moe_layer_freq",
    "use_sliding_window",
]


@st.composite
def architectures(draw):
    cfg = dict(hf_config(draw(st.sampled_from(CONFIGS))))
    for key in draw(st.lists(st.sampled_from(CONFIG_KEYS), max_size=3)):
        if draw(st.booleans()):
            cfg.pop(key, None)
        else:
            cfg[key] = draw(json_values)
    return cfg


VALID = {
    "precision": st.sampled_from(["bf16", "fp16", "fp8", "int8", "int4"]),
    "kv_precision": st.sampled_from(["bf16", "fp8"]),
    "context": st.integers(1, 300_000),
    "concurrency": st.integers(1, 5000),
    "params_b": st.decimals(1, 10**4, places=2, allow_nan=False).map(str),
    "active_params_b": st.floats(0.1, 100),
    "overhead_gb": st.floats(0, 20),
}
CHECK_EXTRA = {
    "gpu": st.sampled_from(["l4", "h100-sxm", "mi300x", "b200", "a100-sxm", "h100-pcie"]),
    "gpu_count": st.integers(1, 9),
    "term": st.sampled_from(["weekly", "monthly"]),
}
RECOMMEND_EXTRA = {
    "vendor": st.sampled_from(["nvidia", "amd"]),
    "region": st.sampled_from(["DFW-1", "IAD-1", "PDX-1"]),
    "max_gpus": st.integers(1, 8),
    "gpu_count": st.sampled_from([1, 2, 4, 8]),
    "term": st.sampled_from(["weekly", "monthly"]),
    "tokens_per_month": st.integers(0, 10**9),
    "traffic": st.sampled_from(["steady", "bursty"]),
}
OPTIONAL = {
    "kv_precision",
    "concurrency",
    "params_b",
    "active_params_b",
    "overhead_gb",
    "vendor",
    "region",
    "max_gpus",
    "gpu_count",
    "term",
    "tokens_per_month",
    "traffic",
}


@st.composite
def bodies(draw, extra):
    """A valid body, then up to two fields dropped or replaced by junk."""
    fields = {**VALID, **extra}
    body = {}
    if draw(st.booleans()):
        body["model"] = draw(
            st.sampled_from(
                ["ref-7b", "ref-70b", "deepseek-v3", "gpt-oss-120b", "gemma-2-27b", "llama-2-13b", "mixtral-8x7b"]
            )
        )
    else:
        body["architecture"] = draw(architectures())
    for name, strategy in fields.items():
        if name not in OPTIONAL or draw(st.booleans()):
            body[name] = draw(strategy)
    for name in draw(st.lists(st.sampled_from(sorted({*fields, "model", "architecture"})), max_size=2)):
        if draw(st.booleans()):
            body.pop(name, None)
        else:
            body[name] = draw(json_values)
    return body


@pytest.fixture(autouse=True)
def _every_example_sized(settings):  # pytest-django's settings (hypothesis' is shadowed only here)
    """Each example is worked out, not answered 429 once past the per-address limit on new sizings."""
    settings.SIZING_NEW_PER_ADDRESS = 0


def assert_answered(resp):
    assert resp.status_code < 500, resp.content
    body = resp.json()
    if resp.status_code >= 400:
        assert set(body["error"]) == {"code", "message", "details"}


@pytest.mark.slow
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(body=st.one_of(bodies(CHECK_EXTRA), json_values))
def test_check_never_answers_5xx(api, catalog, seeded_architectures, body):
    assert_answered(api.post("/api/v1/sizing/check", body, format="json"))


@pytest.mark.slow
@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(body=st.one_of(bodies(RECOMMEND_EXTRA), json_values))
def test_recommend_never_answers_5xx(api, catalog, seeded_architectures, body):
    assert_answered(api.post("/api/v1/sizing/recommend", body, format="json"))
