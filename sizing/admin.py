from django.contrib import admin

from core.admin import AuditedModelAdmin

from .models import Architecture


@admin.register(Architecture)
class ArchitectureAdmin(AuditedModelAdmin):
    list_display = (
        "slug",
        "name",
        "total_params",
        "active_params",
        "layers",
        "attention_heads",
        "kv_heads",
        "head_dim",
        "attention_kind",
        "max_context",
        "is_reference",
        "is_active",
    )
    list_filter = ("attention_kind", "is_reference", "is_active")
    search_fields = ("slug", "name")
    ordering = ("sort_order", "slug")
    fieldsets = (
        (None, {"fields": ("slug", "name", "source", "is_active", "is_reference", "sort_order")}),
        ("Parameters", {"fields": ("total_params", "active_params", "experts", "experts_per_token")}),
        ("Shape", {"fields": ("layers", "hidden_size", "attention_heads", "kv_heads", "head_dim", "max_context")}),
        (
            "Attention",
            {"fields": ("attention_kind", "mla_latent_dim", "mla_rope_dim", "sliding_window", "sliding_window_layers")},
        ),
        ("Checkpoint", {"fields": ("config",)}),
    )
