from django import forms
from django.contrib import admin
from django.db.models import Count, Q
from django.template.response import TemplateResponse

from catalog import selectors
from catalog.models import (
    Addon,
    GpuModel,
    Host,
    MultiGpuDiscount,
    Region,
    Slot,
    SlotStatus,
    StockOverview,
    Template,
    TermDiscount,
)
from catalog.services import host_slots_ensure, slot_service_set
from core import display
from core.admin import AuditedModelAdmin, RecordAdmin, ReportAdmin, reason_action
from core.money import cents


@admin.register(GpuModel)
class GpuModelAdmin(AuditedModelAdmin):
    """The cards and their prices. Prices are edited in place in the list
    (Save below it); each change is audited with the old and new value, and
    orders already placed keep the price they were sold at."""

    list_display = (
        "name",
        "slug",
        "family",
        "memory",
        "bandwidth_gbps",
        "fp8",
        "monthly_usd",
        "weekly_usd",
        "usd_per_gpu_hour",
        "gpu_counts",
        "is_active",
    )
    list_display_links = ("name",)
    list_editable = ("monthly_usd", "weekly_usd")
    list_filter = ("vendor", "architecture", "fp8", "software_stack", "is_active")
    search_fields = ("slug", "name", "architecture")
    ordering = ("sort_order",)

    @admin.display(description="vendor, architecture", ordering="architecture")
    def family(self, gpu):
        return f"{gpu.get_vendor_display()} {gpu.architecture}"

    @admin.display(description="memory", ordering="memory_gb")
    def memory(self, gpu):
        return f"{gpu.memory_gb} GB {gpu.memory_type}"

    @admin.display(description="USD per GPU-hour")
    def usd_per_gpu_hour(self, gpu):
        """The monthly price / 720 hours, half up to the cent (before multi-GPU discounts)."""
        return display.usd(cents(gpu.monthly_usd / 720))

    @admin.display(description="GPUs per instance")
    def gpu_counts(self, gpu):
        return ", ".join(str(n) for n in gpu.allowed_counts)


class HostInlineForm(forms.ModelForm):
    """A host's card and slot count are fixed once its slots exist: shown, not
    editable, on a host already saved; a new row of the region's page takes them.
    (Read-only fields would apply to the new rows too, which then failed to save.)"""

    class Meta:
        model = Host
        fields = ("name", "gpu", "slot_count", "is_active")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk is not None:
            for name in ("gpu", "slot_count"):
                self.fields[name].disabled = True


class HostInline(admin.TabularInline):
    model = Host
    form = HostInlineForm
    fields = ("name", "gpu", "slot_count", "is_active", "free_slots")
    readonly_fields = ("free_slots",)
    extra = 0
    show_change_link = True

    def get_queryset(self, request):
        return (
            super()
            .get_queryset(request)
            .select_related("gpu")
            .annotate(_free=Count("slots", filter=Q(slots__status=SlotStatus.FREE)))
        )

    @admin.display(description="free")
    def free_slots(self, host):
        return getattr(host, "_free", None)


@admin.register(Region)
class RegionAdmin(AuditedModelAdmin):
    list_display = ("code", "name", "is_active", "host_count")
    search_fields = ("code", "name")
    inlines = [HostInline]

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(_hosts=Count("hosts"))

    def save_formset(self, request, form, formset, change):
        super().save_formset(request, form, formset, change)
        for host in formset.new_objects:
            host_slots_ensure(host=host)

    @admin.display(description="hosts", ordering="_hosts")
    def host_count(self, region):
        return region._hosts


class SlotInline(admin.TabularInline):
    model = Slot
    fields = ("index", "status", "holder", "changed_at")
    readonly_fields = ("index", "status", "holder", "changed_at")
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Host)
class HostAdmin(AuditedModelAdmin):
    list_display = ("name", "region", "gpu", "slot_count", "free_slots", "is_active")
    list_filter = ("region", "gpu", "is_active")
    search_fields = ("name",)
    list_select_related = ("region", "gpu")
    inlines = [SlotInline]

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(_free=Count("slots", filter=Q(slots__status=SlotStatus.FREE)))

    @admin.display(description="free", ordering="_free")
    def free_slots(self, host):
        return host._free

    def get_readonly_fields(self, request, obj=None):
        return ("gpu", "slot_count") if obj is not None else ()

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        if not change:
            host_slots_ensure(host=obj)


@admin.register(Slot)
class SlotAdmin(RecordAdmin):
    """Slots change only through reservations and rentals, or these actions."""

    list_display = ("__str__", "host", "status", "holder", "changed_at")
    list_filter = ("status", "host__region", "host__gpu")
    search_fields = ("host__name", "holder")
    list_select_related = ("host",)
    actions = [
        reason_action(
            name="out_of_service",
            description="Take out of service (free slots)",
            call=lambda slot, actor, reason: slot_service_set(
                slot_id=slot.pk, in_service=False, actor=actor, reason=reason
            ),
        ),
        reason_action(
            name="in_service",
            description="Put back in service",
            call=lambda slot, actor, reason: slot_service_set(
                slot_id=slot.pk, in_service=True, actor=actor, reason=reason
            ),
        ),
    ]


@admin.register(MultiGpuDiscount)
class MultiGpuDiscountAdmin(AuditedModelAdmin):
    list_display = ("min_gpus", "percent")


@admin.register(TermDiscount)
class TermDiscountAdmin(AuditedModelAdmin):
    list_display = ("term", "min_terms", "percent")
    list_filter = ("term",)


@admin.register(Addon)
class AddonAdmin(AuditedModelAdmin):
    list_display = ("slug", "name", "monthly_usd", "weekly_usd", "is_usage", "unit", "included_units", "is_active")
    list_filter = ("is_usage", "is_active")
    search_fields = ("slug", "name")


@admin.register(Template)
class TemplateAdmin(AuditedModelAdmin):
    list_display = ("slug", "name", "stack", "is_active")
    list_filter = ("stack", "is_active")
    search_fields = ("slug", "name")
    filter_horizontal = ("gpus",)


@admin.register(StockOverview)
class StockOverviewAdmin(ReportAdmin):
    """Region x card table of free / total GPUs and the largest free block."""

    def report_view(self, request):
        regions, gpus = selectors.stock_overview_axes()
        totals = selectors.host_gpu_totals()
        cells = {(r.region, r.gpu): r for r in selectors.stock()}
        rows = []
        for gpu in gpus:
            row = {"gpu": gpu, "cells": []}
            for region in regions:
                stock = cells.get((region.code, gpu.slug))
                row["cells"].append(
                    {
                        "available": stock.available if stock else None,
                        "max_per_host": stock.max_per_host if stock else None,
                        "total": totals.get((region.code, gpu.slug), 0),
                    }
                )
            row["available"] = sum(c["available"] or 0 for c in row["cells"])
            row["total"] = sum(c["total"] for c in row["cells"])
            rows.append(row)
        context = {
            **self.admin_site.each_context(request),
            "title": "Stock overview",
            "opts": self.model._meta,
            "regions": regions,
            "rows": rows,
            "grand_available": sum(r["available"] for r in rows),
            "grand_total": sum(r["total"] for r in rows),
        }
        return TemplateResponse(request, "admin/catalog/stock_overview.html", context)
