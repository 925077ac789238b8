"""Slot reservation never oversells, even under concurrent orders on PostgreSQL."""

import threading

import pytest
from django.db import connection, transaction

from catalog.models import GpuModel, Region, Slot, SlotStatus
from catalog.services import slots_release, slots_reserve
from core.errors import Conflict


def _leave_free(gpu_slug: str, region_code: str, free_per_host: list[int]) -> None:
    """Occupy every slot of the card in the region except `free_per_host[i]` on host i."""
    Slot.objects.filter(host__gpu__slug=gpu_slug, host__region__code=region_code).update(
        status=SlotStatus.RENTED, holder="external"
    )
    hosts = list(
        Slot.objects.filter(host__gpu__slug=gpu_slug, host__region__code=region_code)
        .values_list("host_id", flat=True)
        .distinct()
        .order_by("host_id")
    )
    for host_id, n in zip(hosts, free_per_host, strict=False):
        ids = list(Slot.objects.filter(host_id=host_id).order_by("index").values_list("pk", flat=True)[:n])
        Slot.objects.filter(pk__in=ids).update(status=SlotStatus.FREE, holder="")


@pytest.mark.django_db
def test_best_fit_keeps_whole_hosts_free(catalog):
    _leave_free("h100-sxm", "IAD-1", [8, 3, 1, 8])
    region, gpu = Region.objects.get(code="IAD-1"), GpuModel.objects.get(slug="h100-sxm")
    r1 = slots_reserve(region=region, gpu=gpu, count=1, holder="order:1")
    assert r1.host.slots.filter(status=SlotStatus.FREE).count() == 0  # took the host with exactly 1 free
    r2 = slots_reserve(region=region, gpu=gpu, count=2, holder="order:2")
    assert r2.host.slots.filter(status=SlotStatus.FREE).count() == 1  # the 3-free host, not an 8
    r8 = slots_reserve(region=region, gpu=gpu, count=8, holder="order:3")
    assert len(r8.slots) == 8 and {s.status for s in r8.slots} == {SlotStatus.RESERVED}
    slots_reserve(region=region, gpu=gpu, count=8, holder="order:5")
    with pytest.raises(Conflict) as exc:
        slots_reserve(region=region, gpu=gpu, count=4, holder="order:4")
    assert exc.value.code == "insufficient_stock"
    assert slots_release(holder="order:3") == 8
    assert slots_reserve(region=region, gpu=gpu, count=4, holder="order:4").host == r8.host


@pytest.mark.django_db(transaction=True)
def test_forty_concurrent_reservations_for_the_last_four_gpus(catalog):
    _leave_free("rtx-4090", "PDX-1", [1, 1, 2])  # the last 4 free RTX 4090s in PDX-1, on three hosts
    region, gpu = Region.objects.get(code="PDX-1"), GpuModel.objects.get(slug="rtx-4090")
    barrier = threading.Barrier(40)
    results: list[str] = []
    lock = threading.Lock()

    def order(n: int) -> None:
        try:
            barrier.wait()
            with transaction.atomic():
                slots_reserve(region=region, gpu=gpu, count=1, holder=f"order:{n}")
            outcome = "ok"
        except Conflict as exc:
            outcome = exc.code
        finally:
            connection.close()
        with lock:
            results.append(outcome)

    threads = [threading.Thread(target=order, args=(n,)) for n in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)

    assert len(results) == 40
    assert results.count("ok") == 4
    assert results.count("insufficient_stock") == 36
    reserved = Slot.objects.filter(host__gpu=gpu, host__region=region, status=SlotStatus.RESERVED)
    assert reserved.count() == 4
    assert len(set(reserved.values_list("holder", flat=True))) == 4  # one slot per successful order
    assert not Slot.objects.filter(host__gpu=gpu, host__region=region, status=SlotStatus.FREE).exists()
