"""Inputs and outputs of the order, rental and operator endpoints."""

from __future__ import annotations

import json
import re
from datetime import date
from decimal import Decimal
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from billing.currencies import CURRENCIES
from billing.serializers import CurrencyCodeField, InvoiceOutput, checkout_url, currency_refusal
from catalog.models import TERM_CHOICES
from catalog.serializers import QuoteLineOutput, RefusingInput
from catalog.services import MAX_TERMS
from core.api import RelatedRows
from core.db import related_one
from core.errors import DomainError
from core.fields import MoneyField, PercentField
from rentals.models import Order, Renewal, Rental
from rentals.services import OrderSpec
from sizing.selectors import architecture_list


def schema_models() -> list[str]:
    """The sizing models' slugs, for the API schema's enum of `model` (core.schema.ENUMS)."""
    return list(architecture_list().values_list("slug", flat=True))


# The most a workload may take, as compact JSON. A real config.json is a few
# kilobytes (the published ones in sizing/data/configs are under 3 KB).
WORKLOAD_MAX_BYTES = 64 * 1024
# The fields of a workload kept on the order besides `architecture` (which is
# kept cut to what sizing reads): the body of /sizing/check without gpu and gpu_count.
WORKLOAD_FIELDS = (
    "model",
    "params_b",
    "active_params_b",
    "precision",
    "kv_precision",
    "context",
    "concurrency",
    "overhead_gb",
    # The speed the order was sized for: the benchmark plan (rentals/services/benchmarks.py)
    # predicts from the same lengths and release.
    "input_tokens",
    "output_tokens",
    "engine_version",
)

# --- Inputs ------------------------------------------------------------------------


@extend_schema_field({"type": "string", "enum": list(CURRENCIES)})
def workload_kept(value: dict[str, Any], profile: str) -> dict[str, Any]:
    """What an order keeps of its workload: the fields sizing reads, the
    architecture cut to the keys sizing reads of it (sizing.hf_config), and the
    profile it was sized with. Posted to /sizing/check it sizes the same."""
    from sizing.hf_config import config_read_part

    kept = {name: value[name] for name in WORKLOAD_FIELDS if name in value}
    if "architecture" in value:
        kept["architecture"] = config_read_part(value["architecture"])
    return {**kept, "profile": profile}


class OrderCreateInput(RefusingInput):
    region = serializers.CharField(max_length=16, help_text="A region code, e.g. DFW-1.")
    gpu = serializers.CharField(max_length=32, help_text="A card slug, e.g. h100-sxm.")
    gpu_count = serializers.IntegerField(min_value=1, max_value=64, help_text="1, 2, 4 or 8 on one host.")
    term = serializers.ChoiceField(choices=[c for c, _ in TERM_CHOICES])
    terms = serializers.IntegerField(min_value=1, max_value=MAX_TERMS, default=1, help_text="Terms paid at once.")
    template = serializers.CharField(max_length=48, help_text="An OS template slug.")
    addons = serializers.ListField(child=serializers.CharField(max_length=32), default=list, max_length=10)
    ssh_keys = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=2**62),
        max_length=20,
        help_text="Ids of your SSH keys (at least one): root is handed over through them.",
    )
    workload = serializers.JSONField(
        required=False,
        help_text="A sizing request (the body of /sizing/check without "
        "gpu and gpu_count): the order is refused if it does "
        "not fit as vLLM loads and admits it (always the vllm profile; a `profile` given is ignored).",
    )
    pay_currency = CurrencyCodeField()

    def validate_pay_currency(self, value: str) -> str:
        refusal = currency_refusal(value)
        if refusal is not None:
            raise self.refuse("pay_currency", refusal)
        return value

    def validate_workload(self, value: Any) -> Any:
        if not isinstance(value, dict):
            raise serializers.ValidationError("A JSON object, as /sizing/check takes.")
        try:
            size = len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode(errors="surrogatepass"))
        except (ValueError, RecursionError):  # not JSON a client could send; refused as too large
            size = WORKLOAD_MAX_BYTES + 1
        if size > WORKLOAD_MAX_BYTES:
            raise self.refuse(
                "workload",
                DomainError(
                    "workload_too_large",
                    f"The workload takes {size:,} bytes; at most {WORKLOAD_MAX_BYTES:,}. Send the model's "
                    "config.json as it is published, or a `model` slug.",
                    details={"workload_bytes": size, "max_workload_bytes": WORKLOAD_MAX_BYTES},
                ),
            )
        from sizing.serializers import OrderWorkloadInput

        workload = OrderWorkloadInput(data=value)
        if not workload.is_valid():
            raise serializers.ValidationError(workload.errors)
        self._workload = workload.validated_data["workload"]
        # Kept on the order as it was sized (by the engine: the vllm profile),
        # only what sizing reads of it.
        return workload_kept(value, self._workload.profile)

    def spec(self) -> OrderSpec:
        """The order's spec from the validated input (valid_or_refuse first)."""
        v = self.validated_data
        return OrderSpec(
            region=v["region"],
            gpu=v["gpu"],
            gpu_count=v["gpu_count"],
            term=v["term"],
            terms=v["terms"],
            template=v["template"],
            pay_currency=v["pay_currency"],
            ssh_keys=tuple(v["ssh_keys"]),
            addons=tuple(v["addons"]),
            workload=getattr(self, "_workload", None),
            workload_input=v.get("workload"),
        )


class RentalUpdateInput(serializers.Serializer[Any]):
    auto_renew = serializers.BooleanField()


class RenewInput(RefusingInput):
    terms = serializers.IntegerField(
        min_value=1, max_value=MAX_TERMS, required=False, help_text="Defaults to the rental's renewal terms."
    )
    pay_currency = CurrencyCodeField(
        required=False,
        help_text=f"Quote it now in this currency ({', '.join(CURRENCIES)}, any case); or choose later on the invoice.",
    )

    def validate_pay_currency(self, value: str) -> str:
        refusal = currency_refusal(value)
        if refusal is not None:
            raise self.refuse("pay_currency", refusal)
        return value


class OpsReadyInput(serializers.Serializer[Any]):
    ipv4 = serializers.IPAddressField(protocol="IPv4")
    ipv6_prefix = serializers.CharField(max_length=64, help_text="The /64, e.g. 2001:db8:1:2::/64")


_MONTH = re.compile(r"^(\d{4})-(\d{2})$")


class OpsUsageInput(serializers.Serializer[Any]):
    month = serializers.CharField(help_text="YYYY-MM")
    egress_tb = serializers.DecimalField(max_digits=12, decimal_places=3, min_value=Decimal(0))

    def validate_month(self, value: str) -> date:
        m = _MONTH.match(value)
        if not m or not 1 <= int(m.group(2)) <= 12 or not 2000 <= int(m.group(1)) <= 2999:
            raise serializers.ValidationError("A month as YYYY-MM.")
        return date(int(m.group(1)), int(m.group(2)), 1)


# --- Outputs -----------------------------------------------------------------------


class OrderLineOutput(QuoteLineOutput):
    """A line as it was priced (the quote's line, copied onto the order)."""


class SshKeySnapshotOutput(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    name = serializers.CharField()
    fingerprint = serializers.CharField()


class OrderOutput(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    status = serializers.CharField()
    region = serializers.CharField(source="region_code")
    gpu = serializers.CharField(source="gpu_slug")
    gpu_name = serializers.CharField()
    gpu_count = serializers.IntegerField()
    term = serializers.CharField()
    terms = serializers.IntegerField()
    template = serializers.CharField(source="template_slug")
    addons = serializers.ListField(child=serializers.CharField())
    ssh_keys = SshKeySnapshotOutput(many=True)
    workload = serializers.JSONField(allow_null=True)
    sizing = serializers.JSONField(allow_null=True)
    launch_command = serializers.CharField(help_text="The `vllm serve` line for the workload, or empty.")
    lines = RelatedRows(child=OrderLineOutput())
    subtotal_usd = MoneyField()
    multi_gpu_discount_pct = PercentField()
    term_discount_pct = PercentField()
    discount_usd = MoneyField()
    total_usd = MoneyField()
    per_gpu_hour_usd = MoneyField()
    per_hour_usd = MoneyField()
    pay_currency = serializers.CharField()
    created_at = serializers.DateTimeField()
    paid_at = serializers.DateTimeField(allow_null=True)
    closed_at = serializers.DateTimeField(allow_null=True)
    close_reason = serializers.CharField()
    rental_id = serializers.SerializerMethodField()
    invoice = InvoiceOutput(allow_null=True)

    def get_rental_id(self, order: Order) -> int | None:
        rental = related_one(order, "rental")  # None: not a rental yet
        return rental.pk if rental is not None else None


class PeriodOutput(serializers.Serializer[Any]):
    kind = serializers.CharField()
    starts_at = serializers.DateTimeField()
    ends_at = serializers.DateTimeField()
    invoice_id = serializers.IntegerField(allow_null=True)


class RenewalInvoiceOutput(serializers.Serializer[Any]):
    """A renewal invoice as the rental lists it: enough to pay it as issued (the
    full invoice is at /invoices/{id})."""

    id = serializers.IntegerField(source="invoice_id")
    number = serializers.CharField(source="invoice.number")
    status = serializers.CharField(source="invoice.status")
    kind = serializers.CharField()
    terms = serializers.IntegerField()
    amount_usd = MoneyField(source="invoice.total_usd")
    pay_currency = serializers.SerializerMethodField()
    amount = serializers.SerializerMethodField(help_text="Amount due in base units of pay_currency (string).")
    amount_display = serializers.SerializerMethodField()
    address = serializers.SerializerMethodField()
    payment_uri = serializers.SerializerMethodField()
    checkout_url = serializers.SerializerMethodField()
    expires_at = serializers.DateTimeField(source="invoice.expires_at")

    def _field(self, renewal: Renewal, name: str) -> str | None:
        request = renewal.invoice.active_request
        return getattr(request, name) if request is not None else None

    def get_pay_currency(self, renewal: Renewal) -> str | None:
        return self._field(renewal, "currency")

    def get_amount(self, renewal: Renewal) -> str | None:
        amount = self._field(renewal, "amount_due")
        return None if amount is None else str(int(amount))

    def get_amount_display(self, renewal: Renewal) -> str | None:
        request = renewal.invoice.active_request
        return CURRENCIES[request.currency].coins_str(int(request.amount_due)) if request is not None else None

    def get_address(self, renewal: Renewal) -> str | None:
        return self._field(renewal, "address")

    def get_payment_uri(self, renewal: Renewal) -> str | None:
        return self._field(renewal, "payment_uri")

    def get_checkout_url(self, renewal: Renewal) -> str:
        return checkout_url(renewal.invoice)


class RentalOutput(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    status = serializers.CharField()
    order_id = serializers.IntegerField()
    region = serializers.CharField(source="region_code")
    gpu = serializers.CharField(source="gpu_slug")
    gpu_count = serializers.IntegerField()
    term = serializers.CharField()
    renewal_terms = serializers.IntegerField()
    template = serializers.CharField(source="template_slug")
    launch_command = serializers.CharField(
        source="order.launch_command", help_text="The `vllm serve` line the order's workload was sized for, or empty."
    )
    addons = serializers.ListField(child=serializers.CharField())
    ssh_keys = SshKeySnapshotOutput(many=True)
    pay_currency = serializers.CharField()
    auto_renew = serializers.BooleanField()
    cancelled_at = serializers.DateTimeField(allow_null=True)
    ipv4 = serializers.CharField(allow_null=True)
    ipv6_prefix = serializers.CharField()
    created_at = serializers.DateTimeField()
    settled_at = serializers.DateTimeField()
    active_at = serializers.DateTimeField(allow_null=True)
    provisioning_seconds = serializers.IntegerField(allow_null=True)
    paid_until = serializers.DateTimeField(allow_null=True)
    suspended_at = serializers.DateTimeField(allow_null=True)
    terminated_at = serializers.DateTimeField(allow_null=True)
    periods = PeriodOutput(many=True)
    renewal_invoices = serializers.SerializerMethodField()

    @extend_schema_field(RenewalInvoiceOutput(many=True))
    def get_renewal_invoices(self, rental: Rental) -> list[dict[str, Any]]:
        return [RenewalInvoiceOutput(r).data for r in rental.renewals.all()]


class UsageOutput(serializers.Serializer[Any]):
    rental_id = serializers.IntegerField()
    month = serializers.DateField(format="%Y-%m")
    egress_tb = serializers.DecimalField(max_digits=12, decimal_places=3)
    overage_tb = serializers.DecimalField(max_digits=12, decimal_places=3)
    overage_usd = MoneyField()
    billed_invoice_id = serializers.IntegerField(allow_null=True)


# --- Benchmarks (rentals/benchmark_views.py) ----------------------------------------------


class BenchmarkPredictionOutput(serializers.Serializer[Any]):
    """The speed model's figures for a run, named as `vllm bench serve --save-result` names them."""

    output_throughput = serializers.FloatField(help_text="Output tokens/s.")
    request_throughput = serializers.FloatField(help_text="Requests/s.")
    duration = serializers.FloatField(help_text="Seconds the run takes.")
    median_tpot_ms = serializers.FloatField()
    median_ttft_ms = serializers.FloatField(
        allow_null=True, help_text="Null for the batch: a queue, not a steady state."
    )
    p95_ttft_ms = serializers.FloatField(allow_null=True)
    median_e2el_ms = serializers.FloatField(allow_null=True)
    p95_e2el_ms = serializers.FloatField(allow_null=True)
    p99_e2el_ms = serializers.FloatField(allow_null=True)


class BenchmarkTraceOutput(serializers.Serializer[Any]):
    name = serializers.CharField(help_text="chat, rag or batch.")
    title = serializers.CharField()
    command = serializers.CharField(help_text="The `vllm bench serve` line; it writes `result_file`.")
    result_file = serializers.CharField()
    input_tokens = serializers.IntegerField(help_text="--random-input-len")
    output_tokens = serializers.IntegerField(help_text="--random-output-len")
    range_ratio = serializers.DecimalField(max_digits=4, decimal_places=2, help_text="--random-range-ratio")
    num_prompts = serializers.IntegerField()
    request_rate = serializers.CharField(
        help_text='"inf": every request is sent at once, --max-concurrency holds them.'
    )
    max_concurrency = serializers.IntegerField(allow_null=True, help_text="Null: no client-side limit (batch).")
    in_flight = serializers.IntegerField(help_text="Requests the server is predicted to hold at once.")
    limited_by = serializers.CharField(help_text="concurrency, max_num_seqs or kv_cache.")
    predicted = BenchmarkPredictionOutput()
    predicted_cost_per_million_output_tokens_usd = MoneyField(allow_null=True)


class BenchmarkRecordOutput(serializers.Serializer[Any]):
    field = serializers.CharField(help_text="The key to send in `environment` with the upload.")
    # The serializer's metaclass takes declared fields off the class, so this does not replace Field.label
    # (which the stubs see).
    label = serializers.CharField()  # type: ignore[assignment]
    command = serializers.CharField(help_text="Run on the server to read it.")


class BenchmarkPlanOutput(serializers.Serializer[Any]):
    order_id = serializers.IntegerField()
    rental_id = serializers.IntegerField(allow_null=True)
    gpu = serializers.CharField()
    gpu_count = serializers.IntegerField()
    weight_format = serializers.CharField()
    release = serializers.CharField(help_text="The vLLM release whose `vllm bench serve` the lines are for.")
    bench_available = serializers.BooleanField(help_text="Whether that release has `vllm bench serve`.")
    serve_command = serializers.CharField(help_text="The `vllm serve` line the traces run against.")
    model = serializers.CharField()
    price_per_hour_usd = MoneyField(help_text="The order's total over the hours it buys (add-ons, discounts).")
    traces = BenchmarkTraceOutput(many=True)
    record = BenchmarkRecordOutput(many=True, help_text="What to record beside the figures.")
    upload = serializers.CharField(help_text="Where each result file goes.")
    notes = serializers.ListField(child=serializers.CharField())


class BenchmarkEnvironmentInput(serializers.Serializer[Any]):
    gpu_sku = serializers.CharField(max_length=200, required=False, allow_blank=True)
    driver_version = serializers.CharField(max_length=200, required=False, allow_blank=True)
    cuda_version = serializers.CharField(max_length=200, required=False, allow_blank=True)
    vllm_version = serializers.CharField(max_length=200, required=False, allow_blank=True)


@extend_schema_field(
    {
        "type": "object",
        "description": "The file `vllm bench serve --save-result` writes (vllm/benchmarks/serve.py main), as it is. "
        "Read of it: the fields below, `failed` (later releases), `request_rate`, `max_concurrency`, `label` and "
        "the statistics mean_/median_/std_/p<N>_ of ttft, tpot, itl and e2el in ms; the rest is not kept.",
        "required": [
            "model_id",
            "num_prompts",
            "completed",
            "duration",
            "total_input_tokens",
            "total_output_tokens",
            "output_throughput",
        ],
        "properties": {
            "model_id": {"type": "string"},
            "num_prompts": {"type": "integer", "minimum": 1},
            "completed": {"type": "integer", "minimum": 0},
            "duration": {"type": "number", "minimum": 0},
            "total_input_tokens": {"type": "integer", "minimum": 0},
            "total_output_tokens": {"type": "integer", "minimum": 0},
            "output_throughput": {"type": "number", "minimum": 0},
        },
    }
)
class BenchResultField(serializers.JSONField):
    """A result file: a JSON object (its fields are checked by sizing.benchmarks.result_parse)."""


class BenchmarkUploadInput(RefusingInput):
    trace = serializers.ChoiceField(
        choices=["chat", "rag", "batch"], required=False, help_text="Default: the result's `label` (the plan sets it)."
    )
    result = BenchResultField(help_text="The JSON object `vllm bench serve --save-result` wrote, as it is.")
    environment = BenchmarkEnvironmentInput(required=False, help_text="What the plan's `record` commands printed.")


class BenchmarkFigureOutput(serializers.Serializer[Any]):
    metric = serializers.CharField(help_text="The result file's field name, e.g. output_throughput, p95_ttft_ms.")
    measured = serializers.FloatField()
    predicted = serializers.FloatField(allow_null=True)
    ratio = serializers.FloatField(allow_null=True, help_text="measured / predicted.")


class BenchmarkOutput(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    trace = serializers.CharField()
    uploaded_at = serializers.DateTimeField()
    model_id = serializers.CharField(allow_null=True)
    num_prompts = serializers.IntegerField()
    completed = serializers.IntegerField()
    failed = serializers.IntegerField()
    accepted_output_tokens = serializers.IntegerField(help_text="Output tokens of the completed requests.")
    duration_s = serializers.FloatField()
    accepted_output_tokens_per_hour = serializers.IntegerField()
    price_per_hour_usd = MoneyField()
    cost_per_million_accepted_output_tokens_usd = MoneyField(allow_null=True)
    predicted_cost_per_million_output_tokens_usd = MoneyField(allow_null=True)
    figures = BenchmarkFigureOutput(many=True)
    environment = serializers.DictField(child=serializers.CharField())
    notes = serializers.ListField(child=serializers.CharField())
