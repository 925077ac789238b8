"""API views for accounts: thin callers of accounts.services and
accounts.selectors.

Sections: shared; signup and login; tokens; the account; SSH keys.
"""

from __future__ import annotations

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.response import Response

from accounts import selectors, services
from accounts.serializers import (
    AccountCreatedOutput,
    AccountCreateInput,
    AccountOutput,
    PasswordChangeInput,
    PasswordConfirmInput,
    RecoveredOutput,
    RecoverInput,
    RecoveryCodesOutput,
    SshKeyCreateInput,
    SshKeyOutput,
    TokenIssuedOutput,
    TokenObtainInput,
    TokenOutput,
)
from accounts.throttling import client_address
from core.api import E401, ApiView, PublicApiView, error_doc, id_parameter
from core.errors import NotFound
from core.pagination import PageQuery, page_of, paginate

# =============================================================================
# Shared
# =============================================================================

TAG_ACCOUNTS = "accounts"


_E400 = error_doc("Invalid input (`invalid`, or the rule's own code).")
_E429 = error_doc("`throttled`: too many failed attempts; see the Retry-After header.")


class _BodyOnDeleteSchema(AutoSchema):
    """drf-spectacular leaves DELETE bodies out; this endpoint takes one."""

    def _get_request_body(self, direction="request"):
        if self.method != "DELETE":
            return super()._get_request_body(direction)
        self.method = "POST"
        try:
            return super()._get_request_body(direction)
        finally:
            self.method = "DELETE"


# =============================================================================
# Signup and login
# =============================================================================


class AccountCreateView(PublicApiView):
    no_store = True  # the answer carries a secret

    @extend_schema(
        operation_id="account_create",
        tags=[TAG_ACCOUNTS],
        auth=[],
        summary="Sign up with a username and a password",
        description="Returns an API token and ten one-time recovery codes. Both are shown only once.",
        request=AccountCreateInput,
        responses={
            201: AccountCreatedOutput,
            400: error_doc("`invalid_username`, `weak_password` or `invalid`."),
            409: error_doc("`username_taken`."),
            429: error_doc("`throttled`: too many sign-ups from this address; see the Retry-After header."),
        },
    )
    def post(self, request):
        data = self.validated(AccountCreateInput)
        created = services.account_create(
            username=data["username"], password=data["password"], client_address=client_address(request)
        )
        out = {
            "username": created.account.username,
            "token": created.token.raw,
            "recovery_codes": created.recovery_codes,
        }
        return Response(AccountCreatedOutput(out).data, status=status.HTTP_201_CREATED)


class TokenObtainView(PublicApiView):
    no_store = True  # the answer carries a secret

    @extend_schema(
        operation_id="auth_token_create",
        tags=[TAG_ACCOUNTS],
        auth=[],
        summary="Log in: a new API token",
        description=(
            "A token of the scope asked for (`full` by default). Staff accounts send their authenticator's "
            "current code as `otp`: a staff token is issued only with two-factor authentication."
        ),
        request=TokenObtainInput,
        responses={
            201: TokenIssuedOutput,
            400: _E400,
            401: error_doc("`invalid_credentials`; for staff accounts `otp_required` (send `otp`) or `otp_invalid`."),
            403: error_doc(
                "`otp_not_enrolled`: a staff account without two-factor authentication (set it up in the admin); "
                "`scope_not_allowed`: scope `ops` for an account that is not staff."
            ),
            409: error_doc("`token_limit_reached`: the account holds API_TOKENS_MAX_PER_ACCOUNT live tokens."),
            429: _E429,
        },
    )
    def post(self, request):
        data = self.validated(TokenObtainInput)
        issued = services.token_obtain(
            username=data["username"],
            password=data["password"],
            name=data["name"],
            client_address=client_address(request),
            otp_token=data["otp"],
            scope=data["scope"],
        )
        return Response(TokenIssuedOutput(issued).data, status=status.HTTP_201_CREATED)


class RecoverView(PublicApiView):
    no_store = True  # the answer carries a secret

    @extend_schema(
        operation_id="auth_recover",
        tags=[TAG_ACCOUNTS],
        auth=[],
        summary="Set a new password with a recovery code",
        description="Burns the code, revokes every token of the account and returns a fresh one.",
        request=RecoverInput,
        responses={
            200: RecoveredOutput,
            400: error_doc("`weak_password` or `invalid`."),
            401: error_doc(
                "`invalid_credentials`: unknown username or invalid code; for staff accounts `otp_required` "
                "or `otp_invalid`."
            ),
            403: error_doc("`otp_not_enrolled`: a staff account without two-factor authentication."),
            429: _E429,
        },
    )
    def post(self, request):
        data = self.validated(RecoverInput)
        recovered = services.account_recover(
            username=data["username"],
            recovery_code=data["recovery_code"],
            new_password=data["new_password"],
            client_address=client_address(request),
            otp_token=data["otp"],
        )
        out = {
            "username": recovered.account.username,
            "token": recovered.token.raw,
            "revoked_tokens": recovered.revoked_tokens,
            "recovery_codes_remaining": selectors.recovery_codes_remaining(account=recovered.account),
        }
        return Response(RecoveredOutput(out).data)


# =============================================================================
# Tokens
# =============================================================================


class TokenListView(ApiView):
    @extend_schema(
        operation_id="auth_tokens_list",
        tags=[TAG_ACCOUNTS],
        summary="The account's active tokens",
        parameters=[PageQuery],
        responses={200: page_of(TokenOutput), 400: error_doc("`invalid` or `invalid_cursor`."), 401: E401},
    )
    def get(self, request):
        tokens = selectors.token_list(account=request.user)
        context = {"current_token": request.auth}
        return paginate(request, tokens, TokenOutput, ordering=("-created_at", "-id"), context=context)


class TokenRevokeView(ApiView):
    @extend_schema(
        operation_id="auth_token_revoke",
        tags=[TAG_ACCOUNTS],
        summary="Revoke a token",
        parameters=[id_parameter("token_id")],
        request=None,
        responses={204: None, 401: E401, 404: error_doc("`token_not_found`.")},
    )
    def delete(self, request, token_id: int):
        services.token_revoke(account=request.user, token_id=token_id)
        return Response(status=status.HTTP_204_NO_CONTENT)


# =============================================================================
# The account
# =============================================================================


class AccountView(ApiView):
    schema = _BodyOnDeleteSchema()

    @extend_schema(
        operation_id="account_retrieve",
        tags=[TAG_ACCOUNTS],
        summary="The caller's account",
        responses={200: AccountOutput, 401: E401},
    )
    def get(self, request):
        account = request.user
        out = {
            "username": account.username,
            "created_at": account.created_at,
            "credit_usd": selectors.account_credit_usd(account),
            "is_staff": account.is_staff,
            "recovery_codes_remaining": selectors.recovery_codes_remaining(account=account),
        }
        return Response(AccountOutput(out).data)

    @extend_schema(
        operation_id="account_delete",
        tags=[TAG_ACCOUNTS],
        summary="Close the account",
        description=(
            "Revokes every token and drops the SSH keys and recovery codes. An account nothing refers to is "
            "deleted and its username freed; one with orders or payments is kept, deactivated."
        ),
        request=PasswordConfirmInput,
        responses={204: None, 400: _E400, 401: E401, 403: error_doc("`wrong_password`."), 429: _E429},
    )
    def delete(self, request):
        data = self.validated(PasswordConfirmInput)
        services.account_delete(account=request.user, password=data["password"], client_address=client_address(request))
        return Response(status=status.HTTP_204_NO_CONTENT)


class PasswordChangeView(ApiView):
    @extend_schema(
        operation_id="account_password_change",
        tags=[TAG_ACCOUNTS],
        summary="Change the password",
        description="Every other token of the account is revoked; the one making this request keeps working.",
        request=PasswordChangeInput,
        responses={
            204: None,
            400: error_doc("`weak_password` or `invalid`."),
            401: E401,
            403: error_doc("`wrong_password`."),
            429: _E429,
        },
    )
    def post(self, request):
        data = self.validated(PasswordChangeInput)
        services.account_password_change(
            account=request.user,
            password=data["password"],
            new_password=data["new_password"],
            keep_token=request.auth,
            client_address=client_address(request),
        )
        return Response(status=status.HTTP_204_NO_CONTENT)


class RecoveryCodesView(ApiView):
    no_store = True  # the answer carries a secret

    @extend_schema(
        operation_id="account_recovery_codes_regenerate",
        tags=[TAG_ACCOUNTS],
        summary="New recovery codes",
        description="Ten new one-time codes, shown once; every earlier code stops working.",
        request=PasswordConfirmInput,
        responses={200: RecoveryCodesOutput, 400: _E400, 401: E401, 403: error_doc("`wrong_password`."), 429: _E429},
    )
    def post(self, request):
        data = self.validated(PasswordConfirmInput)
        codes = services.recovery_codes_regenerate(
            account=request.user, password=data["password"], client_address=client_address(request)
        )
        return Response(RecoveryCodesOutput({"recovery_codes": codes}).data)


# =============================================================================
# SSH keys
# =============================================================================


class SshKeyListView(ApiView):
    @extend_schema(
        operation_id="account_ssh_keys_list",
        tags=[TAG_ACCOUNTS],
        summary="The account's SSH public keys",
        parameters=[PageQuery],
        responses={200: page_of(SshKeyOutput), 400: error_doc("`invalid` or `invalid_cursor`."), 401: E401},
    )
    def get(self, request):
        keys = selectors.ssh_key_list(account=request.user)
        return paginate(request, keys, SshKeyOutput, ordering=("created_at", "id"))

    @extend_schema(
        operation_id="account_ssh_keys_create",
        tags=[TAG_ACCOUNTS],
        summary="Add an SSH public key",
        request=SshKeyCreateInput,
        responses={
            201: SshKeyOutput,
            400: error_doc("`invalid_ssh_key` or `invalid`."),
            401: E401,
            409: error_doc("`duplicate_ssh_key`; `ssh_key_limit_reached` (SSH_KEYS_MAX_PER_ACCOUNT keys held)."),
        },
    )
    def post(self, request):
        data = self.validated(SshKeyCreateInput)
        key = services.ssh_key_add(account=request.user, name=data["name"], public_key=data["public_key"])
        return Response(SshKeyOutput(key).data, status=status.HTTP_201_CREATED)


class SshKeyDetailView(ApiView):
    @extend_schema(
        operation_id="account_ssh_keys_retrieve",
        tags=[TAG_ACCOUNTS],
        summary="One SSH public key",
        parameters=[id_parameter("ssh_key_id")],
        responses={200: SshKeyOutput, 401: E401, 404: error_doc("`ssh_key_not_found`.")},
    )
    def get(self, request, ssh_key_id: int):
        key = selectors.ssh_key_get(account=request.user, ssh_key_id=ssh_key_id)
        if key is None:
            raise NotFound("No such SSH key.", code="ssh_key_not_found")
        return Response(SshKeyOutput(key).data)

    @extend_schema(
        operation_id="account_ssh_keys_delete",
        tags=[TAG_ACCOUNTS],
        summary="Remove an SSH public key",
        parameters=[id_parameter("ssh_key_id")],
        request=None,
        responses={204: None, 401: E401, 404: error_doc("`ssh_key_not_found`.")},
    )
    def delete(self, request, ssh_key_id: int):
        services.ssh_key_delete(account=request.user, ssh_key_id=ssh_key_id)
        return Response(status=status.HTTP_204_NO_CONTENT)
