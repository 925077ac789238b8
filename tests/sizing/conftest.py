import json
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest

from sizing.arithmetic import Arch, Card
from sizing.models import Architecture
from sizing.seed import architecture_rows

HF_CONFIGS = Path(__file__).resolve().parent.parent.parent / "sizing" / "data" / "configs"

# The seed's GPU table (FACTS.md): slug -> (name, memory GB, bandwidth GB/s, FP8, architecture).
CARDS = {
    "b200": ("B200", 180, 8000, True, "Blackwell"),
    "mi300x": ("MI300X", 192, 5300, True, "CDNA 3"),
    "h200-sxm": ("H200 SXM", 141, 4800, True, "Hopper"),
    "h100-sxm": ("H100 SXM", 80, 3350, True, "Hopper"),
    "a100-sxm": ("A100 SXM", 80, 2040, False, "Ampere"),
    "h100-pcie": ("H100 PCIe", 80, 2000, True, "Hopper"),
    "rtx-5090": ("RTX 5090", 32, 1790, True, "Blackwell"),
    "rtx-4090": ("RTX 4090", 24, 1010, True, "Ada"),
    "rtx-6000-ada": ("RTX 6000 Ada", 48, 960, True, "Ada"),
    "rtx-3090": ("RTX 3090", 24, 936, False, "Ampere"),
    "l40s": ("L40S", 48, 864, True, "Ada"),
    "a40": ("A40", 48, 696, False, "Ampere"),
    "l4": ("L4", 24, 300, True, "Ada"),
    "rtx-a6000": ("RTX A6000", 48, 768, False, "Ampere"),
    "rtx-a5000": ("RTX A5000", 24, 768, False, "Ampere"),
}


def card(slug: str) -> Card:
    name, memory, bandwidth, fp8, architecture = CARDS[slug]
    return Card(slug=slug, name=name, memory_gb=memory, bandwidth_gbps=bandwidth, fp8=fp8, architecture=architecture)


def arch(slug: str) -> Arch:
    """A seeded architecture straight from the data file (no database)."""
    for row in architecture_rows():
        if row["slug"] == slug:
            return Architecture(**row).to_arch()
    raise KeyError(slug)


def hf_config(slug: str) -> dict:
    return json.loads((HF_CONFIGS / f"{slug}.json").read_text())


def whole_gb(value) -> int:
    return int(Decimal(str(value)).quantize(Decimal(1), rounding=ROUND_HALF_UP))


@pytest.fixture
def seeded_architectures(db):
    from sizing.seed import architectures_seed

    architectures_seed()
