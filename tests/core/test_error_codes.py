"""docs/api.md's errors table lists every error code the code base can answer
with. The codes are collected from the source: the first argument of every
DomainError, Conflict, NotFound, sizing Reason and error_body call, every
`code="..."` keyword, the `error_code` of parser errors, and the DRF and
middleware mappings in core."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APPS = ("accounts", "billing", "catalog", "core", "rentals", "sizing", "webhooks")
_RAISERS = {"DomainError", "Conflict", "NotFound", "Reason", "error_body", "error_response", "_problem"}
_CODE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")


def _name(func: ast.expr) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def _constant(node: ast.expr | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and _CODE.match(node.value):
        return node.value
    return None


def codes_in_source() -> dict[str, str]:
    """{code: where it was found}."""
    found: dict[str, str] = {}
    for app in APPS:
        for path in sorted((ROOT / app).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            tree = ast.parse(path.read_text(), filename=str(path))
            where = str(path.relative_to(ROOT))
            for node in ast.walk(tree):
                if isinstance(node, ast.Call):
                    if _name(node.func) in _RAISERS and node.args and (code := _constant(node.args[0])):
                        found.setdefault(code, where)
                    # (Django's ValidationError codes are not the API's: they answer as `invalid`/`weak_password`.)
                    for kw in node.keywords if _name(node.func) != "ValidationError" else ():
                        if kw.arg == "code" and (code := _constant(kw.value)):
                            found.setdefault(code, where)
                elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                    raw = node.targets if isinstance(node, ast.Assign) else [node.target]
                    targets = [t.id for t in raw if isinstance(t, ast.Name)]
                    reasons = [t for t in targets if t.startswith("REASON_")]  # sizing's reason codes
                    if ("error_code" in targets or reasons) and (code := _constant(node.value)):
                        found.setdefault(code, where)
                    if {"_DRF_CODES", "_CODES"} & set(targets) and isinstance(node.value, ast.Dict):
                        for value in node.value.values:
                            first = value.elts[0] if isinstance(value, ast.Tuple) else value
                            if code := _constant(first):
                                found.setdefault(code, where)
    # Raised through a subclass whose code is fixed in its __init__.
    found.setdefault("throttled", "accounts/throttling.py")
    return found


def documented_codes() -> set[str]:
    text = (ROOT / "docs" / "api.md").read_text()
    section = text[text.index("\n## Errors") :]
    section = section[: section.find("\n## ", 1)] if "\n## " in section[1:] else section
    return set(re.findall(r"`([a-z][a-z0-9_]*)`", section))


def test_the_collector_finds_codes_of_every_kind():
    codes = codes_in_source()
    # A Conflict written over several lines, a NotFound code keyword, a sizing reason,
    # a DRF mapping, the parser's own code, the middleware's.
    for code in (
        "pricing_unavailable",
        "token_not_found",
        "does_not_fit",
        "parse_error",
        "nesting_too_deep",
        "min_gpus",
    ):
        assert code in codes, code
    assert "unpaid_limit" in codes and "otp_required" in codes


def test_every_error_code_is_in_the_errors_table():
    missing = {code: where for code, where in codes_in_source().items() if code not in documented_codes()}
    assert not missing, f"docs/api.md's errors table lacks: {missing}"
