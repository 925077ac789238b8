"""LLM architectures the sizing API knows by slug. Staff add more in admin;
`sizing.seed.architectures_seed` loads the published ones (sizing/data)."""

from __future__ import annotations

from django.db import models
from django.db.models import F, Q

from .arithmetic import (
    ATTENTION_GQA,
    ATTENTION_MHA,
    ATTENTION_MLA,
    ATTENTION_MQA,
    Arch,
)


class AttentionKind(models.TextChoices):
    MHA = ATTENTION_MHA, "Multi-head (MHA)"
    GQA = ATTENTION_GQA, "Grouped-query (GQA)"
    MQA = ATTENTION_MQA, "Multi-query (MQA)"
    MLA = ATTENTION_MLA, "Multi-head latent (MLA)"


class Architecture(models.Model):
    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=120)
    total_params = models.PositiveBigIntegerField(help_text="Parameters, all of them (a MoE's every expert).")
    active_params = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="MoE only: parameters a decode step reads (routed experts only)."
    )
    layers = models.PositiveIntegerField()
    hidden_size = models.PositiveIntegerField()
    attention_heads = models.PositiveIntegerField()
    kv_heads = models.PositiveIntegerField(help_text="KV heads (1 for MLA: one latent per token).")
    head_dim = models.PositiveIntegerField()
    attention_kind = models.CharField(max_length=8, choices=AttentionKind.choices)
    mla_latent_dim = models.PositiveIntegerField(default=0, help_text="MLA: latent size (kv_lora_rank).")
    mla_rope_dim = models.PositiveIntegerField(default=0, help_text="MLA: rope key size (qk_rope_head_dim).")
    sliding_window = models.PositiveIntegerField(null=True, blank=True, help_text="Tokens a sliding layer keeps.")
    sliding_window_layers = models.PositiveIntegerField(default=0, help_text="Layers that use the window.")
    max_context = models.PositiveIntegerField(help_text="Longest context the model supports, tokens.")
    experts = models.PositiveIntegerField(default=0, help_text="MoE: routed experts per layer.")
    experts_per_token = models.PositiveIntegerField(default=0, help_text="MoE: experts a token is routed to.")
    is_reference = models.BooleanField(default=False, help_text="One of the seed's nominal reference shapes.")
    is_active = models.BooleanField(default=True, help_text="Listed and accepted by the sizing API.")
    source = models.CharField(max_length=300, blank=True, help_text="Where the figures come from.")
    config = models.JSONField(
        null=True,
        blank=True,
        help_text="The model's config.json: gives the checkpoint's layer layout (weight bytes per format) and its "
        "Hugging Face repo. Without it the vllm profile spreads the parameter count over linear layers.",
    )
    sort_order = models.PositiveSmallIntegerField(default=0)

    class Meta:
        ordering = ["sort_order", "slug"]
        constraints = [
            models.CheckConstraint(
                condition=Q(total_params__gt=0)
                & Q(layers__gt=0)
                & Q(hidden_size__gt=0)
                & Q(attention_heads__gt=0)
                & Q(kv_heads__gt=0)
                & Q(head_dim__gt=0)
                & Q(max_context__gt=0),
                name="architecture_dims_positive",
            ),
            models.CheckConstraint(condition=Q(kv_heads__lte=F("attention_heads")), name="architecture_kv_le_heads"),
            models.CheckConstraint(
                condition=Q(active_params__isnull=True) | Q(active_params__gt=0, active_params__lte=F("total_params")),
                name="architecture_active_le_total",
            ),
            models.CheckConstraint(
                condition=~Q(attention_kind=ATTENTION_MLA) | Q(mla_latent_dim__gt=0),
                name="architecture_mla_has_latent",
            ),
            models.CheckConstraint(
                condition=Q(sliding_window_layers__lte=F("layers"))
                & (Q(sliding_window_layers=0) | Q(sliding_window__isnull=False, sliding_window__gt=0)),
                name="architecture_sliding_layers",
            ),
            models.CheckConstraint(
                condition=Q(experts_per_token__lte=F("experts")), name="architecture_topk_le_experts"
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def to_arch(self) -> Arch:
        layout = hf_repo = None
        native = chunk = None
        chunked = 0
        notes: tuple[str, ...] = ()
        family = ""
        if self.config:
            from .hf_config import architecture_from_hf_config, published_count_notes

            parsed = architecture_from_hf_config(self.config, slug=self.slug, name=self.name)
            # The row's published counts stand; the config gives the layout, and
            # only while it describes a checkpoint of that size.
            if abs(parsed.total_params - self.total_params) <= self.total_params // 50:
                layout = parsed.layout
            notes = published_count_notes(
                name=self.name,
                total=parsed.total_params,
                active=parsed.active_params,
                published=(self.name, self.total_params, self.active_params),
            )
            hf_repo, native = parsed.hf_repo, parsed.native_context
            chunk, chunked = parsed.attention_chunk, parsed.chunked_attention_layers
            family = parsed.family
        return Arch(
            slug=self.slug,
            name=self.name,
            total_params=self.total_params,
            active_params=self.active_params,
            layers=self.layers,
            hidden_size=self.hidden_size,
            attention_heads=self.attention_heads,
            kv_heads=self.kv_heads,
            head_dim=self.head_dim,
            max_context=self.max_context,
            attention_kind=self.attention_kind,
            mla_latent_dim=self.mla_latent_dim,
            mla_rope_dim=self.mla_rope_dim,
            sliding_window=self.sliding_window if self.sliding_window_layers else None,
            sliding_window_layers=self.sliding_window_layers,
            experts=self.experts,
            experts_per_token=self.experts_per_token,
            layout=layout,
            hf_repo=hf_repo or "",
            native_context=native,
            notes=notes,
            family=family,
            attention_chunk=chunk,
            chunked_attention_layers=chunked,
        )
