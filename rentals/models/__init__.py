"""Accounts, orders, rentals and customer webhooks."""

from rentals.models.accounts import (
    SSH_RSA_MIN_BITS,
    Account,
    AccountManager,
    ApiToken,
    RecoveryCode,
    SshKey,
    SshKeyType,
)
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
from rentals.models.webhooks import (
    WEBHOOK_EVENTS,
    DeliveryStatus,
    WebhookAttempt,
    WebhookDelivery,
    WebhookEndpoint,
    WebhookEvent,
)

__all__ = [
    "SSH_RSA_MIN_BITS", "WEBHOOK_EVENTS", "Account", "AccountManager", "ApiToken", "DeliveryStatus", "IdempotencyKey", "Order",
    "OrderLine", "OrderStatus", "PeriodKind", "ProvisioningAction", "ProvisioningJob", "RecoveryCode", "Renewal",
    "RenewalKind", "Rental", "RentalDashboard", "RentalPeriod", "RentalStatus", "SshKey", "SshKeyType", "UsageReport",
    "WebhookAttempt", "WebhookDelivery", "WebhookEndpoint", "WebhookEvent",
]
