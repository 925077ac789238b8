"""Orders, rentals and their paid periods.

An order snapshots everything it was priced from (card, region, template,
add-ons, every line and discount) so later catalog edits never change what a
customer bought; renewals bill the same lines again (grandfathered).
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import F, Q

from catalog.models import TERM_CHOICES


class OrderStatus(models.TextChoices):
    AWAITING_PAYMENT = "awaiting_payment", "Awaiting payment"
    PAID = "paid", "Paid"
    EXPIRED = "expired", "Expired unpaid"
    CANCELLED = "cancelled", "Cancelled"
    UNFULFILLED = "unfulfilled", "Paid too late to fulfil (credited)"


class Order(models.Model):
    account = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="orders")
    status = models.CharField(max_length=20, choices=OrderStatus.choices, default=OrderStatus.AWAITING_PAYMENT)
    region = models.ForeignKey("catalog.Region", on_delete=models.PROTECT, related_name="+")
    gpu = models.ForeignKey("catalog.GpuModel", on_delete=models.PROTECT, related_name="+", verbose_name="GPU")
    template = models.ForeignKey("catalog.Template", on_delete=models.PROTECT, related_name="+")
    gpu_count = models.PositiveSmallIntegerField("GPUs")
    term = models.CharField(max_length=8, choices=TERM_CHOICES)
    terms = models.PositiveSmallIntegerField()
    # Snapshots: what was sold, as it was when it was sold.
    region_code = models.CharField(max_length=16)
    gpu_slug = models.CharField("GPU slug", max_length=32)
    gpu_name = models.CharField("GPU name", max_length=64)
    template_slug = models.CharField(max_length=48)
    addons = models.JSONField("add-ons", default=list, blank=True, help_text="Add-on slugs.")
    ssh_keys = models.JSONField(
        "SSH keys", default=list, help_text="[{name, type, fingerprint, public_key}] at order time."
    )
    workload = models.JSONField(null=True, blank=True, help_text="The sizing request the order was checked against.")
    sizing = models.JSONField(null=True, blank=True, help_text="The sizing check's result at order time.")
    launch_command = models.TextField(
        blank=True,
        default="",
        help_text="The `vllm serve` line the workload was sized for (vllm-0.9-ubuntu-24.04 runs it).",
    )
    pay_currency = models.CharField(max_length=8)
    subtotal_usd = models.DecimalField(max_digits=12, decimal_places=2)
    multi_gpu_discount_pct = models.DecimalField(max_digits=5, decimal_places=2)
    term_discount_pct = models.DecimalField(max_digits=5, decimal_places=2)
    discount_usd = models.DecimalField(max_digits=12, decimal_places=2)
    total_usd = models.DecimalField(max_digits=12, decimal_places=2)
    per_gpu_hour_usd = models.DecimalField(max_digits=10, decimal_places=2)
    per_hour_usd = models.DecimalField(max_digits=10, decimal_places=2)
    host = models.ForeignKey(
        "catalog.Host",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        help_text="Where the slots are reserved.",
    )
    invoice = models.OneToOneField(
        "billing.Invoice", null=True, blank=True, on_delete=models.PROTECT, related_name="order"
    )
    client_network = models.CharField(
        max_length=43,
        blank=True,
        default="",
        editable=False,
        help_text="The client address the order came from (an IPv6 one as its /64), counted for the unpaid "
        "caps per address; empty when it was placed without a request.",
    )
    created_at = models.DateTimeField()
    paid_at = models.DateTimeField(null=True, blank=True)
    closed_at = models.DateTimeField(null=True, blank=True, help_text="Expired, cancelled or unfulfilled.")
    close_reason = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["account", "-created_at"]),
            models.Index(fields=["status"]),
            # What an account holds unpaid, whether it has paid, and its orders that closed
            # unpaid lately (services/unpaid.py), on every order: the last by a range of closed_at.
            models.Index(fields=["account", "status", "closed_at"]),
            # What an address holds unpaid, and its orders that closed unpaid lately (the same).
            models.Index(fields=["client_network", "status", "closed_at"]),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(gpu_count__in=[1, 2, 4, 8]), name="order_gpu_count_allowed"),
            models.CheckConstraint(condition=Q(terms__gte=1), name="order_terms_positive"),
            models.CheckConstraint(condition=Q(total_usd__gt=0), name="order_total_positive"),
        ]

    def __str__(self) -> str:
        return f"Order {self.pk} ({self.gpu_count}x {self.gpu_slug}, {self.region_code})"

    @property
    def holder(self) -> str:
        """The reference its reserved slots carry."""
        return f"order:{self.pk}"


class OrderLine(models.Model):
    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="lines")
    position = models.PositiveSmallIntegerField()
    code = models.CharField(max_length=48)
    description = models.CharField(max_length=200)
    quantity = models.PositiveIntegerField()
    unit_usd = models.DecimalField(max_digits=12, decimal_places=2)
    terms = models.PositiveSmallIntegerField()
    subtotal_usd = models.DecimalField(max_digits=12, decimal_places=2)
    discount_pct = models.DecimalField(max_digits=5, decimal_places=2)
    discount_usd = models.DecimalField(max_digits=12, decimal_places=2)
    amount_usd = models.DecimalField(max_digits=12, decimal_places=2)

    class Meta:
        ordering = ["order", "position"]
        constraints = [models.UniqueConstraint(fields=["order", "position"], name="orderline_position_unique")]

    def __str__(self) -> str:
        return self.description


class RentalStatus(models.TextChoices):
    PROVISIONING = "provisioning", "Provisioning"
    ACTIVE = "active", "Active"
    SUSPENDED = "suspended", "Suspended (unpaid)"
    TERMINATED = "terminated", "Terminated"


class Rental(models.Model):
    account = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="rentals")
    order = models.OneToOneField(Order, on_delete=models.PROTECT, related_name="rental")
    host = models.ForeignKey("catalog.Host", on_delete=models.PROTECT, related_name="rentals")
    gpu = models.ForeignKey("catalog.GpuModel", on_delete=models.PROTECT, related_name="+", verbose_name="GPU")
    region_code = models.CharField(max_length=16)
    gpu_slug = models.CharField("GPU slug", max_length=32)
    gpu_count = models.PositiveSmallIntegerField("GPUs")
    term = models.CharField(max_length=8, choices=TERM_CHOICES)
    renewal_terms = models.PositiveSmallIntegerField(help_text="Terms an automatic renewal buys.")
    template_slug = models.CharField(max_length=48)
    addons = models.JSONField("add-ons", default=list, blank=True)
    ssh_keys = models.JSONField("SSH keys", default=list)
    pay_currency = models.CharField(max_length=8, help_text="Currency of the last invoice, used for renewals.")
    status = models.CharField(max_length=16, choices=RentalStatus.choices, default=RentalStatus.PROVISIONING)
    auto_renew = models.BooleanField(default=True)
    cancelled_at = models.DateTimeField(null=True, blank=True, help_text="Customer cancelled: no more renewals.")
    ipv4 = models.GenericIPAddressField("IPv4", protocol="IPv4", null=True, blank=True)
    ipv6_prefix = models.CharField(
        "IPv6 prefix", max_length=64, blank=True, help_text="The /64, e.g. 2001:db8:1:2::/64"
    )
    provisioner = models.CharField(max_length=16, help_text="manual or webhook")
    provision_job = models.UUIDField(
        null=True,
        blank=True,
        editable=False,
        help_text="Id of the provisioning job sent to operators, once there is one.",
    )
    created_at = models.DateTimeField()
    settled_at = models.DateTimeField(help_text="When the order's invoice settled.")
    active_at = models.DateTimeField(null=True, blank=True, help_text="First hand-over to the customer.")
    provisioning_seconds = models.PositiveIntegerField(null=True, blank=True, help_text="Settled -> active.")
    paid_until = models.DateTimeField(null=True, blank=True, help_text="End of the last paid period.")
    suspended_at = models.DateTimeField(null=True, blank=True)
    terminated_at = models.DateTimeField(null=True, blank=True)
    end_reason = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["status", "paid_until"]),
            models.Index(fields=["account", "-created_at"]),
        ]
        constraints = [
            models.CheckConstraint(
                condition=~Q(status="active") | Q(paid_until__isnull=False), name="rental_active_is_paid"
            ),
        ]

    def __str__(self) -> str:
        return f"Rental {self.pk} ({self.gpu_count}x {self.gpu_slug}, {self.region_code})"

    @property
    def holder(self) -> str:
        return f"rental:{self.pk}"


class PeriodKind(models.TextChoices):
    INITIAL = "initial", "First period"
    RENEWAL = "renewal", "Renewal"
    RESUME = "resume", "Resumed after suspension"
    EXTENSION = "extension", "Staff extension"


class RentalPeriod(models.Model):
    """A paid stretch of time. Periods are only added, never shortened."""

    rental = models.ForeignKey(Rental, on_delete=models.CASCADE, related_name="periods")
    kind = models.CharField(max_length=16, choices=PeriodKind.choices)
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    invoice = models.ForeignKey("billing.Invoice", null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField()
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    reason = models.TextField(blank=True)

    class Meta:
        ordering = ["rental", "starts_at"]
        constraints = [
            models.CheckConstraint(condition=Q(ends_at__gt=F("starts_at")), name="period_positive_length"),
            models.UniqueConstraint(
                fields=["invoice"], condition=Q(invoice__isnull=False), name="period_one_per_invoice"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.rental} {self.starts_at:%Y-%m-%d} -> {self.ends_at:%Y-%m-%d}"


class RenewalKind(models.TextChoices):
    AUTO = "auto", "Automatic, before the period ends"
    MANUAL = "manual", "Asked for by the customer"
    USAGE = "usage", "Usage charge of an ending rental"


class Renewal(models.Model):
    """An invoice issued to extend a rental (or to bill its usage)."""

    rental = models.ForeignKey(Rental, on_delete=models.PROTECT, related_name="renewals")
    invoice = models.OneToOneField("billing.Invoice", on_delete=models.PROTECT, related_name="renewal")
    kind = models.CharField(max_length=8, choices=RenewalKind.choices)
    terms = models.PositiveSmallIntegerField(default=0)
    for_period_end = models.DateTimeField(null=True, blank=True, help_text="The paid_until it continues (auto).")
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["rental", "created_at"]
        constraints = [
            # One automatic renewal per period end, however often the job runs.
            models.UniqueConstraint(
                fields=["rental", "for_period_end"], condition=Q(kind="auto"), name="renewal_auto_once_per_period"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.rental} {self.kind} {self.invoice_id}"


class UsageReport(models.Model):
    """Egress an operator reported for one rental and month."""

    rental = models.ForeignKey(Rental, on_delete=models.PROTECT, related_name="usage_reports")
    month = models.DateField(help_text="First day of the month.")
    egress_tb = models.DecimalField(max_digits=12, decimal_places=3)
    overage_tb = models.DecimalField(max_digits=12, decimal_places=3)
    overage_usd = models.DecimalField(max_digits=12, decimal_places=2)
    reported_at = models.DateTimeField()
    reported_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    billed_invoice = models.ForeignKey(
        "billing.Invoice", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )

    class Meta:
        ordering = ["rental", "month"]
        constraints = [
            models.UniqueConstraint(fields=["rental", "month"], name="usage_once_per_month"),
            models.CheckConstraint(condition=Q(egress_tb__gte=0), name="usage_egress_nonneg"),
        ]

    def __str__(self) -> str:
        return f"{self.rental} {self.month:%Y-%m}: {self.egress_tb} TB"


class IdempotencyKey(models.Model):
    """The first response to a request made with an Idempotency-Key header."""

    account = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=255)
    scope = models.CharField(max_length=64, help_text="The endpoint, e.g. orders.create")
    request_hash = models.CharField(max_length=64)
    response_status = models.PositiveSmallIntegerField(null=True)
    response_body = models.JSONField(null=True)
    created_at = models.DateTimeField(db_index=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["account", "scope", "key"], name="idempotency_key_unique")]

    def __str__(self) -> str:
        return f"{self.scope} {self.key}"


class ProvisioningAction(models.TextChoices):
    PROVISION = "provision", "Provision"
    POWER_OFF = "power_off", "Power off (suspended)"
    POWER_ON = "power_on", "Power on (resumed)"
    DEPROVISION = "deprovision", "Wipe and return to stock"


class ProvisioningJob(models.Model):
    """A request to the operators' provisioning system, delivered with retries."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    rental = models.ForeignKey(Rental, on_delete=models.PROTECT, related_name="jobs")
    action = models.CharField(max_length=16, choices=ProvisioningAction.choices)
    payload = models.JSONField()
    created_at = models.DateTimeField()
    attempts = models.PositiveIntegerField(default=0)
    delivered_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    completed_at = models.DateTimeField(null=True, blank=True, help_text="The operator reported it done.")
    superseded_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="A later job of the rental made this one moot before it was delivered: it is never sent.",
    )

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.action} {self.rental}"


class RentalDashboard(Rental):
    """Admin page: active rentals per region and card, the provisioning queue,
    and this month's revenue by currency."""

    class Meta:
        proxy = True
        verbose_name = "dashboard"
        verbose_name_plural = "dashboard"
