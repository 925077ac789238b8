"""The invoice state machine, as a pure function (no database, no clock).

Semantics follow the best processors (BTCPay Server's):

- Each counted payment pays `amount / amount_due` of its own request, which
  asks for `request_usd` of the invoice's `total_usd` (all of it, or what was
  left when a partly paid invoice was quoted again): `payment_fraction`. So a
  switch of currency or a fresh quote mid-way still adds up. A payment is *seen* once recorded (mempool or block)
  and *confirmed* once it reaches its chain's confirmation policy.
- new: seen < 1 - tolerance; `paid_partial` while something is seen. Top-ups
  to the same destination count.
- processing: seen >= 1 - tolerance, not yet confirmed. It does not expire;
  if it is still unconfirmed when the monitoring window ends it is `invalid`.
- settled: confirmed >= 1 - tolerance. The confirmed open payments are
  *applied*; beyond 100 % the excess becomes account credit (`paid_over`).
  An excess worth less than half a cent (`over_min`: it would be 0.00 USD of
  credit) is not an over-payment: the quote itself is rounded up to the next
  base unit, and a one-piconero surplus is that rounding, not money owed.
- expired: the rate lock ended below the threshold. A payment completing it
  inside the monitoring window still settles it (`paid_late`); what did not
  complete it is credited once the window closes. The lock is over for a
  payment seen after it: its coins count at the lower of the locked rate and
  the market's then (`rate_ratio`), so a fall in the coin's price after the
  quote ended is not the house's loss.
- settled / invalid: anything confirmed afterwards is credited.

Nothing received is dropped: every confirmed payment ends applied or credited.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from fractions import Fraction

NEW, PROCESSING, SETTLED, EXPIRED, INVALID = "new", "processing", "settled", "expired", "invalid"
NONE, PAID_PARTIAL, PAID_OVER, PAID_LATE, MARKED = "none", "paid_partial", "paid_over", "paid_late", "marked"
OPEN, APPLIED, CREDITED = "open", "applied", "credited"


def payment_fraction(
    *,
    amount: int,
    amount_due: int,
    request_usd: Fraction | Decimal,
    total_usd: Fraction | Decimal,
    rate_ratio: Fraction = Fraction(1),
) -> Fraction:
    """The part of its invoice a payment of `amount` base units pays, made to a
    request for `amount_due` base units that asks for `request_usd` of the
    invoice's `total_usd`. `rate_ratio` (rate_ratio_for): a payment seen after
    its request's rate lock counts at the lower market rate of then."""
    return Fraction(amount, amount_due) * Fraction(request_usd) / Fraction(total_usd) * rate_ratio


def rate_ratio_for(*, locked_rate: Decimal, late_rate: Decimal | None) -> Fraction:
    """What a payment's coins count for against its request's locked rate: 1,
    or (seen after the lock, the market lower) the late rate over the locked one."""
    if late_rate is None:
        return Fraction(1)
    return min(Fraction(1), Fraction(late_rate) / Fraction(locked_rate))


def over_min_for(*, total_usd: Fraction) -> Fraction:
    """The smallest excess (a fraction of the invoice) called an over-payment:
    half a cent, the least that rounds (half up) to 0.01 USD of credit."""
    return Fraction(1, 200) / Fraction(total_usd)


@dataclass(frozen=True)
class PaymentFacts:
    id: int
    fraction: Fraction  # of the invoice this payment pays
    confirmed: bool
    counted: bool  # False once un-counted (reorg, replaced, dropped)
    seen_at: datetime
    disposition: str = OPEN


@dataclass(frozen=True)
class InvoiceFacts:
    status: str
    exception: str
    expires_at: datetime
    monitoring_until: datetime


@dataclass(frozen=True)
class Decision:
    status: str
    exception: str
    apply: tuple[int, ...] = ()  # payment ids applied to the invoice now
    credit: tuple[int, ...] = ()  # payment ids whose whole value becomes credit now
    late_credit: bool = False  # credits come from a payment that missed its invoice
    overpaid: Fraction = field(default=Fraction(0))  # excess of the invoice (fraction) to credit now


def _over(excess: Fraction, over_min: Fraction) -> bool:
    return excess > 0 and excess >= over_min


def invoice_evaluate(
    invoice: InvoiceFacts,
    payments: list[PaymentFacts],
    *,
    now: datetime,
    tolerance: Fraction,
    over_min: Fraction = Fraction(0),
) -> Decision:
    """`over_min`: the smallest excess (a fraction of the invoice) called
    `paid_over` (over_min_for: half a cent); a smaller one is rounding."""
    open_ = [p for p in payments if p.counted and p.disposition == OPEN]
    seen = sum((p.fraction for p in open_), Fraction(0))
    confirmed_open = [p for p in open_ if p.confirmed]
    confirmed = sum((p.fraction for p in confirmed_open), Fraction(0))
    threshold = 1 - tolerance
    status, exception = invoice.status, invoice.exception
    keep_mark = exception == MARKED

    if status in (SETTLED, INVALID):
        # Closed: whatever confirms from now on is the customer's credit.
        credit = tuple(p.id for p in confirmed_open)
        if _over(confirmed, over_min) and status == SETTLED and not keep_mark and exception == NONE:
            exception = PAID_OVER
        return Decision(status, exception, credit=credit, late_credit=status == INVALID)

    if status in (NEW, PROCESSING):
        if confirmed >= threshold:
            return Decision(
                SETTLED,
                exception if keep_mark else (PAID_OVER if _over(confirmed - 1, over_min) else NONE),
                apply=tuple(p.id for p in confirmed_open),
                overpaid=max(confirmed - 1, Fraction(0)),
            )
        if seen >= threshold:
            if now >= invoice.monitoring_until:
                # Paid but never confirmed within the monitoring window.
                return Decision(INVALID, exception if keep_mark else NONE)
            return Decision(PROCESSING, exception if keep_mark else (PAID_OVER if _over(seen - 1, over_min) else NONE))
        if now < invoice.expires_at:
            return Decision(NEW, exception if keep_mark else (PAID_PARTIAL if seen > 0 else NONE))
        # The rate lock is over: fall through to the expired rules (the invoice
        # may even be past its monitoring window already).

    # EXPIRED
    if not keep_mark:
        # The exception tells the invoice's history, credited money included.
        counted = [p for p in payments if p.counted]
        late = any(p.seen_at >= invoice.expires_at for p in counted)
        exception = PAID_LATE if late else (PAID_PARTIAL if counted else NONE)
    if now < invoice.monitoring_until:
        if confirmed >= threshold:
            return Decision(
                SETTLED,
                exception if keep_mark else PAID_LATE,
                apply=tuple(p.id for p in confirmed_open),
                overpaid=max(confirmed - 1, Fraction(0)),
            )
        return Decision(EXPIRED, exception)
    # The window has closed: confirmed money that did not complete the invoice is credited.
    credit = tuple(p.id for p in confirmed_open)
    return Decision(EXPIRED, exception, credit=credit, late_credit=bool(credit))
