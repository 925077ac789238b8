from __future__ import annotations

from typing import Any

from rest_framework import serializers

from catalog.models import TERM_CHOICES, TERM_HOURS, TERM_MONTHLY
from catalog.selectors import catalog_current
from core.errors import DomainError
from core.fields import MoneyField, PercentField
from core.money import usd_str


def first_message(messages: Any) -> str:
    """The first message of a field's errors, the path to it named when they
    are nested (a nested input's `{"model": ["..."]}` reads `model: ...`)."""
    if isinstance(messages, dict) and messages:
        key, inner = next(iter(messages.items()))
        return f"{key}: {first_message(inner)}"
    if isinstance(messages, list) and messages:
        return first_message(messages[0])
    return str(messages)


class RefusingInput(serializers.Serializer):
    """An input some of whose fields are checked against a list of valid values
    (the catalog's cards, the pay currencies, ...) and refused with a stable
    code that lists them (`unknown_gpu` with details.gpus, `unknown_currency`
    with details.currencies, ...). Every field is validated before anything is
    answered, so one error never hides another: one refusal alone is answered
    with its own code and details; more than one error with `invalid`, each
    field's message in details.fields and the refusals' details merged in."""

    def refuse(self, field: str, error: DomainError) -> serializers.ValidationError:
        """Record `error` as the refusal of `field`; its validator raises what this returns."""
        self.refusals = {**getattr(self, "refusals", {}), field: error}
        return serializers.ValidationError(error.message, code=error.code)

    def valid_or_refuse(self) -> dict[str, Any]:
        """The validated data, or the refusal described above (raised)."""
        if self.is_valid():
            return self.validated_data
        errors, refusals = self.errors, getattr(self, "refusals", {})
        if len(errors) == 1 and next(iter(errors)) in refusals:
            raise refusals[next(iter(errors))]
        details: dict[str, Any] = {}
        for error in refusals.values():
            details.update(error.details)
        field, messages = next(iter(errors.items()))
        first = first_message(messages)
        message = first if field == "non_field_errors" else f"{field}: {first}"
        raise DomainError("invalid", message, status=400, details={**details, "fields": errors})


# The values the API schema's enums list (core.schema.ENUMS), read from the catalog
# when the schema is generated: what an order, a quote or a sizing accepts.


def schema_version() -> int:
    """The catalog version the enums below are read at: the schema is kept per
    value of it (core.views.SchemaView); 0, no version row, keeps nothing."""
    return catalog_current().version


def schema_regions() -> list[str]:
    """Active regions' codes."""
    return list(catalog_current().regions)


def schema_gpus() -> list[str]:
    """Active cards' slugs (an inactive card is refused with `gpu_unavailable`)."""
    return [gpu.slug for gpu in catalog_current().gpus.values() if gpu.is_active]


def schema_templates() -> list[str]:
    """Active OS templates' slugs."""
    return list(catalog_current().templates)


def schema_addons() -> list[str]:
    """Orderable add-ons' slugs."""
    return list(catalog_current().addons)


class GpuOutput(serializers.Serializer):
    slug = serializers.CharField()
    name = serializers.CharField()
    vendor = serializers.CharField()
    architecture = serializers.CharField()
    memory_gb = serializers.IntegerField()
    memory_type = serializers.CharField()
    bandwidth_gbps = serializers.IntegerField(help_text="Memory bandwidth, GB/s.")
    fp8 = serializers.BooleanField()
    software_stack = serializers.CharField()
    tdp_w = serializers.IntegerField(allow_null=True)
    monthly_usd = MoneyField()
    weekly_usd = MoneyField()
    hourly_usd = serializers.SerializerMethodField(help_text="Monthly price / 720, per card.")
    min_gpus = serializers.IntegerField()
    max_gpus = serializers.IntegerField()
    allowed_counts = serializers.ListField(child=serializers.IntegerField())
    gpus_per_host = serializers.IntegerField()

    def get_hourly_usd(self, gpu) -> str:
        return usd_str(gpu.monthly_usd / TERM_HOURS[TERM_MONTHLY])


class RegionOutput(serializers.Serializer):
    code = serializers.CharField()
    name = serializers.CharField()
    gpus = serializers.ListField(child=serializers.CharField(), help_text="Cards this region has hosts of.")


class StockOutput(serializers.Serializer):
    region = serializers.CharField()
    gpu = serializers.CharField()
    available = serializers.IntegerField(help_text="Free GPUs of this card in this region.")
    max_per_host = serializers.IntegerField(help_text="The largest instance one host can still give.")


class StockQuery(serializers.Serializer):
    region = serializers.CharField(required=False)
    gpu = serializers.CharField(required=False)


class AddonOutput(serializers.Serializer):
    slug = serializers.CharField()
    name = serializers.CharField()
    description = serializers.CharField()
    monthly_usd = MoneyField()
    weekly_usd = MoneyField()
    orderable = serializers.SerializerMethodField()
    unit = serializers.CharField()
    included_units = serializers.IntegerField()

    def get_orderable(self, addon) -> bool:
        return not addon.is_usage


class TemplateOutput(serializers.Serializer):
    slug = serializers.CharField()
    name = serializers.CharField()
    description = serializers.CharField()
    stack = serializers.CharField(help_text="cuda, rocm, or empty for any card.")
    gpus = serializers.ListField(child=serializers.CharField(), help_text="Cards it runs on.")


class QuoteInput(RefusingInput):
    """A quote's body, checked against the catalog in `context["catalog"]` (a
    CatalogSnapshot): `gpu` becomes the card, `addons` the add-ons, `template`
    the template; an unknown one is refused with its code (`unknown_gpu`,
    `unknown_addon`, `unknown_template`), together with every other field's error."""

    gpu = serializers.CharField(max_length=32)
    gpu_count = serializers.IntegerField(min_value=1, max_value=64)
    term = serializers.ChoiceField(choices=[c for c, _ in TERM_CHOICES])
    terms = serializers.IntegerField(min_value=1, max_value=12, default=1)
    addons = serializers.ListField(child=serializers.CharField(max_length=32), default=list, max_length=10)
    template = serializers.CharField(max_length=48, required=False)

    def validate_gpu(self, value: str) -> Any:
        try:
            return self.context["catalog"].gpu(value)
        except DomainError as exc:
            raise self.refuse("gpu", exc) from None

    def validate_addons(self, value: list[str]) -> list[Any]:
        addons = self.context["catalog"].addons
        for slug in value:
            if slug not in addons:
                raise self.refuse(
                    "addons",
                    DomainError(
                        "unknown_addon", f"No add-on {slug!r}.", details={"addon": slug, "addons": list(addons)}
                    ),
                )
        return [addons[slug] for slug in value]

    def validate_template(self, value: str) -> Any:
        templates = self.context["catalog"].templates
        if value not in templates:
            raise self.refuse(
                "template",
                DomainError("unknown_template", f"No template {value!r}.", details={"templates": list(templates)}),
            )
        return templates[value]


class QuoteLineOutput(serializers.Serializer):
    code = serializers.CharField()
    description = serializers.CharField()
    quantity = serializers.IntegerField()
    unit_usd = MoneyField()
    terms = serializers.IntegerField()
    subtotal_usd = MoneyField()
    discount_pct = PercentField()
    discount_usd = MoneyField()
    amount_usd = MoneyField()


class QuoteOutput(serializers.Serializer):
    gpu = serializers.CharField()
    gpu_count = serializers.IntegerField()
    term = serializers.CharField()
    terms = serializers.IntegerField()
    hours = serializers.IntegerField()
    lines = QuoteLineOutput(many=True)
    subtotal_usd = MoneyField()
    multi_gpu_discount_pct = PercentField()
    term_discount_pct = PercentField()
    discount_pct = PercentField()
    discount_usd = MoneyField()
    total_usd = MoneyField()
    per_gpu_hour_usd = MoneyField()
    per_hour_usd = MoneyField()
