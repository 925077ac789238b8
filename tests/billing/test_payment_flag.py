"""A payment's "flagged for staff" is a field of its own (Payment.flagged_at and
flag_reason, migration billing/0007), set once, and the payments flagged before
it existed take their audit rows' time and reason."""

from __future__ import annotations

import importlib
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.apps import apps

from billing import services
from billing.models import Payment
from billing.services import LineSpec
from core.audit import audit_record
from core.models import AuditEntry

pytestmark = pytest.mark.django_db

MIGRATION = importlib.import_module("billing.migrations.0007_payment_flagged_at")


def _payment(customer) -> Payment:
    inv = services.invoice_create(
        account=customer,
        payable=("test", 1),
        description="A thing",
        lines=[LineSpec("Thing", Decimal(1), Decimal("90.00"), Decimal("90.00"))],
        currency="LTC",
    )
    request = inv.active_request
    assert request is not None
    services.payment_record_manual(
        invoice_number=inv.number,
        txid="ab" * 32,
        amount=int(request.amount_due),
        confirmations=0,
        reason="t",
        actor=None,
    )
    return Payment.objects.get(invoice=inv)


def test_a_payment_is_flagged_once_with_its_reason(chains, customer):
    payment = _payment(customer)
    at = datetime(2026, 12, 3, 12, tzinfo=UTC)
    assert services.payment_flag(
        chain=payment.chain, txid=payment.txid, position=payment.position, reason="locked until block 900", now=at
    )
    payment.refresh_from_db()
    assert (payment.flagged_at, payment.flag_reason) == (at, "locked until block 900")
    assert payment.invoice.needs_attention
    again = services.payment_flag(chain=payment.chain, txid=payment.txid, position=payment.position, reason="again")
    assert again is False
    payment.refresh_from_db()
    assert (payment.flagged_at, payment.flag_reason) == (at, "locked until block 900")
    assert AuditEntry.objects.filter(action="payment.flagged", object_id=str(payment.pk)).count() == 1


def test_the_migration_takes_the_flags_from_the_audit_rows(chains, customer):
    payment = _payment(customer)
    audit_record(actor=None, action="payment.flagged", obj=payment, reason="reorg: orphaned", changes={})
    MIGRATION.flags_from_audit(apps, None)
    payment.refresh_from_db()
    entry = AuditEntry.objects.get(action="payment.flagged", object_id=str(payment.pk))
    assert (payment.flagged_at, payment.flag_reason) == (entry.created_at, "reorg: orphaned")
