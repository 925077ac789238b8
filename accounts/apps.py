from django.apps import AppConfig
from django.contrib.admin import apps as admin_apps


class AccountsConfig(AppConfig):
    name = "accounts"
    verbose_name = "Accounts"
    default = True  # "accounts" in INSTALLED_APPS means this one, not the admin's config below


class StaffAdminConfig(admin_apps.AdminConfig):
    """django.contrib.admin, with the staff site (accounts/admin_site.py) as
    the default site that every app's `admin.register` uses."""

    default = False
    default_site = "accounts.admin_site.StaffAdminSite"
