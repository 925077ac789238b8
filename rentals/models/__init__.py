"""Orders, rentals and their paid periods, provisioning jobs, Idempotency-Key records."""

from rentals.models.orders import (
    IdempotencyKey,
    Order,
    OrderLine,
    OrderStatus,
    PeriodKind,
    ProvisioningAction,
    ProvisioningJob,
    Renewal,
    RenewalKind,
    Rental,
    RentalDashboard,
    RentalPeriod,
    RentalStatus,
    UsageReport,
)

__all__ = [
    "IdempotencyKey",
    "Order",
    "OrderLine",
    "OrderStatus",
    "PeriodKind",
    "ProvisioningAction",
    "ProvisioningJob",
    "Renewal",
    "RenewalKind",
    "Rental",
    "RentalDashboard",
    "RentalPeriod",
    "RentalStatus",
    "UsageReport",
]
