"""Orders, rentals and their paid periods, provisioning jobs, Idempotency-Key records, benchmark results."""

from rentals.models.benchmarks import BenchmarkCalibration, BenchmarkRun, BenchmarkTrace
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
    "BenchmarkCalibration",
    "BenchmarkRun",
    "BenchmarkTrace",
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
