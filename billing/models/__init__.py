"""Billing models, one module per concern."""

from billing.models.rates import RateSample

__all__ = ["RateSample"]
