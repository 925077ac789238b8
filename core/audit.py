"""The audit trail: every staff change and every manual correction writes one
row, in the same transaction as the change itself."""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Any

from django.contrib.contenttypes.models import ContentType
from django.db import models

from core.models import AuditAction, AuditEntry

__all__ = ["AuditAction", "audit_record", "model_snapshot", "snapshot_diff"]


def _plain(value: Any) -> Any:
    if isinstance(value, models.Model):
        return str(value)
    if isinstance(value, (Decimal, uuid.UUID)):
        return str(value)
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, (list, tuple, set)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def model_snapshot(obj: models.Model) -> dict[str, Any]:
    """Concrete field values of `obj`, JSON-ready, keyed by field name."""
    data = {}
    for field in obj._meta.concrete_fields:
        data[field.name] = _plain(getattr(obj, field.attname))
    return data


def snapshot_diff(before: dict[str, Any], after: dict[str, Any]) -> dict[str, list[Any]]:
    """{field: [old, new]} for every field whose value changed."""
    keys = set(before) | set(after)
    return {k: [before.get(k), after.get(k)] for k in sorted(keys) if before.get(k) != after.get(k)}


def audit_record(
    *,
    actor: Any,
    action: AuditAction,
    obj: models.Model | None = None,
    changes: dict[str, Any] | None = None,
    reason: str = "",
) -> AuditEntry:
    action = AuditAction(action)  # a string that is no AuditAction is refused here (ValueError)
    actor_obj = actor if getattr(actor, "pk", None) else None
    return AuditEntry.objects.create(
        actor=actor_obj,
        actor_name=getattr(actor, "username", "") or ("" if actor is None else str(actor)),
        action=action,
        content_type=ContentType.objects.get_for_model(obj) if obj is not None else None,
        object_id=str(obj.pk) if obj is not None else "",
        object_repr=str(obj)[:200] if obj is not None else "",
        changes=_plain(changes or {}),
        reason=reason,
    )
