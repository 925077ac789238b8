"""What webhooks does when other apps tell it something."""

from __future__ import annotations

from django.dispatch import receiver

from accounts.signals import account_closing
from webhooks.models import WebhookEndpoint, WebhookEvent


@receiver(account_closing, dispatch_uid="webhooks.account_closing")
def endpoints_go_with_the_account(sender, account, **kwargs) -> None:
    """A closed account gets no more webhooks: its endpoints (their secrets,
    deliveries and attempt log) and its events are deleted, whether the
    account row itself is deleted or kept deactivated."""
    WebhookEndpoint.objects.filter(account=account).delete()
    WebhookEvent.objects.filter(account=account).delete()
