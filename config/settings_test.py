"""Settings for the test suite: PostgreSQL and Redis, as in production.

The Makefile exports DATABASE_URL and REDIS_URL; the defaults below match the
services `make test` starts on a fresh machine.
"""

import os

os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/gpurenthub")
os.environ.setdefault("SECRET_KEY", "test-only-secret-key-not-used-anywhere-else-0123456789")
_redis = os.environ.setdefault("TEST_REDIS_URL", "redis://127.0.0.1:6379")
os.environ.setdefault("CACHE_URL", f"{_redis}/14")
os.environ.setdefault("CELERY_BROKER_URL", f"{_redis}/15")
os.environ.setdefault("SECURE_SSL_REDIRECT", "false")
os.environ.setdefault("ALLOWED_HOSTS", "localhost,testserver,127.0.0.1")
# Admin tests log staff in directly; the two-factor tests turn the policy on themselves.
os.environ.setdefault("ADMIN_OTP_REQUIRED", "off")

from config.settings import *  # noqa: E402,F403

# Tasks queued with on_commit run inline, so a test sees the whole effect of a commit.
CELERY_TASK_ALWAYS_EAGER = True
CELERY_TASK_EAGER_PROPAGATES = True
WHITENOISE_AUTOREFRESH = True  # no collectstatic before tests
# Argon2id with small costs (tests/hashers.py): same algorithm and format, fast.
PASSWORD_HASHERS = ["tests.hashers.FastArgon2PasswordHasher"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
