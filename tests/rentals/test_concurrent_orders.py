"""Never oversell: 40 orders at once, through the API, each on its own database
connection, for the last 4 free GPUs of a card."""

import threading

import pytest
from django.db import connection
from rest_framework.test import APIClient

from accounts.services import ssh_key_add
from billing.models import Invoice
from catalog.models import Slot, SlotStatus
from rentals.models import Order
from tests.rentals.helpers import new_key_line


@pytest.mark.django_db(transaction=True)
def test_forty_concurrent_orders_for_the_last_four_gpus(chains, catalog, customer, settings):
    # One account places them all: lift its cap on unpaid orders (tests/rentals/test_unpaid.py holds that).
    settings.UNPAID_ORDERS_MAX = settings.UNPAID_GPUS_MAX = 100
    key = ssh_key_add(account=customer, public_key=new_key_line(), name="k")
    slots = Slot.objects.filter(host__gpu__slug="rtx-4090", host__region__code="IAD-1")
    slots.update(status=SlotStatus.RENTED, holder="external")
    last_four = list(slots.order_by("host__name", "index").values_list("pk", flat=True)[:4])
    Slot.objects.filter(pk__in=last_four).update(status=SlotStatus.FREE, holder="")
    body = {
        "region": "IAD-1",
        "gpu": "rtx-4090",
        "gpu_count": 1,
        "term": "weekly",
        "terms": 1,
        "template": "ubuntu-24.04",
        "addons": [],
        "ssh_keys": [key.pk],
        "pay_currency": "USDC",
    }
    barrier = threading.Barrier(40)
    results, lock = [], threading.Lock()

    def order(n: int) -> None:
        client = APIClient()
        client.force_authenticate(customer)
        try:
            barrier.wait()
            resp = client.post("/api/v1/orders", body, format="json")
            outcome = (resp.status_code, resp.json().get("error", {}).get("code"))
        finally:
            connection.close()
        with lock:
            results.append(outcome)

    threads = [threading.Thread(target=order, args=(n,)) for n in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)

    assert len(results) == 40
    assert results.count((201, None)) == 4
    assert results.count((409, "insufficient_stock")) == 36
    assert Order.objects.count() == 4 and Invoice.objects.count() == 4
    reserved = Slot.objects.filter(pk__in=last_four, status=SlotStatus.RESERVED)
    assert sorted(reserved.values_list("holder", flat=True)) == sorted(f"order:{o.pk}" for o in Order.objects.all())
    assert not slots.filter(status=SlotStatus.FREE).exists()
    # Invoice numbers stayed gap-free although 36 transactions rolled back.
    assert sorted(Invoice.objects.values_list("number", flat=True)) == [
        f"GRH-{Invoice.objects.first().created_at.year}-00000{i}" for i in range(1, 5)
    ]
