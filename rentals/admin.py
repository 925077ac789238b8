"""Staff views of orders and rentals, their actions (each needs a reason and
is audited) and the dashboard."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime

from django import forms
from django.contrib import admin
from django.db.models import Count, Sum
from django.template.response import TemplateResponse
from django.utils import timezone

from billing.selectors import revenue_by_currency
from core.admin import ReadOnlyInline, ReasonForm, ReportAdmin, reason_action
from rentals import services
from rentals.models import (
    Order,
    OrderLine,
    ProvisioningJob,
    Renewal,
    Rental,
    RentalDashboard,
    RentalPeriod,
    RentalStatus,
    UsageReport,
)


class OrderLineInline(ReadOnlyInline):
    model = OrderLine
    fields = ("position", "description", "quantity", "unit_usd", "terms", "discount_pct", "discount_usd", "amount_usd")


@admin.register(Order)
class OrderAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "account",
        "status",
        "gpu_count",
        "gpu_slug",
        "region_code",
        "term",
        "terms",
        "total_usd",
        "invoice",
        "host",
        "created_at",
    )
    list_filter = ("status", "region_code", "gpu_slug", "term", "pay_currency")
    search_fields = ("id", "account__username", "invoice__number", "host__name")
    list_select_related = ("account", "invoice", "host")
    date_hierarchy = "created_at"
    inlines = [OrderLineInline]
    actions = [
        reason_action(
            name="cancel_order",
            description="Cancel order (slots back to stock)",
            call=lambda order, actor, reason: services.order_cancel(order_id=order.pk, actor=actor, reason=reason),
        )
    ]

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in Order._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class PeriodInline(ReadOnlyInline):
    model = RentalPeriod
    fields = ("kind", "starts_at", "ends_at", "invoice", "created_by", "reason")


class RenewalInline(ReadOnlyInline):
    model = Renewal
    fields = ("kind", "invoice", "terms", "for_period_end", "created_at")


class JobInline(ReadOnlyInline):
    model = ProvisioningJob
    fields = ("action", "created_at", "attempts", "delivered_at", "completed_at", "last_error")


class UsageInline(ReadOnlyInline):
    model = UsageReport
    fields = ("month", "egress_tb", "overage_tb", "overage_usd", "billed_invoice", "reported_at")


class ProvisionedForm(ReasonForm):
    ipv4 = forms.GenericIPAddressField(protocol="IPv4")
    ipv6_prefix = forms.CharField(max_length=64, help_text="The /64, e.g. 2001:db8:1:2::/64")


class ExtendForm(ReasonForm):
    days = forms.IntegerField(min_value=1, max_value=366)


@admin.register(Rental)
class RentalAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "account",
        "status",
        "gpu_count",
        "gpu_slug",
        "region_code",
        "host",
        "paid_until",
        "auto_renew",
        "ipv4",
        "provisioning_seconds",
    )
    list_filter = ("status", "region_code", "gpu_slug", "auto_renew", "provisioner")
    search_fields = ("id", "account__username", "host__name", "ipv4", "order__invoice__number")
    list_select_related = ("account", "host")
    date_hierarchy = "created_at"
    inlines = [PeriodInline, RenewalInline, JobInline, UsageInline]
    actions = [
        reason_action(
            name="mark_provisioned",
            description="Mark provisioned (addresses)",
            form_class=ProvisionedForm,
            single=True,
            call=lambda r, actor, reason, ipv4, ipv6_prefix: services.rental_activate(
                rental_id=r.pk, ipv4=ipv4, ipv6_prefix=ipv6_prefix, actor=actor, reason=reason
            ),
        ),
        reason_action(
            name="extend",
            description="Extend the paid period",
            form_class=ExtendForm,
            call=lambda r, actor, reason, days: services.rental_extend(
                rental_id=r.pk, days=days, actor=actor, reason=reason
            ),
        ),
        reason_action(
            name="suspend",
            description="Suspend (power off)",
            call=lambda r, actor, reason: services.rental_suspend(rental_id=r.pk, actor=actor, reason=reason),
        ),
        reason_action(
            name="unsuspend",
            description="Unsuspend (power on)",
            call=lambda r, actor, reason: services.rental_unsuspend(rental_id=r.pk, actor=actor, reason=reason),
        ),
        reason_action(
            name="terminate",
            description="Terminate (slots back to stock)",
            call=lambda r, actor, reason: services.rental_terminate(rental_id=r.pk, actor=actor, reason=reason),
        ),
    ]

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in Rental._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


def month_start(now: datetime) -> datetime:
    return now.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)


@admin.register(RentalDashboard)
class RentalDashboardAdmin(ReportAdmin):
    def report_view(self, request):
        now = timezone.now()
        start = month_start(now)
        end = start.replace(year=start.year + 1, month=1) if start.month == 12 else start.replace(month=start.month + 1)
        active = (
            Rental.objects.filter(status=RentalStatus.ACTIVE)
            .values("region_code", "gpu_slug")
            .annotate(rentals=Count("id"), gpus=Sum("gpu_count"))
        )
        grid: dict[str, dict[str, dict]] = defaultdict(dict)
        regions: set[str] = set()
        for row in active:
            grid[row["gpu_slug"]][row["region_code"]] = row
            regions.add(row["region_code"])
        regions_sorted = sorted(regions)
        table = [
            {
                "gpu": gpu,
                "cells": [cells.get(r) for r in regions_sorted],
                "rentals": sum(c["rentals"] for c in cells.values()),
                "gpus": sum(c["gpus"] for c in cells.values()),
            }
            for gpu, cells in sorted(grid.items())
        ]
        by_status = dict(Rental.objects.values_list("status").annotate(n=Count("id")))
        queue = Rental.objects.filter(status=RentalStatus.PROVISIONING).select_related("account", "host")
        context = {
            **self.admin_site.each_context(request),
            "title": "Dashboard",
            "opts": self.model._meta,
            "regions": regions_sorted,
            "table": table,
            "by_status": [(s.label, by_status.get(s.value, 0)) for s in RentalStatus],
            "queue": [
                {"rental": r, "waiting_minutes": int((now - r.settled_at).total_seconds() // 60)}
                for r in queue.order_by("settled_at")[:50]
            ],
            "month": start,
            "revenue": revenue_by_currency(since=start, until=end),
        }
        context["revenue_usd"] = sum((row["usd"] for row in context["revenue"]), 0)
        return TemplateResponse(request, "admin/rentals/dashboard.html", context)
