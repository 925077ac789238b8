"""Serializer fields for the API's money and amounts."""

from __future__ import annotations

from decimal import Decimal

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from core.money import usd_str


@extend_schema_field({"type": "string", "format": "decimal", "example": "12168.00"})
class MoneyField(serializers.Field):
    """USD as a string with two decimals ("12168.00")."""

    def to_representation(self, value: Decimal) -> str:
        return usd_str(value)


@extend_schema_field(OpenApiTypes.NUMBER)
class PercentField(serializers.Field):
    """A percentage as a JSON number (10, 7.5)."""

    def to_representation(self, value: Decimal):
        value = Decimal(value).normalize()
        return int(value) if value == value.to_integral_value() else float(value)


@extend_schema_field({"type": "string", "pattern": "^[0-9]+$", "example": "390000"})
class BaseUnitsField(serializers.Field):
    """A crypto amount in base units, as a string (a wei amount does not fit a JavaScript number)."""

    def to_representation(self, value) -> str:
        return str(int(value))
