"""What other apps call: the workload serializer, sizing_check / sizing_require_fit,
sizing_recommend; and the staff side (admin, seed command)."""

from io import StringIO

import pytest
from django.core.management import call_command

from catalog.models import GpuModel
from core.errors import DomainError
from core.models import AuditEntry
from sizing.models import Architecture
from sizing.serializers import WorkloadInput
from sizing.services import sizing_check, sizing_recommend, sizing_require_fit

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _seeded(catalog, seeded_architectures):
    pass


def workload(**body):
    body.setdefault("profile", "guide")  # the guide's figures; test_engine_services.py covers vllm
    data = WorkloadInput(data=body)
    data.is_valid(raise_exception=True)
    return data.validated_data["workload"]


def test_workload_input_gives_a_workload_with_defaults():
    w = workload(model="ref-70b", precision="fp8")
    assert (w.context, w.concurrency, w.kv_precision, str(w.overhead_gb)) == (8192, 1, "bf16", "2")
    assert w.arch.slug == "ref-70b" and w.arch.total_params == 70 * 10**9


def test_workload_input_raises_the_api_codes():
    with pytest.raises(DomainError) as err:
        workload(model="nope", precision="fp8")
    assert err.value.code == "unknown_model"
    with pytest.raises(DomainError) as err:
        workload(model="phi-3-mini-4k", precision="bf16", context=4097)
    assert err.value.code == "context_too_long"
    bad = WorkloadInput(data={"model": "ref-7b", "precision": "fp8", "concurrency": 0})
    assert not bad.is_valid() and "concurrency" in bad.errors


def test_overhead_setting_is_the_default(settings):
    settings.SIZING_OVERHEAD_GB = 3
    w = workload(model="ref-7b", precision="fp8")
    assert w.overhead_bytes == 3 * 10**9
    assert workload(model="ref-7b", precision="fp8", overhead_gb="1.5").overhead_bytes == 1_500_000_000


def test_require_fit_raises_with_the_breakdown():
    gpu = GpuModel.objects.get(slug="h100-sxm")
    ok = sizing_require_fit(request=workload(model="ref-70b", precision="fp8"), gpu=gpu, gpu_count=1)
    assert ok.fits and ok.quote.total_usd == 1690
    with pytest.raises(DomainError) as err:
        sizing_require_fit(request=workload(model="ref-70b", precision="fp8", context=32768), gpu=gpu, gpu_count=1)
    e = err.value
    assert e.code == "does_not_fit" and e.status == 400
    assert e.details["per_gpu"]["required_gb"] == 82.74 and e.details["per_gpu"]["capacity_gb"] == 80.0
    assert [r["code"] for r in e.details["reasons"]] == ["does_not_fit"]
    a100 = GpuModel.objects.get(slug="a100-sxm")
    with pytest.raises(DomainError) as err:
        sizing_require_fit(request=workload(model="ref-7b", precision="fp8"), gpu=a100, gpu_count=1)
    assert err.value.code == "fp8_unsupported"
    b200 = GpuModel.objects.get(slug="b200")
    with pytest.raises(DomainError) as err:
        sizing_require_fit(request=workload(model="ref-7b", precision="fp8"), gpu=b200, gpu_count=1)
    assert err.value.code == "min_gpus"


def test_check_reports_an_inactive_card():
    GpuModel.objects.filter(slug="l4").update(is_active=False)
    result = sizing_check(
        request=workload(model="ref-7b", precision="fp8"), gpu=GpuModel.objects.get(slug="l4"), gpu_count=1
    )
    assert not result.fits and result.reasons[0].code == "gpu_unavailable"
    rec = sizing_recommend(request=workload(model="ref-7b", precision="fp8"), gpu_count=1)
    assert "l4" not in [c.gpu.slug for c in rec.candidates]


def test_recommend_follows_price_edits():
    w = workload(model="ref-7b", precision="fp8")
    assert sizing_recommend(request=w, vendor="nvidia", gpu_count=1).candidates[0].gpu.slug == "l4"
    GpuModel.objects.filter(slug="rtx-4090").update(monthly_usd=200)
    assert sizing_recommend(request=w, vendor="nvidia", gpu_count=1).candidates[0].gpu.slug == "rtx-4090"


def test_seed_command_is_idempotent():
    Architecture.objects.all().delete()
    out = StringIO()
    call_command("seed_architectures", stdout=out)
    assert "26 new" in out.getvalue()
    out = StringIO()
    call_command("seed_architectures", stdout=out)
    assert "already" in out.getvalue()


@pytest.fixture
def staff_client(django_user_model, client):
    staff = django_user_model.objects.create_superuser("sizingstaff", "a-long-password-123")
    client.force_login(staff)
    return client


def test_staff_add_a_model_in_admin_and_it_is_audited(staff_client, api):
    assert staff_client.get("/admin/sizing/architecture/").status_code == 200
    resp = staff_client.post(
        "/admin/sizing/architecture/add/",
        {
            "slug": "house-9b",
            "name": "House 9B",
            "source": "",
            "is_active": "on",
            "sort_order": 50,
            "total_params": 9_000_000_000,
            "active_params": "",
            "experts": 0,
            "experts_per_token": 0,
            "layers": 36,
            "hidden_size": 4096,
            "attention_heads": 32,
            "kv_heads": 8,
            "head_dim": 128,
            "max_context": 32768,
            "attention_kind": "gqa",
            "mla_latent_dim": 0,
            "mla_rope_dim": 0,
            "sliding_window": "",
            "sliding_window_layers": 0,
        },
    )
    assert resp.status_code == 302, resp.content[:2000]
    assert AuditEntry.objects.filter(action="admin.add", object_repr="House 9B").exists()
    body = api.post(
        "/api/v1/sizing/check", {"model": "house-9b", "precision": "bf16", "gpu": "rtx-4090"}, format="json"
    ).json()
    assert body["per_gpu"]["weights_gb"] == 18.0 and body["fits"] is True


def test_database_refuses_inconsistent_shapes():
    from django.db import IntegrityError, transaction

    base = Architecture.objects.get(slug="ref-7b")
    for change in (
        {"kv_heads": 64},
        {"active_params": 8 * 10**9},
        {"attention_kind": "mla", "mla_latent_dim": 0},
        {"sliding_window_layers": 40},
        {"sliding_window_layers": 2, "sliding_window": None},
        {"experts_per_token": 2},
    ):
        with pytest.raises(IntegrityError), transaction.atomic():
            Architecture.objects.filter(pk=base.pk).update(**change)
