"""Rentals writes, one module per concern: orders (order to reservation to
invoice), lifecycle (provisioning, renewals, suspension, termination, usage),
provisioning (jobs for the operators' systems) and idempotency (the
Idempotency-Key header)."""

from rentals.services.lifecycle import (  # noqa: F401
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
from rentals.services.orders import OrderSpec, order_cancel, order_create, order_expire  # noqa: F401
from rentals.services.provisioning import provisioning_job_deliver, provisioning_jobs_due  # noqa: F401
from rentals.services.unpaid import account_unpaid_orders_release, unpaid_limit_check  # noqa: F401
