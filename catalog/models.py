"""The catalog: cards, regions, hosts and their GPU slots, prices, discount
tiers, add-ons and OS templates. Every figure here is data staff can edit in
admin; `seed_catalog` loads the published one (catalog/data/catalog.json)."""

from __future__ import annotations

from decimal import Decimal

from django.core.validators import MinValueValidator, RegexValidator
from django.db import models
from django.db.models import Q

TERM_WEEKLY = "weekly"
TERM_MONTHLY = "monthly"
TERM_CHOICES = [(TERM_WEEKLY, "Weekly (7 days)"), (TERM_MONTHLY, "Monthly (720 hours)")]
TERM_HOURS = {TERM_WEEKLY: 7 * 24, TERM_MONTHLY: 30 * 24}

ALLOWED_COUNTS = (1, 2, 4, 8)


class Vendor(models.TextChoices):
    NVIDIA = "nvidia", "NVIDIA"
    AMD = "amd", "AMD"


class SoftwareStack(models.TextChoices):
    CUDA = "cuda", "CUDA"
    ROCM = "rocm", "ROCm"


class GpuModel(models.Model):
    slug = models.SlugField(max_length=32, unique=True)
    name = models.CharField(max_length=64)
    vendor = models.CharField(max_length=16, choices=Vendor.choices)
    architecture = models.CharField(max_length=32, help_text="Blackwell, Hopper, Ada, Ampere, CDNA 3")
    memory_gb = models.PositiveIntegerField("memory GB", help_text="Memory per card, GB (10^9 bytes).")
    memory_type = models.CharField(max_length=32, help_text="HBM3e, GDDR6X, GDDR6 ECC, ...")
    bandwidth_gbps = models.PositiveIntegerField("bandwidth GB/s", help_text="Memory bandwidth per card, GB/s.")
    fp8 = models.BooleanField("FP8", help_text="Has FP8 tensor cores (silicon, not a driver feature).")
    software_stack = models.CharField(max_length=8, choices=SoftwareStack.choices)
    tdp_w = models.PositiveIntegerField("TDP W", null=True, blank=True, help_text="Board power, W, where quoted.")
    monthly_usd = models.DecimalField(
        "monthly USD", max_digits=10, decimal_places=2, validators=[MinValueValidator(Decimal("0.01"))]
    )
    weekly_usd = models.DecimalField(
        "weekly USD", max_digits=10, decimal_places=2, validators=[MinValueValidator(Decimal("0.01"))]
    )
    min_gpus = models.PositiveSmallIntegerField("min GPUs", default=1)
    max_gpus = models.PositiveSmallIntegerField("max GPUs", default=8)
    gpus_per_host = models.PositiveSmallIntegerField(
        "GPUs per host", default=8, help_text="Slots on one host of this card."
    )
    is_active = models.BooleanField(default=True, help_text="Offered for new orders.")
    sort_order = models.PositiveSmallIntegerField(default=0)

    class Meta:
        ordering = ["sort_order", "slug"]
        verbose_name = "GPU model"
        constraints = [
            models.CheckConstraint(condition=Q(min_gpus__gte=1), name="gpu_min_gpus_positive"),
            models.CheckConstraint(condition=Q(max_gpus__gte=models.F("min_gpus")), name="gpu_max_ge_min"),
            models.CheckConstraint(condition=Q(monthly_usd__gt=0) & Q(weekly_usd__gt=0), name="gpu_prices_positive"),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def allowed_counts(self) -> list[int]:
        """Counts one instance may have: 1/2/4/8 within this card's min and max
        and within one host."""
        top = min(self.max_gpus, self.gpus_per_host)
        return [n for n in ALLOWED_COUNTS if self.min_gpus <= n <= top]

    def term_price(self, term: str) -> Decimal:
        return self.monthly_usd if term == TERM_MONTHLY else self.weekly_usd


class Region(models.Model):
    code = models.CharField(max_length=16, unique=True)
    name = models.CharField(max_length=64, help_text="City.")
    is_active = models.BooleanField(default=True)
    sort_order = models.PositiveSmallIntegerField(default=0)

    class Meta:
        ordering = ["sort_order", "code"]

    def __str__(self) -> str:
        return self.code


class Host(models.Model):
    """A physical server in a region with N GPU slots of one card. An instance
    never spans hosts."""

    name = models.CharField(max_length=64, unique=True)
    region = models.ForeignKey(Region, on_delete=models.PROTECT, related_name="hosts")
    gpu = models.ForeignKey(GpuModel, on_delete=models.PROTECT, related_name="hosts", verbose_name="GPU")
    slot_count = models.PositiveSmallIntegerField()
    is_active = models.BooleanField(default=True, help_text="Inactive hosts take no new reservations.")
    # Free slots of this host, kept by database triggers on catalog_slot in the
    # same statement that frees or takes a slot (catalog/triggers.py): stock and
    # reservations read it instead of counting slots. Never written from Python.
    free_slots = models.IntegerField(default=0, editable=False)

    class Meta:
        ordering = ["region", "gpu", "name"]
        indexes = [models.Index(fields=["region", "gpu"])]
        constraints = [
            models.CheckConstraint(condition=Q(slot_count__gte=1), name="host_has_slots"),
            models.CheckConstraint(condition=Q(free_slots__gte=0), name="host_free_slots_nonneg"),
        ]

    def __str__(self) -> str:
        return self.name

    def save(self, *args, **kwargs):
        # An edit never writes free_slots: the triggers own it, and the value
        # this instance read may be stale by the time it is saved. An edit is
        # the save of a host read from the database or saved before.
        if self.pk is not None and getattr(self, "stored", False) and kwargs.get("update_fields") is None:
            kwargs["update_fields"] = [
                f.name for f in self._meta.concrete_fields if not f.primary_key and f.name != "free_slots"
            ]
        super().save(*args, **kwargs)
        self.stored = True

    @classmethod
    def from_db(cls, db, field_names, values, **kwargs):
        # **kwargs: what newer Django passes on (6.1's fetch_mode), passed through as it is.
        host = super().from_db(db, field_names, values, **kwargs)
        host.stored = True  # read from the database: a later save() is an edit
        return host


class SlotStatus(models.TextChoices):
    FREE = "free", "Free"
    RESERVED = "reserved", "Reserved (order awaiting payment)"
    RENTED = "rented", "Rented"
    OUT_OF_SERVICE = "out_of_service", "Out of service"


class Slot(models.Model):
    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="slots")
    index = models.PositiveSmallIntegerField()
    status = models.CharField(max_length=16, choices=SlotStatus.choices, default=SlotStatus.FREE)
    holder = models.CharField(
        max_length=64,
        blank=True,
        help_text="Opaque reference to what holds the slot (e.g. order:12); empty when free.",
    )
    changed_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["host", "index"]
        indexes = [models.Index(fields=["host", "status"]), models.Index(fields=["holder"])]
        constraints = [
            models.UniqueConstraint(fields=["host", "index"], name="slot_unique_index"),
            models.CheckConstraint(
                condition=Q(status="free", holder="") | ~Q(status="free"),
                name="slot_free_has_no_holder",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.host.name}#{self.index}"


class MultiGpuDiscount(models.Model):
    """Discount on every line of an instance with at least `min_gpus` cards."""

    min_gpus = models.PositiveSmallIntegerField("min GPUs", unique=True)
    percent = models.DecimalField(max_digits=5, decimal_places=2)

    class Meta:
        ordering = ["min_gpus"]
        verbose_name = "multi-GPU discount"
        constraints = [
            models.CheckConstraint(condition=Q(percent__gte=0) & Q(percent__lt=100), name="multigpu_pct_range"),
        ]

    def __str__(self) -> str:
        return f"{self.min_gpus}+ GPUs: {self.percent}%"


class TermDiscount(models.Model):
    """Discount for paying `min_terms` or more terms of one length at once."""

    term = models.CharField(max_length=8, choices=TERM_CHOICES)
    min_terms = models.PositiveSmallIntegerField()
    percent = models.DecimalField(max_digits=5, decimal_places=2, default=Decimal("0"))

    class Meta:
        ordering = ["term", "min_terms"]
        constraints = [
            models.UniqueConstraint(fields=["term", "min_terms"], name="termdiscount_unique"),
            models.CheckConstraint(condition=Q(percent__gte=0) & Q(percent__lt=100), name="termdiscount_pct_range"),
        ]

    def __str__(self) -> str:
        return f"{self.term} x{self.min_terms}+: {self.percent}%"


class Addon(models.Model):
    """A recurring extra on an instance (billed per term), or a usage charge
    (`is_usage`: egress beyond the included allowance, billed per unit)."""

    slug = models.SlugField(max_length=32, unique=True)
    name = models.CharField(max_length=64)
    description = models.TextField(blank=True)
    monthly_usd = models.DecimalField(max_digits=10, decimal_places=2)
    weekly_usd = models.DecimalField(max_digits=10, decimal_places=2)
    is_usage = models.BooleanField(default=False, help_text="A metered charge, not orderable.")
    unit = models.CharField(max_length=16, blank=True, help_text="Unit of a usage charge, e.g. TB.")
    included_units = models.PositiveIntegerField(default=0, help_text="Units included per month before charging.")
    is_active = models.BooleanField(default=True)

    class Meta:
        ordering = ["slug"]
        verbose_name = "add-on"
        constraints = [
            models.CheckConstraint(condition=Q(monthly_usd__gte=0) & Q(weekly_usd__gte=0), name="addon_prices_nonneg"),
        ]

    def __str__(self) -> str:
        return self.name

    def term_price(self, term: str) -> Decimal:
        return self.monthly_usd if term == TERM_MONTHLY else self.weekly_usd


class Template(models.Model):
    """An OS image. `stack` limits it to cards of one software stack (empty: any);
    `gpus`, when set, limits it further to those cards."""

    # Template slugs carry versions (`vllm-0.9-ubuntu-24.04`): a SlugField's validator
    # refuses the dot, and staff could save no template in the admin.
    slug = models.CharField(
        max_length=48,
        unique=True,
        validators=[
            RegexValidator(
                r"^[a-z0-9][a-z0-9._-]*$",
                "Lower-case letters, digits, dots, hyphens and underscores, starting with a letter or digit.",
            )
        ],
    )
    name = models.CharField(max_length=64)
    description = models.TextField(blank=True)
    stack = models.CharField(max_length=8, choices=SoftwareStack.choices, blank=True)
    gpus = models.ManyToManyField(GpuModel, blank=True, related_name="templates")
    is_active = models.BooleanField(default=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.name

    def runs_on(self, gpu: GpuModel) -> bool:
        """Whether this template runs on `gpu` (uses prefetched `gpus` when there)."""
        restricted = list(self.gpus.all())
        stack_ok = not self.stack or self.stack == gpu.software_stack
        return self.is_active and stack_ok and (not restricted or gpu in restricted)


class CatalogVersion(models.Model):
    """One row: changes whenever anything an answer of the catalog, pricing or
    sizing endpoints depends on changes (cards, regions, hosts, discounts,
    add-ons, templates, architectures; not slots). Database triggers set it in
    the writing transaction (catalog/triggers.py), so no write path can miss it;
    caches and ETags are keyed on it. `version` is never reused, not even after
    a rollback (a sequence on PostgreSQL, a random number on SQLite)."""

    version = models.BigIntegerField(default=0)
    changed_at = models.DateTimeField()

    class Meta:
        constraints = [models.CheckConstraint(condition=Q(id=1), name="catalogversion_single_row")]

    def __str__(self) -> str:
        return f"catalog version {self.version}"


class StockOverview(Region):
    """Admin page: free and total GPUs per region and card."""

    class Meta:
        proxy = True
        verbose_name = "stock overview"
        verbose_name_plural = "stock overview"
