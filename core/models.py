from django.conf import settings
from django.contrib.contenttypes.models import ContentType
from django.db import models


class AuditEntry(models.Model):
    """Who did what to which object, when and why. Append-only."""

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_name = models.CharField(max_length=64, blank=True, help_text="Kept when the account goes.")
    action = models.CharField(max_length=64)
    content_type = models.ForeignKey(ContentType, null=True, blank=True, on_delete=models.SET_NULL)
    object_id = models.CharField(max_length=64, blank=True)
    object_repr = models.CharField(max_length=200, blank=True)
    changes = models.JSONField(default=dict, blank=True)
    reason = models.TextField(blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["content_type", "object_id"])]
        verbose_name_plural = "audit entries"

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M} {self.actor_name or 'system'} {self.action} {self.object_repr}"


class Lease(models.Model):
    """A named, expiring lock held in the database: one holder at a time across
    every worker on every machine (single-flight periodic jobs)."""

    name = models.CharField(max_length=100, primary_key=True)
    owner = models.CharField(max_length=100, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return self.name
