"""What rentals sells, as billing's port sees it (billing.payable): one
Payable per kind of invoice subject, registered in rentals.apps.

- "order": the invoice of a new order (subject_id: the order's id). Settled,
  the order becomes a rental; closed unpaid, its slots go back to stock;
  quoted anew, the order shows the new currency; before a re-quote its slots
  are reserved again (or the re-quote is refused).
- "renewal": a rental's renewal (subject_id: the rental's id). Settled, the
  rental gains its paid period; a terminated rental's is not quoted again.
- "usage": a rental's usage (egress) bill (subject_id: the rental's id).

A callback after a commit that fails is logged by billing, which goes on.
rentals.services.lifecycle.orders_reconcile redoes what changes state from
the database: a settled order's or renewal's fulfilment, and an expired
order's slots going back. An order's shown currency after a failed `on_quoted`
stays the old one until its next quote (the invoice, which is what is paid,
has the new one).
"""

from __future__ import annotations

from django.urls import NoReverseMatch, reverse

from billing.payable import Payable
from rentals.services.lifecycle import renewal_apply, renewal_requote_check, rental_from_order
from rentals.services.orders import order_currency_follow, order_release_unpaid, order_requote_check


def _admin_url(url_name: str, object_id: int) -> str | None:
    try:
        return reverse(url_name, args=[object_id])
    except NoReverseMatch:
        return None


class OrderPayable(Payable):
    label = "order"

    def requote_check(self, *, invoice_id: int, subject_id: int) -> None:
        order_requote_check(order_id=subject_id, invoice_id=invoice_id)

    def on_settled(self, *, invoice_id: int, subject_id: int, late: bool) -> None:
        rental_from_order(order_id=subject_id)

    def on_expired(self, *, invoice_id: int, subject_id: int, status: str) -> None:
        order_release_unpaid(order_id=subject_id, invoice_id=invoice_id)

    def on_quoted(self, *, invoice_id: int, subject_id: int, currency: str) -> None:
        order_currency_follow(order_id=subject_id, invoice_id=invoice_id, currency=currency)

    def admin_url(self, *, subject_id: int) -> str | None:
        return _admin_url("admin:rentals_order_change", subject_id)


class RenewalPayable(Payable):
    label = "renewal of rental"

    def requote_check(self, *, invoice_id: int, subject_id: int) -> None:
        renewal_requote_check(invoice_id=invoice_id)

    def on_settled(self, *, invoice_id: int, subject_id: int, late: bool) -> None:
        renewal_apply(invoice_id=invoice_id)

    def admin_url(self, *, subject_id: int) -> str | None:
        return _admin_url("admin:rentals_rental_change", subject_id)


class UsagePayable(Payable):
    """A usage bill pays for what was used already: nothing follows its
    settlement, and it may be re-quoted whatever became of the rental (the
    egress of a terminated rental is still owed)."""

    label = "usage of rental"

    def admin_url(self, *, subject_id: int) -> str | None:
        return _admin_url("admin:rentals_rental_change", subject_id)


ORDER = OrderPayable()
RENEWAL = RenewalPayable()
USAGE = UsagePayable()
