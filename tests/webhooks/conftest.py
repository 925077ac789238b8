"""Fixtures of the webhook tests: a real HTTP receiver on loopback, a fake
resolver, the private-targets switch (defined in tests.webhooks.receiver)."""

from tests.webhooks.receiver import allow_private, dns, receiver  # noqa: F401
