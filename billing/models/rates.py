from django.conf import settings
from django.db import models


class RateSample(models.Model):
    """One USD price of a currency from one source at one time. The rate a quote
    uses is the median of the fresh samples (billing.rates)."""

    currency = models.CharField(max_length=8)
    source = models.CharField(max_length=32, help_text="kraken, coingecko, manual, setting")
    usd = models.DecimalField(max_digits=30, decimal_places=12, help_text="USD per whole coin.")
    observed_at = models.DateTimeField(help_text="When the source says the price held.")
    fetched_at = models.DateTimeField(auto_now_add=True)
    valid_until = models.DateTimeField(
        null=True, blank=True, help_text="Manual rates: the time after which this rate no longer counts."
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    note = models.TextField(blank=True)

    class Meta:
        ordering = ["-observed_at", "-id"]
        verbose_name = "exchange rate"
        indexes = [models.Index(fields=["currency", "source", "-observed_at"])]
        constraints = [models.CheckConstraint(condition=models.Q(usd__gt=0), name="ratesample_usd_positive")]

    def __str__(self) -> str:
        usd = f"{self.usd.normalize():f}" if self.usd is not None else "?"  # 151.2375, not 151.237500000000
        return f"{self.currency} {usd} USD ({self.source}, {self.observed_at:%Y-%m-%d %H:%M})"
