"""What a customer changes leaves an audit entry with the customer as actor:
cancelling an order or a rental, renewing by hand, turning renewal on or off;
and the invoices those void name who voided them."""

from __future__ import annotations

import pytest
from django.contrib.contenttypes.models import ContentType

from billing.models import Invoice
from core.models import AuditEntry
from rentals.models import Order, Rental

pytestmark = pytest.mark.django_db


def entries(model, pk) -> list[AuditEntry]:
    return list(
        AuditEntry.objects.filter(content_type=ContentType.objects.get_for_model(model), object_id=str(pk)).order_by(
            "id"
        )
    )


def test_an_order_cancelled_by_its_customer_is_audited(ordered, customer, customer_api):
    assert customer_api.post(f"/api/v1/orders/{ordered['id']}/cancel").status_code == 200
    [entry] = entries(Order, ordered["id"])
    assert (entry.action, entry.actor, entry.reason) == ("order.cancel", customer, "cancelled by the customer")
    assert entry.changes == {"released": 1}
    [void] = entries(Invoice, ordered["invoice"]["id"])
    assert (void.action, void.actor) == ("invoice.void", customer)


def test_a_manual_renewal_is_audited(active_rental, customer, customer_api):
    resp = customer_api.post(
        f"/api/v1/rentals/{active_rental.pk}/renew", {"terms": 2, "pay_currency": "ltc"}, format="json"
    )
    assert resp.status_code == 201, resp.json()
    renewal = resp.json()["renewal_invoices"][0]
    [entry] = [e for e in entries(Rental, active_rental.pk) if e.action == "rental.renew"]
    assert entry.actor == customer
    assert entry.changes == {
        "invoice": renewal["number"],
        "terms": 2,
        "pay_currency": "LTC",
        "invoice_status": "new",
    }


def test_a_rental_cancelled_by_its_customer_is_audited_with_its_voided_renewal(active_rental, customer, customer_api):
    renewed = customer_api.post(f"/api/v1/rentals/{active_rental.pk}/renew", {}, format="json").json()
    renewal = renewed["renewal_invoices"][0]
    assert customer_api.post(f"/api/v1/rentals/{active_rental.pk}/cancel").status_code == 200
    cancel = [e for e in entries(Rental, active_rental.pk) if e.action == "rental.cancel"]
    assert len(cancel) == 1 and cancel[0].actor == customer
    assert cancel[0].changes["auto_renew"] == [True, False]
    [void] = [e for e in entries(Invoice, renewal["id"]) if e.action == "invoice.void"]
    assert (void.actor, void.reason) == (customer, "rental cancelled by the customer")
    # Cancelling again changes nothing and records nothing.
    assert customer_api.post(f"/api/v1/rentals/{active_rental.pk}/cancel").status_code == 200
    assert len([e for e in entries(Rental, active_rental.pk) if e.action == "rental.cancel"]) == 1


def test_turning_renewal_off_and_on_is_audited(active_rental, customer, customer_api):
    url = f"/api/v1/rentals/{active_rental.pk}"
    for value in (False, False, True):
        assert customer_api.patch(url, {"auto_renew": value}, format="json").status_code == 200
    actions = [(e.action, e.actor, e.changes) for e in entries(Rental, active_rental.pk)]
    assert [a for a in actions if a[0].startswith("rental.auto_renew")] == [
        ("rental.auto_renew_off", customer, {"auto_renew": [True, False]}),
        ("rental.auto_renew_on", customer, {"auto_renew": [False, True]}),
    ]
