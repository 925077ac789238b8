from django.contrib import admin

from core.admin import AuditedModelAdmin

from .models import Architecture


@admin.register(Architecture)
class ArchitectureAdmin(AuditedModelAdmin):
    list_display = (
        "name",
        "slug",
        "parameters",
        "layers",
        "heads",
        "head_dim",
        "attention_kind",
        "max_context",
        "is_reference",
        "is_active",
    )
    list_display_links = ("name",)
    list_filter = ("attention_kind", "is_reference", "is_active")
    search_fields = ("slug", "name")
    ordering = ("sort_order", "slug")

    @admin.display(description="parameters", ordering="total_params")
    def parameters(self, arch):
        """`70.55B`, or a mixture of experts' `46.7B, 12.9B active`."""
        total = f"{arch.total_params / 1e9:.4g}B"
        return f"{total}, {arch.active_params / 1e9:.3g}B active" if arch.active_params else total

    @admin.display(description="heads (KV)", ordering="attention_heads")
    def heads(self, arch):
        return f"{arch.attention_heads} ({arch.kv_heads})"

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
