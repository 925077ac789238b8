"""The benchmark plan and the results a customer uploads, through the real
endpoints, with the result files vLLM 0.9.2's own bench code wrote
(tests/fixtures/vllm_bench/README.md says how)."""

import copy
import json
import shlex
from datetime import timedelta
from decimal import ROUND_HALF_UP, Decimal

import pytest
import time_machine
from rest_framework.test import APIClient

from accounts.services import ssh_key_add, token_create
from core.models import AuditEntry
from rentals import services
from rentals.models import BenchmarkRun, Order, Rental
from rentals.services import benchmarks as bench_services
from tests.rentals.benchmark_runs import WORKLOAD, order, recorded, upload
from tests.rentals.helpers import T0, committed, new_key_line, pay
from tests.sizing.bench_lines import check_bench_line

pytestmark = pytest.mark.django_db


@pytest.fixture
def sized(chains, customer, customer_api, catalog):
    return order(customer, customer_api)


@pytest.fixture
def rental(sized, staff):
    with time_machine.travel(T0 + timedelta(minutes=5), tick=False):
        pay(sized["invoice"]["number"], int(sized["invoice"]["amount"]))
    rental = Rental.objects.get(order_id=sized["id"])
    with committed():
        services.rental_activate(
            rental_id=rental.pk, ipv4="203.0.113.12", ipv6_prefix="2001:db8:12::/64", actor=staff, now=T0
        )
    return rental


def test_the_plan_of_an_order_before_paying(sized, customer_api):
    resp = customer_api.get(f"/api/v1/orders/{sized['id']}/benchmark-plan")
    assert resp.status_code == 200, resp.json()
    plan = resp.json()
    assert plan["release"] == "0.9.2" and plan["bench_available"] is True and plan["rental_id"] is None
    # The traces run against the very line the order was sized for.
    assert plan["serve_command"] == sized["launch_command"]
    assert plan["model"] == shlex.split(sized["launch_command"])[2]
    assert [t["name"] for t in plan["traces"]] == ["chat", "rag", "batch"]
    traces = {t["name"]: t for t in plan["traces"]}
    for trace in plan["traces"]:
        flags = check_bench_line(trace["command"], "0.9.2")
        assert flags["model"] == plan["model"] and flags["result-filename"] == trace["result_file"]
        assert int(flags["num-prompts"]) == trace["num_prompts"]
    chat = check_bench_line(traces["chat"]["command"], "0.9.2")
    assert (chat["random-input-len"], chat["random-output-len"], chat["max-concurrency"]) == ("1000", "200", "8")
    assert "max-concurrency" not in check_bench_line(traces["batch"]["command"], "0.9.2")
    rag = traces["rag"]
    assert rag["input_tokens"] + rag["output_tokens"] <= WORKLOAD["context"] and rag["input_tokens"] > 7000
    # The chat trace's prediction is the sizing's own steady state for the order.
    assert (
        int(traces["chat"]["predicted"]["output_throughput"]) == sized["sizing"]["throughput"]["aggregate_tokens_per_s"]
    )
    assert traces["batch"]["predicted"]["p95_ttft_ms"] is None
    # The price: the order's total over the 720 hours of its term.
    price = Decimal(sized["total_usd"]) / 720
    assert plan["price_per_hour_usd"] == str(price.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))
    rate = Decimal(str(traces["chat"]["predicted"]["output_throughput"]))
    expected = (price * 10**6 / (rate * 3600)).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
    assert traces["chat"]["predicted_cost_per_million_output_tokens_usd"] == str(expected)
    assert [r["field"] for r in plan["record"]] == ["gpu_sku", "driver_version", "cuda_version", "vllm_version"]


def test_the_plan_of_the_rental_is_its_orders(rental, sized, customer_api):
    from_order = customer_api.get(f"/api/v1/orders/{sized['id']}/benchmark-plan").json()
    from_rental = customer_api.get(f"/api/v1/rentals/{rental.pk}/benchmark-plan").json()
    assert from_rental["rental_id"] == rental.pk
    assert from_rental["upload"] == f"POST /api/v1/rentals/{rental.pk}/benchmarks"
    assert from_rental["traces"] == from_order["traces"]


def test_an_order_kept_without_its_lengths_plans_from_its_sizing(sized, customer_api):
    """Orders placed before the workload kept input_tokens, output_tokens and engine_version: the
    sizing stored with the order has them, and the plan is the same."""
    before = customer_api.get(f"/api/v1/orders/{sized['id']}/benchmark-plan").json()
    stored = Order.objects.get(pk=sized["id"])
    stored.workload = {k: v for k, v in stored.workload.items() if k not in ("input_tokens", "output_tokens")}
    stored.save(update_fields=["workload"])
    after = customer_api.get(f"/api/v1/orders/{sized['id']}/benchmark-plan").json()
    assert after == before
    stored.sizing = None  # nothing to fall back on: the sizing's defaults (1,000 and 1,000)
    stored.save(update_fields=["sizing"])
    plain = customer_api.get(f"/api/v1/orders/{sized['id']}/benchmark-plan").json()
    assert plain["traces"][0]["output_tokens"] == 1000


def test_uploads_list_measured_beside_predicted_with_the_cost(rental, sized, customer_api):
    for trace in ("chat", "rag", "batch"):
        resp = upload(customer_api, rental.pk, trace, environment={"gpu_sku": "NVIDIA L4", "vllm_version": "0.9.2"})
        assert resp.status_code == 201, resp.json()
    listed = customer_api.get(f"/api/v1/rentals/{rental.pk}/benchmarks")
    assert listed.status_code == 200
    runs = {r["trace"]: r for r in listed.json()["results"]}
    assert set(runs) == {"chat", "rag", "batch"}
    price = Decimal(sized["total_usd"]) / 720
    for trace, run in runs.items():
        data = recorded(trace)
        assert run["num_prompts"] == data["num_prompts"] and run["completed"] == data["completed"]
        assert run["accepted_output_tokens"] == data["total_output_tokens"]
        assert run["environment"] == {"gpu_sku": "NVIDIA L4", "vllm_version": "0.9.2"}
        # Cost per 1M accepted output tokens = hourly price / accepted tokens an hour x 1e6.
        duration = Decimal(str(data["duration"])).quantize(Decimal("0.001"))
        per_hour = Decimal(data["total_output_tokens"]) / duration * 3600
        expected = (price * 10**6 / per_hour).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
        assert run["cost_per_million_accepted_output_tokens_usd"] == str(expected)
        figures = {f["metric"]: f for f in run["figures"]}
        throughput = figures["output_throughput"]
        assert throughput["measured"] == data["output_throughput"]
        assert throughput["ratio"] == round(throughput["measured"] / throughput["predicted"], 2)
        assert figures["median_tpot_ms"]["predicted"] > 0
    # The RAG run failed some requests: they are not accepted tokens.
    rag = runs["rag"]
    assert rag["failed"] == 6 and rag["accepted_output_tokens"] == rag["completed"] * 200
    assert any("6 of 123 requests failed" in note for note in rag["notes"])
    # The batch's latencies are a queue's: measured, with no prediction beside them.
    batch = {f["metric"]: f for f in runs["batch"]["figures"]}
    assert batch["median_ttft_ms"]["predicted"] is None and batch["median_ttft_ms"]["ratio"] is None
    stored = BenchmarkRun.objects.get(rental=rental, trace="chat")
    assert (stored.gpu_slug, stored.weight_format, stored.engine_version) == ("l4", "fp8", "0.9.2")
    assert AuditEntry.objects.filter(action="rental.benchmark_upload", object_id=str(rental.pk)).count() == 3


def test_the_trace_defaults_to_the_files_label(rental, customer_api):
    resp = customer_api.post(f"/api/v1/rentals/{rental.pk}/benchmarks", {"result": recorded("rag")}, format="json")
    assert resp.status_code == 201 and resp.json()["trace"] == "rag"
    unlabelled = dict(recorded("chat"), label=None)
    resp = customer_api.post(f"/api/v1/rentals/{rental.pk}/benchmarks", {"result": unlabelled}, format="json")
    assert resp.status_code == 400 and resp.json()["error"]["details"]["field"] == "trace"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda d: d.pop("total_output_tokens"), "result.total_output_tokens"),
        (lambda d: d.update(completed=d["num_prompts"] + 1), "result.completed"),
        (lambda d: d.update(output_throughput=1e9), "result.output_throughput"),
        (lambda d: d.update(median_ttft_ms=None), "result.median_ttft_ms"),
        # PostgreSQL's jsonb stores no NUL: it was a 500.
        (lambda d: d.update(model_id="meta-llama/x\u0000"), "result.model_id"),
        (lambda d: d.update(model_id="meta-llama/\udc80"), "result"),  # a lone surrogate: was "too large"
        # Figures past any run: stored, one broke the rental's benchmark list for good (a 500).
        (lambda d: d.update(median_tpot_ms=1e30), "result.median_tpot_ms"),
        (lambda d: d.update(num_prompts=3_000_000_000, completed=3_000_000_000), "result.num_prompts"),
        (lambda d: d.update(total_output_tokens=10**19), "result.total_output_tokens"),
    ],
)
def test_a_bad_file_gets_a_400_naming_the_field(rental, customer_api, change, field):
    data = copy.deepcopy(recorded("chat"))
    change(data)
    resp = customer_api.post(  # as a client sends JSON (a lone surrogate escaped, as json.dumps does)
        f"/api/v1/rentals/{rental.pk}/benchmarks",
        json.dumps({"trace": "chat", "result": data}),
        content_type="application/json",
    )
    assert resp.status_code == 400
    error = resp.json()["error"]
    assert error["code"] == "invalid_bench_result" and error["details"]["field"] == field
    assert field in error["message"]
    assert not BenchmarkRun.objects.exists()


def test_a_detailed_file_is_too_large(rental, customer_api):
    data = recorded("chat") | {"generated_texts": ["token " * 200] * 304, "ttfts": [0.2] * 304}
    resp = customer_api.post(
        f"/api/v1/rentals/{rental.pk}/benchmarks", {"trace": "chat", "result": data}, format="json"
    )
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "bench_result_too_large"


def test_uploads_per_rental_are_capped(rental, customer_api, monkeypatch):
    monkeypatch.setattr(bench_services, "BENCHMARKS_PER_RENTAL", 2)
    assert upload(customer_api, rental.pk, "chat").status_code == 201
    assert upload(customer_api, rental.pk, "rag").status_code == 201
    resp = upload(customer_api, rental.pk, "batch")
    assert resp.status_code == 409 and resp.json()["error"]["code"] == "benchmark_limit"
    assert BenchmarkRun.objects.filter(rental=rental).count() == 2


def test_another_account_sees_nothing(rental, sized, other_customer, customer_api):
    assert upload(customer_api, rental.pk, "chat").status_code == 201
    mallory = APIClient()
    mallory.force_authenticate(other_customer)
    for path in (
        f"/api/v1/orders/{sized['id']}/benchmark-plan",
        f"/api/v1/rentals/{rental.pk}/benchmark-plan",
        f"/api/v1/rentals/{rental.pk}/benchmarks",
    ):
        resp = mallory.get(path)
        assert resp.status_code == 404 and resp.json()["error"]["code"] == "not_found", path
    assert upload(mallory, rental.pk, "rag").status_code == 404
    assert BenchmarkRun.objects.count() == 1


def test_a_read_token_reads_and_cannot_upload(rental, customer):
    reader = APIClient()
    reader.credentials(HTTP_AUTHORIZATION=f"Bearer {token_create(account=customer, name='r', scope='read').raw}")
    assert reader.get(f"/api/v1/rentals/{rental.pk}/benchmark-plan").status_code == 200
    assert reader.get(f"/api/v1/rentals/{rental.pk}/benchmarks").status_code == 200
    resp = upload(reader, rental.pk, "chat")
    assert resp.status_code == 403 and resp.json()["error"]["code"] == "insufficient_scope"


def test_an_order_without_a_workload_has_no_plan(chains, customer, customer_api, catalog):
    key = ssh_key_add(account=customer, public_key=new_key_line(), name="k2")
    with time_machine.travel(T0, tick=False):
        resp = customer_api.post(
            "/api/v1/orders",
            {
                "region": "DFW-1",
                "gpu": "l4",
                "gpu_count": 1,
                "term": "monthly",
                "template": "ollama-ubuntu-24.04",
                "ssh_keys": [key.pk],
                "pay_currency": "LTC",
            },
            format="json",
        )
    assert resp.status_code == 201, resp.json()
    plan = customer_api.get(f"/api/v1/orders/{resp.json()['id']}/benchmark-plan")
    assert plan.status_code == 409 and plan.json()["error"]["code"] == "workload_missing"


def test_staff_see_measured_against_predicted_per_card_and_format(rental, customer_api, admin_client):
    for trace in ("chat", "rag", "batch"):
        assert upload(customer_api, rental.pk, trace).status_code == 201
    page = admin_client.get("/admin/rentals/benchmarkcalibration/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "<svg" in html and "L4 · fp8" in html
    runs = BenchmarkRun.objects.filter(rental=rental)
    measured = sum(r.output_tokens_per_s for r in runs) / 3
    predicted = sum(r.predicted_output_tokens_per_s for r in runs) / 3
    assert f"{measured:,.1f}" in html and f"{predicted:,.1f}" in html
    listed = admin_client.get("/admin/rentals/benchmarkrun/")
    assert listed.status_code == 200 and listed.context["cl"].result_count == 3
    one = admin_client.get(f"/admin/rentals/benchmarkrun/{runs.first().pk}/change/")
    assert one.status_code == 200 and "RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8" in one.content.decode()


def test_a_plan_is_sized_once_per_order(sized, customer_api, monkeypatch):
    """Sizing it takes 8-13 ms of CPU: asked again, the plan is the one kept."""
    import sizing.benchmarks

    calls = []
    real = sizing.benchmarks.benchmark_plan

    def counted(**kwargs):
        calls.append(1)
        return real(**kwargs)

    monkeypatch.setattr(sizing.benchmarks, "benchmark_plan", counted)
    path = f"/api/v1/orders/{sized['id']}/benchmark-plan"
    first = customer_api.get(path).json()
    assert customer_api.get(path).json() == first and len(calls) == 1
