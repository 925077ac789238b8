"""How many statements recording a payment makes (not timed): a block pays many
invoices, one payment and one transaction each, so each statement is paid once
per invoice paid. The figures are ceilings; a change that adds a statement fails
here, and one that removes some lowers them."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from billing import services
from tests.billing.helpers import make_invoice, observation

pytestmark = pytest.mark.django_db

# A first sighting: the request and its invoice (locked) in one read, whether the
# payment is recorded already, its insert, the invoice's payments read for the
# state machine and the invoice's move to processing; and the transaction's
# savepoint and its release (BEGIN and COMMIT outside a test).
FIRST_SIGHTING_MAX = 7
# Seen again, confirmed: the same reads, the payment's update, the payment
# applied and the invoice settled.
CONFIRMED_MAX = 8


def test_recording_a_payment_queries(chains, customer):
    invoice = make_invoice(customer)
    seen, seen_confirmed = observation(invoice), observation(invoice, confirmations=6)  # read before counting

    with CaptureQueriesContext(connection) as first:
        assert services.payment_observe(observation=seen) is not None
    with CaptureQueriesContext(connection) as confirmed:
        services.payment_observe(observation=seen_confirmed)
    assert len(first.captured_queries) <= FIRST_SIGHTING_MAX, [q["sql"][:100] for q in first.captured_queries]
    assert len(confirmed.captured_queries) <= CONFIRMED_MAX, [q["sql"][:100] for q in confirmed.captured_queries]
    invoice.refresh_from_db()
    assert invoice.status == "settled"
