"""Settings for the test suite: PostgreSQL and Redis, as in production.

The Makefile exports DATABASE_URL and TEST_REDIS_URL; CACHE_URL and
CELERY_BROKER_URL may be set to use other Redis databases. The defaults below
match the services `make test` starts on a fresh machine.

Under pytest-xdist each worker (gw0, gw1, ...) is isolated from the others:
pytest-django gives it its own PostgreSQL test database (test_<name>_gw0, ...),
and here it gets its own Redis databases, two apart, counted from the ones
configured: worker n uses the cache's database + 2n and the broker's + 2n. The
cache needs this most: cache.clear() flushes a whole Redis database, and the
login throttling and the watchers' leases live in it. With the defaults
(12 and 13) two workers use databases 12 to 15, within Redis's default 16.
"""

import os
from urllib.parse import urlsplit, urlunsplit

os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/gpurenthub")
os.environ.setdefault("SECRET_KEY", "test-only-secret-key-not-used-anywhere-else-0123456789")
_redis = os.environ.setdefault("TEST_REDIS_URL", "redis://127.0.0.1:6379")
os.environ.setdefault("CACHE_URL", f"{_redis}/12")
os.environ.setdefault("CELERY_BROKER_URL", f"{_redis}/13")
os.environ.setdefault("SECURE_SSL_REDIRECT", "false")
os.environ.setdefault("SITE_URL", "http://127.0.0.1:8000")
os.environ.setdefault("ALLOWED_HOSTS", "localhost,testserver,127.0.0.1")
# Admin tests log staff in directly; the two-factor tests turn the policy on themselves.
os.environ.setdefault("ADMIN_OTP_REQUIRED", "off")


def redis_url_for_worker(url: str, worker: str) -> str:
    """`url` (redis://host:port/db) with the database of xdist worker `worker`
    ("gw3"): db + 2 x 3. Unchanged outside xdist, and for other schemes."""
    parts = urlsplit(url)
    if not worker.startswith("gw") or parts.scheme not in ("redis", "rediss"):
        return url
    db = int(parts.path.strip("/") or 0)
    return urlunsplit(parts._replace(path=f"/{db + 2 * int(worker[2:])}"))


XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
# The Redis URLs as configured, before this worker's databases are counted in.
REDIS_URLS_CONFIGURED = {name: os.environ[name] for name in ("CACHE_URL", "CELERY_BROKER_URL")}
for _name, _url in REDIS_URLS_CONFIGURED.items():
    os.environ[_name] = redis_url_for_worker(_url, XDIST_WORKER)

from config.settings import *  # noqa: E402,F403

# The regtest harnesses and the sandbox are tested with DEBUG off, as production
# runs; core.apps lets only this settings module install devtools without DEBUG.
if "devtools" not in INSTALLED_APPS:  # noqa: F405
    INSTALLED_APPS = [*INSTALLED_APPS, "devtools"]  # noqa: F405

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

# The embedded default's database beside PostgreSQL, for tests that must hold on
# both (tests/core/test_fields_base_units.py): in memory, its tables made from
# the models, and set up only for a test that asks for it (databases=[..., "sqlite"]).
DATABASES["sqlite"] = {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:", "TEST": {"MIGRATE": False}}  # noqa: F405
