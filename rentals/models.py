from __future__ import annotations

from django.contrib.auth.base_user import AbstractBaseUser, BaseUserManager
from django.contrib.auth.models import PermissionsMixin
from django.db import models
from django.db.models.functions import Lower
from django.utils import timezone


class AccountManager(BaseUserManager["Account"]):
    use_in_migrations = True

    def get_by_natural_key(self, username: str) -> "Account":
        return self.get(username__iexact=username)

    def create_user(self, username: str, password: str | None = None, **extra) -> "Account":
        account = self.model(username=username.lower(), **extra)
        account.set_password(password)
        account.save(using=self._db)
        return account

    def create_superuser(self, username: str, password: str | None = None, **extra) -> "Account":
        extra.setdefault("is_staff", True)
        extra.setdefault("is_superuser", True)
        return self.create_user(username, password, **extra)


class Account(AbstractBaseUser, PermissionsMixin):
    """A customer or staff member: a username and a password, nothing else.
    There is deliberately no email column."""

    username = models.CharField(max_length=32, unique=True)
    created_at = models.DateTimeField(default=timezone.now)
    is_staff = models.BooleanField(default=False, help_text="Can log into the admin.")
    is_active = models.BooleanField(default=True)

    USERNAME_FIELD = "username"
    REQUIRED_FIELDS: list[str] = []

    objects = AccountManager()

    class Meta:
        constraints = [
            models.UniqueConstraint(Lower("username"), name="account_username_ci_unique"),
            models.CheckConstraint(
                condition=models.Q(username__regex=r"^[a-z0-9_.-]{3,32}$"),
                name="account_username_charset",
            ),
        ]

    def __str__(self) -> str:
        return self.username

    def get_full_name(self) -> str:
        return self.username

    def get_short_name(self) -> str:
        return self.username
