"""Rentals writes, one module per concern: accounts (signup, tokens, recovery,
SSH keys), orders (order to reservation to invoice), lifecycle (provisioning,
renewals, suspension, termination, usage) and provisioning (jobs for the
operators' systems)."""

from rentals.services.accounts import *  # noqa: F403
from rentals.services.accounts import SSH_KEY_MAX_LENGTH, _dummy_password_hash  # noqa: F401
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
    rentals_renewals_issue,
    rentals_suspend_due,
    rentals_terminate_due,
    usage_report,
)
from rentals.services.orders import OrderSpec, order_cancel, order_create, order_expire  # noqa: F401
from rentals.services.provisioning import provisioning_job_deliver, provisioning_jobs_due  # noqa: F401
