"""The account (the custom user model: a username and a password, no email), its API tokens,
recovery codes and SSH public keys."""

from __future__ import annotations

from django.contrib.auth.base_user import AbstractBaseUser, BaseUserManager
from django.contrib.auth.models import PermissionsMixin
from django.db import models
from django.db.models.functions import Lower
from django.utils import timezone

from core.permissions import TokenScope


class AccountManager(BaseUserManager["Account"]):
    use_in_migrations = True

    def get_by_natural_key(self, username: str) -> Account:
        return self.get(username__iexact=username)

    def create_user(self, username: str, password: str | None = None, **extra) -> Account:
        account = self.model(username=username.lower(), **extra)
        account.set_password(password)
        account.save(using=self._db)
        return account

    def create_superuser(self, username: str, password: str | None = None, **extra) -> Account:
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
        # The operators' API (/api/v1/ops/): staff need these besides an `ops`
        # token (core.permissions.StaffPermissionRequired); superusers hold them all.
        permissions = [
            ("provision_rental", "Can report a rental handed over (ops API)"),
            ("record_usage", "Can report a rental's monthly egress (ops API)"),
        ]
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


# --- API tokens ---------------------------------------------------------------


class ApiToken(models.Model):
    """A bearer token. Only the SHA-256 digest of the secret is stored; the
    secret itself is shown once, when the token is issued. `prefix` (the first
    characters of the secret) stays visible so a holder can tell tokens apart.
    `scope` (core.permissions.TokenScope) says what the token may do."""

    account = models.ForeignKey(Account, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=64, blank=True)
    prefix = models.CharField(max_length=16)
    scope = models.CharField(
        max_length=8,
        choices=TokenScope.choices,
        default=TokenScope.FULL,
        help_text="read: safe methods only; full: what a customer does; ops: full and the staff /ops/ endpoints.",
    )
    digest = models.CharField(max_length=64, unique=True, help_text="SHA-256 of the secret, hex.")
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True, help_text="Recorded at most once a minute.")
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "API token"
        indexes = [models.Index(fields=["account", "revoked_at"])]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(digest__regex=r"^[0-9a-f]{64}$"), name="apitoken_digest_sha256_hex"
            ),
            models.CheckConstraint(condition=~models.Q(prefix=""), name="apitoken_prefix_not_empty"),
            models.CheckConstraint(condition=models.Q(scope__in=TokenScope.values), name="apitoken_scope_known"),
        ]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.name or 'unnamed'})"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None


# --- Recovery codes -----------------------------------------------------------


class RecoveryCode(models.Model):
    """A one-time code that resets a forgotten password (there is no email to
    send a link to). Only the SHA-256 digest of the normalised code is stored."""

    account = models.ForeignKey(Account, on_delete=models.CASCADE, related_name="recovery_codes")
    digest = models.CharField(max_length=64)
    created_at = models.DateTimeField(default=timezone.now)
    used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["account", "digest"], name="recoverycode_unique_per_account"),
            models.CheckConstraint(
                condition=models.Q(digest__regex=r"^[0-9a-f]{64}$"), name="recoverycode_digest_sha256_hex"
            ),
        ]

    def __str__(self) -> str:
        return f"recovery code #{self.pk} of {self.account_id}{' (used)' if self.used_at else ''}"


# --- SSH public keys ----------------------------------------------------------


class SshKeyType(models.TextChoices):
    ED25519 = "ssh-ed25519", "Ed25519"
    ECDSA_P256 = "ecdsa-sha2-nistp256", "ECDSA P-256"
    ECDSA_P384 = "ecdsa-sha2-nistp384", "ECDSA P-384"
    ECDSA_P521 = "ecdsa-sha2-nistp521", "ECDSA P-521"
    RSA = "ssh-rsa", "RSA"


SSH_RSA_MIN_BITS = 2048


class SshKey(models.Model):
    """A public key installed on the account's servers. `public_key` is the
    canonical OpenSSH line: type, base64 blob and the comment as given."""

    account = models.ForeignKey(Account, on_delete=models.CASCADE, related_name="ssh_keys")
    name = models.CharField(max_length=100)
    key_type = models.CharField(max_length=32, choices=SshKeyType.choices)
    bits = models.PositiveIntegerField()
    fingerprint = models.CharField(max_length=64, help_text="SHA256:<unpadded base64>, as ssh-keygen -l shows.")
    public_key = models.TextField()
    comment = models.CharField(max_length=255, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at", "id"]
        verbose_name = "SSH key"
        constraints = [
            models.UniqueConstraint(fields=["account", "fingerprint"], name="sshkey_unique_per_account"),
            models.CheckConstraint(condition=models.Q(key_type__in=SshKeyType.values), name="sshkey_type_accepted"),
            models.CheckConstraint(
                condition=~models.Q(key_type=SshKeyType.RSA) | models.Q(bits__gte=SSH_RSA_MIN_BITS),
                name="sshkey_rsa_min_bits",
            ),
            models.CheckConstraint(
                condition=models.Q(fingerprint__startswith="SHA256:"), name="sshkey_fingerprint_sha256"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.fingerprint})"
