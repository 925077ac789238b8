"""An order's input: the workload is bounded and kept as sizing reads it; a pay
currency is read in any case and an unknown one is answered with the valid
ones; every wrong field is reported together."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from accounts.models import SshKey
from accounts.services import ssh_key_add
from billing.currencies import CURRENCIES
from rentals.models import Order
from rentals.serializers import WORKLOAD_MAX_BYTES
from sizing.hf_config import CONFIG_KEYS_READ, architecture_from_hf_config, config_read_part
from tests.rentals.helpers import new_key_line

pytestmark = pytest.mark.django_db

CONFIGS = Path(__file__).resolve().parents[2] / "sizing" / "data" / "configs"


@pytest.fixture
def ssh_key(customer) -> SshKey:
    return ssh_key_add(account=customer, public_key=new_key_line(), name="laptop")


def body(ssh_key, **overrides):
    return {
        "region": "DFW-1",
        "gpu": "l4",
        "gpu_count": 1,
        "term": "weekly",
        "terms": 1,
        "template": "ubuntu-24.04",
        "addons": [],
        "ssh_keys": [ssh_key.pk],
        "pay_currency": "LTC",
    } | overrides


def config(name: str) -> dict:
    return json.loads((CONFIGS / f"{name}.json").read_text())


# --- The workload --------------------------------------------------------------------


def test_a_workload_past_the_bound_is_refused(chains, catalog, customer_api, ssh_key):
    architecture = config("llama-3.1-8b") | {"id2label": {str(i): f"label {i}" for i in range(5000)}}
    workload = {"architecture": architecture, "precision": "fp8", "context": 8192}
    size = len(json.dumps(workload, separators=(",", ":")).encode())
    assert size > WORKLOAD_MAX_BYTES
    resp = customer_api.post("/api/v1/orders", body(ssh_key, workload=workload), format="json")
    assert resp.status_code == 400
    error = resp.json()["error"]
    assert error["code"] == "workload_too_large"
    assert error["details"] == {"workload_bytes": size, "max_workload_bytes": 65536}
    assert not Order.objects.exists()


def test_a_wrong_workload_field_is_named_in_plain_words(chains, catalog, customer_api, ssh_key):
    workload = {"model": "llama\u0000", "precision": "bf16", "context": 1024, "concurrency": 1}
    resp = customer_api.post("/api/v1/orders", body(ssh_key, workload=workload), format="json")
    assert resp.status_code == 400
    error = resp.json()["error"]
    assert error["code"] == "invalid"
    assert error["message"] == "workload: model: Null characters are not allowed."
    assert error["details"]["fields"] == {"workload": {"model": ["Null characters are not allowed."]}}
    assert not Order.objects.exists()


def test_an_order_keeps_only_what_sizing_reads_of_its_workload(chains, catalog, customer_api, ssh_key, api):
    """What sizing does not read (config keys, workload keys nobody knows) is not
    stored; what is stored sizes exactly as what was sent."""
    architecture = config("llama-3.1-8b") | {
        "id2label": {str(i): f"label {i}" for i in range(500)},
        "torch_dtype": "bfloat16",
        "rope_scaling": {**config("llama-3.1-8b")["rope_scaling"], "comment": "x" * 2000},
    }
    workload = {"architecture": architecture, "precision": "fp8", "context": 8192, "notes": "y" * 5000}
    resp = customer_api.post("/api/v1/orders", body(ssh_key, workload=workload), format="json")
    assert resp.status_code == 201, resp.json()
    stored = Order.objects.get(pk=resp.json()["id"]).workload
    assert stored == {
        "architecture": config_read_part(architecture),
        "precision": "fp8",
        "context": 8192,
        "profile": "vllm",
    }
    assert set(stored["architecture"]) <= CONFIG_KEYS_READ
    assert "id2label" not in stored["architecture"] and "comment" not in stored["architecture"]["rope_scaling"]
    assert resp.json()["workload"] == stored
    assert len(json.dumps(stored)) < 1500

    def sized(w: dict) -> dict:
        r = api.post("/api/v1/sizing/check", w | {"gpu": "l4", "gpu_count": 1}, format="json")
        assert r.status_code == 200, r.json()
        return r.json()

    assert sized(stored) == sized({k: v for k, v in workload.items() if k != "notes"})


def quantized_wrapper() -> dict:
    """A multimodal wrapper around a compressed-tensors 4-bit text model, with
    the keys nobody reads that such configs carry."""
    text = config("qwen2.5-7b") | {
        "use_sliding_window": True,
        "sliding_window": 4096,
        "max_window_layers": 20,
        "quantization_config": {
            "quant_method": "compressed-tensors",
            "ignore": [f"model.layers.{i}.mlp.gate" for i in range(200)],
            "config_groups": {
                "unread": "not an object",
                "group_0": {
                    "targets": ["Linear"],
                    "weights": {"num_bits": 4, "type": "int", "group_size": 64, "symmetric": True},
                },
            },
        },
    }
    return {
        "model_type": "qwen2_5_vl",
        "_name_or_path": "example/qwen-vl-awq",
        "params_b": 7.6,
        "vision_config": {"depth": 32, "hidden_size": 1280, "fullatt_block_indexes": list(range(32))},
        "text_config": text,
    }


@pytest.mark.parametrize(
    "name", [*sorted(p.stem for p in CONFIGS.glob("*.json")), "quantized-wrapper"], ids=lambda n: n
)
def test_the_part_kept_sizes_as_the_whole_config(name):
    whole = quantized_wrapper() if name == "quantized-wrapper" else config(name)
    part = config_read_part(whole)
    assert set(part) <= CONFIG_KEYS_READ
    assert architecture_from_hf_config(part) == architecture_from_hf_config(whole)
    if name == "quantized-wrapper":
        assert part["quantization_config"] == {
            "quant_method": "compressed-tensors",
            "config_groups": {"group_0": {"weights": {"num_bits": 4, "type": "int", "group_size": 64}}},
        }
        assert architecture_from_hf_config(part).checkpoint == {"format": "gptq", "group_size": 64}


# --- The pay currency ----------------------------------------------------------------


def test_a_pay_currency_is_read_in_any_case(chains, catalog, customer_api, ssh_key):
    resp = customer_api.post("/api/v1/orders", body(ssh_key, pay_currency="usdc"), format="json")
    assert resp.status_code == 201, resp.json()
    assert resp.json()["pay_currency"] == "USDC"
    assert resp.json()["invoice"]["pay_currency"] == "USDC"


def test_an_unknown_pay_currency_lists_the_valid_ones(chains, catalog, customer_api, ssh_key):
    resp = customer_api.post("/api/v1/orders", body(ssh_key, pay_currency="doge"), format="json")
    assert resp.status_code == 400
    assert resp.json()["error"] == {
        "code": "unknown_currency",
        "message": "'DOGE' is not a pay currency; use one of BTC, ETH, USDT, USDC, XMR, SOL, LTC.",
        "details": {"currency": "DOGE", "currencies": list(CURRENCIES)},
    }


def test_every_wrong_field_is_reported_together(chains, catalog, customer_api, ssh_key):
    wrong = body(ssh_key, pay_currency="doge", gpu_count=0)
    del wrong["term"]
    resp = customer_api.post("/api/v1/orders", wrong, format="json")
    assert resp.status_code == 400
    error = resp.json()["error"]
    assert error["code"] == "invalid"
    assert set(error["details"]["fields"]) == {"pay_currency", "gpu_count", "term"}
    assert error["details"]["fields"]["pay_currency"] == [
        "'DOGE' is not a pay currency; use one of BTC, ETH, USDT, USDC, XMR, SOL, LTC."
    ]
    assert error["details"]["currencies"] == list(CURRENCIES)


def test_a_renewal_currency_is_read_in_any_case(active_rental, customer_api):
    resp = customer_api.post(f"/api/v1/rentals/{active_rental.pk}/renew", {"pay_currency": "ltc"}, format="json")
    assert resp.status_code == 201, resp.json()
    assert resp.json()["renewal_invoices"][0]["pay_currency"] == "LTC"
    resp = customer_api.post(f"/api/v1/rentals/{active_rental.pk}/renew", {"pay_currency": "ltx"}, format="json")
    assert resp.status_code == 400
    assert resp.json()["error"]["code"] == "unknown_currency"
    assert resp.json()["error"]["details"]["currencies"] == list(CURRENCIES)
