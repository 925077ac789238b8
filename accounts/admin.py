"""Staff views of accounts: staff create staff accounts, switch accounts off
(revoking their tokens) and reset passwords; every change is audited.
Accounts are never deleted here: they own financial records."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.forms import (
    BaseUserCreationForm,
    ReadOnlyPasswordHashField,
    ReadOnlyPasswordHashWidget,
    UserChangeForm,
)
from django.contrib.auth.models import Group
from django.db import transaction
from django.db.models import Exists, OuterRef
from django.http import HttpResponseRedirect
from django.urls import reverse
from django_otp.plugins.otp_totp.models import TOTPDevice

from accounts import services
from accounts.models import Account, ApiToken, SshKey
from core.admin import AuditedModelAdmin, ReadOnlyInline, reason_action, related_panels
from core.audit import AuditAction, audit_record, model_snapshot, snapshot_diff
from core.errors import DomainError


class StaffAccountCreationForm(BaseUserCreationForm):
    """Staff create staff accounts here (customers sign up through the API).
    Username rules are the API's, except that reserved names are allowed."""

    class Meta:
        model = Account
        fields = ("username",)

    def clean_username(self) -> str:
        try:
            username = services.username_normalize(username=self.cleaned_data["username"], allow_reserved=True)
        except DomainError as exc:
            raise forms.ValidationError(exc.message, code=exc.code) from exc
        if Account.objects.filter(username__iexact=username).exists():
            raise forms.ValidationError("This username is taken.", code="username_taken")
        return username


class AccountChangeForm(UserChangeForm):
    class Meta:
        model = Account
        fields = "__all__"


class PasswordSummaryWidget(ReadOnlyPasswordHashWidget):
    """The password's summary without Django's "Reset password" button: on an
    account the viewer may not change, the button led to a 403."""

    template_name = "accounts/widgets/password_summary.html"


class ApiTokenInline(ReadOnlyInline):
    model = ApiToken
    fields = readonly_fields = ("name", "prefix", "scope", "created_at", "last_used_at", "revoked_at")
    verbose_name_plural = "API tokens (only the prefix is stored in the clear)"


class SshKeyInline(ReadOnlyInline):
    model = SshKey
    fields = readonly_fields = ("name", "key_type", "bits", "fingerprint", "comment", "created_at")


class RightsAudited:
    """For the admin of a model that holds rights (an account's groups and
    permissions, a group's permissions): many-to-many fields, saved after the
    row's own (save_related), which the row's audit entry does not see. What a
    save grants or takes away, by name (`rights`), is audited here."""

    audited_many_to_many: tuple[str, ...] | None = ()  # AuditedModelAdmin's own would count them again

    def rights(self, obj) -> dict[str, list[str]]:
        raise NotImplementedError

    def save_related(self, request, form, formsets, change):
        obj = form.instance
        before = self.rights(obj) if change else None
        super().save_related(request, form, formsets, change)
        after = self.rights(obj)
        diff = snapshot_diff(before if before is not None else {name: [] for name in after}, after)
        if diff:
            audit_record(actor=request.user, action=AuditAction.ADMIN_CHANGE, obj=obj, changes=diff)


@admin.register(Account)
class AccountAdmin(RightsAudited, AuditedModelAdmin, UserAdmin):
    form = AccountChangeForm
    add_form = StaffAccountCreationForm
    add_fieldsets = (
        (
            None,
            {
                "classes": ("wide",),
                "description": "Creates a staff account. Customers sign up through the API.",
                "fields": ("username", "password1", "password2"),
            },
        ),
    )
    fieldsets = (
        (None, {"fields": ("username", "password")}),
        ("Status", {"fields": ("is_active", "is_staff", "is_superuser")}),
        ("Permissions", {"fields": ("groups", "user_permissions")}),
        ("Dates", {"fields": ("created_at", "last_login")}),
    )
    list_display = ("username", "is_staff", "is_active", "two_factor", "created_at", "last_login")
    list_filter = ("is_staff", "is_active", "is_superuser")
    search_fields = ("username",)
    ordering = ("-created_at", "-id")
    actions = [
        "deactivate_accounts",
        reason_action(
            name="reset_two_factor",
            description="Reset two-factor (lost authenticator)",
            call=lambda account, actor, reason: services.staff_otp_reset(
                account_id=account.pk, actor=actor, reason=reason
            ),
            permissions=("reset_two_factor",),
        ),
    ]

    def get_queryset(self, request):
        return (
            super()
            .get_queryset(request)
            .annotate(_otp=Exists(TOTPDevice.objects.filter(user=OuterRef("pk"), confirmed=True)))
        )

    @admin.display(boolean=True, description="two-factor", ordering="_otp")
    def two_factor(self, account):
        return account._otp

    def has_reset_two_factor_permission(self, request):
        return request.user.is_superuser

    inlines = [ApiTokenInline, SshKeyInline]

    def get_inlines(self, request, obj):
        return self.inlines if obj is not None else []

    def _panels(self, request):
        # The customer's orders, invoices, rentals and credit: panels the apps
        # that own them register (rentals/admin.py, billing/admin.py), each a
        # bounded table with a link to the full list, shown to staff who may
        # view those records.
        return related_panels(model="accounts.Account", user=request.user)

    def get_fieldsets(self, request, obj=None):
        fieldsets = list(super().get_fieldsets(request, obj))
        panels = self._panels(request) if obj is not None else []
        if panels:
            fieldsets.insert(1, ("Orders, billing and rentals", {"fields": panels}))
        return fieldsets

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return ()
        readonly = ["username", "created_at", "last_login", *self._panels(request)]
        if not request.user.is_superuser:
            # Granting rights is for superusers; other staff may only switch accounts on and off.
            readonly += ["is_staff", "is_superuser", "groups", "user_permissions"]
        return readonly

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change=change, **kwargs)
        if obj is not None and "password" in form.base_fields and not self.has_change_permission(request, obj):
            # A page the viewer may only look at offers no password reset.
            shown = form.base_fields["password"]
            form = type(form.__name__, (form,), {})
            form.base_fields["password"] = ReadOnlyPasswordHashField(
                label=shown.label, help_text=shown.help_text, widget=PasswordSummaryWidget
            )
        return form

    def has_delete_permission(self, request, obj=None):
        # Accounts own financial records: deactivate, never delete.
        return False

    def has_change_permission(self, request, obj=None):
        """Another staff account (its password, whether it is active) is changed
        by a superuser only: a member of staff who could set a colleague's
        password, or a superuser's, could sign in as them with their rights."""
        if obj is not None and _guarded_from(request.user, obj):
            return False
        return super().has_change_permission(request, obj)

    def save_model(self, request, obj, form, change):
        if not change:
            account = services.staff_account_create(
                username=form.cleaned_data["username"],
                password=form.cleaned_data["password1"],
                actor=request.user,
            )
            obj.pk = account.pk
            obj.refresh_from_db()  # the admin goes on (its log entry, the redirect) with the stored account
            return
        with transaction.atomic():
            old = Account.objects.select_for_update().get(pk=obj.pk)
            before = model_snapshot(old)
            obj.save()
            diff = snapshot_diff(before, model_snapshot(obj))
            diff.pop("password", None)  # never copy a hash into the audit trail
            if old.is_active and not obj.is_active:
                # Switched off on its page: what the action does (tokens revoked, unpaid
                # orders released, its own audit row), not only the flag.
                diff.pop("is_active", None)
                services.account_deactivate(account=obj, actor=request.user, reason="admin form")
            if diff:
                audit_record(actor=request.user, action=AuditAction.ADMIN_CHANGE, obj=obj, changes=diff)

    def rights(self, account):
        return {
            "groups": sorted(account.groups.values_list("name", flat=True)),
            "user_permissions": _permission_names(account.user_permissions.all()),
        }

    def user_change_password(self, request, id, form_url=""):
        if str(id) == str(request.user.pk):
            # One's own password is changed on the page that asks for the current one (and
            # throttles wrong guesses): set here, a stolen session could lock its owner out.
            return HttpResponseRedirect(reverse("admin:password_change", current_app=self.admin_site.name))
        with transaction.atomic():
            response = super().user_change_password(request, id, form_url)
            if request.method == "POST" and response.status_code == 302:
                account = Account.objects.filter(pk=id).first()
                if account is not None:
                    services.account_password_reset_by_staff(account=account, actor=request.user)
        return response

    @admin.action(permissions=["change"], description="Deactivate selected accounts and revoke their tokens")
    def deactivate_accounts(self, request, queryset):
        done = 0
        for account in queryset.filter(is_active=True).exclude(pk=request.user.pk):
            if _guarded_from(request.user, account):
                messages.warning(request, f"{account.username} has staff rights: only a superuser deactivates it.")
                continue
            services.account_deactivate(account=account, actor=request.user, reason="admin action")
            done += 1
        if queryset.filter(pk=request.user.pk).exists():
            messages.warning(request, "Your own account was left active.")
        messages.success(request, f"Deactivated {done} account(s).")


def _guarded_from(user, account: Account) -> bool:
    """Whether `account` is another staff account (or a superuser) that `user`,
    not a superuser, may not change."""
    return not user.is_superuser and account.pk != user.pk and (account.is_staff or account.is_superuser)


def _permission_names(permissions) -> list[str]:
    return sorted(
        f"{app}.{codename}" for app, codename in permissions.values_list("content_type__app_label", "codename")
    )


# Groups carry permissions: whoever edits a group grants its rights to every
# member, their own included. As with an account's rights, a superuser's
# work; audited like every other change here.
if admin.site.is_registered(Group):
    admin.site.unregister(Group)


@admin.register(Group)
class StaffGroupAdmin(RightsAudited, AuditedModelAdmin, GroupAdmin):
    def has_add_permission(self, request):
        return request.user.is_superuser

    def has_change_permission(self, request, obj=None):
        return request.user.is_superuser

    def has_delete_permission(self, request, obj=None):
        return request.user.is_superuser

    def rights(self, group):
        return {"permissions": _permission_names(group.permissions.all())}


# Authenticators are set up by their owner (the two-factor page) and reset by a
# superuser (the action above); their secrets are never listed.
if admin.site.is_registered(TOTPDevice):
    admin.site.unregister(TOTPDevice)
