import pytest
from django.test import Client

from catalog.models import GpuModel, Region
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


def test_the_cards_a_template_runs_on_are_audited_when_changed_in_admin(staff_client, catalog):
    """A many-to-many field is saved after the row: the row's audit entry never saw
    it, so which cards a template was offered on changed with no trace."""
    from catalog.models import Template

    template = Template.objects.filter(gpus__isnull=False).distinct().first()
    cards = sorted(str(g) for g in template.gpus.all())
    form = {
        "slug": template.slug,
        "name": template.name,
        "description": template.description,
        "stack": template.stack,
        "gpus": [],  # offered on every card of its stack from now on
        "is_active": "on" if template.is_active else "",
    }
    resp = staff_client.post(f"/admin/catalog/template/{template.pk}/change/", form)
    assert resp.status_code == 302, resp.context["adminform"].form.errors
    [entry] = AuditEntry.objects.filter(action="admin.change", object_id=str(template.pk))
    assert entry.changes == {"gpus": [cards, []]}
    assert not template.gpus.exists()


def test_stock_overview_page(staff_client, catalog):
    resp = staff_client.get("/admin/catalog/stockoverview/")
    assert resp.status_code == 200
    html = resp.content.decode()
    assert "Stock overview" in html
    assert "22 / 96 (8)" in html  # MI300X in DFW-1: 22 free of 96, a whole host free
    assert "834 / 6300" in html  # every free GPU of catalog.json


@pytest.mark.slow
def test_catalog_admin_lists_render(staff_client, catalog):
    for url in (
        "/admin/catalog/gpumodel/",
        "/admin/catalog/region/",
        "/admin/catalog/host/?gpu__id__exact=1",
        "/admin/catalog/addon/",
        "/admin/catalog/template/",
        "/admin/catalog/multigpudiscount/",
        "/admin/core/auditentry/",
    ):
        assert staff_client.get(url).status_code == 200, url
    region = staff_client.get(f"/admin/catalog/region/{Region.objects.get(code='DFW-1').pk}/change/")
    assert region.status_code == 200 and "dfw-1-b200-001" in region.content.decode()


def test_a_host_added_in_admin_gets_its_slots_and_joins_the_stock(staff_client, catalog, api):
    from catalog.models import Host, Region

    gpu = GpuModel.objects.get(slug="a40")
    region = Region.objects.get(code="PDX-1")
    resp = staff_client.post(
        "/admin/catalog/host/add/",
        {
            "name": "pdx-1-a40-100",
            "region": region.pk,
            "gpu": gpu.pk,
            "slot_count": 8,
            "is_active": "on",
            "slots-TOTAL_FORMS": "0",
            "slots-INITIAL_FORMS": "0",
        },
    )
    assert resp.status_code == 302, resp.content[:2000]
    host = Host.objects.get(name="pdx-1-a40-100")
    assert list(host.slots.values_list("index", "status").order_by("index")) == [(i, "free") for i in range(8)]
    row = api.get("/api/v1/catalog/stock", {"region": "PDX-1", "gpu": "a40"}).json()[0]
    assert (row["available"], row["max_per_host"]) == (12, 8)


def test_slots_go_out_of_service_and_back_through_actions(staff_client, catalog):
    from catalog.models import Slot

    slot = Slot.objects.filter(host__name="dfw-1-b200-001", status="free").first()
    resp = staff_client.post(
        "/admin/catalog/slot/",
        {"action": "out_of_service", "_selected_action": [slot.pk], "apply": "1", "reason": "GPU 3 fails ECC checks"},
    )
    assert resp.status_code == 302
    slot.refresh_from_db()
    assert slot.status == "out_of_service"
    assert AuditEntry.objects.filter(action="slot.out_of_service", reason="GPU 3 fails ECC checks").exists()
    rented = Slot.objects.filter(status="rented").first()
    staff_client.post(
        "/admin/catalog/slot/",
        {"action": "out_of_service", "_selected_action": [rented.pk], "apply": "1", "reason": "no"},
    )
    rented.refresh_from_db()
    assert rented.status == "rented"  # refused: only a free slot goes out of service
    staff_client.post(
        "/admin/catalog/slot/",
        {"action": "in_service", "_selected_action": [slot.pk], "apply": "1", "reason": "card replaced"},
    )
    slot.refresh_from_db()
    assert slot.status == "free"


def test_prices_are_edited_in_place_in_the_card_list(staff_client, catalog):
    listing = staff_client.get("/admin/catalog/gpumodel/")
    html = listing.content.decode()
    formset = listing.context["cl"].formset
    assert formset is not None and set(formset.forms[0].fields) >= {"monthly_usd", "weekly_usd"}
    assert 'name="form-0-monthly_usd"' in html and 'name="form-0-weekly_usd"' in html
    # Post the list back with one price changed, as the Save button under it does.
    data = {
        "form-TOTAL_FORMS": str(len(formset.forms)),
        "form-INITIAL_FORMS": str(len(formset.forms)),
        "_save": "Save",
    }
    for i, form in enumerate(formset.forms):
        gpu = form.instance
        data[f"form-{i}-id"] = str(gpu.pk)
        data[f"form-{i}-monthly_usd"] = "1590.00" if gpu.slug == "h100-sxm" else str(gpu.monthly_usd)
        data[f"form-{i}-weekly_usd"] = str(gpu.weekly_usd)
    resp = staff_client.post("/admin/catalog/gpumodel/", data)
    assert resp.status_code == 302, resp.content[:2000]
    assert str(GpuModel.objects.get(slug="h100-sxm").monthly_usd) == "1590.00"
    entry = AuditEntry.objects.get(action="admin.change")  # only the card that changed
    assert (entry.object_repr, entry.changes) == ("H100 SXM", {"monthly_usd": ["1690.00", "1590.00"]})


def test_the_card_list_shows_the_hourly_price_and_instance_sizes(staff_client, catalog):
    html = staff_client.get("/admin/catalog/gpumodel/").content.decode()
    assert ">2.35<" in html and ">1.38<" in html  # H100 SXM and A100 SXM per GPU-hour (FACTS)
    assert "2, 4, 8" in html  # B200: a minimum of 2


def test_a_host_added_on_its_regions_page_gets_its_slots_and_the_others_keep_theirs(staff_client, catalog):
    """A new row of the region's hosts takes its card and slot count (it was a 500:
    both were read-only on every row); a host already saved keeps them, whatever
    the form sends."""
    from catalog.models import Host, Region
    from catalog.services import host_slots_ensure

    region = Region.objects.create(code="TST-1", name="Test region", is_active=True)
    l4, a40 = GpuModel.objects.get(slug="l4"), GpuModel.objects.get(slug="a40")
    old = Host.objects.create(name="tst-1-l4-001", region=region, gpu=l4, slot_count=4, is_active=True)
    host_slots_ensure(host=old)
    url = f"/admin/catalog/region/{region.pk}/change/"
    page = staff_client.get(url)
    data = {name: value for name, value in page.context["adminform"].form.initial.items() if value is not None}
    data.update(
        {
            "is_active": "on",
            "hosts-TOTAL_FORMS": "2",
            "hosts-INITIAL_FORMS": "1",
            "hosts-0-id": str(old.pk),
            "hosts-0-region": str(region.pk),
            "hosts-0-name": old.name,
            "hosts-0-gpu": str(a40.pk),  # ignored: fixed once the slots exist
            "hosts-0-slot_count": "8",
            "hosts-0-is_active": "on",
            "hosts-1-region": str(region.pk),
            "hosts-1-name": "tst-1-a40-001",
            "hosts-1-gpu": str(a40.pk),
            "hosts-1-slot_count": "2",
            "hosts-1-is_active": "on",
        }
    )
    resp = staff_client.post(url, data)
    assert resp.status_code == 302, resp.content[:3000]
    new = Host.objects.get(name="tst-1-a40-001")
    assert (new.gpu, new.slot_count, new.slots.count()) == (a40, 2, 2)
    old.refresh_from_db()
    assert (old.gpu, old.slot_count, old.slots.count()) == (l4, 4, 4)
