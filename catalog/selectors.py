"""Catalog reads: what is offered and what is free right now."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import TypeVar

from django.db import connection
from django.db.models import Count

from catalog import feed
from catalog.models import (
    Addon,
    CatalogVersion,
    GpuModel,
    Host,
    MultiGpuDiscount,
    Region,
    Template,
    TermDiscount,
)
from core.errors import DomainError

T = TypeVar("T")


@dataclass(frozen=True)
class StockRow:
    region: str  # region code
    gpu: str  # card slug
    available: int  # free GPUs in the region
    max_per_host: int  # the largest instance one host can still give
    hosts: int  # active hosts of this card in the region


def _hosts_open(region: Region | None = None, gpu: GpuModel | None = None):
    hosts = Host.objects.filter(is_active=True, region__is_active=True, gpu__is_active=True)
    if region is not None:
        hosts = hosts.filter(region=region)
    if gpu is not None:
        hosts = hosts.filter(gpu=gpu)
    return hosts


def stock(
    *, region: str | None = None, gpu: str | None = None, catalog_now: CatalogSnapshot | None = None
) -> list[StockRow]:
    """Free GPUs per region and card, and the most one host can still give.
    Kept until stock changes where the change feed runs (stock_memo); else
    one query over the hosts' free counts (kept by triggers on the slots, see
    catalog/triggers.py), never a count over the slots, and on the host table
    alone: which regions and cards are active, their codes and their order come
    from the catalog in memory. Rows for every (region, card) that has hosts,
    free or not. `catalog_now`: the caller's catalog_current(), when it has it."""
    snapshot = catalog_now or catalog_current()
    return stock_memo(snapshot, ("rows", region, gpu), lambda: _stock_read(snapshot, region, gpu))


def stock_memo(snapshot: CatalogSnapshot, key: tuple, build: Callable[[], T]) -> T:
    """`build()`, kept until free slots or the catalog change, where the change
    feed runs and says when (catalog/feed.py); built every time otherwise."""
    state = feed.current()
    if state is None or state.version != snapshot.version:
        return build()
    return catalog_memo(snapshot, ("stock", state.stock_generation, *key), build)


def _stock_read(snapshot: CatalogSnapshot, region: str | None, gpu: str | None) -> list[StockRow]:
    regions = {r.pk: r for r in snapshot.regions.values() if region is None or r.code == region}
    gpus = {g.pk: g for g in snapshot.gpus.values() if g.is_active and (gpu is None or g.slug == gpu)}
    if not regions or not gpus:
        return []
    # Written out: the public, most asked read of the API; the ORM would spend
    # more building it than the database spends answering it.
    where, params = ["is_active"], []
    for column, ids in (("region_id", regions), ("gpu_id", gpus)):
        where.append(f"{column} IN ({', '.join(['%s'] * len(ids))})")
        params += list(ids)
    table = connection.ops.quote_name(Host._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT region_id, gpu_id, SUM(free_slots), MAX(free_slots), COUNT(*) FROM {table} "
            f"WHERE {' AND '.join(where)} GROUP BY region_id, gpu_id",
            params,
        )
        rows = cursor.fetchall()
    out = [
        (regions[r], gpus[g], available, top, n)
        for r, g, available, top, n in rows
        if r in regions and g in gpus  # a card made inactive in this very moment
    ]
    out.sort(key=lambda row: (row[0].sort_order, row[1].sort_order, row[0].code, row[1].slug))
    return [StockRow(r.code, g.slug, available, top, n) for r, g, available, top, n in out]


def hosts_with_free_slots(*, region: Region, gpu: GpuModel, at_least: int) -> list[tuple[int, int]]:
    """(host id, free slots) of the hosts that can take `at_least` more, best
    fit first (fewest free), then by name for a stable order."""
    rows = (
        _hosts_open(region=region, gpu=gpu)
        .filter(free_slots__gte=at_least)
        .order_by("free_slots", "name")
        .values_list("pk", "free_slots")
    )
    return list(rows)


def catalog_version(conn=None) -> CatalogVersion | None:
    """The catalog's version and when it last changed (None on a database
    without one, e.g. right after a flush): one small query, asked on every
    request of the hot endpoints, so written out rather than built by the ORM.
    `conn`: another connection to ask (the change feed's own)."""
    table = connection.ops.quote_name(CatalogVersion._meta.db_table)
    with (conn or connection).cursor() as cursor:
        cursor.execute(f"SELECT version, changed_at FROM {table} WHERE id = 1")
        row = cursor.fetchone()
    if row is None:
        return None
    changed_at = row[1]
    if isinstance(changed_at, str):  # SQLite hands back text
        changed_at = datetime.fromisoformat(changed_at).replace(tzinfo=UTC)
    elif changed_at.tzinfo is None:
        changed_at = changed_at.replace(tzinfo=UTC)
    return CatalogVersion(pk=1, version=row[0], changed_at=changed_at)


def gpu_get(*, slug: str) -> GpuModel:
    try:
        return GpuModel.objects.get(slug=slug.lower())
    except GpuModel.DoesNotExist:
        raise DomainError(
            "unknown_gpu",
            f"No card {slug!r}.",
            details={"gpus": list(GpuModel.objects.filter(is_active=True).values_list("slug", flat=True))},
        ) from None


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


# --- The catalog held in memory, per version ------------------------------------------------
#
# What the hot endpoints read of the catalog (cards, regions, add-ons, templates,
# discount tiers) changes only when staff edit it, and every such write moves
# the catalog version in the same transaction (catalog/triggers.py). Each web
# process keeps what it read for the current version, and answers built from it,
# so a request costs one small query for the version instead of one per table.
# The objects kept are shared between requests and threads: read them, never
# change them.

# What each process keeps, in estimated bytes: keys carry request bodies and the
# answers can be large (a recommendation's), so the bound is on size, not count.
MEMO_BYTES = 32 * 1024 * 1024  # with a worker at about 140 MB, under the 200 MB budget
MEMO_DEFAULT_COST = 4096  # the estimate for a kept object that is not bytes


@dataclass(frozen=True)
class CatalogSnapshot:
    version: int
    changed_at: datetime
    regions: dict[str, Region]  # active regions by upper-case code, in display order
    gpus: dict[str, GpuModel]  # every card by slug (inactive ones too: callers say why they refuse)
    addons: dict[str, Addon]  # orderable add-ons by slug
    templates: dict[str, Template]  # active templates by slug, their cards prefetched
    multi_gpu_tiers: tuple[tuple[int, Decimal], ...]
    term_tiers: dict[str, tuple[tuple[int, Decimal], ...]]
    gpu_regions: dict[str, tuple[str, ...]]  # card slug -> codes of the regions with active hosts of it

    def region(self, code: str) -> Region:
        region = self.regions.get(code.upper())
        if region is None:
            raise DomainError("unknown_region", f"No region {code!r}.", details={"regions": list(self.regions)})
        return region

    def gpu(self, slug: str) -> GpuModel:
        gpu = self.gpus.get(slug.lower())
        if gpu is None:
            active = [g.slug for g in self.gpus.values() if g.is_active]
            raise DomainError("unknown_gpu", f"No card {slug!r}.", details={"gpus": active})
        return gpu


_memo: OrderedDict[tuple, tuple[object, int]] = OrderedDict()
_memo_lock = threading.Lock()
_memo_bytes = 0


def _memo_cost(key: tuple, value: object, cost: int | None) -> int:
    size = sum(len(part) for part in key if isinstance(part, bytes | str))
    if cost is not None:
        return size + cost
    return size + (len(value) if isinstance(value, bytes) else MEMO_DEFAULT_COST)


def _memo_get(key: tuple, build: Callable[[], T], cost: int | None = None) -> T:
    """`build()`, kept under `key` (least recently used first out, within MEMO_BYTES)."""
    global _memo_bytes
    with _memo_lock:
        if key in _memo:
            _memo.move_to_end(key)
            return _memo[key][0]  # type: ignore[return-value]
    value = build()
    size = _memo_cost(key, value, cost(value) if callable(cost) else cost)
    with _memo_lock:
        if key not in _memo:
            _memo[key] = (value, size)
            _memo_bytes += size
        while _memo_bytes > MEMO_BYTES and _memo:
            _memo_bytes -= _memo.popitem(last=False)[1][1]
    return value


def _snapshot_build(version: CatalogVersion) -> CatalogSnapshot:
    term_tiers: dict[str, list[tuple[int, Decimal]]] = {}
    for term, min_terms, percent in TermDiscount.objects.values_list("term", "min_terms", "percent"):
        term_tiers.setdefault(term, []).append((min_terms, percent))
    gpu_regions: dict[str, list[str]] = {}
    for slug, code in (
        Host.objects.filter(is_active=True, region__is_active=True)
        .values_list("gpu__slug", "region__code")
        .distinct()
        .order_by("gpu__slug", "region__sort_order", "region__code")
    ):
        gpu_regions.setdefault(slug, []).append(code)
    return CatalogSnapshot(
        version=version.version,
        changed_at=version.changed_at,
        regions={r.code.upper(): r for r in Region.objects.filter(is_active=True)},
        gpus={g.slug: g for g in GpuModel.objects.all()},
        addons={a.slug: a for a in Addon.objects.filter(is_active=True, is_usage=False)},
        templates={t.slug: t for t in Template.objects.filter(is_active=True).prefetch_related("gpus")},
        multi_gpu_tiers=tuple(MultiGpuDiscount.objects.values_list("min_gpus", "percent")),
        term_tiers={term: tuple(rows) for term, rows in term_tiers.items()},
        gpu_regions={slug: tuple(codes) for slug, codes in gpu_regions.items()},
    )


def catalog_current(*, exact: bool = False) -> CatalogSnapshot:
    """The catalog as of now, read afresh once per version and process. The
    version comes from the change feed where it runs (catalog/feed.py; no query),
    else from one small query. `exact`: always query, for a caller that must see
    a change committed a moment ago (an order prices what the database holds)."""
    state = None if exact else feed.current()
    if state is not None:
        version = CatalogVersion(pk=1, version=state.version, changed_at=state.changed_at)
        return _memo_get(("catalog", version.version), lambda: _snapshot_build(version), cost=512 * 1024)
    version = catalog_version()
    if version is None:  # no version row (a flushed database): read it all, keep nothing
        return _snapshot_build(CatalogVersion(version=0, changed_at=datetime.now(UTC)))
    return _memo_get(("catalog", version.version), lambda: _snapshot_build(version), cost=512 * 1024)


def catalog_memo(snapshot: CatalogSnapshot, key: tuple, build: Callable[[], T], cost=None) -> T:
    """`build()`, kept for this catalog version: for answers that depend on the
    catalog and the request alone (a quote, a sizing, a rendered list). Version 0
    (no version row) keeps nothing. `cost`: the kept value's size in bytes, or a
    function of the value giving it, where it is not bytes (their length is used)."""
    if snapshot.version == 0:
        return build()
    return _memo_get(("answer", snapshot.version, *key), build, cost)
