"""Routes of the accounts app under /api/v1/ (included from config.api_urls)."""

from django.urls import path

from accounts import views
from core import converters  # noqa: F401  (registers the `id` path converter)

urlpatterns = [
    # --- Signup, login, recovery, tokens
    path("accounts", views.AccountCreateView.as_view(), name="account-create"),
    path("auth/token", views.TokenObtainView.as_view(), name="auth-token"),
    path("auth/tokens", views.TokenListView.as_view(), name="auth-tokens"),
    path("auth/tokens/<id:token_id>", views.TokenRevokeView.as_view(), name="auth-token-revoke"),
    path("auth/recover", views.RecoverView.as_view(), name="auth-recover"),
    # --- The caller's account
    path("account", views.AccountView.as_view(), name="account"),
    path("account/password", views.PasswordChangeView.as_view(), name="account-password"),
    path("account/recovery-codes", views.RecoveryCodesView.as_view(), name="account-recovery-codes"),
    path("account/ssh-keys", views.SshKeyListView.as_view(), name="ssh-keys"),
    path("account/ssh-keys/<id:ssh_key_id>", views.SshKeyDetailView.as_view(), name="ssh-key"),
]
