"""Shared values and helpers of the accounts tests (imported by their modules
and conftest; no tests here)."""

from __future__ import annotations

from cryptography.hazmat.primitives import serialization
from django_otp.oath import TOTP
from django_otp.plugins.otp_totp.models import TOTPDevice

PASSWORD = "violet-harbour-lantern-93"
NEW_PASSWORD = "amber-quarry-whistle-58"


def openssh_line(private_key, comment: str = "") -> str:
    line = (
        private_key.public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
    )
    return f"{line} {comment}" if comment else line


# --- Two-factor authentication (TOTP) -------------------------------------------------


def enrolled(account) -> TOTPDevice:
    """A confirmed authenticator for the account, as the admin's set-up leaves it."""
    return TOTPDevice.objects.create(user=account, name="Authenticator app", confirmed=True)


def code_for(device: TOTPDevice, steps: int = 0) -> str:
    """The code the app shows now, or `steps` steps from now (the clock is frozen by the caller)."""
    totp = TOTP(device.bin_key, device.step, device.t0, device.digits, device.drift + steps)
    return f"{totp.token():06d}"


def wrong_code_for(device: TOTPDevice) -> str:
    """A code no step the device accepts now shows (it takes one step either side)."""
    taken = {code_for(device, steps) for steps in range(-device.tolerance, device.tolerance + 1)}
    return next(code for code in ("123456", "123457", "123458", "123459") if code not in taken)
