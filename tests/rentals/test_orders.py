"""Orders through the API: validation, pricing snapshot, reservation, invoice,
Idempotency-Key, the sizing refusal, cancellation and expiry."""

from datetime import datetime, timedelta
from decimal import Decimal

import pytest
import time_machine

from accounts.models import SshKey
from accounts.services import ssh_key_add
from billing import services as billing
from billing.models import Invoice, InvoiceCounter
from catalog.models import Slot, SlotStatus
from rentals.models import IdempotencyKey, Order
from tests.rentals.helpers import new_key_line

pytestmark = pytest.mark.django_db

START = "2026-11-30 12:00:00+00:00"


@pytest.fixture
def ssh_key(customer) -> SshKey:
    return ssh_key_add(account=customer, public_key=new_key_line(), name="laptop")


@pytest.fixture
def frozen():
    with time_machine.travel(START, tick=False) as traveller:
        yield traveller


def order_body(ssh_key, **overrides):
    body = {
        "region": "DFW-1",
        "gpu": "h100-sxm",
        "gpu_count": 8,
        "term": "monthly",
        "terms": 1,
        "template": "vllm-0.9-ubuntu-24.04",
        "addons": [],
        "ssh_keys": [ssh_key.pk],
        "pay_currency": "BTC",
    }
    return body | overrides


def free(gpu: str, region: str) -> int:
    return Slot.objects.filter(host__gpu__slug=gpu, host__region__code=region, status=SlotStatus.FREE).count()


def test_order_reserves_snapshots_and_invoices(chains, customer_api, ssh_key, catalog, frozen):
    before = free("h100-sxm", "DFW-1")
    resp = customer_api.post("/api/v1/orders", order_body(ssh_key), format="json")
    assert resp.status_code == 201, resp.json()
    body = resp.json()
    assert body["status"] == "awaiting_payment"
    assert (body["region"], body["gpu"], body["gpu_count"], body["term"]) == ("DFW-1", "h100-sxm", 8, "monthly")
    assert body["total_usd"] == "12168.00" and body["per_gpu_hour_usd"] == "2.11"
    assert body["lines"][0] | {"description": ""} == {
        "code": "gpu",
        "description": "",
        "quantity": 8,
        "unit_usd": "1690.00",
        "terms": 1,
        "subtotal_usd": "13520.00",
        "discount_pct": 10,
        "discount_usd": "1352.00",
        "amount_usd": "12168.00",
    }
    assert body["ssh_keys"] == [{"id": ssh_key.pk, "name": "laptop", "fingerprint": ssh_key.fingerprint}]
    invoice = body["invoice"]
    assert {k: invoice[k] for k in ("status", "exception", "amount_usd", "pay_currency")} == {
        "status": "new",
        "exception": "none",
        "amount_usd": "12168.00",
        "pay_currency": "BTC",
    }
    assert invoice["number"] == "GRH-2026-000001"
    assert invoice["amount"] == "12808422"  # 12168 / 95000 BTC, rounded up to the satoshi
    assert invoice["address"].startswith("bc1q") and invoice["payment_uri"].startswith("bitcoin:")
    assert invoice["expires_at"] == "2026-11-30T12:30:00Z"
    order = Order.objects.get(pk=body["id"])
    assert order.host.slots.filter(holder=f"order:{order.pk}", status=SlotStatus.RESERVED).count() == 8
    assert free("h100-sxm", "DFW-1") == before - 8
    assert customer_api.get(f"/api/v1/orders/{order.pk}").json() == body
    assert [o["id"] for o in customer_api.get("/api/v1/orders").json()["results"]] == [order.pk]


def test_the_price_on_the_order_does_not_follow_catalog_edits(chains, customer_api, ssh_key, catalog):
    from catalog.models import GpuModel

    body = customer_api.post("/api/v1/orders", order_body(ssh_key, gpu_count=1), format="json").json()
    GpuModel.objects.filter(slug="h100-sxm").update(monthly_usd=Decimal("1990.00"))
    again = customer_api.get(f"/api/v1/orders/{body['id']}").json()
    assert again["total_usd"] == "1690.00" and again["lines"][0]["unit_usd"] == "1690.00"


@pytest.mark.parametrize(
    "overrides,status,code",
    [
        ({"region": "LHR-1"}, 400, "unknown_region"),
        ({"gpu": "mi300x", "template": "rocm-6.4-pytorch", "region": "IAD-1"}, 409, "region_unavailable"),
        ({"gpu": "b200", "gpu_count": 1}, 400, "min_gpus"),
        ({"gpu_count": 3}, 400, "invalid_gpu_count"),
        ({"template": "rocm-6.4-pytorch"}, 400, "template_incompatible"),
        ({"template": "windows-95"}, 400, "unknown_template"),
        ({"addons": ["egress-overage"]}, 400, "unknown_addon"),
        ({"ssh_keys": []}, 400, "ssh_key_required"),
        ({"ssh_keys": [999999]}, 400, "unknown_ssh_key"),
        ({"pay_currency": "DOGE"}, 400, "unknown_currency"),
        ({"terms": 0}, 400, "invalid"),
        ({"workload": "70b please"}, 400, "invalid"),
        ({"workload": {"model": "no-such-model", "precision": "fp8"}}, 400, "unknown_model"),
    ],
)
def test_refusals_leave_nothing_behind(chains, customer_api, ssh_key, catalog, overrides, status, code):
    stock = Slot.objects.filter(status=SlotStatus.FREE).count()
    resp = customer_api.post("/api/v1/orders", order_body(ssh_key, **overrides), format="json")
    assert resp.status_code == status, resp.json()
    assert resp.json()["error"]["code"] == code
    assert not Order.objects.exists() and not Invoice.objects.exists()
    assert Slot.objects.filter(status=SlotStatus.FREE).count() == stock


def test_another_accounts_ssh_key_is_unknown(chains, customer_api, other_customer, catalog):
    theirs = ssh_key_add(account=other_customer, public_key=new_key_line(), name="theirs")
    resp = customer_api.post("/api/v1/orders", order_body(theirs), format="json")
    assert resp.json()["error"]["code"] == "unknown_ssh_key"


def test_rate_unavailable_leaves_no_gap_in_invoice_numbers(chains, customer_api, ssh_key, catalog, settings):
    settings.MANUAL_RATES_USD = ""
    settings.RATE_PROVIDERS = []
    resp = customer_api.post("/api/v1/orders", order_body(ssh_key), format="json")
    assert resp.status_code == 409 and resp.json()["error"]["code"] == "rate_unavailable"
    assert not Order.objects.exists() and not InvoiceCounter.objects.filter(last__gt=0).exists()
    assert free("h100-sxm", "DFW-1") == 26


def test_insufficient_stock_is_409(chains, customer_api, ssh_key, catalog, settings):
    settings.UNPAID_ORDERS_MAX, settings.UNPAID_GPUS_MAX = (
        3,
        24,
    )  # this is about stock, not about what one account may hold unpaid
    settings.UNPAID_HOLD_SHARE_PCT = 100  # nor about its share of the card's stock (test_unpaid_address.py)
    # DFW-1 has two whole free H100 SXM hosts; the third 8-GPU order finds none.
    for _ in range(2):
        assert customer_api.post("/api/v1/orders", order_body(ssh_key), format="json").status_code == 201
    resp = customer_api.post("/api/v1/orders", order_body(ssh_key), format="json")
    assert resp.status_code == 409
    assert resp.json()["error"] == {
        "code": "insufficient_stock",
        "message": "No host in DFW-1 has 8 free H100 SXM right now.",
        "details": {"region": "DFW-1", "gpu": "h100-sxm", "gpu_count": 8},
    }


def test_workload_that_does_not_fit_is_refused_with_the_breakdown_and_the_cheapest_fit(
    chains, customer_api, ssh_key, catalog
):
    workload = {"model": "llama-3.1-70b", "precision": "bf16", "context": 8192, "concurrency": 1}
    resp = customer_api.post("/api/v1/orders", order_body(ssh_key, gpu_count=1, workload=workload), format="json")
    assert resp.status_code == 400
    err = resp.json()["error"]
    assert err["code"] == "does_not_fit"
    # What vLLM may use of an H100: 95 % of the 79.18 GiB it reports.
    assert err["details"]["per_gpu"]["capacity_gb"] == 80.77
    assert err["details"]["per_gpu"]["required_gb"] > 141
    cheapest = err["details"]["cheapest_fit"]
    # 141 GB in BF16: four 48 GB A40s ($883.20 a month) hold it for less than any single card.
    assert (cheapest["gpu"], cheapest["gpu_count"], cheapest["monthly_usd"]) == ("a40", 4, "883.20")
    assert cheapest["launch_command"].startswith("vllm serve meta-llama/Llama-3.1-70B-Instruct ")
    assert not Order.objects.exists()
    # A profile sent with the order changes nothing: the engine's budget gates it.
    guide = {**workload, "profile": "guide"}
    resp = customer_api.post("/api/v1/orders", order_body(ssh_key, gpu_count=1, workload=guide), format="json")
    assert resp.status_code == 400 and resp.json()["error"]["details"]["per_gpu"]["capacity_gb"] == 80.77


def test_a_format_the_card_cannot_run_is_refused(chains, customer_api, ssh_key, catalog):
    # The template's vLLM (0.9.2) has no MXFP4 kernels at all (nor gpt-oss): not on an A100.
    workload = {"model": "gpt-oss-20b", "precision": "mxfp4", "context": 4096}
    resp = customer_api.post(
        "/api/v1/orders", order_body(ssh_key, gpu="a100-sxm", gpu_count=2, workload=workload), format="json"
    )
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "model_unsupported"
    (fmt,) = [r for r in resp.json()["error"]["details"]["reasons"] if r["code"] == "format_unsupported"]
    assert "bf16" in fmt["details"]["formats"]
    # AWQ has no kernels on the MI300X.
    awq = {"model": "llama-3.1-8b", "precision": "awq"}
    resp = customer_api.post(
        "/api/v1/orders",
        order_body(ssh_key, gpu="mi300x", gpu_count=1, template="rocm-6.4-pytorch", workload=awq),
        format="json",
    )
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "format_unsupported"
    assert not Order.objects.exists()


def test_workload_that_fits_is_kept_on_the_order(chains, customer_api, ssh_key, catalog):
    workload = {"model": "llama-3.1-70b", "precision": "fp8", "context": 8192, "concurrency": 1}
    resp = customer_api.post("/api/v1/orders", order_body(ssh_key, gpu_count=1, workload=workload), format="json")
    assert resp.status_code == 201, resp.json()
    body = resp.json()
    assert body["workload"] == {**workload, "profile": "vllm"}  # as it was sized
    assert body["sizing"]["fits"] is True and body["sizing"]["profile"] == "vllm"
    # The order keeps the vllm serve line it was sized for.
    launch = body["launch_command"]
    assert launch == body["sizing"]["launch"]["command"]
    assert launch.startswith("vllm serve RedHatAI/Meta-Llama-3.1-70B-Instruct-FP8 --tensor-parallel-size 1 ")
    assert "--max-model-len 8192" in launch and "--max-num-seqs 1" in launch
    assert Order.objects.get(pk=body["id"]).launch_command == launch
    # Once paid, the rental shows it (the lifecycle tests pay for real; here the invoice is marked settled).
    from django.utils import timezone

    from billing.models import Invoice, InvoiceStatus
    from rentals.services.lifecycle import rental_from_order

    Invoice.objects.filter(pk=body["invoice"]["id"]).update(status=InvoiceStatus.SETTLED, settled_at=timezone.now())
    rental = rental_from_order(order_id=body["id"])
    (shown,) = [r for r in customer_api.get("/api/v1/rentals").json()["results"] if r["id"] == rental.pk]
    assert shown["launch_command"] == launch and shown["template"] == "vllm-0.9-ubuntu-24.04"


def test_idempotency_key(chains, customer_api, ssh_key, catalog, frozen):
    headers = {"HTTP_IDEMPOTENCY_KEY": "order-7f3a"}
    first = customer_api.post("/api/v1/orders", order_body(ssh_key, gpu_count=1), format="json", **headers)
    again = customer_api.post("/api/v1/orders", order_body(ssh_key, gpu_count=1), format="json", **headers)
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json()
    assert again["Idempotent-Replayed"] == "true"
    assert Order.objects.count() == 1
    other = customer_api.post("/api/v1/orders", order_body(ssh_key, gpu_count=2), format="json", **headers)
    assert other.status_code == 422 and other.json()["error"]["code"] == "idempotency_key_reused"
    frozen.shift(timedelta(hours=24, seconds=1))
    later = customer_api.post("/api/v1/orders", order_body(ssh_key, gpu_count=2), format="json", **headers)
    assert later.status_code == 201 and Order.objects.count() == 2


def test_idempotency_remembers_refusals_too(chains, customer_api, ssh_key, catalog):
    headers = {"HTTP_IDEMPOTENCY_KEY": "k1"}
    body = order_body(ssh_key, region="IAD-1", gpu="b200", gpu_count=2)
    first = customer_api.post("/api/v1/orders", body, format="json", **headers)
    assert first.status_code == 409 and first.json()["error"]["code"] == "region_unavailable"
    again = customer_api.post("/api/v1/orders", body, format="json", **headers)
    assert again.status_code == 409 and again.json() == first.json() and again["Idempotent-Replayed"] == "true"


def test_new_idempotency_keys_are_limited_per_account(chains, customer_api, ssh_key, catalog, settings):
    """Each new key is a stored row, a refusal's answer included: a fresh key
    with each of many refused orders is 429 past IDEMPOTENCY_KEYS_PER_HOUR, and
    nothing more is stored; a key already sent is replayed as before."""
    from django.core.cache import cache

    cache.clear()
    settings.IDEMPOTENCY_KEYS_PER_HOUR = 2
    body = order_body(ssh_key, region="IAD-1", gpu="b200", gpu_count=2)  # refused: region_unavailable
    answers = [
        customer_api.post("/api/v1/orders", body, format="json", HTTP_IDEMPOTENCY_KEY=f"fresh-{i}") for i in range(3)
    ]
    assert [a.status_code for a in answers] == [409, 409, 429]
    assert answers[2].json()["error"]["code"] == "throttled" and answers[2]["Retry-After"]
    assert IdempotencyKey.objects.count() == 2
    again = customer_api.post("/api/v1/orders", body, format="json", HTTP_IDEMPOTENCY_KEY="fresh-0")
    assert again.status_code == 409 and again["Idempotent-Replayed"] == "true"
    cache.clear()
    # A request refused as sent (400) stores nothing: its key is not counted either.
    bad = order_body(ssh_key, term="fortnightly")
    for i in range(3):
        resp = customer_api.post("/api/v1/orders", bad, format="json", HTTP_IDEMPOTENCY_KEY=f"typo-{i}")
        assert resp.status_code == 400, resp.json()
    stored = [
        customer_api.post("/api/v1/orders", body, format="json", HTTP_IDEMPOTENCY_KEY=f"next-{i}").status_code
        for i in range(3)
    ]
    assert stored == [409, 409, 429]
    cache.clear()


def test_idempotency_forgets_a_request_refused_as_sent(chains, customer_api, ssh_key, catalog, settings):
    """A 400 (the body as sent) or a 429 (its rate) did nothing: no answer is
    stored, however much of the body the refusal quotes, and the key may be sent
    again with a corrected body."""
    headers = {"HTTP_IDEMPOTENCY_KEY": "k2"}
    huge = "w" * 200_000
    first = customer_api.post("/api/v1/orders", order_body(ssh_key, term=huge), format="json", **headers)
    assert first.status_code == 400 and first.json()["error"]["code"] == "invalid"
    assert huge in first.content.decode()  # DRF's choice error quotes the value
    assert not IdempotencyKey.objects.exists()
    again = customer_api.post("/api/v1/orders", order_body(ssh_key, term=huge), format="json", **headers)
    assert again.status_code == 400 and "Idempotent-Replayed" not in again
    settings.SIZING_NEW_PER_ADDRESS = 1
    workload = {"model": "llama-3.1-8b", "precision": "bf16", "context": 4096, "concurrency": 1}
    sized = order_body(ssh_key, gpu_count=1, workload=workload)
    assert customer_api.post("/api/v1/orders", sized, format="json").status_code == 201
    throttled = customer_api.post("/api/v1/orders", sized, format="json", **headers)
    assert throttled.status_code == 429 and not IdempotencyKey.objects.exists()
    fixed = customer_api.post("/api/v1/orders", order_body(ssh_key, gpu_count=1), format="json", **headers)
    assert fixed.status_code == 201 and "Idempotent-Replayed" not in fixed
    assert IdempotencyKey.objects.get().response_status == 201


def test_an_order_with_a_workload_counts_as_a_new_sizing(chains, customer_api, ssh_key, catalog, settings):
    """Its workload is sized afresh (and on a refusal the cheapest fit is searched
    over the region): with the client's checks, comparisons and new
    recommendations, under SIZING_NEW_PER_ADDRESS."""
    settings.SIZING_NEW_PER_ADDRESS = 2
    too_big = {"model": "llama-3.1-70b", "precision": "bf16", "context": 8192, "concurrency": 1}
    body = order_body(ssh_key, gpu_count=1, workload=too_big)
    assert customer_api.post("/api/v1/orders", body, format="json").json()["error"]["code"] == "does_not_fit"
    check = {"model": "llama-3.1-8b", "precision": "bf16", "context": 4096, "concurrency": 1, "gpu": "l4"}
    assert customer_api.post("/api/v1/sizing/check", check, format="json").status_code == 200
    refused = customer_api.post("/api/v1/orders", body, format="json")
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "throttled"
    wait = refused.json()["error"]["details"]["retry_after_seconds"]
    assert refused["Retry-After"] == str(wait) and 1 <= wait <= settings.SIZING_NEW_WINDOW_SECONDS
    # An order without a workload is not a sizing.
    assert customer_api.post("/api/v1/orders", order_body(ssh_key, gpu_count=1), format="json").status_code == 201


def test_cancel_releases_the_slots_and_voids_the_invoice(chains, customer_api, ssh_key, catalog):
    before = free("h100-sxm", "DFW-1")
    order = customer_api.post("/api/v1/orders", order_body(ssh_key, gpu_count=4), format="json").json()
    assert free("h100-sxm", "DFW-1") == before - 4
    resp = customer_api.post(f"/api/v1/orders/{order['id']}/cancel")
    assert resp.status_code == 200
    assert resp.json()["status"] == "cancelled" and resp.json()["invoice"]["status"] == "invalid"
    assert free("h100-sxm", "DFW-1") == before
    again = customer_api.post(f"/api/v1/orders/{order['id']}/cancel")
    assert again.status_code == 409 and again.json()["error"]["code"] == "order_not_cancellable"


def test_an_expired_order_can_be_cancelled_and_is_then_final(chains, customer_api, ssh_key, catalog):
    from django.utils import timezone

    from rentals import services

    order = customer_api.post("/api/v1/orders", order_body(ssh_key, gpu_count=1), format="json").json()
    later = timezone.now() + timedelta(hours=1)
    with time_machine.travel(later, tick=False):
        billing.invoices_advance_due(now=later)
        services.orders_reconcile(now=later)
        assert customer_api.get(f"/api/v1/orders/{order['id']}").json()["status"] == "expired"
        resp = customer_api.post(f"/api/v1/orders/{order['id']}/cancel")
        assert resp.status_code == 200, resp.json()
        assert resp.json()["status"] == "cancelled" and resp.json()["invoice"]["status"] == "invalid"
        requote = customer_api.post(f"/api/v1/invoices/{order['invoice']['id']}/requote", {}, format="json")
    assert requote.status_code == 409


def test_a_payment_left_unconfirmed_gives_the_gpus_back_and_still_fills_the_order(
    chains, customer_api, ssh_key, catalog, frozen
):
    # Sent in time with a fee too low to confirm: the order does not hold a host for the
    # whole monitoring window. Confirmed later, it is filled from the stock left.
    from rentals import services
    from rentals.models import Rental

    before = free("h100-sxm", "DFW-1")
    order = customer_api.post("/api/v1/orders", order_body(ssh_key), format="json").json()
    number, amount = order["invoice"]["number"], int(order["invoice"]["amount"])
    billing.payment_record_manual(
        invoice_number=number, txid="ab" * 32, amount=amount, confirmations=0, reason="seen", actor=None
    )
    quote_end = datetime.fromisoformat(START) + timedelta(minutes=30)
    held = quote_end + timedelta(minutes=119)
    assert services.orders_reconcile(now=held) == 0
    assert Order.objects.get(pk=order["id"]).status == "awaiting_payment"
    assert free("h100-sxm", "DFW-1") == before - 8
    released = quote_end + timedelta(minutes=121)
    assert services.orders_reconcile(now=released) == 1
    closed = Order.objects.get(pk=order["id"])
    assert closed.status == "expired" and "unconfirmed" in closed.close_reason
    assert free("h100-sxm", "DFW-1") == before
    assert services.orders_reconcile(now=released) == 0  # a second run changes nothing
    with time_machine.travel(released + timedelta(minutes=30), tick=False):
        billing.payment_record_manual(
            invoice_number=number, txid="ab" * 32, amount=amount, confirmations=2, reason="seen", actor=None
        )
        assert Invoice.objects.get(number=number).status == "settled"
        services.orders_reconcile()
    assert Order.objects.get(pk=order["id"]).status == "paid"
    assert Rental.objects.filter(order_id=order["id"]).exists()
    assert free("h100-sxm", "DFW-1") == before - 8


def test_one_order_that_fails_in_the_reconcile_job_holds_back_none_after_it(
    chains, customer_api, ssh_key, catalog, monkeypatch
):
    from django.utils import timezone

    from rentals import services
    from rentals.services import orders as order_services

    first, second = (
        customer_api.post("/api/v1/orders", order_body(ssh_key, gpu_count=1), format="json").json() for _ in range(2)
    )
    later = timezone.now() + timedelta(hours=1)
    billing.invoices_advance_due(now=later)  # expired; their release is the reconcile job's here
    real = order_services.order_expire

    def expire(*, order_id, now=None):
        if order_id == first["id"]:
            raise RuntimeError("bad data")
        return real(order_id=order_id, now=now)

    monkeypatch.setattr(order_services, "order_expire", expire)
    assert services.orders_reconcile(now=later) == 1
    statuses = dict(Order.objects.values_list("pk", "status"))
    assert (statuses[first["id"]], statuses[second["id"]]) == ("awaiting_payment", "expired")
    monkeypatch.setattr(order_services, "order_expire", real)
    assert services.orders_reconcile(now=later) == 1
    assert Order.objects.get(pk=first["id"]).status == "expired"


def test_an_order_with_a_payment_seen_cannot_be_cancelled(chains, customer_api, ssh_key, catalog):
    order = customer_api.post("/api/v1/orders", order_body(ssh_key, gpu_count=1), format="json").json()
    billing.payment_record_manual(
        invoice_number=order["invoice"]["number"], txid="t", amount=1000, confirmations=0, reason="test", actor=None
    )
    resp = customer_api.post(f"/api/v1/orders/{order['id']}/cancel")
    assert resp.status_code == 409 and resp.json()["error"]["code"] == "order_has_payments"


def _placed_and_lapsed(customer_api, ssh_key, frozen, capture) -> dict:
    """2 x L4 in PDX-1 ordered, then left to expire (the expiry job run past the quote)."""
    order = customer_api.post(
        "/api/v1/orders", order_body(ssh_key, gpu="l4", region="PDX-1", gpu_count=2), format="json"
    ).json()
    frozen.shift(timedelta(minutes=31))
    with capture(execute=True):
        billing.invoices_advance_due()
    return order


def test_expiry_releases_the_reservation_and_a_requote_takes_it_again(
    chains, customer_api, ssh_key, catalog, frozen, django_capture_on_commit_callbacks, settings
):
    before = free("l4", "PDX-1")
    order = _placed_and_lapsed(customer_api, ssh_key, frozen, django_capture_on_commit_callbacks)
    body = customer_api.get(f"/api/v1/orders/{order['id']}").json()
    assert (body["status"], body["invoice"]["status"]) == ("expired", "expired")
    assert free("l4", "PDX-1") == before
    # The lapse limit is for new orders: a re-quote places none (the lapsed order is counted, at its limit).
    settings.UNPAID_LAPSES_MAX = 1
    resp = customer_api.post(f"/api/v1/invoices/{order['invoice']['id']}/requote", {}, format="json")
    assert resp.status_code == 200 and resp.json()["status"] == "new"
    assert customer_api.get(f"/api/v1/orders/{order['id']}").json()["status"] == "awaiting_payment"
    assert free("l4", "PDX-1") == before - 2


def test_a_lapsed_order_is_not_requoted_at_prices_since_changed(
    chains, customer_api, ssh_key, catalog, frozen, django_capture_on_commit_callbacks
):
    """Placed while the card was cheaper, left to expire, re-quoted after the
    price rose: refused (409 order_prices_changed), a new order pays today's
    price; at unchanged prices the re-quote goes through as before."""
    from catalog.models import GpuModel

    order = _placed_and_lapsed(customer_api, ssh_key, frozen, django_capture_on_commit_callbacks)
    l4 = GpuModel.objects.get(slug="l4")
    was = l4.monthly_usd
    GpuModel.objects.filter(pk=l4.pk).update(monthly_usd=was + 100)
    resp = customer_api.post(f"/api/v1/invoices/{order['invoice']['id']}/requote", {}, format="json")
    assert resp.status_code == 409, resp.json()
    error = resp.json()["error"]
    assert error["code"] == "order_prices_changed"
    assert error["details"]["order_total_usd"] == order["total_usd"]
    assert error["details"]["total_usd_now"] != order["total_usd"]
    assert customer_api.get(f"/api/v1/orders/{order['id']}").json()["status"] == "expired"
    GpuModel.objects.filter(pk=l4.pk).update(monthly_usd=was)
    resp = customer_api.post(f"/api/v1/invoices/{order['invoice']['id']}/requote", {}, format="json")
    assert resp.status_code == 200 and resp.json()["status"] == "new"


def test_other_accounts_get_404_on_every_order_and_rental_endpoint(
    chains, customer_api, ssh_key, catalog, other_customer, api
):
    order = customer_api.post("/api/v1/orders", order_body(ssh_key, gpu_count=1), format="json").json()
    api.force_authenticate(other_customer)
    for method, path in [
        ("get", f"/api/v1/orders/{order['id']}"),
        ("post", f"/api/v1/orders/{order['id']}/cancel"),
        ("get", f"/api/v1/invoices/{order['invoice']['id']}"),
    ]:
        resp = getattr(api, method)(path)
        assert resp.status_code == 404 and resp.json()["error"]["code"] == "not_found", path
    assert api.get("/api/v1/orders").json()["results"] == []


def test_an_order_paid_from_credit_cannot_be_cancelled(chains, customer, customer_api, ssh_key, catalog):
    billing.credit_post(account_id=customer.pk, kind="adjustment", amount_usd=Decimal("5000.00"), reason="t")
    order = customer_api.post("/api/v1/orders", order_body(ssh_key, gpu_count=1), format="json").json()
    paid = customer_api.post(f"/api/v1/invoices/{order['invoice']['id']}/pay-with-credit")
    assert paid.json()["status"] == "settled"
    resp = customer_api.post(f"/api/v1/orders/{order['id']}/cancel")
    assert resp.status_code == 409 and resp.json()["error"]["code"] == "order_has_payments"
    assert Order.objects.get(pk=order["id"]).host.slots.filter(holder=f"order:{order['id']}").count() == 1


def test_an_invalid_invoice_releases_the_reservation(
    chains, customer_api, ssh_key, catalog, frozen, django_capture_on_commit_callbacks
):
    before = free("l4", "PDX-1")
    order = customer_api.post(
        "/api/v1/orders", order_body(ssh_key, gpu="l4", region="PDX-1", gpu_count=1), format="json"
    ).json()
    billing.payment_record_manual(
        invoice_number=order["invoice"]["number"],
        txid="never-confirms",
        amount=int(order["invoice"]["amount"]),
        confirmations=0,
        reason="t",
        actor=None,
    )
    frozen.shift(timedelta(hours=25))  # past the monitoring window, still unconfirmed
    with django_capture_on_commit_callbacks(execute=True):
        billing.invoices_advance_due()
    body = customer_api.get(f"/api/v1/orders/{order['id']}").json()
    assert (body["status"], body["invoice"]["status"]) == ("expired", "invalid")
    assert free("l4", "PDX-1") == before


@pytest.mark.parametrize("profile", ["guide", "vllm", None])
def test_orders_are_gated_by_the_engine_whatever_profile_is_sent(chains, customer_api, ssh_key, catalog, profile):
    """70B in FP8 with two 10k sequences on one H100 SXM: the guide's arithmetic
    (weights + KV + 2 GB) says it fits, vLLM's budget says it does not. The
    order follows the engine even when the body asks for the guide."""
    workload = {"model": "llama-3.1-70b", "precision": "fp8", "context": 10000, "concurrency": 2}
    if profile is not None:
        workload["profile"] = profile
    guide = customer_api.post(
        "/api/v1/sizing/check", {**workload, "profile": "guide", "gpu": "h100-sxm", "gpu_count": 1}, format="json"
    )
    assert guide.json()["fits"] is True
    resp = customer_api.post("/api/v1/orders", order_body(ssh_key, gpu_count=1, workload=workload), format="json")
    assert resp.status_code == 400
    assert resp.json()["error"]["code"] == "does_not_fit"
    assert not Order.objects.exists()


@pytest.mark.parametrize(
    "override",
    [{"term": "X\x00Y"}, {"workload": {"model": "llama-3.1-8b", "precision": "X\x00Y"}}],
    ids=["term", "precision"],
)
def test_a_refusal_quoting_a_nul_character_is_answered_not_stored(chains, customer_api, ssh_key, catalog, override):
    """PostgreSQL's jsonb keeps no NUL. A refusal of the body as sent is not
    remembered (rentals/services/idempotency.py), so neither answer is a 500."""
    headers = {"HTTP_IDEMPOTENCY_KEY": "nul"}
    body = order_body(ssh_key, **override)
    first = customer_api.post("/api/v1/orders", body, format="json", **headers)
    assert first.status_code == 400 and "\\u0000" in first.content.decode()  # the refusal quotes it
    again = customer_api.post("/api/v1/orders", body, format="json", **headers)
    assert again.status_code == 400 and "Idempotent-Replayed" not in again
    assert again.json() == first.json() and not IdempotencyKey.objects.exists()


def test_a_remembered_answer_keeps_no_nul_character():
    """What is stored (a refusal once work began, or a success) is kept as
    jsonb keeps it: a NUL a detail quotes becomes U+FFFD."""
    from rentals.services.idempotency import storable

    assert storable({"k\x00": ["a\x00b", {"c": "\x00"}], "n": 1}) == {"k\ufffd": ["a\ufffdb", {"c": "\ufffd"}], "n": 1}
