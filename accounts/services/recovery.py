"""Recovery codes: the only way back into an account without email."""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from accounts.models import Account, RecoveryCode
from accounts.services.passwords import _invalid_credentials, _password_confirm, _password_validate
from accounts.services.tokens import IssuedToken, _sha256_hex, _staff_token_second_factor, _token_issue, _tokens_revoke
from accounts.services.usernames import _login_username
from accounts.throttling import (
    auth_attempt_begin,
    auth_attempt_succeeded,
    auth_username_attempt_begin,
    auth_username_attempt_give_back,
    auth_username_failure,
)
from core.audit import AuditAction, audit_record
from core.errors import DomainError

RECOVERY_CODE_COUNT = 10
RECOVERY_CODE_GROUPS = 4
RECOVERY_CODE_GROUP_LENGTH = 4
# Crockford's base32: no i, l, o, u. 16 characters carry 80 bits.
_RECOVERY_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"
_RECOVERY_TYPOS = str.maketrans({"i": "1", "l": "1", "o": "0"})


def _recovery_code_generate() -> str:
    groups = (
        "".join(secrets.choice(_RECOVERY_ALPHABET) for _ in range(RECOVERY_CODE_GROUP_LENGTH))
        for _ in range(RECOVERY_CODE_GROUPS)
    )
    return "-".join(groups)


def _recovery_code_digest(code: str) -> str:
    """Digest of the normalised code: case, spaces, hyphens and the letters
    Crockford's base32 reads as digits do not matter."""
    normal = re.sub(r"[\s-]", "", code.lower()).translate(_RECOVERY_TYPOS)
    return _sha256_hex(normal)


def _recovery_codes_replace(*, account: Account) -> list[str]:
    RecoveryCode.objects.filter(account=account).delete()
    codes: list[str] = []
    while len(codes) < RECOVERY_CODE_COUNT:
        code = _recovery_code_generate()
        if code not in codes:
            codes.append(code)
    RecoveryCode.objects.bulk_create(RecoveryCode(account=account, digest=_recovery_code_digest(c)) for c in codes)
    return codes


def recovery_codes_regenerate(*, account: Account, password: str, client_address: str) -> list[str]:
    """Ten new recovery codes; every earlier one stops working."""
    _password_confirm(account=account, password=password, client_address=client_address)
    with transaction.atomic():
        codes = _recovery_codes_replace(account=account)
        audit_record(actor=account, action=AuditAction.ACCOUNT_RECOVERY_CODES_REGENERATE, obj=account)
    return codes


@dataclass(frozen=True)
class Recovered:
    account: Account
    token: IssuedToken
    revoked_tokens: int


def account_recover(
    *, username: str, recovery_code: str, new_password: str, client_address: str, otp_token: str = ""
) -> Recovered:
    """Set a new password with a one-time recovery code. Burns the code,
    revokes every token and issues a fresh one. A valid code goes through the
    per-username lock-out (so guessing a password cannot lock the holder out
    of recovery); the per-address limit holds, and a wrong code counts as a
    failure of the username and is refused with 429 once it is locked.
    A staff account's recovery mints a token too, so it needs the second
    factor as a login does (`otp_not_enrolled`, `otp_required`, `otp_invalid`;
    the last two count as failures); nothing changes until it is proved."""
    username = _login_username(username)
    counted = auth_attempt_begin(username=username, address=client_address, per_username=False)
    # Checked first: a refused password must not cost the caller a code.
    _password_validate(password=new_password, account=Account(username=username))
    holder = Account.objects.filter(username=username, is_active=True).first()
    second_factor_proved = False
    if holder is not None and holder.is_staff:
        # Asked only once the recovery code is known good (so a wrong one says
        # nothing about the account), before the transaction below (the device
        # keeps its record of a wrong code), and under the username's lock-out,
        # which a valid recovery code otherwise passes.
        digest = _recovery_code_digest(recovery_code)
        if RecoveryCode.objects.filter(account=holder, digest=digest, used_at__isnull=True).exists():
            counted_user = auth_username_attempt_begin(username=username)
            try:
                _staff_token_second_factor(account=holder, otp_token=otp_token)
            except DomainError as exc:
                if exc.code == "otp_not_enrolled" and counted_user is not None:  # nothing was guessed
                    auth_username_attempt_give_back(key=counted_user)
                raise
            second_factor_proved = True
    with transaction.atomic():
        account = Account.objects.select_for_update().filter(username=username, is_active=True).first()
        code = None
        if account is not None:
            code = (
                RecoveryCode.objects.select_for_update()
                .filter(account=account, digest=_recovery_code_digest(recovery_code), used_at__isnull=True)
                .first()
            )
        if code is None or account is None:
            # The address was counted up front; the username is counted now, and
            # a locked one answers as a locked login would.
            auth_username_failure(username=username)
            raise _invalid_credentials("Unknown username or invalid recovery code.")
        if account.is_staff and not second_factor_proved:  # made staff a moment ago
            raise DomainError("otp_required", "Send `otp`: the authenticator's current code.", status=401)
        code.used_at = timezone.now()
        code.save(update_fields=["used_at"])
        account.set_password(new_password)
        account.save(update_fields=["password"])
        revoked = _tokens_revoke(account=account)
        audit_record(
            actor=account, action=AuditAction.ACCOUNT_RECOVER, obj=account, changes={"revoked_tokens": revoked}
        )
        issued = _token_issue(account=account, name="recovery")
    auth_attempt_succeeded(username=username, address=client_address, counted=counted)
    return Recovered(account=account, token=issued, revoked_tokens=revoked)
