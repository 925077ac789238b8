"""The port between billing and what it bills for.

Billing is a generic invoicing engine: it never imports the apps that sell
(import-linter holds it). An invoice pays for a *subject*, stored as two
columns, `(subject_kind, subject_id)`: "order" 12, "renewal" 5 (the rental's
id), "usage" 5. The app that owns each kind registers one `Payable` for it
when it starts (rentals.apps: one line per kind); billing calls it back:

- `requote_check`, inside the re-quote's transaction, before the new quote:
  re-establish what the invoice pays for (reserve the slots again) or raise a
  DomainError to refuse;
- `on_settled`, `on_expired` (expired or invalid: closed unpaid) and
  `on_quoted` (a new payment request, in `currency`), after the transaction
  that made the change commits. A callback that fails is logged and left to
  the owner's reconcile job (rentals.services.lifecycle.orders_reconcile), so
  a payment is never lost between a commit and the work that follows it;
- `describe` and `admin_url`, to show the subject (the admin's "pays for",
  the API's `subject`).

An invoice for a kind nobody registered is refused when it is issued
(`UnknownPayable`): billing would not know whom to tell when it is paid.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import NamedTuple

log = logging.getLogger(__name__)


class PayableRef(NamedTuple):
    """What an invoice pays for: a registered kind and the id of its object."""

    kind: str
    id: int

    def __str__(self) -> str:
        return f"{self.kind}:{self.id}"


class UnknownPayable(LookupError):
    """No Payable is registered for this kind of subject."""


class Payable:
    """One kind of subject an invoice can pay for. Every callback does nothing
    unless the owner overrides it."""

    #: Shown where the subject is named: "order", "renewal of rental".
    label: str = ""

    def requote_check(self, *, invoice_id: int, subject_id: int) -> None:
        """Inside the re-quote's transaction (the invoice is locked): raise a
        DomainError when the subject can no longer be paid for."""

    def on_settled(self, *, invoice_id: int, subject_id: int, late: bool) -> None:
        """After the commit that settled the invoice."""

    def on_expired(self, *, invoice_id: int, subject_id: int, status: str) -> None:
        """After the commit that closed the invoice unpaid (`status` is expired or invalid)."""

    def on_quoted(self, *, invoice_id: int, subject_id: int, currency: str) -> None:
        """After the commit of a new payment request (a currency switch, a re-quote)."""

    def describe(self, *, subject_id: int) -> str:
        """The subject in a few words: "order 12"."""
        return f"{self.label or 'subject'} {subject_id}"

    def admin_url(self, *, subject_id: int) -> str | None:
        """The staff page of the subject, if it has one."""
        return None


# For invoices that pay for nothing the system delivers (a sandbox demo, a
# benchmark's, a test's): the tool that issues them registers its kind with it.
NOTHING = Payable()

_payables: dict[str, Payable] = {}


def payable_register(*, kind: str, payable: Payable) -> None:
    """Register the Payable of `kind`, once: a second, different one is refused
    (two owners of one kind would both be told of each payment)."""
    if not kind or ":" in kind or len(kind) > 16:
        raise ValueError(f"a subject kind is a short word: {kind!r}")
    present = _payables.get(kind)
    if present is not None and present is not payable:
        raise ValueError(f"subject kind {kind!r} is registered already ({present!r})")
    _payables[kind] = payable


def payable_get(kind: str) -> Payable:
    """The Payable registered for `kind`; UnknownPayable when none is."""
    try:
        return _payables[kind]
    except KeyError:
        raise UnknownPayable(f"No Payable is registered for invoices of kind {kind!r}.") from None


def payable_kinds() -> tuple[str, ...]:
    return tuple(sorted(_payables))


def payable_describe(*, kind: str, subject_id: int) -> str:
    """The subject in words, or its reference when its kind is not registered (an old row)."""
    payable = _payables.get(kind)
    return payable.describe(subject_id=subject_id) if payable is not None else str(PayableRef(kind, subject_id))


def payable_notify(what: str, call: Callable[[Payable], None], *, invoice_id: int, kind: str) -> None:
    """Run one callback of the subject's Payable (after a commit): a failure is
    logged, never raised, so the next callback and the caller go on; the
    owner's reconcile job redoes from the database what changes state (rentals:
    fulfilment, released slots)."""
    payable = _payables.get(kind)
    if payable is None:
        log.error("invoice %s: no Payable for kind %r; %s not delivered", invoice_id, kind, what)
        return
    try:
        call(payable)
    except Exception:
        log.exception("invoice %s: %s of its %s failed; left to the owner's reconcile job", invoice_id, what, kind)
