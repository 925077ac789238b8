from __future__ import annotations

from django.db import models


class ChainState(models.Model):
    """A watcher's cursor and health: the last block it scanned (height and hash)
    and what it last saw of the node."""

    chain = models.CharField(max_length=16, primary_key=True)
    height = models.BigIntegerField(null=True, blank=True, help_text="Last block fully scanned.")
    block_hash = models.CharField(max_length=128, blank=True)
    tip_height = models.BigIntegerField(null=True, blank=True, help_text="The node's tip when last asked.")
    last_scan_at = models.DateTimeField(null=True, blank=True)
    last_ok_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)
    consecutive_failures = models.PositiveIntegerField(default=0)
    extra = models.JSONField(default=dict, blank=True, help_text="Chain-specific cursor data.")

    def __str__(self) -> str:
        return f"{self.chain} @ {self.height}"


class ChainBlock(models.Model):
    """Hashes of recently scanned blocks, to find the fork point after a reorg."""

    chain = models.CharField(max_length=16)
    height = models.BigIntegerField()
    block_hash = models.CharField(max_length=128)

    class Meta:
        ordering = ["chain", "-height"]
        constraints = [models.UniqueConstraint(fields=["chain", "height"], name="chainblock_height_unique")]

    def __str__(self) -> str:
        return f"{self.chain} {self.height} {self.block_hash[:16]}"
