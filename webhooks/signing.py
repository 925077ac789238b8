"""Signing deliveries per the Standard Webhooks specification
(https://www.standardwebhooks.com), with the `standardwebhooks` library, so
receivers verify them with the published libraries in any language:

    webhook-id         the event id (the same on every attempt)
    webhook-timestamp  unix seconds of this attempt
    webhook-signature  "v1,<base64 HMAC-SHA256>" over "<id>.<timestamp>.<body>",
                       keyed with the base64-decoded part of the secret after
                       "whsec_"; several space-separated while a rotated
                       secret is still in its overlap window

GRH-Signature, the header sent before, is still sent: `t=<timestamp>,v1=<hex>`
with the HMAC-SHA256 of "<timestamp>.<body>" keyed with the whole secret string,
one `v1=` per valid secret.
"""

from __future__ import annotations

import base64
import binascii
import secrets
from collections.abc import Sequence
from datetime import UTC, datetime

from standardwebhooks.webhooks import Webhook

from core.signing import signature

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32  # the specification asks for 24 to 64
LEGACY_SIGNATURE_HEADER = "GRH-Signature"


def secret_generate() -> str:
    """A new signing secret: "whsec_" and 32 random bytes in base64."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def secret_is_valid(secret: str) -> bool:
    """Whether `secret` has the form Standard Webhooks libraries accept."""
    if not secret.startswith(SECRET_PREFIX):
        return False
    try:
        key = base64.b64decode(secret[len(SECRET_PREFIX) :], validate=True)
    except (binascii.Error, ValueError):
        return False
    return 24 <= len(key) <= 64


def signature_headers(*, msg_id: str, timestamp: int, body: bytes, secrets: Sequence[str]) -> dict[str, str]:
    """The signing headers of one attempt, one signature per secret (the
    current one first), in the Standard Webhooks form and the older one."""
    if not secrets:
        raise ValueError("A delivery is signed with at least one secret.")
    at = datetime.fromtimestamp(timestamp, UTC)
    text = body.decode()
    standard = " ".join(Webhook(secret).sign(msg_id=msg_id, timestamp=at, data=text) for secret in secrets)
    legacy = ",".join(f"v1={signature(secret=secret, timestamp=timestamp, body=body)}" for secret in secrets)
    return {
        "Webhook-Id": msg_id,
        "Webhook-Timestamp": str(timestamp),
        "Webhook-Signature": standard,
        LEGACY_SIGNATURE_HEADER: f"t={timestamp},{legacy}",
    }
