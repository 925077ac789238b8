"""Billing models, one module per concern."""

from billing.models.chains import ChainBlock, ChainState
from billing.models.credit import CreditBalance, CreditEntry, CreditKind
from billing.models.invoices import (
    DerivationCounter,
    Invoice,
    InvoiceCounter,
    InvoiceException,
    InvoiceLine,
    InvoiceStatus,
    PaymentRequest,
)
from billing.models.payments import Payment, PaymentDisposition, PaymentStatus, StrayTransfer
from billing.models.rates import RateSample
from billing.models.utxo_seen import MempoolSeen

__all__ = [
    "ChainBlock",
    "ChainState",
    "CreditBalance",
    "CreditEntry",
    "CreditKind",
    "DerivationCounter",
    "Invoice",
    "InvoiceCounter",
    "InvoiceException",
    "InvoiceLine",
    "InvoiceStatus",
    "MempoolSeen",
    "Payment",
    "PaymentDisposition",
    "PaymentRequest",
    "PaymentStatus",
    "RateSample",
    "StrayTransfer",
]
