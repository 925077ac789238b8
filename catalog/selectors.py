"""Catalog reads: what is offered and what is free right now."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from django.db.models import Count, Q

from catalog.models import GpuModel, Host, Region, SlotStatus
from core.errors import DomainError


@dataclass(frozen=True)
class StockRow:
    region: str  # region code
    gpu: str  # card slug
    available: int  # free GPUs in the region
    max_per_host: int  # the largest instance one host can still give
    hosts: int  # active hosts of this card in the region


def _hosts_free(region: Region | None = None, gpu: GpuModel | None = None):
    hosts = Host.objects.filter(is_active=True, region__is_active=True, gpu__is_active=True)
    if region is not None:
        hosts = hosts.filter(region=region)
    if gpu is not None:
        hosts = hosts.filter(gpu=gpu)
    return hosts.annotate(free=Count("slots", filter=Q(slots__status=SlotStatus.FREE)))


def stock(*, region: str | None = None, gpu: str | None = None) -> list[StockRow]:
    """Free GPUs per region and card, and the most one host can still give.
    One query; rows for every (region, card) that has hosts, free or not."""
    hosts = _hosts_free()
    if region is not None:
        hosts = hosts.filter(region__code=region)
    if gpu is not None:
        hosts = hosts.filter(gpu__slug=gpu)
    totals: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    order: dict[tuple[str, str], tuple[int, int]] = {}
    for code, slug, free, r_order, g_order in hosts.values_list(
        "region__code", "gpu__slug", "free", "region__sort_order", "gpu__sort_order"
    ):
        row = totals[(code, slug)]
        row[0] += free
        row[1] = max(row[1], free)
        row[2] += 1
        order[(code, slug)] = (r_order, g_order)
    keys = sorted(totals, key=lambda k: (order[k], k))
    return [StockRow(k[0], k[1], *totals[k]) for k in keys]


def hosts_with_free_slots(*, region: Region, gpu: GpuModel, at_least: int) -> list[tuple[int, int]]:
    """(host id, free slots) of the hosts that can take `at_least` more, best
    fit first (fewest free), then by name for a stable order."""
    rows = (
        _hosts_free(region=region, gpu=gpu)
        .filter(free__gte=at_least)
        .order_by("free", "name")
        .values_list("pk", "free")
    )
    return list(rows)


def region_get(*, code: str) -> Region:
    try:
        return Region.objects.get(code__iexact=code, is_active=True)
    except Region.DoesNotExist:
        raise DomainError(
            "unknown_region",
            f"No region {code!r}.",
            details={"regions": list(Region.objects.filter(is_active=True).values_list("code", flat=True))},
        ) from None


def gpu_get(*, slug: str) -> GpuModel:
    try:
        return GpuModel.objects.get(slug=slug.lower())
    except GpuModel.DoesNotExist:
        raise DomainError(
            "unknown_gpu",
            f"No card {slug!r}.",
            details={"gpus": list(GpuModel.objects.filter(is_active=True).values_list("slug", flat=True))},
        ) from None


def gpu_regions(*, gpu: GpuModel) -> list[str]:
    """Regions that have hosts of this card."""
    return list(
        Region.objects.filter(is_active=True, hosts__gpu=gpu, hosts__is_active=True)
        .distinct()
        .order_by("sort_order")
        .values_list("code", flat=True)
    )


def slots_by_status() -> list[dict]:
    """GPU slots of active hosts per region, card and status (free, reserved,
    rented, out of service): rows `{region, gpu, gpu_name, status, n}`."""
    rows = (
        Host.objects.filter(is_active=True, region__is_active=True)
        .values("region__code", "gpu__slug", "gpu__name", "gpu__sort_order", "slots__status")
        .annotate(n=Count("slots"))
        .order_by("region__code", "gpu__sort_order", "gpu__slug")
    )
    return [
        {
            "region": r["region__code"],
            "gpu": r["gpu__slug"],
            "gpu_name": r["gpu__name"],
            "status": r["slots__status"],
            "n": r["n"],
        }
        for r in rows
        if r["slots__status"] is not None
    ]


def host_gpu_totals() -> dict[tuple[str, str], int]:
    """GPUs (slots) of the active hosts per (region code, card slug), whatever their status."""
    return {
        (code, slug): n
        for code, slug, n in Host.objects.filter(is_active=True)
        .values_list("region__code", "gpu__slug")
        .annotate(n=Count("slots"))
    }


def stock_overview_axes() -> tuple[list[Region], list[GpuModel]]:
    """The active regions and every card, the two axes of the staff's stock overview."""
    return list(Region.objects.filter(is_active=True)), list(GpuModel.objects.all())
