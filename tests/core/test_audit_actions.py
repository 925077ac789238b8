"""Audit actions are an enum (core.models.AuditAction), not free strings: every
audit_record call in the production code names a member, and a string that is
no member is refused before anything is written."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from core.audit import AuditAction, audit_record
from core.models import AuditEntry

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("accounts", "billing", "catalog", "config", "core", "observability", "rentals", "sizing", "webhooks")


def _named_member(node: ast.expr) -> bool:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "AuditAction":
        return node.attr in AuditAction.__members__
    if isinstance(node, ast.IfExp):
        return _named_member(node.body) and _named_member(node.orelse)
    return isinstance(node, ast.Name) and node.id == "action"  # a parameter typed AuditAction, passed on


def test_every_audit_record_call_names_a_member():
    calls, wrong = 0, []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                name = getattr(node, "func", None)
                if not (
                    isinstance(node, ast.Call) and getattr(name, "id", getattr(name, "attr", "")) == "audit_record"
                ):
                    continue
                calls += 1
                [action] = [k.value for k in node.keywords if k.arg == "action"]
                if not _named_member(action):
                    wrong.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert wrong == []
    assert calls >= 50


@pytest.mark.django_db
def test_a_string_that_is_no_member_is_refused():
    with pytest.raises(ValueError):
        audit_record(actor=None, action="rental.suspnd")
    assert not AuditEntry.objects.exists()
    entry = audit_record(actor=None, action=AuditAction.RENTAL_SUSPEND)
    assert entry.action == "rental.suspend" and entry.get_action_display()
