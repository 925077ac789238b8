"""The checkout page in Spanish: what an invoice pays for and its lines are
rebuilt from what the order recorded (billing/wording.py), dates read "3 de
diciembre de 2026", and the currency list names each coin once."""

from __future__ import annotations

from datetime import date, timedelta
from decimal import Decimal

import pytest
import time_machine
from django.test import Client
from django.utils import translation

from accounts.services import ssh_key_add
from billing import wording
from billing.models import Invoice
from rentals import services
from tests.rentals.helpers import T0, new_key_line

pytestmark = pytest.mark.django_db

HTML = {"HTTP_ACCEPT": "text/html,application/xhtml+xml"}


def page(invoice: Invoice, language: str) -> str:
    resp = Client().get(f"/pay/{invoice.checkout_token}", HTTP_ACCEPT_LANGUAGE=language, **HTML)
    assert resp.status_code == 200
    return resp.content.decode()


@pytest.fixture
def weekly_order(chains, customer, customer_api, catalog):
    """2x H100 SXM for 3 weeks with a private VLAN, paid in USDT."""
    key = ssh_key_add(account=customer, public_key=new_key_line(), name="k")
    with time_machine.travel(T0, tick=False):
        resp = customer_api.post(
            "/api/v1/orders",
            {
                "region": "DFW-1",
                "gpu": "h100-sxm",
                "gpu_count": 2,
                "term": "weekly",
                "terms": 3,
                "template": "vllm-0.9-ubuntu-24.04",
                "addons": ["private-vlan"],
                "ssh_keys": [key.pk],
                "pay_currency": "USDT",
            },
            format="json",
        )
    assert resp.status_code == 201, resp.json()
    return Invoice.objects.get(pk=resp.json()["invoice"]["id"])


def test_order_invoice_reads_in_spanish_and_as_issued_in_english(weekly_order):
    invoice = weekly_order
    gpu_line, vlan_line = invoice.lines.order_by("position")
    assert invoice.description == "2x H100 SXM in DFW-1, 3 weeks"
    assert gpu_line.description == "H100 SXM GPU, per card and week x 3"
    addon = vlan_line.description.removesuffix(", per week x 3")

    english = page(invoice, "en")
    for stored in (invoice.description, gpu_line.description, vlan_line.description):
        assert stored in english

    spanish = page(invoice, "es")
    assert "2\N{MULTIPLICATION SIGN} H100 SXM en DFW-1, 3 semanas" in spanish
    assert "GPU H100 SXM, por tarjeta y semana \N{MULTIPLICATION SIGN} 3" in spanish
    assert f"{addon}, por semana \N{MULTIPLICATION SIGN} 3" in spanish
    assert invoice.description not in spanish and gpu_line.description not in spanish


def test_dates_read_as_spanish_writes_them(weekly_order):
    until = weekly_order.expires_at
    spanish = page(weekly_order, "es")
    months = {11: "noviembre", 12: "diciembre"}
    assert f"Paga antes del {until.day} de {months[until.month]} de {until.year} a las {until:%H:%M} UTC" in spanish
    english = page(weekly_order, "en")
    assert f"Pay before {until:%Y-%m-%d %H:%M} UTC" in english


@pytest.mark.parametrize("language", ["en", "es"])
def test_each_currency_is_named_once(weekly_order, language):
    html = page(weekly_order, language)
    assert "USDT &ndash; Tether USD (ERC-20)</option>" in html
    assert "(ERC-20) (USDT)" not in html


def test_renewal_and_usage_lines_in_spanish(active_rental, customer):
    services.usage_report(
        rental_id=active_rental.pk,
        month=date(2026, 11, 1),
        egress_tb=Decimal("21.5"),
        actor=None,
        now=T0 + timedelta(days=2),
    )
    renewal = services.rental_renew_now(
        rental_id=active_rental.pk, account=customer, terms=2, currency="LTC", now=T0 + timedelta(days=6)
    )
    invoice = renewal.invoice
    lines = list(invoice.lines.order_by("position"))
    assert invoice.description == "1x L4 in DFW-1: renewal, 2 monthly terms"
    assert lines[-1].description == "Egress beyond the included allowance, 2026-11: 1.500 TB"
    with translation.override("es"):
        assert (
            wording.invoice_description(invoice)
            == "1\N{MULTIPLICATION SIGN} L4 en DFW-1: renovación, 2 plazos mensuales"
        )
        assert wording.line_description(lines[0], invoice) == "GPU L4, por tarjeta y mes \N{MULTIPLICATION SIGN} 2"
        assert (
            wording.line_description(lines[-1], invoice)
            == "Tráfico de salida por encima del incluido, 2026-11: 1,500 TB"
        )
    with translation.override("en"):
        assert [wording.line_description(ln, invoice) for ln in lines] == [ln.description for ln in lines]


def test_text_that_cannot_be_rebuilt_is_shown_as_issued(weekly_order):
    """A description the metadata does not reproduce (older wording) is never replaced."""
    Invoice.objects.filter(pk=weekly_order.pk).update(description="Two H100s, three weeks")
    weekly_order.refresh_from_db()
    line = weekly_order.lines.order_by("position").first()
    line.description = "H100 SXM GPU, per card and fortnight"
    with translation.override("es"):
        assert wording.invoice_description(weekly_order) == "Two H100s, three weeks"
        assert wording.line_description(line, weekly_order) == "H100 SXM GPU, per card and fortnight"


def test_a_closed_renewal_asks_for_a_new_renewal_not_a_new_order(active_rental, customer_api):
    from tests.rentals.helpers import committed

    at = active_rental.paid_until - timedelta(days=10)
    with time_machine.travel(at, tick=False):
        [renewal] = customer_api.post(f"/api/v1/rentals/{active_rental.pk}/renew", {}, format="json").json()[
            "renewal_invoices"
        ]
        with committed():
            assert customer_api.post(f"/api/v1/rentals/{active_rental.pk}/cancel").status_code == 200
    invoice = Invoice.objects.get(pk=renewal["id"])
    assert invoice.status == "invalid"
    english, spanish = page(invoice, "en"), page(invoice, "es")
    assert "To keep the rental, ask for a new renewal from your account." in english
    assert "place a new order" not in english
    assert "Para conservar el alquiler, pide una renovación nueva desde tu cuenta." in spanish
    # An order's closed invoice still points to a new order.
    order_invoice = Invoice.objects.get(pk=active_rental.order.invoice_id)
    Invoice.objects.filter(pk=order_invoice.pk).update(status="invalid")
    assert "To go on, place a new order from your account." in page(order_invoice, "en")
