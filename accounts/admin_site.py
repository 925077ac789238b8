"""The staff admin site: Django's admin with a login that is throttled like
the API's and asks for a TOTP code once a staff member has an authenticator,
a page where staff turn two-factor authentication on and off, and the names,
links and order a billing tool needs.

It replaces Django's default site (accounts.apps.StaffAdminConfig), so every
`admin.register` in the apps lands here. docs/admin.md explains it to staff.
"""

from __future__ import annotations

from functools import update_wrapper
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.forms import AdminAuthenticationForm, AdminPasswordChangeForm
from django.contrib.auth import REDIRECT_FIELD_NAME
from django.contrib.auth import login as auth_login
from django.contrib.auth.views import LoginView, PasswordChangeView, redirect_to_login
from django.http import HttpResponseRedirect
from django.shortcuts import resolve_url
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.safestring import mark_safe
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_protect

from accounts import services
from accounts.throttling import client_address
from core.csp import content_security_policy
from core.errors import DomainError

# Every admin page, the login page included, sends the strict policy of
# core/csp.py: only the project's own scripts, styles, images and fonts, no
# inline script or style (Django's admin needs none; the charts and the QR code
# are inline SVG, which the policy does not restrict), forms to this origin only.
admin_csp = content_security_policy()

# The index lists apps in this order (the rest follow, by name): what staff use
# every day first.
APP_ORDER = ("rentals", "billing", "catalog", "accounts", "webhooks", "sizing", "core", "auth")
# Within an app, these models lead (reports before lists).
MODEL_ORDER = {"rentals": ("RentalDashboard", "Order", "Rental"), "catalog": ("StockOverview",)}


class StaffAuthenticationForm(AdminAuthenticationForm):
    """Username, password and, for staff with an authenticator, its code. The
    checks are `accounts.services.staff_login`'s: throttled per username and
    per address, every failure counted."""

    otp_token = forms.CharField(
        label="Authentication code",
        required=False,
        max_length=16,
        strip=True,
        widget=forms.TextInput(attrs={"autocomplete": "one-time-code", "inputmode": "numeric", "size": 8}),
        help_text="From your authenticator app, once two-factor authentication is on for your account.",
    )

    def clean(self):
        username = self.cleaned_data.get("username")
        password = self.cleaned_data.get("password")
        if username is None or not password:
            return self.cleaned_data
        try:
            self.staff_login = services.staff_login(
                username=username,
                password=password,
                otp_token=self.cleaned_data.get("otp_token") or "",
                client_address=client_address(self.request),
            )
        except DomainError as exc:
            self.retry_after = getattr(exc, "retry_after", None)  # set when throttled
            raise forms.ValidationError(exc.message, code=exc.code) from exc
        self.user_cache = self.staff_login.account
        if self.staff_login.device is not None:
            # django_otp marks the session verified when the user logs in with this attribute set.
            self.user_cache.otp_device = self.staff_login.device
        self.confirm_login_allowed(self.user_cache)
        return self.cleaned_data


class StaffLoginView(LoginView):
    """Django's login view; a staff member the policy wants enrolled is sent to
    the two-factor page first."""

    admin_site: StaffAdminSite | None = None

    def form_valid(self, form):
        auth_login(self.request, form.get_user())
        if form.staff_login.must_enrol:
            messages.warning(self.request, "Your account must use two-factor authentication: set it up to go on.")
            return HttpResponseRedirect(reverse("admin:two_factor", current_app=self.admin_site.name))
        return HttpResponseRedirect(self.get_success_url())

    def form_invalid(self, form):
        response = super().form_invalid(form)
        retry_after = getattr(form, "retry_after", None)
        if retry_after:  # throttled: say so in the status too, as the API does
            response.status_code = 429
            response["Retry-After"] = str(retry_after)
        return response


class StaffPasswordChangeForm(AdminPasswordChangeForm):
    """The admin's own "Change password" page, through the same service as the
    API's: the old password checked under the login throttle (per username and
    address) before it is hashed, every API token of the account revoked, an
    audit row. Django's own form checked the old password unthrottled and left
    the tokens alive."""

    def __init__(self, user, *args, request=None, **kwargs):
        super().__init__(user, *args, **kwargs)
        self.request = request

    def clean_old_password(self):
        return self.cleaned_data["old_password"]  # checked by the service, throttled, in clean()

    def clean(self):
        cleaned = super().clean()
        old, new = cleaned.get("old_password"), cleaned.get("new_password2")
        if old and new and not self.errors:
            try:
                services.account_password_change(
                    account=self.user,
                    password=old,
                    new_password=new,
                    keep_token=None,
                    client_address=client_address(self.request),
                )
            except DomainError as exc:
                # On the field: the admin's page shows each field's errors, not the form's own.
                self.add_error("old_password", forms.ValidationError(exc.message, code=exc.code))
        return cleaned

    def save(self, commit=True):
        return self.user  # saved by the service in clean()


class StaffPasswordChangeView(PasswordChangeView):
    form_class = StaffPasswordChangeForm

    def get_form_kwargs(self):
        return {**super().get_form_kwargs(), "request": self.request}


class OtpCodeForm(forms.Form):
    otp_token = forms.CharField(
        label="Code from the app",
        max_length=16,
        strip=True,
        widget=forms.TextInput(attrs={"autocomplete": "one-time-code", "inputmode": "numeric", "size": 8}),
    )


def _grouped(secret: str, size: int = 4) -> str:
    return " ".join(secret[i : i + size] for i in range(0, len(secret), size))


class StaffAdminSite(admin.AdminSite):
    site_header = "GPU Rent Hub staff"
    site_title = "GPU Rent Hub"
    index_title = "Staff admin"
    # There is no public site to "view": the header links the dashboard and the API docs instead.
    site_url = None
    # The app list beside every page takes 300 pixels the billing tables need;
    # the index and the header's links are one click away.
    enable_nav_sidebar = False
    login_form = StaffAuthenticationForm

    # --- Who may see the admin ---------------------------------------------------

    def _otp_missing(self, request) -> bool:
        """Whether an active staff member still owes a second factor: they have
        an authenticator this session has not verified, or the policy wants one
        and they have none yet."""
        user = request.user
        if getattr(user, "is_verified", None) and user.is_verified():
            return False
        return services.staff_otp_device(account=user) is not None or services.staff_otp_required(account=user)

    def has_permission(self, request):
        user = request.user
        return bool(user.is_active and user.is_staff) and not self._otp_missing(request)

    def staff_view(self, view):
        """A view for any signed-in active staff member, second factor or not
        (logging out, setting up two-factor): never cached, CSRF-protected."""

        def inner(request, *args, **kwargs):
            user = request.user
            if not (user.is_authenticated and user.is_active and user.is_staff):
                return redirect_to_login(request.get_full_path(), reverse("admin:login", current_app=self.name))
            return view(request, *args, **kwargs)

        return update_wrapper(admin_csp(csrf_protect(never_cache(inner))), view)

    def admin_view(self, view, cacheable=False):
        return admin_csp(super().admin_view(view, cacheable))

    # --- Pages -------------------------------------------------------------------

    def get_urls(self):
        urls = super().get_urls()
        for i, pattern in enumerate(urls):
            if getattr(pattern, "name", None) == "logout":
                urls[i] = path("logout/", self.staff_view(self.logout), name="logout")
        return [path("two-factor/", self.staff_view(self.two_factor_view), name="two_factor"), *urls]

    def login(self, request, extra_context=None):
        return admin_csp(self._login)(request, extra_context)

    def password_change(self, request, extra_context=None):
        """Django's page with StaffPasswordChangeForm (AdminSite.password_change's defaults otherwise)."""
        defaults: dict[str, Any] = {
            "success_url": reverse("admin:password_change_done", current_app=self.name),
            "extra_context": {**self.each_context(request), **(extra_context or {})},
        }
        if self.password_change_template is not None:
            defaults["template_name"] = self.password_change_template
        request.current_app = self.name
        return StaffPasswordChangeView.as_view(**defaults)(request)

    def _login(self, request, extra_context=None):
        user = request.user
        if request.method == "GET" and user.is_authenticated and user.is_active and user.is_staff:
            if self.has_permission(request):
                return HttpResponseRedirect(reverse("admin:index", current_app=self.name))
            if services.staff_otp_device(account=user) is None:
                # Signed in with the password, and the policy wants an authenticator first.
                return HttpResponseRedirect(reverse("admin:two_factor", current_app=self.name))
        context = {
            **self.each_context(request),
            "title": "Log in",
            "subtitle": None,
            "app_path": request.get_full_path(),
            "username": request.user.get_username(),
        }
        if REDIRECT_FIELD_NAME not in request.GET and REDIRECT_FIELD_NAME not in request.POST:
            context[REDIRECT_FIELD_NAME] = reverse("admin:index", current_app=self.name)
        context.update(extra_context or {})
        request.current_app = self.name
        view = StaffLoginView.as_view(
            extra_context=context,
            authentication_form=self.login_form,
            template_name=self.login_template or "admin/login.html",
            admin_site=self,
        )
        return view(request)

    def two_factor_view(self, request):
        """Turn two-factor authentication on (scan the QR code, type a code) or
        off (a current code; not where ADMIN_OTP_REQUIRED covers the account)."""
        from django_otp import login as otp_login

        account = request.user
        device = services.staff_otp_device(account=account)
        required = services.staff_otp_required(account=account)
        form = OtpCodeForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            try:
                if device is None:
                    confirmed = services.staff_otp_confirm(account=account, otp_token=form.cleaned_data["otp_token"])
                    otp_login(request, confirmed)
                    messages.success(request, "Two-factor authentication is on: log in with a code from now on.")
                    return HttpResponseRedirect(reverse("admin:index", current_app=self.name))
                services.staff_otp_disable(account=account, otp_token=form.cleaned_data["otp_token"])
                request.session.pop("otp_device_id", None)
                messages.success(
                    request, "Two-factor authentication is off for your account; its API tokens are revoked."
                )
                return HttpResponseRedirect(reverse("admin:two_factor", current_app=self.name))
            except DomainError as exc:
                form.add_error("otp_token", forms.ValidationError(exc.message, code=exc.code))
        context = {
            **self.each_context(request),
            "title": "Two-factor authentication",
            "subtitle": None,
            "form": form,
            "device": device,
            "required": required,
            "policy": settings.ADMIN_OTP_REQUIRED,
        }
        if device is None:
            pending = services.staff_otp_enrolment_start(account=account)
            context.update(
                qr_svg=_qr_svg(pending.config_url),
                secret=_grouped(_b32(pending.bin_key)),
            )
        request.current_app = self.name
        return TemplateResponse(request, "admin/two_factor.html", context)

    # --- The index ---------------------------------------------------------------

    def get_app_list(self, request, app_label=None):
        apps = super().get_app_list(request, app_label)

        def app_key(app):
            label = app["app_label"]
            return (APP_ORDER.index(label) if label in APP_ORDER else len(APP_ORDER), app["name"])

        for app in apps:
            leading = MODEL_ORDER.get(app["app_label"], ())
            app["models"].sort(
                key=lambda m: (
                    leading.index(m["object_name"]) if m["object_name"] in leading else len(leading),
                    m["name"],
                )
            )
        return sorted(apps, key=app_key)

    def each_context(self, request):
        context = super().each_context(request)
        user = getattr(request, "user", None)
        context["two_factor_on"] = bool(
            user is not None and user.is_authenticated and services.staff_otp_device(account=user) is not None
        )
        context["dashboard_url"] = resolve_url("admin:rentals_rentaldashboard_changelist")
        return context


def _b32(key: bytes) -> str:
    from base64 import b32encode

    return b32encode(key).decode().rstrip("=")


def _qr_svg(uri: str) -> str:
    """The otpauth:// URI as an inline SVG QR code (no image request, no script)."""
    import segno

    svg = segno.make(uri, error="m").svg_inline(scale=5, border=2, dark="#000", light="#fff")
    return mark_safe(svg)  # segno's own markup; the URI inside it is not rendered as text
