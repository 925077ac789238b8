"""Fields for money and amounts: the API's serializer fields, and the model
field that stores crypto amounts in base units exactly on every database."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django import forms
from django.core import exceptions
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Model
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from typing_extensions import TypeVar

from core.money import usd_str


@extend_schema_field({"type": "string", "format": "decimal", "example": "12168.00"})
class MoneyField(serializers.Field[Decimal, Any, str, Any]):
    """USD as a string with two decimals ("12168.00")."""

    def to_representation(self, value: Decimal) -> str:
        return usd_str(value)


@extend_schema_field(OpenApiTypes.NUMBER)
class PercentField(serializers.Field[Decimal, Any, int | float, Any]):
    """A percentage as a JSON number (10, 7.5)."""

    def to_representation(self, value: Decimal) -> int | float:
        value = Decimal(value).normalize()
        return int(value) if value == value.to_integral_value() else float(value)


@extend_schema_field({"type": "string", "pattern": "^[0-9]+$", "example": "390000"})
class BaseUnitsField(serializers.Field[int, Any, str, Any]):
    """A crypto amount in base units, as a string (a wei amount does not fit a JavaScript number)."""

    def to_representation(self, value: int) -> str:
        return str(int(value))


# --- Model fields ---------------------------------------------------------------


# What the field takes and gives: int, or `int | None` for a nullable one, which is declared
# `BaseUnitsModelField[int | None, int | None](null=True)` (django-stubs reads the type parameters).
_ST = TypeVar("_ST", default=int)
_GT = TypeVar("_GT", default=int)


class BaseUnitsModelField(models.Field[_ST, _GT]):
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

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.validators.extend([MinValueValidator(0), MaxValueValidator(self.MAX)])

    def db_type(self, connection: BaseDatabaseWrapper) -> str:
        if connection.vendor == "postgresql":
            return f"numeric({self.DIGITS}, 0)"  # as Django writes DecimalField's, so no type change on PostgreSQL
        return f"varchar({self.DIGITS})"

    def from_db_value(self, value: Any, expression: Any, connection: BaseDatabaseWrapper) -> int | None:
        if value is None:
            return None
        if isinstance(value, float):
            raise TypeError(
                f"a base-units amount reached the database's answer as a float ({value!r}): it may have lost digits. "
                "Sum base units in Python, not in SQL."
            )
        return self.to_python(value)

    def to_python(self, value: Any) -> int | None:
        if value is None:
            return None
        if isinstance(value, int) and not isinstance(value, bool):
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

    def get_prep_value(self, value: Any) -> int | None:
        value = super().get_prep_value(value)
        if value is None:
            return None
        try:
            units = self.to_python(value)
        except exceptions.ValidationError as exc:
            raise ValueError(f"Field '{self.name}' expected whole base units, got {value!r}.") from exc
        if units is None or not 0 <= units <= self.MAX:
            raise ValueError(f"Field '{self.name}' holds 0 to 2**256 - 1 base units, not {units}.")
        return units

    def get_db_prep_value(self, value: Any, connection: BaseDatabaseWrapper, prepared: bool = False) -> Any:
        if not prepared:
            value = self.get_prep_value(value)
        if value is None:
            return None
        if connection.vendor == "postgresql":
            return Decimal(value)
        return f"{int(value):0{self.DIGITS}d}"

    def value_to_string(self, obj: Model) -> str:
        value = self.value_from_object(obj)
        return "" if value is None else str(value)

    def formfield(self, **kwargs: Any) -> Any:
        return super().formfield(**{"form_class": forms.IntegerField, "min_value": 0, "max_value": self.MAX, **kwargs})
