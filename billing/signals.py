"""What billing tells the rest of the system. Every signal is sent after the
transaction that caused it commits, with `invoice_id` (and `payment_id` for
payment_received) and what the invoice pays for (`subject_kind`,
`subject_id`); receivers load what they need.

The owner of what an invoice pays for is told through its Payable
(billing.payable), right after the signal; signals are for whoever else
listens (rentals sends the invoice's webhooks from them).
"""

from django.dispatch import Signal

invoice_created = Signal()  # invoice_id, subject_kind, subject_id
invoice_processing = Signal()  # invoice_id, subject_kind, subject_id
invoice_settled = Signal()  # invoice_id, subject_kind, subject_id, late: bool
invoice_expired = Signal()  # invoice_id, subject_kind, subject_id
invoice_invalid = Signal()  # invoice_id, subject_kind, subject_id
invoice_reopened = (
    Signal()
)  # invoice_id, subject_kind, subject_id: back to new after a payment was un-counted or a re-quote
invoice_quoted = (
    Signal()
)  # invoice_id, subject_kind, subject_id, currency: a new payment request (currency switch, re-quote)
payment_received = Signal()  # invoice_id, payment_id, subject_kind, subject_id
credit_changed = Signal()  # account_id, balance_usd

BY_STATUS = {
    "processing": invoice_processing,
    "settled": invoice_settled,
    "expired": invoice_expired,
    "invalid": invoice_invalid,
    "new": invoice_reopened,
}
