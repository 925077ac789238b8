"""Recorded answers of real clusters (fixtures/*.json, each naming its source)
and a comparison of JSON shapes: same keys, same JSON types, recursively.

A key the recorded answer lacks is allowed only when it is one newer nodes add
(`NEWER_FIELDS`): recordings span node versions. A null on either side matches
anything (`blockTime` and `err` are nullable).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).parent / "fixtures"

# Fields nodes added over time, absent from older recordings.
NEWER_FIELDS = frozenset(
    {"apiVersion", "computeUnitsConsumed", "costUnits", "loadedAddresses", "returnData", "stackHeight", "version"}
)


def recorded(name: str) -> dict[str, Any]:
    data = json.loads((FIXTURES / f"{name}.json").read_text())
    assert data["source"], f"fixture {name} names no source"
    return data


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "null"


def shape_mismatches(expected: Any, actual: Any, path: str = "$") -> list[str]:
    """Where `actual` does not have the shape of `expected` (empty when it does)."""
    if expected is None or actual is None:
        return []
    if _kind(expected) != _kind(actual):
        return [f"{path}: {_kind(actual)} where the recording has {_kind(expected)}"]
    problems: list[str] = []
    if isinstance(expected, dict):
        for key, value in expected.items():
            if key not in actual:
                problems.append(f"{path}.{key}: missing")
            else:
                problems += shape_mismatches(value, actual[key], f"{path}.{key}")
        problems += [f"{path}.{key}: not in the recording" for key in actual.keys() - expected.keys() - NEWER_FIELDS]
    elif isinstance(expected, list) and expected and actual:
        for index, item in enumerate(actual):
            problems += shape_mismatches(expected[min(index, len(expected) - 1)], item, f"{path}[{index}]")
    return problems
