"""Rentals writes, one module per concern: orders (order to reservation to
invoice), lifecycle (provisioning, renewals, suspension, termination, usage),
provisioning (jobs for the operators' systems) and idempotency (the
Idempotency-Key header)."""

from rentals.services.lifecycle import (
    orders_reconcile,
    renewal_apply,
    renewal_issue,
    rental_activate,
    rental_auto_renew_set,
    rental_cancel,
    rental_extend,
    rental_from_order,
    rental_renew_now,
    rental_suspend,
    rental_terminate,
    rental_unsuspend,
    rentals_auto_renew_off,
    rentals_renewals_issue,
    rentals_suspend_due,
    rentals_terminate_due,
    rentals_usage_bill_due,
    usage_report,
)
from rentals.services.orders import OrderSpec, order_cancel, order_create, order_expire
from rentals.services.provisioning import provisioning_job_deliver, provisioning_jobs_due
from rentals.services.unpaid import account_unpaid_orders_release, unpaid_limit_check

# What the package offers (other modules import these from rentals.services).
__all__ = [
    "OrderSpec",
    "account_unpaid_orders_release",
    "order_cancel",
    "order_create",
    "order_expire",
    "orders_reconcile",
    "provisioning_job_deliver",
    "provisioning_jobs_due",
    "renewal_apply",
    "renewal_issue",
    "rental_activate",
    "rental_auto_renew_set",
    "rental_cancel",
    "rental_extend",
    "rental_from_order",
    "rental_renew_now",
    "rental_suspend",
    "rental_terminate",
    "rental_unsuspend",
    "rentals_auto_renew_off",
    "rentals_renewals_issue",
    "rentals_suspend_due",
    "rentals_terminate_due",
    "rentals_usage_bill_due",
    "unpaid_limit_check",
    "usage_report",
]
