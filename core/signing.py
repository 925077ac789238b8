"""HMAC-SHA256 signatures for outgoing JSON (customer webhooks and provisioning
jobs): `t=<unix time>,v1=<hex>` over "<unix time>.<body>", so a receiver can
check both who sent it and that it is fresh (README "Webhooks" shows how)."""

from __future__ import annotations

import hashlib
import hmac
import time


def signature(*, secret: str, timestamp: int, body: bytes) -> str:
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return mac.hexdigest()


def signature_header(*, secret: str, body: bytes, timestamp: int | None = None) -> str:
    ts = int(time.time()) if timestamp is None else timestamp
    return f"t={ts},v1={signature(secret=secret, timestamp=ts, body=body)}"
