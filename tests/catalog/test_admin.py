import pytest
from django.test import Client

from catalog.models import GpuModel
from core.models import AuditEntry

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_client(django_user_model):
    staff = django_user_model.objects.create_superuser("opsperson", "a-long-staff-password")
    client = Client()
    client.force_login(staff)
    return client


def test_price_change_in_admin_is_audited_with_old_and_new_values(staff_client, catalog):
    gpu = GpuModel.objects.get(slug="h100-sxm")
    form = {
        f.name: getattr(gpu, f.attname)
        for f in GpuModel._meta.concrete_fields
        if f.name != "id" and getattr(gpu, f.attname) is not None
    }
    form["monthly_usd"] = "1590.00"
    resp = staff_client.post(f"/admin/catalog/gpumodel/{gpu.pk}/change/", form)
    assert resp.status_code == 302, resp.content[:2000]
    entry = AuditEntry.objects.get(action="admin.change", object_id=str(gpu.pk))
    assert entry.actor_name == "opsperson"
    assert entry.changes == {"monthly_usd": ["1690.00", "1590.00"]}
    gpu.refresh_from_db()
    assert str(gpu.monthly_usd) == "1590.00"


def test_stock_overview_page(staff_client, catalog):
    resp = staff_client.get("/admin/catalog/stockoverview/")
    assert resp.status_code == 200
    html = resp.content.decode()
    assert "Stock overview" in html
    assert "22 / 96 (8)" in html  # MI300X in DFW-1: 22 free of 96, a whole host free
    assert "834 / 6300" in html  # every free GPU of catalog.json


def test_catalog_admin_lists_render(staff_client, catalog):
    for url in (
        "/admin/catalog/gpumodel/", "/admin/catalog/region/", "/admin/catalog/host/?gpu__id__exact=1",
        "/admin/catalog/addon/", "/admin/catalog/template/", "/admin/catalog/multigpudiscount/",
        "/admin/core/auditentry/",
    ):
        assert staff_client.get(url).status_code == 200, url
    region = staff_client.get("/admin/catalog/region/1/change/")
    assert region.status_code == 200 and "dfw-1-b200-001" in region.content.decode()
