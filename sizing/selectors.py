"""Sizing reads: the architectures the API knows."""

from __future__ import annotations

from django.db.models import QuerySet

from core.errors import DomainError

from .models import Architecture


def architecture_list() -> QuerySet[Architecture]:
    return Architecture.objects.filter(is_active=True)


def architecture_get(*, slug: str) -> Architecture:
    try:
        return Architecture.objects.get(slug=slug.strip().lower(), is_active=True)
    except Architecture.DoesNotExist:
        raise DomainError(
            "unknown_model",
            f"No model {slug!r}. GET /api/v1/sizing/models lists them, or post its config.json as `architecture`.",
            status=400,
            details={"model": slug, "models": list(architecture_list().values_list("slug", flat=True))},
        ) from None
