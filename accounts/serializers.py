"""API serializers for accounts: one per input, one per output. Inputs only
check shape; the rules live in accounts.services.

Sections: accounts; tokens; recovery; SSH keys.
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from accounts.services import SSH_KEY_MAX_LENGTH
from core.permissions import TokenScope

_PASSWORD_MAX_LENGTH = 1024  # far above any real password; keeps hashing cheap to refuse


def _password_field(**kw) -> serializers.CharField:
    return serializers.CharField(
        max_length=_PASSWORD_MAX_LENGTH, trim_whitespace=False, style={"input_type": "password"}, **kw
    )


def _username_field() -> serializers.CharField:
    # Long enough that the length rule is reported as `invalid_username` by the service.
    return serializers.CharField(max_length=150, help_text="3-32 characters of a-z 0-9 _ . - (lower-cased).")


# =============================================================================
# Accounts
# =============================================================================


class AccountCreateInput(serializers.Serializer):
    username = _username_field()
    password = _password_field()


class AccountCreatedOutput(serializers.Serializer):
    username = serializers.CharField()
    token = serializers.CharField(help_text="The API token. Shown once.")
    recovery_codes = serializers.ListField(
        child=serializers.CharField(), help_text="Ten one-time codes that reset the password. Shown once."
    )


class AccountOutput(serializers.Serializer):
    username = serializers.CharField()
    created_at = serializers.DateTimeField()
    credit_usd = serializers.DecimalField(max_digits=14, decimal_places=2)
    is_staff = serializers.BooleanField()
    recovery_codes_remaining = serializers.IntegerField()


class PasswordConfirmInput(serializers.Serializer):
    password = _password_field(help_text="The current password.")


class PasswordChangeInput(serializers.Serializer):
    password = _password_field(help_text="The current password.")
    new_password = _password_field()


# =============================================================================
# Tokens
# =============================================================================

_SCOPE_HELP = (
    "What the token may do: `read` (GET, HEAD and OPTIONS only), `full` (everything a customer does) or "
    "`ops` (full, and the staff /ops/ endpoints; staff accounts only)."
)


def _otp_field(help_text: str) -> serializers.CharField:
    return serializers.CharField(max_length=16, required=False, allow_blank=True, default="", help_text=help_text)


class TokenObtainInput(serializers.Serializer):
    username = _username_field()
    password = _password_field()
    name = serializers.CharField(max_length=64, required=False, allow_blank=True, default="")
    scope = serializers.ChoiceField(
        choices=TokenScope.choices, required=False, default=TokenScope.FULL, help_text=_SCOPE_HELP + " Default: full."
    )
    otp = _otp_field("Staff accounts (required): the authenticator app's current code.")


class TokenIssuedOutput(serializers.Serializer):
    """Renders an accounts.services.IssuedToken."""

    token = serializers.CharField(source="raw", help_text="The bearer secret. Shown once.")
    id = serializers.IntegerField(source="token.id")
    name = serializers.CharField(source="token.name")
    prefix = serializers.CharField(source="token.prefix")
    scope = serializers.ChoiceField(source="token.scope", choices=TokenScope.choices, help_text=_SCOPE_HELP)
    created_at = serializers.DateTimeField(source="token.created_at")


class TokenOutput(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    prefix = serializers.CharField(help_text="The first characters of the token, to tell tokens apart.")
    scope = serializers.ChoiceField(choices=TokenScope.choices, help_text=_SCOPE_HELP)
    created_at = serializers.DateTimeField()
    last_used_at = serializers.DateTimeField(allow_null=True, help_text="To the minute.")
    current = serializers.SerializerMethodField(help_text="The token this request was made with.")

    @extend_schema_field(serializers.BooleanField())
    def get_current(self, token) -> bool:
        current = self.context.get("current_token")
        return current is not None and current.pk == token.pk


# =============================================================================
# Recovery
# =============================================================================


class RecoverInput(serializers.Serializer):
    username = _username_field()
    recovery_code = serializers.CharField(max_length=64)
    new_password = _password_field()
    otp = _otp_field("Staff accounts (required): the authenticator app's current code.")


class RecoveredOutput(serializers.Serializer):
    username = serializers.CharField()
    token = serializers.CharField(help_text="A fresh API token; every earlier one was revoked.")
    revoked_tokens = serializers.IntegerField()
    recovery_codes_remaining = serializers.IntegerField()


class RecoveryCodesOutput(serializers.Serializer):
    recovery_codes = serializers.ListField(
        child=serializers.CharField(), help_text="Ten new one-time codes; the earlier ones no longer work."
    )


# =============================================================================
# SSH keys
# =============================================================================


class SshKeyCreateInput(serializers.Serializer):
    name = serializers.CharField(
        max_length=100,
        required=False,
        allow_blank=True,
        default="",
        help_text="Defaults to the key's comment.",
    )
    public_key = serializers.CharField(
        max_length=SSH_KEY_MAX_LENGTH,
        help_text="One OpenSSH public key line (leading and trailing spaces are dropped first): ssh-ed25519, ecdsa-sha2-nistp256/384/521 or ssh-rsa (>= 2048 bits).",
    )


class SshKeyOutput(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    type = serializers.CharField(source="key_type")
    bits = serializers.IntegerField()
    fingerprint = serializers.CharField(help_text="SHA256:<base64>, as `ssh-keygen -l` prints it.")
    comment = serializers.CharField()
    public_key = serializers.CharField()
    created_at = serializers.DateTimeField()
