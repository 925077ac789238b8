"""Password rules of our own, beside Django's (AUTH_PASSWORD_VALIDATORS)."""

from __future__ import annotations

from django.core.exceptions import ValidationError


class NotBlankValidator:
    """Refuse passwords that are blank once spaces are stripped: ten spaces
    pass a length rule and are no secret."""

    def validate(self, password: str, user=None) -> None:
        if not password.strip():
            raise ValidationError("A password cannot be only spaces.", code="password_blank")

    def get_help_text(self) -> str:
        return "Your password cannot be only spaces."
