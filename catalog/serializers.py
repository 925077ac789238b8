from __future__ import annotations

from rest_framework import serializers

from catalog.models import TERM_CHOICES, TERM_HOURS, TERM_MONTHLY
from core.fields import MoneyField, PercentField
from core.money import usd_str


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


class QuoteInput(serializers.Serializer):
    gpu = serializers.CharField(max_length=32)
    gpu_count = serializers.IntegerField(min_value=1, max_value=64)
    term = serializers.ChoiceField(choices=[c for c, _ in TERM_CHOICES])
    terms = serializers.IntegerField(min_value=1, max_value=12, default=1)
    addons = serializers.ListField(child=serializers.CharField(max_length=32), default=list, max_length=10)
    template = serializers.CharField(max_length=48, required=False)


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
