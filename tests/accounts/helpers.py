"""Shared values and helpers of the accounts tests (imported by their modules
and conftest; no tests here)."""

from __future__ import annotations

from cryptography.hazmat.primitives import serialization

PASSWORD = "violet-harbour-lantern-93"
NEW_PASSWORD = "amber-quarry-whistle-58"


def openssh_line(private_key, comment: str = "") -> str:
    line = (
        private_key.public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
    )
    return f"{line} {comment}" if comment else line
