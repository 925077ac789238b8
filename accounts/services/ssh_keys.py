"""SSH keys: parsing, fingerprints, adding and deleting them."""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from dataclasses import dataclass

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from django.conf import settings
from django.db import IntegrityError, transaction

from accounts.models import SSH_RSA_MIN_BITS, Account, SshKey, SshKeyType
from accounts.services.tokens import _account_lock
from core.audit import AuditAction, audit_record
from core.db import locked_or_404
from core.errors import Conflict, DomainError

SSH_KEY_MAX_LENGTH = 16_384
SSH_KEY_COMMENT_MAX_LENGTH = 255
SSH_RSA_MAX_BITS = 16_384  # OpenSSH's own ceiling
_SSH_CONTROL_CHARS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


@dataclass(frozen=True)
class ParsedSshKey:
    key_type: str
    bits: int
    fingerprint: str
    public_key: str  # canonical "<type> <base64>[ <comment>]"
    comment: str


def _invalid_ssh_key(message: str, **details) -> DomainError:
    return DomainError("invalid_ssh_key", message, details=details)


def ssh_key_fingerprint(*, blob: bytes) -> str:
    """OpenSSH's SHA256 fingerprint of a public key blob."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def ssh_key_parse(*, public_key: str) -> ParsedSshKey:
    """Parse and check one OpenSSH public key line ("<type> <base64> [comment]")."""
    text = public_key.strip()
    if not text:
        raise _invalid_ssh_key("The public key is empty.")
    if len(text) > SSH_KEY_MAX_LENGTH:
        raise _invalid_ssh_key("The public key is too long.", max_length=SSH_KEY_MAX_LENGTH)
    if "\n" in text or "\r" in text:
        raise _invalid_ssh_key("Send one key, on one line.")
    if _SSH_CONTROL_CHARS.search(text):
        raise _invalid_ssh_key("The public key contains control characters.")
    parts = text.split(None, 2)
    accepted = list(SshKeyType.values)
    if parts[0] not in accepted:
        raise _invalid_ssh_key(
            "Unsupported key type; expected '<type> <base64> [comment]' with one of the accepted types.",
            accepted_types=accepted,
        )
    if len(parts) < 2:
        raise _invalid_ssh_key("The key data is missing; expected '<type> <base64> [comment]'.")
    key_type, encoded = parts[0], parts[1]
    comment = parts[2].strip() if len(parts) == 3 else ""
    if len(comment) > SSH_KEY_COMMENT_MAX_LENGTH:
        raise _invalid_ssh_key("The key comment is too long.", max_length=SSH_KEY_COMMENT_MAX_LENGTH)
    try:
        base64.b64decode(encoded, validate=True)
        key = serialization.load_ssh_public_key(f"{key_type} {encoded}".encode())
    except (binascii.Error, ValueError, UnsupportedAlgorithm) as exc:
        raise _invalid_ssh_key("The key data is not a valid key of the stated type.") from exc

    if isinstance(key, ed25519.Ed25519PublicKey):
        bits = 256
    elif isinstance(key, ec.EllipticCurvePublicKey):
        bits = key.curve.key_size
    elif isinstance(key, rsa.RSAPublicKey):
        bits = key.key_size
        if bits < SSH_RSA_MIN_BITS:
            raise _invalid_ssh_key(
                f"RSA keys need at least {SSH_RSA_MIN_BITS} bits; this one has {bits}.",
                bits=bits,
                min_bits=SSH_RSA_MIN_BITS,
            )
        if bits > SSH_RSA_MAX_BITS:
            raise _invalid_ssh_key(
                f"RSA keys may have at most {SSH_RSA_MAX_BITS} bits.", bits=bits, max_bits=SSH_RSA_MAX_BITS
            )
    else:  # pragma: no cover - the type check above admits nothing else
        raise _invalid_ssh_key("Unsupported key type.", accepted_types=accepted)

    # Re-encoded, so one key has one blob (and one fingerprint) however it was written.
    canonical = key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    canonical_type, canonical_b64 = canonical.split(" ", 1)
    if canonical_type != key_type:
        raise _invalid_ssh_key("The key data does not match the stated type.")
    return ParsedSshKey(
        key_type=key_type,
        bits=bits,
        fingerprint=ssh_key_fingerprint(blob=base64.b64decode(canonical_b64)),
        public_key=f"{canonical} {comment}" if comment else canonical,
        comment=comment,
    )


def ssh_key_add(*, account: Account, public_key: str, name: str = "") -> SshKey:
    """Store a public key for the account (409 `duplicate_ssh_key` when it has
    it, `ssh_key_limit_reached` when it holds SSH_KEYS_MAX_PER_ACCOUNT)."""
    parsed = ssh_key_parse(public_key=public_key)
    name = (name.strip() or parsed.comment or f"{parsed.key_type} key")[:100]
    with transaction.atomic():
        _account_lock(account=account)
        existing = SshKey.objects.filter(account=account, fingerprint=parsed.fingerprint).first()
        if existing is not None:
            raise Conflict("duplicate_ssh_key", "This key is already on the account.", details={"id": existing.pk})
        limit = settings.SSH_KEYS_MAX_PER_ACCOUNT
        if SshKey.objects.filter(account=account).count() >= limit:
            raise Conflict(
                "ssh_key_limit_reached",
                f"An account holds at most {limit} SSH keys: delete one you no longer use first.",
                details={"limit": limit},
            )
        try:
            with transaction.atomic():
                key = SshKey.objects.create(
                    account=account,
                    name=name,
                    key_type=parsed.key_type,
                    bits=parsed.bits,
                    fingerprint=parsed.fingerprint,
                    public_key=parsed.public_key,
                    comment=parsed.comment,
                )
        except IntegrityError as exc:  # added concurrently
            raise Conflict("duplicate_ssh_key", "This key is already on the account.") from exc
        audit_record(
            actor=account,
            action=AuditAction.SSH_KEY_ADD,
            obj=key,
            changes={"fingerprint": key.fingerprint, "type": key.key_type},
        )
    return key


def ssh_key_delete(*, account: Account, ssh_key_id: int) -> None:
    with transaction.atomic():
        key = locked_or_404(
            SshKey.objects.filter(account=account), pk=ssh_key_id, message="No such SSH key.", code="ssh_key_not_found"
        )
        audit_record(
            actor=account, action=AuditAction.SSH_KEY_DELETE, obj=key, changes={"fingerprint": key.fingerprint}
        )
        key.delete()


# Staff log into the admin with their password and, once enrolled, a TOTP code
# from an authenticator app (django-otp's TOTP devices). Failures count against
# the same throttle as API logins (per username and per address), so a guesser
# gains nothing by switching doors. ADMIN_OTP_REQUIRED says who must enrol:
# "superusers" (production default), "staff", or "off".
