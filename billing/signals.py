"""What billing tells the rest of the system. Every signal is sent after the
transaction that caused it commits, with `invoice_id` (and `payment_id` for
payment_received); receivers load what they need.

`billing` never imports its callers: `rentals` connects receivers to these.
"""

from django.dispatch import Signal

invoice_created = Signal()  # invoice_id, subject
invoice_processing = Signal()  # invoice_id, subject
invoice_settled = Signal()  # invoice_id, subject, late: bool
invoice_expired = Signal()  # invoice_id, subject
invoice_invalid = Signal()  # invoice_id, subject
invoice_reopened = Signal()  # invoice_id, subject: back to new after a payment was un-counted or a re-quote
invoice_quoted = Signal()  # invoice_id, subject, currency: a new payment request (currency switch, re-quote)
payment_received = Signal()  # invoice_id, payment_id, subject
credit_changed = Signal()  # account_id, balance_usd

BY_STATUS = {
    "processing": invoice_processing,
    "settled": invoice_settled,
    "expired": invoice_expired,
    "invalid": invoice_invalid,
    "new": invoice_reopened,
}
