"""Load the published catalog (catalog/data/catalog.json) into the database.

Idempotent and respectful of staff: it creates what is missing, matched by
natural keys (slug, code, host name, tier), and never changes a row that
already exists, so a second run adds nothing and staff edits survive.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from django.db import transaction

from catalog.models import (
    Addon,
    GpuModel,
    Host,
    MultiGpuDiscount,
    Region,
    Slot,
    SlotStatus,
    Template,
    TermDiscount,
)

log = logging.getLogger(__name__)

DATA_FILE = Path(__file__).resolve().parent / "data" / "catalog.json"
# Slots the seed marks as taken were rented before this system kept the books.
EXTERNAL_HOLDER = "external"


@dataclass
class SeedReport:
    created: dict[str, int] = field(default_factory=dict)

    def add(self, kind: str, n: int = 1) -> None:
        self.created[kind] = self.created.get(kind, 0) + n

    @property
    def total(self) -> int:
        return sum(self.created.values())


def host_name(region_code: str, gpu_slug: str, number: int) -> str:
    return f"{region_code.lower()}-{gpu_slug}-{number:03d}"


@transaction.atomic
def catalog_seed(*, path: Path = DATA_FILE) -> SeedReport:
    data = json.loads(path.read_text())
    report = SeedReport()

    for order, row in enumerate(data["regions"]):
        _, made = Region.objects.get_or_create(code=row["code"], defaults={"name": row["name"], "sort_order": order})
        report.add("regions", made)

    for order, row in enumerate(data["gpus"]):
        defaults = {k: v for k, v in row.items() if k != "slug"}
        for key in ("monthly_usd", "weekly_usd"):
            defaults[key] = Decimal(defaults[key])
        defaults["sort_order"] = order
        _, made = GpuModel.objects.get_or_create(slug=row["slug"], defaults=defaults)
        report.add("gpus", made)

    for row in data["multi_gpu_discounts"]:
        _, made = MultiGpuDiscount.objects.get_or_create(
            min_gpus=row["min_gpus"], defaults={"percent": Decimal(row["percent"])}
        )
        report.add("multi_gpu_discounts", made)

    for row in data["term_discounts"]:
        _, made = TermDiscount.objects.get_or_create(
            term=row["term"], min_terms=row["min_terms"], defaults={"percent": Decimal(row["percent"])}
        )
        report.add("term_discounts", made)

    for row in data["addons"]:
        defaults = {k: v for k, v in row.items() if k != "slug"}
        for key in ("monthly_usd", "weekly_usd"):
            defaults[key] = Decimal(defaults[key])
        _, made = Addon.objects.get_or_create(slug=row["slug"], defaults=defaults)
        report.add("addons", made)

    gpus = {g.slug: g for g in GpuModel.objects.all()}
    for row in data["templates"]:
        defaults = {k: v for k, v in row.items() if k not in ("slug", "gpus")}
        template, made = Template.objects.get_or_create(slug=row["slug"], defaults=defaults)
        if made and row["gpus"]:
            template.gpus.set([gpus[s] for s in row["gpus"]])
        report.add("templates", made)

    _seed_hosts(data["hosts"], gpus, report)
    log.info("catalog seed: %s", report.created)
    return report


def _seed_hosts(rows: list[dict], gpus: dict[str, GpuModel], report: SeedReport) -> None:
    regions = {r.code: r for r in Region.objects.all()}
    existing = set(Host.objects.values_list("name", flat=True))
    new_slots: list[Slot] = []
    for row in rows:
        gpu = gpus[row["gpu"]]
        region = regions[row["region"]]
        free = row["free"]
        for number in range(1, row["count"] + 1):
            name = host_name(region.code, gpu.slug, number)
            if name in existing:
                continue
            host = Host.objects.create(name=name, region=region, gpu=gpu, slot_count=gpu.gpus_per_host)
            report.add("hosts")
            free_here = free[number - 1] if number <= len(free) else 0
            for index in range(host.slot_count):
                taken = index >= free_here
                new_slots.append(
                    Slot(
                        host=host,
                        index=index,
                        status=SlotStatus.RENTED if taken else SlotStatus.FREE,
                        holder=EXTERNAL_HOLDER if taken else "",
                    )
                )
    Slot.objects.bulk_create(new_slots, batch_size=2000)
    report.add("slots", len(new_slots))
