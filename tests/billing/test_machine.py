"""The invoice state machine, table-driven over every transition (pure: no database)."""

from datetime import UTC, datetime, timedelta
from fractions import Fraction as F

import pytest

from billing.machine import (
    APPLIED,
    CREDITED,
    EXPIRED,
    INVALID,
    MARKED,
    NEW,
    NONE,
    PAID_LATE,
    PAID_OVER,
    PAID_PARTIAL,
    PROCESSING,
    SETTLED,
    InvoiceFacts,
    PaymentFacts,
    invoice_evaluate,
)

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
EXPIRES = T0 + timedelta(minutes=30)
WINDOW_END = EXPIRES + timedelta(hours=24)
TOL = F(5, 1000)  # 0.5 %
DUE = 1_000_000  # base units due


def inv(status=NEW, exception=NONE):
    return InvoiceFacts(status, exception, EXPIRES, WINDOW_END)


def pay(id, units, confirmed=False, counted=True, seen=T0, disposition="open", due=DUE):
    return PaymentFacts(id, F(units, due), confirmed, counted, seen, disposition)


BEFORE = T0 + timedelta(minutes=5)
AFTER_EXPIRY = EXPIRES + timedelta(minutes=5)
AFTER_WINDOW = WINDOW_END + timedelta(minutes=1)
AT_TOLERANCE = 995_000  # exactly due x (1 - 0.5 %)


@pytest.mark.parametrize(
    "name,invoice,payments,now,status,exception,apply,credit,overpaid",
    [
        ("nothing yet", inv(), [], BEFORE, NEW, NONE, (), (), 0),
        ("exactly at tolerance, unconfirmed", inv(), [pay(1, AT_TOLERANCE)], BEFORE, PROCESSING, NONE, (), (), 0),
        ("one base unit under tolerance", inv(), [pay(1, AT_TOLERANCE - 1)], BEFORE, NEW, PAID_PARTIAL, (), (), 0),
        ("exactly at tolerance, confirmed", inv(), [pay(1, AT_TOLERANCE, True)], BEFORE, SETTLED, NONE, (1,), (), 0),
        ("one unit under, confirmed", inv(), [pay(1, AT_TOLERANCE - 1, True)], BEFORE, NEW, PAID_PARTIAL, (), (), 0),
        ("full, confirmed", inv(PROCESSING), [pay(1, DUE, True)], BEFORE, SETTLED, NONE, (1,), (), 0),
        (
            "partial then top-up seen",
            inv(NEW, PAID_PARTIAL),
            [pay(1, 600_000, True), pay(2, 400_000)],
            BEFORE,
            PROCESSING,
            NONE,
            (),
            (),
            0,
        ),
        (
            "partial then top-up confirmed",
            inv(PROCESSING),
            [pay(1, 600_000, True), pay(2, 400_000, True)],
            BEFORE,
            SETTLED,
            NONE,
            (1, 2),
            (),
            0,
        ),
        ("over-payment seen", inv(), [pay(1, 1_500_000)], BEFORE, PROCESSING, PAID_OVER, (), (), 0),
        (
            "over-payment confirmed",
            inv(PROCESSING, PAID_OVER),
            [pay(1, 1_500_000, True)],
            BEFORE,
            SETTLED,
            PAID_OVER,
            (1,),
            (),
            F(1, 2),
        ),
        ("expiry, nothing paid", inv(), [], EXPIRES, EXPIRED, NONE, (), (), 0),
        (
            "expiry with a partial payment",
            inv(NEW, PAID_PARTIAL),
            [pay(1, 500_000, True)],
            AFTER_EXPIRY,
            EXPIRED,
            PAID_PARTIAL,
            (),
            (),
            0,
        ),
        ("processing does not expire", inv(PROCESSING), [pay(1, DUE)], AFTER_EXPIRY, PROCESSING, NONE, (), (), 0),
        (
            "late full payment settles inside the window",
            inv(EXPIRED),
            [pay(1, DUE, True, seen=AFTER_EXPIRY)],
            AFTER_EXPIRY,
            SETTLED,
            PAID_LATE,
            (1,),
            (),
            0,
        ),
        (
            "late payment seen, unconfirmed",
            inv(EXPIRED),
            [pay(1, DUE, seen=AFTER_EXPIRY)],
            AFTER_EXPIRY,
            EXPIRED,
            PAID_LATE,
            (),
            (),
            0,
        ),
        (
            "late partial top-up completes it",
            inv(EXPIRED, PAID_PARTIAL),
            [pay(1, 500_000, True), pay(2, 500_000, True, seen=AFTER_EXPIRY)],
            AFTER_EXPIRY,
            SETTLED,
            PAID_LATE,
            (1, 2),
            (),
            0,
        ),
        (
            "late partial is credited when the window closes",
            inv(EXPIRED, PAID_LATE),
            [pay(1, 300_000, True, seen=AFTER_EXPIRY)],
            AFTER_WINDOW,
            EXPIRED,
            PAID_LATE,
            (),
            (1,),
            0,
        ),
        (
            "partial before expiry credited when the window closes",
            inv(EXPIRED, PAID_PARTIAL),
            [pay(1, 300_000, True)],
            AFTER_WINDOW,
            EXPIRED,
            PAID_PARTIAL,
            (),
            (1,),
            0,
        ),
        (
            "unconfirmed after the window waits",
            inv(EXPIRED, PAID_LATE),
            [pay(1, 300_000, seen=AFTER_EXPIRY)],
            AFTER_WINDOW,
            EXPIRED,
            PAID_LATE,
            (),
            (),
            0,
        ),
        (
            "paid but never confirmed in the window",
            inv(PROCESSING),
            [pay(1, DUE)],
            AFTER_WINDOW,
            INVALID,
            NONE,
            (),
            (),
            0,
        ),
        (
            "anything confirmed on an invalid invoice is credit",
            inv(INVALID),
            [pay(1, DUE, True)],
            AFTER_WINDOW,
            INVALID,
            NONE,
            (),
            (1,),
            0,
        ),
        (
            "extra money after settlement is credit",
            inv(SETTLED),
            [pay(1, DUE, True, disposition=APPLIED), pay(2, 10_000, True)],
            BEFORE,
            SETTLED,
            PAID_OVER,
            (),
            (2,),
            0,
        ),
        (
            "already applied is not applied twice",
            inv(SETTLED),
            [pay(1, DUE, True, disposition=APPLIED)],
            BEFORE,
            SETTLED,
            NONE,
            (),
            (),
            0,
        ),
        (
            "already credited is not credited twice",
            inv(EXPIRED, PAID_PARTIAL),
            [pay(1, 300_000, True, disposition=CREDITED)],
            AFTER_WINDOW,
            EXPIRED,
            PAID_PARTIAL,
            (),
            (),
            0,
        ),
        (
            "reorg back: un-counted payment no longer pays",
            inv(PROCESSING),
            [pay(1, DUE, counted=False)],
            BEFORE,
            NEW,
            NONE,
            (),
            (),
            0,
        ),
        (
            "reorg back after expiry: expired",
            inv(PROCESSING),
            [pay(1, DUE, counted=False)],
            AFTER_EXPIRY,
            EXPIRED,
            NONE,
            (),
            (),
            0,
        ),
        (
            "a mark survives evaluation",
            inv(SETTLED, MARKED),
            [pay(2, 10_000, True)],
            BEFORE,
            SETTLED,
            MARKED,
            (),
            (2,),
            0,
        ),
        (
            "two currencies add up by fraction",
            inv(),
            [pay(1, 50, True, due=100), pay(2, 500_000, True)],
            BEFORE,
            SETTLED,
            NONE,
            (1, 2),
            (),
            0,
        ),
    ],
)
def test_transition(name, invoice, payments, now, status, exception, apply, credit, overpaid):
    d = invoice_evaluate(invoice, payments, now=now, tolerance=TOL)
    assert (d.status, d.exception) == (status, exception), name
    assert (d.apply, d.credit, d.overpaid) == (apply, credit, overpaid), name


def test_evaluation_is_idempotent_once_applied():
    """Feeding a decision back changes nothing the second time."""
    first = invoice_evaluate(inv(PROCESSING), [pay(1, 1_200_000, True)], now=BEFORE, tolerance=TOL)
    assert first.status == SETTLED and first.overpaid == F(1, 5)
    second = invoice_evaluate(
        inv(first.status, first.exception), [pay(1, 1_200_000, True, disposition=APPLIED)], now=BEFORE, tolerance=TOL
    )
    assert (second.status, second.exception, second.apply, second.credit, second.overpaid) == (
        SETTLED,
        PAID_OVER,
        (),
        (),
        0,
    )
