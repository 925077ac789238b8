"""What an API credential may do: token scopes, and the named Django
permissions of the operators' endpoints.

Every API token carries one scope, chosen when it is made; each includes
the ones before it:

- `read`: safe methods only (GET, HEAD, OPTIONS);
- `full`: everything a customer does (the default);
- `ops`: `full`, and the operators' `/ops/` endpoints (staff tokens only).

`TokenScopeAllows` sits in REST_FRAMEWORK's DEFAULT_PERMISSION_CLASSES, so it
holds on every endpoint that keeps the default permissions: a `read` token
gets `403 insufficient_scope` for any other method. A view that sets its own
`permission_classes` uses `StaffPermissionRequired.of(...)` (which asks for
more than `full`) or lists `TokenScopeAllows` itself; tests/accounts walk
every route to hold that.

The credential is DRF's `request.auth`: any object with a `scope` attribute
(accounts.models.ApiToken). Core imports no app, so it reads nothing else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.db import models
from rest_framework.exceptions import NotAuthenticated
from rest_framework.permissions import SAFE_METHODS, BasePermission

from core.errors import DomainError

if TYPE_CHECKING:  # rest_framework.views loads DEFAULT_PERMISSION_CLASSES, which names this module
    from rest_framework.request import Request
    from rest_framework.views import APIView


class TokenScope(models.TextChoices):
    READ = "read", "Read only"
    FULL = "full", "Full"
    OPS = "ops", "Full and operations"


_RANK = {TokenScope.READ: 0, TokenScope.FULL: 1, TokenScope.OPS: 2}


def scope_includes(held: str | None, needed: str) -> bool:
    """Whether a credential of scope `held` may do what `needed` allows."""
    return held in _RANK and _RANK[TokenScope(held)] >= _RANK[TokenScope(needed)]


def request_user(request: Request) -> AbstractBaseUser:
    """The user an API request is signed in as (settings.AUTH_USER_MODEL). The API's views sit behind
    IsAuthenticated (the default permission), so they only ever see one; anything else is refused as not
    signed in. For apps that may not import accounts (billing); the others use
    accounts.selectors.request_account, typed with the Account model."""
    user = request.user
    if not isinstance(user, AbstractBaseUser):
        raise NotAuthenticated()
    return user


def credential_scope(request: Request) -> str | None:
    """The scope of the credential the request was authenticated with, or
    None when it carries none (no credential, or a test's forced login)."""
    return getattr(request.auth, "scope", None)


def _insufficient_scope(*, held: str | None, needed: str, message: str) -> DomainError:
    return DomainError(
        "insufficient_scope", message, status=403, details={"token_scope": held, "required_scope": needed}
    )


class TokenScopeAllows(BasePermission):
    """Safe methods need `read`, every other method `full`. A request made
    without a scoped credential is not limited here: the other permissions
    decide (IsAuthenticated refuses anonymous ones)."""

    def has_permission(self, request: Request, view: APIView) -> bool:
        held = credential_scope(request)
        if held is None:
            return True
        needed = TokenScope.READ if request.method in SAFE_METHODS else TokenScope.FULL
        if not scope_includes(held, needed):
            raise _insufficient_scope(
                held=held,
                needed=needed,
                message=f"This token's scope is {held}: it may read, not {request.method}. "
                "Make a token with the scope `full` for that.",
            )
        return True


class StaffPermissionRequired(BasePermission):
    """An active staff account that holds every one of `permissions` (Django
    permissions, "app_label.codename"; a superuser holds them all), calling
    with a token of scope `token_scope` (`ops` unless said otherwise). A
    customer gets `403 permission_denied` (nothing said about what exists); a
    staff member without a permission `403 permission_required` with
    `details.permissions` missing; with a token of a lesser scope
    `403 insufficient_scope`. Use `StaffPermissionRequired.of(...)`."""

    permissions: tuple[str, ...] = ()
    token_scope: str = TokenScope.OPS

    @classmethod
    def of(cls, *permissions: str, token_scope: str = TokenScope.OPS) -> type[StaffPermissionRequired]:
        if not permissions:
            raise TypeError("Name at least one permission.")
        for name in permissions:
            label, _, codename = name.partition(".")
            if not label or not codename or "." in codename:
                raise ValueError(f"A permission is 'app_label.codename'; got {name!r}.")
        attrs: dict[str, Any] = {
            "permissions": tuple(permissions),
            "token_scope": TokenScope(token_scope),
            "__doc__": cls.__doc__,
        }
        return type(f"{cls.__name__}_{'_'.join(p.replace('.', '_') for p in permissions)}", (cls,), attrs)

    def has_permission(self, request: Request, view: APIView) -> bool:
        user = request.user
        if user is None or not user.is_authenticated:
            return False  # DRF answers 401 not_authenticated
        if not (user.is_active and user.is_staff):
            return False  # 403 permission_denied
        missing = [name for name in self.permissions if not user.has_perm(name)]
        if missing:
            raise DomainError(
                "permission_required",
                f"This staff account lacks the permission {', '.join(missing)}: a superuser grants it in the admin.",
                status=403,
                details={"permissions": missing},
            )
        held = credential_scope(request)
        if not scope_includes(held, self.token_scope):
            raise _insufficient_scope(
                held=held,
                needed=self.token_scope,
                message=f"This endpoint needs a token of scope `{self.token_scope}` "
                "(POST /api/v1/auth/token with the authenticator's code and that scope).",
            )
        return True
