"""What the benchmark tests and the admin's pictures share: the order with a
workload the recorded `vllm bench serve` files were made for, and their upload."""

import json

import time_machine

from accounts.services import ssh_key_add
from tests.rentals.helpers import T0, new_key_line
from tests.sizing.bench_lines import FIXTURES

WORKLOAD = {
    "model": "llama-3.1-8b",
    "precision": "fp8",
    "context": 8192,
    "concurrency": 8,
    "input_tokens": 1000,
    "output_tokens": 200,
}


def recorded(trace: str) -> dict:
    return json.loads((FIXTURES / "0.9.2" / f"{trace}.json").read_text())


def order(customer, customer_api, **overrides) -> dict:
    key = ssh_key_add(account=customer, public_key=new_key_line(), name="k")
    body = {
        "region": "DFW-1",
        "gpu": "l4",
        "gpu_count": 1,
        "term": "monthly",
        "terms": 1,
        "template": "vllm-0.9-ubuntu-24.04",
        "addons": [],
        "ssh_keys": [key.pk],
        "pay_currency": "LTC",
        "workload": WORKLOAD,
    } | overrides
    with time_machine.travel(T0, tick=False):
        resp = customer_api.post("/api/v1/orders", body, format="json")
    assert resp.status_code == 201, resp.json()
    return resp.json()


def upload(client, rental_id: int, trace: str, **body):
    return client.post(
        f"/api/v1/rentals/{rental_id}/benchmarks", {"trace": trace, "result": recorded(trace), **body}, format="json"
    )
