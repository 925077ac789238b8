"""Staff views of orders and rentals, their actions (each needs a reason and
is audited) and the dashboard."""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.safestring import SafeString

from accounts.models import Account
from core import display
from core.admin import (
    PANEL_ROWS,
    ReadOnlyAdmin,
    ReadOnlyInline,
    ReasonForm,
    RecordAdmin,
    ReportAdmin,
    admin_link,
    changelist_url,
    json_display,
    percent_display,
    reason_action,
    related_panel_register,
    related_table,
    usd_display,
)
from rentals import services
from rentals.benchmark_charts import calibration_context
from rentals.dashboard import dashboard_context
from rentals.models import (
    BenchmarkCalibration,
    BenchmarkRun,
    Order,
    OrderLine,
    ProvisioningJob,
    Renewal,
    Rental,
    RentalDashboard,
    RentalPeriod,
    UsageReport,
)


@admin.display(description="instance", ordering="gpu_slug")
def instance(row: Order | Rental) -> str:
    """`1 x H100 SXM`: the GPUs of an order or a rental."""
    return f"{row.gpu_count} \u00d7 {getattr(row, 'gpu_name', '') or row.gpu_slug}"


@admin.display(description="paid for", ordering="term")
def paid_terms(order: Order) -> str:
    return f"{order.terms} \u00d7 {order.term}"


class OrderLineInline(ReadOnlyInline):
    model = OrderLine
    fields = (
        "position",
        "description",
        "quantity",
        usd_display("unit_usd", "unit USD"),
        "terms",
        percent_display("discount_pct", "discount"),
        usd_display("discount_usd", "discount USD"),
        usd_display("amount_usd", "amount USD"),
    )
    readonly_fields = fields


@admin.register(Order)
class OrderAdmin(RecordAdmin):
    """Orders are never edited: what was sold is a snapshot. Cancelling is an
    action (with a reason, audited)."""

    list_display = (
        "id",
        "account",
        "status",
        instance,
        "region_code",
        paid_terms,
        usd_display("total_usd", "total USD"),
        "invoice",
        "created_at",
    )
    fieldsets = (
        (None, {"fields": ("account", "client_network", "status", "invoice", "pay_currency", "host")}),
        (
            "What was sold",
            {
                "fields": (
                    "region_code",
                    "gpu_name",
                    "gpu_slug",
                    "gpu_count",
                    "term",
                    "terms",
                    "template_slug",
                    json_display("addons", "add-ons"),
                    json_display("ssh_keys", "SSH keys"),
                )
            },
        ),
        (
            "Price (snapshot)",
            {
                "fields": (
                    usd_display("subtotal_usd", "subtotal USD"),
                    percent_display("multi_gpu_discount_pct", "multi-GPU discount"),
                    percent_display("term_discount_pct", "term discount"),
                    usd_display("discount_usd", "discount USD"),
                    usd_display("total_usd", "total USD"),
                    usd_display("per_gpu_hour_usd", "per GPU-hour USD"),
                    usd_display("per_hour_usd", "per hour USD"),
                )
            },
        ),
        (
            "Workload and sizing",
            {"fields": (json_display("workload", "workload"), json_display("sizing", "sizing"), "launch_command")},
        ),
        ("Times (UTC)", {"fields": ("created_at", "paid_at", "closed_at", "close_reason")}),
    )
    # Shown above as snapshots or tables; the catalog rows they came from can change later.
    shown_otherwise = (
        "id",
        "region",
        "gpu",
        "template",
        "addons",
        "ssh_keys",
        "workload",
        "sizing",
        "subtotal_usd",
        "multi_gpu_discount_pct",
        "term_discount_pct",
        "discount_usd",
        "total_usd",
        "per_gpu_hour_usd",
        "per_hour_usd",
    )
    list_filter = ("status", "region_code", "gpu_slug", "term", "pay_currency")
    search_fields = ("id", "account__username", "invoice__number", "host__name", "=client_network")
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


class PeriodInline(ReadOnlyInline):
    model = RentalPeriod
    fields = ("kind", "starts_at", "ends_at", "invoice", "created_by", "reason")


class RenewalInline(ReadOnlyInline):
    model = Renewal
    fields = ("kind", "invoice", "terms", "for_period_end", "created_at")


class JobInline(ReadOnlyInline):
    model = ProvisioningJob
    fields = ("action", "created_at", "attempts", "delivered_at", "superseded_at", "completed_at", "last_error")


class UsageInline(ReadOnlyInline):
    model = UsageReport
    fields = (
        "month",
        "egress_tb",
        "overage_tb",
        usd_display("overage_usd", "overage USD"),
        "billed_invoice",
        "reported_at",
    )
    readonly_fields = fields


class ProvisionedForm(ReasonForm):
    ipv4 = forms.GenericIPAddressField(protocol="IPv4")
    ipv6_prefix = forms.CharField(max_length=64, help_text="The /64, e.g. 2001:db8:1:2::/64")


class ExtendForm(ReasonForm):
    days = forms.IntegerField(min_value=1, max_value=366)


@admin.register(Rental)
class RentalAdmin(RecordAdmin):
    """Rentals change through their lifecycle and the actions below (each with
    a reason, audited), never through a form."""

    list_display = (
        "id",
        "account",
        "status",
        instance,
        "region_code",
        "host",
        "paid_until",
        "auto_renew",
        "ipv4",
    )
    fieldsets = (
        (None, {"fields": ("account", "order", "status", "host", "provisioner")}),
        (
            "What is rented",
            {
                "fields": (
                    "region_code",
                    "gpu_slug",
                    "gpu_count",
                    "term",
                    "renewal_terms",
                    "auto_renew",
                    "pay_currency",
                    "template_slug",
                    json_display("addons", "add-ons"),
                    json_display("ssh_keys", "SSH keys"),
                )
            },
        ),
        ("Hand-over", {"fields": ("ipv4", "ipv6_prefix")}),
        (
            "Times (UTC)",
            {
                "fields": (
                    "settled_at",
                    "active_at",
                    "provisioning_seconds",
                    "paid_until",
                    "cancelled_at",
                    "suspended_at",
                    "terminated_at",
                    "end_reason",
                    "created_at",
                )
            },
        ),
    )
    shown_otherwise = ("id", "gpu", "addons", "ssh_keys")
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


@admin.register(RentalDashboard)
class RentalDashboardAdmin(ReportAdmin):
    def report_view(self, request: HttpRequest) -> TemplateResponse:
        context = {
            **self.admin_site.each_context(request),
            "title": "Dashboard",
            "opts": self.model._meta,
            **dashboard_context(now=timezone.now()),
        }
        return TemplateResponse(request, "admin/rentals/dashboard.html", context)


@admin.register(BenchmarkRun)
class BenchmarkRunAdmin(ReadOnlyAdmin):
    list_display = (
        "rental",
        "trace",
        "gpu_slug",
        "weight_format",
        "output_tokens_per_s",
        "predicted_output_tokens_per_s",
        "completed",
        "num_prompts",
        "uploaded_at",
    )
    list_filter = ("trace", "gpu_slug", "weight_format")
    list_select_related = ("rental",)
    search_fields = ("=rental__id", "rental__account__username", "model_name")


@admin.register(BenchmarkCalibration)
class BenchmarkCalibrationAdmin(ReportAdmin):
    def report_view(self, request: HttpRequest) -> TemplateResponse:
        context = {
            **self.admin_site.each_context(request),
            "title": "Measured vs predicted",
            "opts": self.model._meta,
            **calibration_context(),
        }
        return TemplateResponse(request, "admin/rentals/benchmarks.html", context)


# --- Links from billing and panels on a customer's page ---------------------------------


def _account_orders(account: Account) -> SafeString:
    orders = Order.objects.filter(account=account).select_related("invoice").order_by("-created_at", "-id")
    return related_table(
        rows=list(orders[:PANEL_ROWS]),
        columns=[
            ("order", lambda o: admin_link("admin:rentals_order_change", o.pk, o.pk)),
            ("status", lambda o: o.get_status_display()),
            ("instance", instance),
            ("region", lambda o: o.region_code),
            ("paid for", paid_terms),
            ("total USD", lambda o: display.usd(o.total_usd)),
            (
                "invoice",
                lambda o: (
                    admin_link("admin:billing_invoice_change", o.invoice_id, o.invoice.number)
                    if o.invoice_id
                    else display.EMPTY
                ),
            ),
            ("created", lambda o: f"{o.created_at:%Y-%m-%d %H:%M}"),
        ],
        total=Order.objects.filter(account=account).count(),
        list_url=changelist_url("admin:rentals_order_changelist", account__id__exact=account.pk),
        noun="orders",
    )


def _account_rentals(account: Account) -> SafeString:
    rentals = Rental.objects.filter(account=account).select_related("host").order_by("-created_at", "-id")
    return related_table(
        rows=list(rentals[:PANEL_ROWS]),
        columns=[
            ("rental", lambda r: admin_link("admin:rentals_rental_change", r.pk, r.pk)),
            ("status", lambda r: r.get_status_display()),
            ("instance", instance),
            ("region", lambda r: r.region_code),
            ("host", lambda r: r.host or display.EMPTY),
            ("paid until", lambda r: f"{r.paid_until:%Y-%m-%d %H:%M}" if r.paid_until else display.EMPTY),
            ("auto-renew", lambda r: "yes" if r.auto_renew else "no"),
        ],
        total=Rental.objects.filter(account=account).count(),
        list_url=changelist_url("admin:rentals_rental_changelist", account__id__exact=account.pk),
        noun="rentals",
    )


related_panel_register(
    model="accounts.Account",
    name="orders",
    title="orders",
    render=_account_orders,
    permission="rentals.view_order",
    order=10,
)
related_panel_register(
    model="accounts.Account",
    name="rentals",
    title="rentals",
    render=_account_rentals,
    permission="rentals.view_rental",
    order=30,
)
