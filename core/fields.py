"""Fields for money and amounts: the API's serializer fields, and the model
field that stores crypto amounts in base units exactly on every database."""

from __future__ import annotations

from decimal import Decimal

from django import forms
from django.core import exceptions
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
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


# --- Model fields ---------------------------------------------------------------


class BaseUnitsModelField(models.Field):
    """A crypto amount in base units: a whole number from 0 to 2**256 - 1 (a
    uint256, the largest amount a token contract can hold), stored exactly and
    read back as a Python `int` on every database.

    PostgreSQL keeps it in `numeric(78, 0)` (78 digits hold 2**256 - 1).
    SQLite has no exact type that wide: its INTEGER stops at 2**63 - 1, a larger
    value is stored as a REAL (a double), and Django's DecimalField reads
    `numeric` columns back through a float of 15 digits. So on SQLite (and any
    other database) the column is text holding the number zero-padded to 78
    digits: text order is then numeric order, so equality, `<`, `>`, `in`,
    ordering, `Min` and `Max` work in SQL as on PostgreSQL. `Sum` does not
    (SQLite would add the texts as floats): sum amounts in Python, and a value
    that reaches this field as a float is refused rather than rounded.
    """

    description = "Crypto amount in base units (a whole number from 0 to 2**256 - 1)"
    MAX = 2**256 - 1
    DIGITS = len(str(MAX))  # 78
    default_error_messages = {"invalid": "“%(value)s” is not a whole number of base units."}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.validators.extend([MinValueValidator(0), MaxValueValidator(self.MAX)])

    def db_type(self, connection) -> str:
        if connection.vendor == "postgresql":
            return f"numeric({self.DIGITS}, 0)"  # as Django writes DecimalField's, so no type change on PostgreSQL
        return f"varchar({self.DIGITS})"

    def from_db_value(self, value, expression, connection) -> int | None:
        if value is None:
            return None
        if isinstance(value, float):
            raise TypeError(
                f"a base-units amount reached the database's answer as a float ({value!r}): it may have lost digits. "
                "Sum base units in Python, not in SQL."
            )
        return self.to_python(value)

    def to_python(self, value) -> int | None:
        if value is None or (isinstance(value, int) and not isinstance(value, bool)):
            return value
        try:
            if isinstance(value, Decimal):
                if value != value.to_integral_value():
                    raise ValueError
                return int(value)
            if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
                return int(value.strip())
        except (ValueError, ArithmeticError):
            pass
        raise exceptions.ValidationError(self.error_messages["invalid"], code="invalid", params={"value": value})

    def get_prep_value(self, value) -> int | None:
        value = super().get_prep_value(value)
        if value is None:
            return None
        try:
            value = self.to_python(value)
        except exceptions.ValidationError as exc:
            raise ValueError(f"Field '{self.name}' expected whole base units, got {value!r}.") from exc
        if not 0 <= value <= self.MAX:
            raise ValueError(f"Field '{self.name}' holds 0 to 2**256 - 1 base units, not {value}.")
        return value

    def get_db_prep_value(self, value, connection, prepared=False):
        if not prepared:
            value = self.get_prep_value(value)
        if value is None:
            return None
        if connection.vendor == "postgresql":
            return Decimal(value)
        return f"{int(value):0{self.DIGITS}d}"

    def value_to_string(self, obj) -> str:
        value = self.value_from_object(obj)
        return "" if value is None else str(value)

    def formfield(self, **kwargs):
        return super().formfield(**{"form_class": forms.IntegerField, "min_value": 0, "max_value": self.MAX, **kwargs})
