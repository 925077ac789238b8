"""Staff sign-in to the admin and their second factor (TOTP)."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from accounts.models import Account
from accounts.services.passwords import _invalid_credentials, _password_attempt, _password_matches
from accounts.services.tokens import _tokens_revoke, staff_otp_device
from accounts.services.usernames import _login_username
from accounts.throttling import auth_attempt_succeeded, counts_give_back
from core.audit import AuditAction, audit_record
from core.db import locked_or_404
from core.errors import Conflict, DomainError

OTP_REQUIRED_CHOICES = ("off", "superusers", "staff")


def staff_otp_required(*, account: Account) -> bool:
    """Whether the policy (ADMIN_OTP_REQUIRED) makes this staff account use a second factor."""
    policy = settings.ADMIN_OTP_REQUIRED
    return policy == "staff" or (policy == "superusers" and account.is_superuser)


@dataclass(frozen=True)
class StaffLogin:
    """A staff member who proved who they are. `device` is the authenticator
    whose code was checked (None when not enrolled); `must_enrol` says the
    policy wants one and there is none yet: such a session may only enrol."""

    account: Account
    device: object | None
    must_enrol: bool


def staff_login(*, username: str, password: str, otp_token: str, client_address: str) -> StaffLogin:
    """Check an admin login: the password of an active staff account, then the
    authenticator's code when the account has one. `throttled` (429) once the
    username or the address has used up its failures; `invalid_credentials`,
    `otp_required` or `otp_invalid` (401) otherwise, each counted as a failure
    (so a missing code reveals nothing a guesser can use for free)."""
    from django_otp import verify_token

    username = _login_username(username)
    counted, proofs = _password_attempt(username=username, address=client_address)
    account = Account.objects.filter(username=username).first()
    if not _password_matches(account=account, password=password) or account is None or not account.is_staff:
        counts_give_back(proofs)
        raise _invalid_credentials("Enter the username and password of a staff account.")
    device = staff_otp_device(account=account)
    if device is not None:
        token = "".join((otp_token or "").split())
        if not token:
            raise DomainError(
                "otp_required", "Enter the 6-digit code your authenticator app shows for this account.", status=401
            )
        if verify_token(account, device.persistent_id, token) is None:
            raise DomainError("otp_invalid", "The authentication code is wrong or has expired.", status=401)
    auth_attempt_succeeded(username=username, address=client_address, counted=counted)
    with transaction.atomic():
        account.last_login = timezone.now()
        account.save(update_fields=["last_login"])
        audit_record(
            actor=account,
            action=AuditAction.ACCOUNT_ADMIN_LOGIN,
            obj=account,
            changes={"second_factor": device is not None, "address": client_address},
        )
    return StaffLogin(account=account, device=device, must_enrol=device is None and staff_otp_required(account=account))


def staff_otp_enrolment_start(*, account: Account):
    """The authenticator being set up for a staff account: an unconfirmed
    TOTPDevice with a fresh secret, the same one on every call until it is
    confirmed (so reloading the page keeps the QR code the app scanned)."""
    from django_otp.plugins.otp_totp.models import TOTPDevice

    if staff_otp_device(account=account) is not None:
        raise Conflict("otp_enrolled", "Two-factor authentication is already on for this account.")
    with transaction.atomic():
        pending = TOTPDevice.objects.filter(user=account, confirmed=False).order_by("-id").first()
        if pending is None:
            pending = TOTPDevice.objects.create(user=account, name="Authenticator app", confirmed=False)
    return pending


def staff_otp_confirm(*, account: Account, otp_token: str):
    """Turn two-factor on: the code from the app proves it holds the secret
    shown at enrolment. Returns the confirmed device (the session that
    confirmed it counts as verified)."""
    from django_otp.plugins.otp_totp.models import TOTPDevice

    token = "".join((otp_token or "").split())
    with transaction.atomic():
        pending = TOTPDevice.objects.select_for_update().filter(user=account, confirmed=False).order_by("-id").first()
        # A wrong code is counted by the device's own throttle (it saves the
        # failure), so it must not be rolled back: decide here, raise after.
        confirmed = pending is not None and bool(token) and pending.verify_token(token)
        if confirmed:
            pending.confirmed = True
            pending.save(update_fields=["confirmed"])
            TOTPDevice.objects.filter(user=account, confirmed=False).delete()
            audit_record(
                actor=account, action=AuditAction.ACCOUNT_OTP_ENABLE, obj=account, changes={"device": pending.name}
            )
    if pending is None:
        raise DomainError("otp_not_started", "Start the set-up again: there is no authenticator waiting.")
    if not confirmed:
        raise DomainError("otp_invalid", "The authentication code is wrong or has expired.")
    return pending


def staff_otp_disable(*, account: Account, otp_token: str) -> None:
    """A staff member turns their own two-factor off, with a current code.
    Refused (`otp_required_by_policy`) when ADMIN_OTP_REQUIRED covers them.
    Their API tokens are revoked with it: a staff account holds tokens only
    under a second factor (`token_obtain`)."""
    from django_otp.plugins.otp_totp.models import TOTPDevice

    if staff_otp_required(account=account):
        raise DomainError(
            "otp_required_by_policy", "Two-factor authentication is required for this account and stays on."
        )
    device = staff_otp_device(account=account)
    if device is None:
        raise DomainError("otp_not_enrolled", "Two-factor authentication is not on for this account.")
    token = "".join((otp_token or "").split())
    with transaction.atomic():
        device = TOTPDevice.objects.select_for_update().get(pk=device.pk)
        verified = bool(token) and device.verify_token(token)  # a failure is saved by the device's throttle
        if verified:
            removed, _ = TOTPDevice.objects.filter(user=account).delete()
            revoked = _tokens_revoke(account=account)
            audit_record(
                actor=account,
                action=AuditAction.ACCOUNT_OTP_DISABLE,
                obj=account,
                changes={"devices_removed": removed, "revoked_tokens": revoked},
            )
    if not verified:
        raise DomainError("otp_invalid", "The authentication code is wrong or has expired.")


def staff_otp_reset(*, account_id: int, actor: Account, reason: str) -> int:
    """A superuser removes another staff member's authenticator (a lost or
    replaced phone): they log in with their password and enrol again. The
    account's API tokens are revoked with it, as they were issued against the
    authenticator now declared lost. Returns how many devices were removed."""
    from django_otp.plugins.otp_totp.models import TOTPDevice

    if not actor.is_superuser:
        raise DomainError("forbidden", "Only superusers reset two-factor authentication.", status=403)
    if not reason.strip():
        raise DomainError("reason_required", "Say why the authenticator is being reset.")
    with transaction.atomic():
        account = locked_or_404(Account.objects.all(), pk=account_id)
        removed, _ = TOTPDevice.objects.filter(user=account).delete()
        revoked = _tokens_revoke(account=account)
        audit_record(
            actor=actor,
            action=AuditAction.ACCOUNT_OTP_RESET,
            obj=account,
            changes={"devices_removed": removed, "revoked_tokens": revoked},
            reason=reason,
        )
    return removed
