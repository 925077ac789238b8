"""Loads the published architectures (sizing/data/architectures.json)."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

from django.db import transaction

from .arithmetic import attention_kind_infer
from .models import Architecture

DATA_FILE = Path(__file__).resolve().parent / "data" / "architectures.json"
CONFIGS = Path(__file__).resolve().parent / "data" / "configs"


def published_config(slug: str) -> dict | None:
    """The model's config.json as published (sizing/data/configs), if there is one."""
    path = CONFIGS / f"{slug}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _billions(value: str | None) -> int | None:
    return None if value is None else int(Decimal(value) * 10**9)


def architecture_rows(path: Path = DATA_FILE) -> list[dict]:
    """The data file's rows as model field values, in file order."""
    data = json.loads(path.read_text())
    rows = []
    for order, row in enumerate(data["architectures"], start=1):
        row = dict(row)
        fields = {
            "slug": row.pop("slug"),
            "name": row.pop("name"),
            "total_params": _billions(row.pop("params_b")),
            "active_params": _billions(row.pop("active_params_b", None)),
            "sort_order": order,
        }
        fields.update(row)
        fields["config"] = published_config(fields["slug"])
        fields.setdefault(
            "attention_kind",
            attention_kind_infer(attention_heads=fields["attention_heads"], kv_heads=fields["kv_heads"]),
        )
        rows.append(fields)
    return rows


def architectures_seed() -> int:
    """Create every published architecture that is missing; never touch one that
    exists (staff may have edited it). Returns how many were created."""
    created = 0
    with transaction.atomic():
        existing = set(Architecture.objects.values_list("slug", flat=True))
        for fields in architecture_rows():
            if fields["slug"] in existing:
                continue
            Architecture.objects.create(**fields)
            created += 1
    return created
