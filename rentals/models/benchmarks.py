"""Benchmark results customers upload for their rentals: the file `vllm bench
serve --save-result` wrote (the fields sizing.benchmarks reads of it), the
trace of the benchmark plan it ran, and the speed model's prediction for the
same run, kept as it was at upload."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import F, Q

from rentals.models.orders import Rental


class BenchmarkTrace(models.TextChoices):
    CHAT = "chat", "Short chat"
    RAG = "rag", "Long-context RAG"
    BATCH = "batch", "Batch / offline"


class BenchmarkRun(models.Model):
    rental = models.ForeignKey(Rental, on_delete=models.CASCADE, related_name="benchmarks")
    trace = models.CharField(max_length=8, choices=BenchmarkTrace.choices)
    uploaded_at = models.DateTimeField()
    uploaded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # What ran, copied from the rental and its order's workload (the admin's chart groups by them).
    gpu_slug = models.CharField("GPU slug", max_length=32)
    gpu_count = models.PositiveSmallIntegerField("GPUs")
    weight_format = models.CharField(max_length=16, help_text="The workload's weight format, e.g. fp8.")
    model_name = models.CharField(max_length=200, help_text="The model the server line serves.")
    engine_version = models.CharField(max_length=16, help_text="The vLLM release the plan was written for.")
    # The measured figures the list and the chart read.
    num_prompts = models.PositiveIntegerField()
    completed = models.PositiveIntegerField(help_text="Requests that succeeded.")
    output_tokens = models.BigIntegerField(help_text="Accepted output tokens: those of completed requests.")
    duration_s = models.DecimalField("duration (s)", max_digits=14, decimal_places=3)
    output_tokens_per_s = models.DecimalField("measured tokens/s", max_digits=14, decimal_places=2)
    predicted_output_tokens_per_s = models.DecimalField(
        "predicted tokens/s", max_digits=14, decimal_places=2, null=True, blank=True
    )
    result = models.JSONField(help_text="The result file's fields this system reads.")
    predicted = models.JSONField(null=True, blank=True, help_text="The speed model's figures for the same run.")
    environment = models.JSONField(default=dict, blank=True, help_text="GPU SKU, driver, CUDA, vLLM as reported.")

    class Meta:
        ordering = ["rental", "uploaded_at", "id"]
        indexes = [models.Index(fields=["gpu_slug", "weight_format"])]
        constraints = [
            models.CheckConstraint(condition=Q(completed__lte=F("num_prompts")), name="benchmark_completed_le_prompts"),
            models.CheckConstraint(condition=Q(output_tokens__gte=0), name="benchmark_output_tokens_nonneg"),
            models.CheckConstraint(condition=Q(duration_s__gt=0), name="benchmark_duration_positive"),
            models.CheckConstraint(condition=Q(trace__in=BenchmarkTrace.values), name="benchmark_trace_known"),
        ]

    def __str__(self) -> str:
        return f"{self.rental} {self.trace} {self.uploaded_at:%Y-%m-%d %H:%M}"

    @property
    def failed(self) -> int:
        return self.num_prompts - self.completed


class BenchmarkCalibration(BenchmarkRun):
    """Admin page: measured against predicted per card and weight format, over all uploads."""

    class Meta:
        proxy = True
        verbose_name = "measured vs predicted"
        verbose_name_plural = "measured vs predicted"
