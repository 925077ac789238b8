"""`Authorization: Bearer <token>` against hashed API tokens."""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions


class BearerTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        parts = header.split()
        if not parts or parts[0].lower() != self.keyword.lower():
            return None
        if len(parts) != 2:
            raise exceptions.AuthenticationFailed("Malformed Authorization header.")
        from accounts.services import token_authenticate

        result = token_authenticate(raw=parts[1])
        if result is None:
            raise exceptions.AuthenticationFailed("Invalid or revoked token.")
        return result

    def authenticate_header(self, request) -> str:
        return self.keyword


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "accounts.authentication.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer"}

    def get_security_requirement(self, auto_schema):
        from drf_spectacular.settings import spectacular_settings

        # The SECURITY setting already names this scheme on every operation; listing it twice helps no one.
        if any(self.name in requirement for requirement in spectacular_settings.SECURITY or []):
            return None
        return super().get_security_requirement(auto_schema)
