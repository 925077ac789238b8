"""Billing writes, one module per sub-domain: invoices (issue, a new quote),
payments (sightings through the state machine, strays), credit (the account
ledger), staff (corrections with a reason) and checkout (the page that acts
for whoever holds an invoice's token); common holds what they share.

Every top-level function runs in one transaction, locks the invoice row it
changes (so concurrent observations of one payment serialize and count once),
writes its audit row in the same transaction and sends signals on commit.
Other apps import these names from `billing.services`.
"""

from billing.services.checkout import checkout_currency_switch, checkout_requote
from billing.services.common import CHECKOUT_ACTOR, SYSTEM_ACTOR, confirmations_required, invoice_lock
from billing.services.credit import (
    account_closing_check,
    credit_adjust,
    credit_post,
    credit_refund_record,
    invoice_credit_unfulfilled,
    invoice_pay_with_credit,
)
from billing.services.invoices import (
    InvoiceSpec,
    LineSpec,
    amount_due_for,
    invoice_create,
    invoice_issuing,
    invoice_requote,
    invoice_subjects_fill,
    invoice_switch_currency,
)
from billing.services.payments import (
    Observation,
    invoices_advance_due,
    payment_flag,
    payment_observe,
    payment_uncount,
    stray_transfer_record,
)
from billing.services.staff import (
    invoice_mark_invalid,
    invoice_mark_settled,
    invoice_void,
    invoice_void_lapsed,
    payment_record_manual,
    stray_transfer_review,
)

__all__ = [
    "CHECKOUT_ACTOR",
    "SYSTEM_ACTOR",
    "InvoiceSpec",
    "LineSpec",
    "Observation",
    "account_closing_check",
    "amount_due_for",
    "checkout_currency_switch",
    "checkout_requote",
    "confirmations_required",
    "credit_adjust",
    "credit_post",
    "credit_refund_record",
    "invoice_create",
    "invoice_credit_unfulfilled",
    "invoice_issuing",
    "invoice_lock",
    "invoice_mark_invalid",
    "invoice_mark_settled",
    "invoice_pay_with_credit",
    "invoice_requote",
    "invoice_subjects_fill",
    "invoice_switch_currency",
    "invoice_void",
    "invoice_void_lapsed",
    "invoices_advance_due",
    "payment_flag",
    "payment_observe",
    "payment_record_manual",
    "payment_uncount",
    "stray_transfer_record",
    "stray_transfer_review",
]
