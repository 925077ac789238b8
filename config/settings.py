"""Settings, read from the environment (README "Configuration" lists every one).

Production defaults are the safe ones: DEBUG off, no default SECRET_KEY, secure
cookies, HSTS and an HTTPS redirect. `make run` sets DEBUG=1 and runs on the
embedded default (SQLite, and an SQLite Celery broker, under DATA_DIR).
"""

from __future__ import annotations

import secrets
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import django_stubs_ext
import environ
from django.core.exceptions import ImproperlyConfigured

# Django's generic classes (ModelAdmin, Field, Form...) take type parameters in the type hints
# (django-stubs); this lets `admin.ModelAdmin[Order]` be written as a base class at run time too.
django_stubs_ext.monkeypatch()

BASE_DIR = Path(__file__).resolve().parent.parent
env = environ.Env()

DATA_DIR = Path(env.str("DATA_DIR", default=str(BASE_DIR / "data")))
DEBUG = env.bool("DEBUG", default=False)

# The local sandbox (`make run` with litecoind, anvil or monerod installed) writes the LTC,
# ETH and XMR settings of its nodes to this file while it runs. Local runs (DEBUG only) read
# it, so commands in another shell (`manage.py sandbox_pay`) see the sandbox too; it
# never overrides the environment, and is not read when LTC or ETH is configured there.
SANDBOX_ENV_FILE = DATA_DIR / "sandbox" / "sandbox.env"
_CHAINS_CONFIGURED = any(
    env.str(name, default="")
    for name in (
        "LTC_XPUB",
        "LTC_RPC_URL",
        "ETH_XPUB",
        "ETH_RPC_URL",
        "XMR_ADDRESS",
        "XMR_WALLET_RPC_URL",
        "SOL_RECIPIENT",
        "SOL_RPC_URL",
    )
)
if DEBUG and SANDBOX_ENV_FILE.is_file() and not _CHAINS_CONFIGURED:
    environ.Env.read_env(SANDBOX_ENV_FILE)


def _secret_key() -> str:
    key = env.str("SECRET_KEY", default="")
    if key:
        return key
    if not DEBUG:
        raise ImproperlyConfigured(
            "SECRET_KEY is not set. Production has no default secret: set SECRET_KEY "
            "to a long random string (or DEBUG=1 for a local run)."
        )
    # Local runs keep one generated key per data folder so sessions survive restarts.
    path = DATA_DIR / "secret_key"
    if not path.exists():
        DATA_DIR.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


SECRET_KEY = _secret_key()
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"] if DEBUG else [])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])
# The public base URL (checkout links, provisioning jobs' ready_url). Production
# must say it: a default would send customers' checkout links to 127.0.0.1.
SITE_URL = env.str("SITE_URL", default="http://127.0.0.1:8000" if DEBUG else "")
if not SITE_URL:
    raise ImproperlyConfigured(
        "SITE_URL is not set. With DEBUG off set it to the public base URL, e.g. https://api.example.com "
        "(invoices' checkout links and provisioning jobs start with it)."
    )

INSTALLED_APPS = [
    "accounts.apps.StaffAdminConfig",  # django.contrib.admin with the staff site (accounts/admin_site.py)
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_otp",
    "django_otp.plugins.otp_totp",
    "core",
    "catalog",
    "sizing",
    "accounts",
    "billing",
    "webhooks",
    "rentals",
    "observability",
]

# Development and test tooling (regtest nodes, the sandbox, serve_local, sandbox_pay):
# installed for local runs only; production refuses to start with it (core.apps).
if DEBUG:
    INSTALLED_APPS.append("devtools")

MIDDLEWARE = [
    # Outermost: the request id and the request metrics (observability/middleware.py).
    "observability.middleware.ObservabilityMiddleware",
    "core.middleware.ApiJsonErrorsMiddleware",  # outermost: sees every answer under /api/
    # A database that is gone (restarting, failing over) is a 503 with Retry-After, not a 500.
    "core.middleware.DatabaseUnavailableMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django_otp.middleware.OTPMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database, cache, broker -------------------------------------------------

DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{DATA_DIR / 'db.sqlite3'}")}
DATABASES["default"]["ATOMIC_REQUESTS"] = False
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Web, worker and beat share one SQLite file in the local run: wait for the
    # write lock instead of failing, and use WAL so readers never block writers.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {"timeout": 20, "transaction_mode": "IMMEDIATE", "init_command": "PRAGMA journal_mode=WAL;"}
    )
else:
    DATABASE_POOL = env.bool("DATABASE_POOL", default=False)
    if DATABASE_POOL:
        # Django's own connection pool (psycopg_pool, one per process): a request takes a
        # connection from it and gives it back at its end; the pool checks one before
        # lending it (CONN_HEALTH_CHECKS) and replaces what is broken.
        DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
            "min_size": env.int("DATABASE_POOL_MIN_SIZE", default=2),
            "max_size": env.int("DATABASE_POOL_MAX_SIZE", default=16),
            "timeout": env.float("DATABASE_POOL_TIMEOUT", default=10.0),
        }
        DATABASES["default"]["CONN_MAX_AGE"] = 0  # the pool keeps them
    else:
        if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
            # Django's backend with a health check that needs no round trip (core/postgresql/base.py).
            DATABASES["default"]["ENGINE"] = "core.postgresql"
        DATABASES["default"]["CONN_MAX_AGE"] = env.int("DATABASE_CONN_MAX_AGE", default=60)
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
    if env.bool("DATABASE_PREPARED_STATEMENTS", default=True):
        # Parameters sent apart from the statement, and a statement run five times on
        # a connection is prepared on the server: parsed and planned once, not on
        # every order (a quarter of the database's work per order). Off behind a
        # pooler that cannot keep prepared statements (PgBouncer before 1.21 in
        # transaction mode).
        DATABASES["default"].setdefault("OPTIONS", {}).update({"server_side_binding": True, "prepare_threshold": 5})
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

CACHES = {"default": env.cache_url("CACHE_URL", default=f"filecache://{DATA_DIR / 'cache'}")}

# --- Broker and worker: the embedded broker, Redis restarts, the local run ----
# The embedded default (`make run`) keeps its Celery messages in an SQLite file
# under DATA_DIR through kombu's SQLAlchemy transport (kombu/transport/sqlalchemy):
# a message is a row, taken in one `BEGIN IMMEDIATE` transaction, so a worker never
# reads one half written. (kombu's filesystem transport writes a message file in
# place and a worker could read it still empty, kombu #1551: the worker died.)
# Delivered rows stay with visible=0; `make run` deletes them when it starts.
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default=f"sqla+sqlite:///{DATA_DIR / 'broker.sqlite3'}")
# Redis: a message a worker had taken and could not give back (Redis was down when the worker
# let go of it, reconnecting) is delivered again once it is this many seconds old (kombu's
# `visibility_timeout`, default an hour; checked about every 100 s). No task here runs for
# minutes, and every job is idempotent, so a task still running then and run again changes nothing.
CELERY_BROKER_VISIBILITY_TIMEOUT = env.int("CELERY_BROKER_VISIBILITY_TIMEOUT", default=300)
if CELERY_BROKER_URL.startswith(("sqla+sqlite:", "sqlalchemy+sqlite:")):
    # Passed to sqlalchemy.create_engine: wait up to 20 s for the file's write lock.
    CELERY_BROKER_TRANSPORT_OPTIONS = {"connect_args": {"timeout": 20}}
elif CELERY_BROKER_URL.startswith(("redis:", "rediss:")):
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": CELERY_BROKER_VISIBILITY_TIMEOUT}
else:
    CELERY_BROKER_TRANSPORT_OPTIONS = {}
# A worker started while the broker is down waits for it, and a worker whose broker
# went away (a Redis restart) retries for as long as it takes instead of exiting
# after 100 attempts (celery's default); systemd restarts it if it exits all the same.
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
# The sandbox's monerod runs regtest, whose addresses have mainnet's prefixes: it
# says so here (the only value taken; `make run` sets it), so XMR invoices read
# monero-regtest rather than monero-mainnet.
XMR_NETWORK = env.str("XMR_NETWORK", default="")
if XMR_NETWORK not in ("", "regtest") or (XMR_NETWORK and not DEBUG):
    raise ImproperlyConfigured(
        'XMR_NETWORK is "regtest" in the local sandbox (DEBUG=1) or unset: the address names the other networks.'
    )
# --- end of the broker and worker block ---

CELERY_TASK_ALWAYS_EAGER = env.bool("CELERY_TASK_ALWAYS_EAGER", default=False)
# Webhook deliveries on a queue of their own, consumed by their own workers
# (deploy/systemd/gpurenthub-webhooks.service), so slow endpoints cannot hold the
# workers that watch payments: webhooks/routing.py. Empty: one queue for everything.
WEBHOOK_QUEUE = env.str("WEBHOOK_QUEUE", default="")
if WEBHOOK_QUEUE not in ("", "webhooks"):
    raise ImproperlyConfigured("WEBHOOK_QUEUE is webhooks (the queue gpurenthub-webhooks.service takes) or empty.")
CELERY_TASK_ROUTES = ["webhooks.routing.route"]
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BEAT_SCHEDULE_FILENAME = str(DATA_DIR / "celerybeat-schedule")
CELERY_TIMEZONE = "UTC"
# The periodic jobs (bodies in each app's tasks.py). Each is idempotent: a run
# that finds nothing to do changes nothing.
CELERY_BEAT_SCHEDULE: dict = {}

# --- Auth ---------------------------------------------------------------------

AUTH_USER_MODEL = "accounts.Account"
PASSWORD_HASHERS = [
    "django.contrib.auth.hashers.Argon2PasswordHasher",
    "django.contrib.auth.hashers.PBKDF2PasswordHasher",
]
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "accounts.password_validation.NotBlankValidator"},
    {
        "NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator",
        "OPTIONS": {"user_attributes": ("username",)},
    },
    {
        "NAME": "django.contrib.auth.password_validation.MinimumLengthValidator",
        "OPTIONS": {"min_length": env.int("PASSWORD_MIN_LENGTH", default=10)},
    },
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# Failed logins / recoveries tolerated per username and per client address in a window.
AUTH_FAILURES_PER_USERNAME = env.int("AUTH_FAILURES_PER_USERNAME", default=5)
AUTH_FAILURES_PER_ADDRESS = env.int("AUTH_FAILURES_PER_ADDRESS", default=20)
AUTH_FAILURE_WINDOW_SECONDS = env.int("AUTH_FAILURE_WINDOW_SECONDS", default=900)
# An address a username has logged in (or signed up) from is not held to the
# per-username limit for this many days (so a stranger cannot lock the holder out).
AUTH_KNOWN_ADDRESS_DAYS = env.int("AUTH_KNOWN_ADDRESS_DAYS", default=90)
# Right passwords checked per client address (IPv6: per /64) and, from an address the
# username has proved itself from, per username, in a window: each check is an Argon2 hash
# (100 MiB of memory, a quarter of a second of CPU), and only wrong ones count against the
# failure limits above. 0 turns a limit off.
PASSWORD_PROOFS_PER_USERNAME = env.int("PASSWORD_PROOFS_PER_USERNAME", default=20)
PASSWORD_PROOFS_PER_ADDRESS = env.int("PASSWORD_PROOFS_PER_ADDRESS", default=60)
PASSWORD_PROOF_WINDOW_SECONDS = env.int("PASSWORD_PROOF_WINDOW_SECONDS", default=900)
# Sign-ups accepted per client address (IPv6: per /64) in a window; 0 turns the limit off.
SIGNUP_PER_ADDRESS = env.int("SIGNUP_PER_ADDRESS", default=10)
SIGNUP_WINDOW_SECONDS = env.int("SIGNUP_WINDOW_SECONDS", default=3600)
# Number of reverse proxies in front of the app whose X-Forwarded-For entries are trusted.
TRUSTED_PROXY_COUNT = env.int("TRUSTED_PROXY_COUNT", default=0)

# --- API tokens and SSH keys per account (docs/api.md, Limits) -------------------
# The most live (unrevoked) API tokens and SSH keys one account may hold; one
# more is refused with 409 token_limit_reached / ssh_key_limit_reached.
API_TOKENS_MAX_PER_ACCOUNT = env.int("API_TOKENS_MAX_PER_ACCOUNT", default=20)
SSH_KEYS_MAX_PER_ACCOUNT = env.int("SSH_KEYS_MAX_PER_ACCOUNT", default=50)
if API_TOKENS_MAX_PER_ACCOUNT < 1 or SSH_KEYS_MAX_PER_ACCOUNT < 1:
    raise ImproperlyConfigured("API_TOKENS_MAX_PER_ACCOUNT and SSH_KEYS_MAX_PER_ACCOUNT are at least 1.")

# --- List pages (docs/api.md, Lists) -------------------------------------------
# Every list endpoint answers pages of API_PAGE_SIZE rows; ?page_size= asks for
# 1 to API_PAGE_SIZE_MAX. Follow `next` for the rest: nothing is cut silently.
API_PAGE_SIZE = env.int("API_PAGE_SIZE", default=50)
API_PAGE_SIZE_MAX = env.int("API_PAGE_SIZE_MAX", default=200)
if not 1 <= API_PAGE_SIZE <= API_PAGE_SIZE_MAX:
    raise ImproperlyConfigured("API_PAGE_SIZE is at least 1 and at most API_PAGE_SIZE_MAX.")

# --- Staff admin ----------------------------------------------------------------
# Admin logins count failures against the same throttle as API logins (above).
# Two-factor authentication (TOTP, an authenticator app; docs/admin.md): who must
# enrol before using the admin: "superusers" (the default in production), "staff"
# (everyone), or "off" (the default with DEBUG=1). Anyone may enrol voluntarily.
ADMIN_OTP_REQUIRED = env.str("ADMIN_OTP_REQUIRED", default="off" if DEBUG else "superusers").strip().lower()
if ADMIN_OTP_REQUIRED not in ("off", "superusers", "staff"):
    raise ImproperlyConfigured(f"ADMIN_OTP_REQUIRED is off, superusers or staff; got {ADMIN_OTP_REQUIRED!r}.")
# The name authenticator apps show beside the username.
OTP_TOTP_ISSUER = env.str("ADMIN_OTP_ISSUER", default="GPU Rent Hub")

# --- Security -----------------------------------------------------------------

SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=not DEBUG)
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$"]
if env.bool("BEHIND_TLS_PROXY", default=not DEBUG):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=0 if DEBUG else 31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=not DEBUG)
SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", default=not DEBUG)
SESSION_COOKIE_SECURE = env.bool("SESSION_COOKIE_SECURE", default=not DEBUG)
CSRF_COOKIE_SECURE = env.bool("CSRF_COOKIE_SECURE", default=not DEBUG)
SESSION_COOKIE_HTTPONLY = True
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"

# --- I18n, time, static -------------------------------------------------------

LANGUAGE_CODE = "en"
TIME_ZONE = "UTC"
# Translations serve the pages customers read (the checkout page, in English and
# Spanish, chosen by Accept-Language or the page's switch). The API and the admin
# stay in English: no LocaleMiddleware. The catalogs (*/locale/*/LC_MESSAGES/*.po)
# are compiled to .mo files by the build (`make install`, `make run`, `make test`).
USE_I18N = True
LANGUAGES = [("en", "English"), ("es", "Español")]
USE_TZ = True
# Dates as 2026-12-01 and times as 15:32 on English pages (config/formats/en/formats.py).
FORMAT_MODULE_PATH = ["config.formats"]

STATIC_URL = "static/"
STATIC_ROOT = Path(env.str("STATIC_ROOT", default=str(BASE_DIR / "staticfiles")))
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

# --- API ----------------------------------------------------------------------

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["accounts.authentication.BearerTokenAuthentication"],
    # A token's scope holds on every endpoint (core/permissions.py): `read` tokens only read.
    "DEFAULT_PERMISSION_CLASSES": [
        "rest_framework.permissions.IsAuthenticated",
        "core.permissions.TokenScopeAllows",
    ],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["core.parsers.DepthLimitedJSONParser"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "core.api.exception_handler",
    "UNAUTHENTICATED_USER": None,
    "COERCE_DECIMAL_TO_STRING": True,
}

# JSON request bodies nested deeper than this (objects and arrays) are refused
# with 400 nesting_too_deep; a Hugging Face config.json nests 3 or 4 levels.
API_JSON_MAX_DEPTH = env.int("API_JSON_MAX_DEPTH", default=32)

SPECTACULAR_SETTINGS = {
    "TITLE": "GPU Rent Hub API",
    "DESCRIPTION": "Dedicated GPU servers for LLM inference, paid in crypto.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "SCHEMA_PATH_PREFIX": r"/api/v1",
    "APPEND_COMPONENTS": {
        "securitySchemes": {"bearerAuth": {"type": "http", "scheme": "bearer", "description": "An API token."}}
    },
    "SECURITY": [{"bearerAuth": []}],
    "ENUM_NAME_OVERRIDES": {"CurrencyEnum": "billing.currencies.CURRENCY_CODES"},
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "core.schema.error_responses_complete",
        "core.schema.rules_complete",
        "core.schema.links_complete",
    ],
}

# --- Logging ------------------------------------------------------------------
# Everything goes to stderr (the journal in production), one JSON object a line
# (LOG_FORMAT=json, the default with DEBUG off) or a line of text (LOG_FORMAT=plain,
# the default with DEBUG), each with the request id of the request or task that
# wrote it, secrets masked (observability/logs.py). Celery's worker and beat use
# this too (config/celery.py); their per-task lines ("Task ... received",
# "succeeded", beat's "Sending due task") are below the default level.

LOG_LEVEL = env.str("LOG_LEVEL", default="INFO").upper()
LOG_FORMAT = env.str("LOG_FORMAT", default="plain" if DEBUG else "json").lower()
if LOG_FORMAT not in ("json", "plain"):
    raise ImproperlyConfigured(f"LOG_FORMAT is json or plain; got {LOG_FORMAT!r}.")
_CELERY_CHATTER_LEVEL = "DEBUG" if LOG_LEVEL == "DEBUG" else "WARNING"
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"request_id": {"()": "observability.logs.RequestIdFilter"}},
    "formatters": {
        "plain": {
            "()": "observability.logs.PlainFormatter",
            "format": "%(asctime)s %(levelname)s %(name)s%(rid)s %(message)s",
        },
        "json": {"()": "observability.logs.JsonFormatter"},
    },
    "handlers": {
        "console": {
            # stderr, as before: a command's own output on stdout (dumpdata, JSON reports) stays clean.
            "class": "logging.StreamHandler",
            "stream": "ext://sys.stderr",
            "formatter": LOG_FORMAT,
            "filters": ["request_id"],
        }
    },
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        # The access line of every request comes from observability.middleware.
        "django.server": {"level": "WARNING"},
        "httpx": {"level": "WARNING"},
        "celery.worker.strategy": {"level": _CELERY_CHATTER_LEVEL},
        "celery.app.trace": {"level": _CELERY_CHATTER_LEVEL},
        "celery.beat": {"level": _CELERY_CHATTER_LEVEL},
    },
}

SESSION_COOKIE_AGE = int(timedelta(hours=12).total_seconds())

# --- Rentals ------------------------------------------------------------------

# Automatic renewal invoices are issued this many days before a period ends.
RENEWAL_LEAD_DAYS_WEEKLY = env.int("RENEWAL_LEAD_DAYS_WEEKLY", default=2)
RENEWAL_LEAD_DAYS_MONTHLY = env.int("RENEWAL_LEAD_DAYS_MONTHLY", default=7)
# A renewal invoice is quoted at issue in the rental's currency; its rate holds this
# many hours (at most to the renewal's deadline), then it is re-quoted at a fresh rate.
RENEWAL_RATE_LOCK_HOURS = env.int("RENEWAL_RATE_LOCK_HOURS", default=24)
# Unpaid at the end of a period: this many days of grace, then suspended (powered
# off), then terminated this many days later with the slots back in stock.
RENTAL_GRACE_DAYS = env.int("RENTAL_GRACE_DAYS", default=3)
RENTAL_TERMINATE_AFTER_DAYS = env.int("RENTAL_TERMINATE_AFTER_DAYS", default=7)
# A month's egress report can be corrected this many days after the month ended;
# then it is billed (on the next renewal, or its own invoice for an ending rental).
USAGE_CORRECTION_DAYS = env.int("USAGE_CORRECTION_DAYS", default=3)
# How servers get provisioned: "manual" (staff enter the addresses in admin) or
# "webhook" (signed JSON jobs POSTed to PROVISIONER_URL; the operator's system
# calls POST /api/v1/ops/rentals/{id}/ready with a staff token).
PROVISIONER = env.str("PROVISIONER", default="manual")
PROVISIONER_URL = env.str("PROVISIONER_URL", default="")
PROVISIONER_SECRET = env.str("PROVISIONER_SECRET", default="")
PROVISIONER_TIMEOUT_SECONDS = env.float("PROVISIONER_TIMEOUT_SECONDS", default=10.0)
if PROVISIONER not in ("manual", "webhook"):
    raise ImproperlyConfigured("PROVISIONER is manual or webhook.")
if PROVISIONER == "webhook" and not (PROVISIONER_URL and PROVISIONER_SECRET):
    raise ImproperlyConfigured("PROVISIONER=webhook needs PROVISIONER_URL and PROVISIONER_SECRET.")
# What one account may hold unpaid at once (orders awaiting payment and their
# GPUs, reserved while the invoice can be paid); higher once it has paid for an
# order. Beyond it an order is refused with 409 unpaid_limit.
UNPAID_ORDERS_MAX = env.int("UNPAID_ORDERS_MAX", default=2)
UNPAID_GPUS_MAX = env.int("UNPAID_GPUS_MAX", default=8)
UNPAID_ORDERS_MAX_PAID = env.int("UNPAID_ORDERS_MAX_PAID", default=10)
UNPAID_GPUS_MAX_PAID = env.int("UNPAID_GPUS_MAX_PAID", default=64)
# Idempotency-Key headers are remembered this long.
IDEMPOTENCY_KEY_HOURS = env.int("IDEMPOTENCY_KEY_HOURS", default=24)
# New Idempotency-Keys one account may send in an hour (each is a stored row, a refusal's
# answer included); past it, 429. 0: no limit.
IDEMPOTENCY_KEYS_PER_HOUR = env.int("IDEMPOTENCY_KEYS_PER_HOUR", default=120)

# Web workers listen for the database's notifications of catalog and stock
# changes (catalog/feed.py) and answer the public catalog, stock, quote and
# recommend reads without asking for the catalog version each time. Off behind a
# pooler that cannot LISTEN (PgBouncer in transaction mode): every request then
# queries. The feed reads the version again every HEARTBEAT seconds, so a
# notification lost on the network is made good within that time.
CATALOG_CHANGE_FEED = env.bool("CATALOG_CHANGE_FEED", default=True)
CATALOG_FEED_HEARTBEAT_SECONDS = env.float("CATALOG_FEED_HEARTBEAT_SECONDS", default=5.0)
if not 0.1 <= CATALOG_FEED_HEARTBEAT_SECONDS <= 300:
    raise ImproperlyConfigured("CATALOG_FEED_HEARTBEAT_SECONDS is between 0.1 and 300.")

# --- Unpaid holds: per client address, and a share of each card's stock --------
# The unpaid caps above hold per client address too (all accounts ordering from
# one IPv4 address or IPv6 /64 together; the address is the one TRUSTED_PROXY_COUNT
# vouches for), and no account or address holds unpaid more than this percent of
# one card's stock in a region (its GPUs there free or held unpaid), never less
# than one host's worth of the card; 100 turns the share cap off. Beyond it an
# order is refused with 409 hold_share_exceeded (docs/api.md).
UNPAID_HOLD_SHARE_PCT = env.int("UNPAID_HOLD_SHARE_PCT", default=25)
if not 1 <= UNPAID_HOLD_SHARE_PCT <= 100:
    raise ImproperlyConfigured("UNPAID_HOLD_SHARE_PCT is between 1 and 100.")
# The one-host allowance above (a hold over the share, admitted because one host is
# the least that can be ordered) is withheld from an account, and from a client
# address, once this many of its orders of that card in that region lapsed (expired
# unpaid, or cancelled after holding the GPUs 10 minutes) within
# UNPAID_HOLD_FLOOR_COOLDOWN_HOURS (409 hold_share_exceeded); an account that has paid
# for that card before keeps it. 0 (either) turns this off.
# An order whose payment was seen in time but has not confirmed this long after its
# quote ended gives its GPUs back to stock (its invoice still settles if the payment
# confirms: the order is then filled from the stock left, or credited). Without it, a
# transfer sent with too low a fee to confirm held a host for the whole monitoring window.
# A rental whose renewal payment is seen and confirming is suspended no sooner than this
# long after its grace ended.
ORDER_CONFIRMING_HOLD_MINUTES = env.int("ORDER_CONFIRMING_HOLD_MINUTES", default=120)
UNPAID_HOLD_FLOOR_MISSES = env.int("UNPAID_HOLD_FLOOR_MISSES", default=2)
UNPAID_HOLD_FLOOR_COOLDOWN_HOURS = env.int("UNPAID_HOLD_FLOOR_COOLDOWN_HOURS", default=24)
# Every order leaves a deposit address watched for a month, paid or not: once this many
# orders of an account, or of a client address, closed unpaid (cancelled or expired)
# within UNPAID_LAPSE_WINDOW_HOURS, its next order is refused (429 throttled) until the
# oldest leaves the window. 0 turns it off.
UNPAID_LAPSES_MAX = env.int("UNPAID_LAPSES_MAX", default=10)
UNPAID_LAPSE_WINDOW_HOURS = env.int("UNPAID_LAPSE_WINDOW_HOURS", default=1)
if UNPAID_LAPSE_WINDOW_HOURS < 1:
    raise ImproperlyConfigured("UNPAID_LAPSE_WINDOW_HOURS is 1 or more.")

# --- Sizing -------------------------------------------------------------------

SIZING_OVERHEAD_GB = Decimal(env.str("SIZING_OVERHEAD_GB", default="2"))  # runtime overhead per GPU
# vllm profile: the highest --gpu-memory-utilization a launch line may use; a workload fits when it needs no more.
SIZING_MAX_GPU_MEMORY_UTILIZATION = Decimal(env.str("SIZING_MAX_GPU_MEMORY_UTILIZATION", default="0.95"))
if not Decimal("0.5") <= SIZING_MAX_GPU_MEMORY_UTILIZATION <= Decimal("0.99"):
    raise ImproperlyConfigured("SIZING_MAX_GPU_MEMORY_UTILIZATION is between 0.5 and 0.99.")
# New sizings allowed per client address (IPv6 per /64) and window: recommendations no web
# worker has an answer kept for (each takes the whole sizing, some 10-50 ms of CPU:
# docs/sizing.md#speed), comparisons, checks and orders' workloads (worked out every time);
# more answer 429.
# 0: no limit.
SIZING_NEW_PER_ADDRESS = env.int("SIZING_NEW_PER_ADDRESS", default=120)
SIZING_NEW_WINDOW_SECONDS = env.int("SIZING_NEW_WINDOW_SECONDS", default=60)

# --- Billing ------------------------------------------------------------------
# A currency is enabled exactly when its watch-only material is set. Never put
# a key that can spend here: xprv/zprv/tprv/vprv and spend keys are refused.

BTC_XPUB = env.str("BTC_XPUB", default="")
BTC_NETWORK = env.str("BTC_NETWORK", default="mainnet")  # mainnet | testnet | regtest
BTC_SCRIPT_TYPE = env.str("BTC_SCRIPT_TYPE", default="p2wpkh")  # states the script for xpub/tpub keys
BTC_RPC_URL = env.str("BTC_RPC_URL", default="")
LTC_XPUB = env.str("LTC_XPUB", default="")
LTC_NETWORK = env.str("LTC_NETWORK", default="mainnet")
LTC_SCRIPT_TYPE = env.str("LTC_SCRIPT_TYPE", default="p2wpkh")
LTC_RPC_URL = env.str("LTC_RPC_URL", default="")
ETH_XPUB = env.str("ETH_XPUB", default="")
ETH_CHAIN_ID = env.int("ETH_CHAIN_ID", default=1)
USDT_CONTRACT = env.str("USDT_CONTRACT", default="0xdAC17F958D2ee523a2206206994597C13D831ec7")
USDC_CONTRACT = env.str("USDC_CONTRACT", default="0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48")
# The Ethereum watcher (docs/chains/ethereum.md): an execution client's or provider's
# HTTP JSON-RPC; settle at CONFIRMATIONS_* blocks or at the node's `finalized` block;
# how ether sent by contracts is found (auto: trace_block, else debug_trace, else balance).
ETH_RPC_URL = env.str("ETH_RPC_URL", default="")
ETH_FINALITY = env.str("ETH_FINALITY", default="confirmations")  # confirmations | finalized
ETH_INTERNAL_TRANSFERS = env.str("ETH_INTERNAL_TRANSFERS", default="auto")  # auto|trace_block|debug_trace|balance
ETH_MULTICALL3_ADDRESS = env.str("ETH_MULTICALL3_ADDRESS", default="0xcA11bde05977b3631167028862bE2a173976CA11")
ETH_STRAY_TOKENS = env.bool("ETH_STRAY_TOKENS", default=True)  # tell staff about tokens nobody credits
ETH_LOG_BLOCK_RANGE = env.int("ETH_LOG_BLOCK_RANGE", default=1000)  # widest eth_getLogs; halved when refused
ETH_RPC_BATCH_SIZE = env.int("ETH_RPC_BATCH_SIZE", default=100)
ETH_RPC_TIMEOUT_SECONDS = env.float("ETH_RPC_TIMEOUT_SECONDS", default=30.0)
XMR_ADDRESS = env.str("XMR_ADDRESS", default="")
XMR_VIEW_KEY = env.str("XMR_VIEW_KEY", default="")
# The Monero watcher (docs/chains/monero.md): monero-wallet-rpc holding the view-only
# wallet of XMR_ADDRESS + XMR_VIEW_KEY (digest login optional), and monerod for how far
# the wallet is behind.
XMR_WALLET_RPC_URL = env.str("XMR_WALLET_RPC_URL", default="")
XMR_WALLET_RPC_USER = env.str("XMR_WALLET_RPC_USER", default="")
XMR_WALLET_RPC_PASSWORD = env.str("XMR_WALLET_RPC_PASSWORD", default="")
XMR_DAEMON_URL = env.str("XMR_DAEMON_URL", default="")
XMR_SUBADDRESS_LOOKAHEAD = env.int("XMR_SUBADDRESS_LOOKAHEAD", default=200)  # the wallet file's minor lookahead
XMR_SCAN_MARGIN_BLOCKS = env.int("XMR_SCAN_MARGIN_BLOCKS", default=20)  # transfers read from cursor minus this
XMR_WALLET_MAX_LAG_BLOCKS = env.int("XMR_WALLET_MAX_LAG_BLOCKS", default=5)  # further behind: the watcher is blind
XMR_RPC_TIMEOUT_SECONDS = env.float("XMR_RPC_TIMEOUT_SECONDS", default=120.0)
SOL_RECIPIENT = env.str("SOL_RECIPIENT", default="")
SOL_CLUSTER = env.str("SOL_CLUSTER", default="mainnet-beta")  # mainnet-beta | devnet | testnet | localnet
# The Solana watcher (billing/chains/solana/): a node's or provider's JSON-RPC URL enables it.
SOL_RPC_URL = env.str("SOL_RPC_URL", default="")
SOL_GENESIS_HASH = env.str("SOL_GENESIS_HASH", default="")  # pins the node's genesis hash (localnet)
SOL_RPC_MAX_RPS = env.float("SOL_RPC_MAX_RPS", default=0.0)  # calls per second at most (0: unpaced)
SOL_RPC_BATCH_SIZE = env.int("SOL_RPC_BATCH_SIZE", default=100)  # calls per JSON-RPC batch request
SOL_RPC_TIMEOUT_SECONDS = env.float("SOL_RPC_TIMEOUT_SECONDS", default=30.0)
SOL_SCAN_REFERENCES = env.bool("SOL_SCAN_REFERENCES", default=False)  # True: list each open reference too
SOL_SCAN_MAX_PAGES = env.int("SOL_SCAN_MAX_PAGES", default=5)  # pages of 1,000 per address and pass
SOL_WS_URL = env.str("SOL_WS_URL", default="")  # the node's PubSub websocket: logsSubscribe (listen_chain SOL)

# How long a quote's exchange rate is locked (the invoice's expiry), and how long
# after expiry payments are still watched and matched.
INVOICE_EXPIRY_MINUTES = env.int("INVOICE_EXPIRY_MINUTES", default=30)
INVOICE_MONITORING_HOURS = env.int("INVOICE_MONITORING_HOURS", default=24)
# A payment seen this long after its quote's rate lock, the invoice expired meanwhile, still
# pays what the invoice lacks at the locked rate: a watcher sees a transfer some seconds after
# it was sent (an Ethereum block, a wallet's refresh). Coins a quote no longer buys anything
# with count at the lower of the locked and the market rate, whenever they come (docs/billing.md).
RATE_LOCK_GRACE_SECONDS = env.int("RATE_LOCK_GRACE_SECONDS", default=300)
# A staff manual rate further than this from the market's of the day is a superuser's to set.
RATE_MANUAL_MAX_DEVIATION_PCT = Decimal(env.str("RATE_MANUAL_MAX_DEVIATION_PCT", default="25"))
INVOICE_UNDERPAYMENT_TOLERANCE_PCT = Decimal(env.str("INVOICE_UNDERPAYMENT_TOLERANCE_PCT", default="0.5"))
INVOICE_NUMBER_PREFIX = env.str("INVOICE_NUMBER_PREFIX", default="GRH")
# Quotes an invoice may have (the first, currency switches, re-quotes): each holds what it
# pays for (an order's GPUs) one more rate lock, so this bounds how long it can be held.
INVOICE_MAX_QUOTES = env.int("INVOICE_MAX_QUOTES", default=6)
# POSTs to one checkout page (switch currency, fresh quote), and from one address to any,
# allowed per window; more answer 429.
CHECKOUT_POSTS_PER_TOKEN = env.int("CHECKOUT_POSTS_PER_TOKEN", default=10)
CHECKOUT_POSTS_PER_ADDRESS = env.int("CHECKOUT_POSTS_PER_ADDRESS", default=30)
CHECKOUT_POST_WINDOW_SECONDS = env.int("CHECKOUT_POST_WINDOW_SECONDS", default=600)
# Destinations of closed invoices stay watched this long: late money becomes credit.
WATCH_AFTER_CLOSE_DAYS = env.int("WATCH_AFTER_CLOSE_DAYS", default=30)
# A watcher without a successful scan for this long is reported unhealthy, and
# invoices in its currency are not expired while it is blind.
CHAIN_STALE_SECONDS = env.int("CHAIN_STALE_SECONDS", default=300)
PAYMENT_LABEL = env.str("PAYMENT_LABEL", default="GPU Rent Hub")  # shown by wallets
from billing.chains.spec import chain_beat_schedule, chain_specs, family_currencies  # noqa: E402 - plain declarations

# A chain family's own settings (its key material and its node's URL, as its ChainSpec names
# them) are read from the environment like those above; a family added later needs no line here.
for _spec in chain_specs():
    for _name in (*_spec.material_settings, _spec.rpc_url_setting):
        if _name not in globals():
            globals()[_name] = env.str(_name, default="")

# Each currency's default comes from its chain family (billing/chains/*/__init__.py):
# BTC 2, LTC 6, ETH/USDT/USDC 12, XMR 10; SOL is fixed at 1 (a transaction counts once its
# commitment is `finalized`).
CONFIRMATIONS = {
    c.code: env.int(f"CONFIRMATIONS_{c.code}", default=c.confirmations) if c.confirmations_setting else c.confirmations
    for c in family_currencies()
}
# 0 would count a transaction still in the mempool (one a double spend may replace) as paid.
if _unconfirmed := sorted(f"CONFIRMATIONS_{code}" for code, n in CONFIRMATIONS.items() if n < 1):
    raise ImproperlyConfigured(f"{', '.join(_unconfirmed)}: at least 1.")

# Exchange rates.
MANUAL_RATES_USD = env.str("MANUAL_RATES_USD", default="")  # e.g. "BTC=95000,ETH=3500"
RATE_PROVIDERS = env.list("RATE_PROVIDERS", default=["kraken", "coingecko"])
RATE_MAX_AGE_SECONDS = env.int("RATE_MAX_AGE_SECONDS", default=600)
RATE_REFRESH_SECONDS = env.int("RATE_REFRESH_SECONDS", default=60)
STABLECOIN_DEPEG_PCT = Decimal(env.str("STABLECOIN_DEPEG_PCT", default="2"))
KRAKEN_API_URL = env.str("KRAKEN_API_URL", default="https://api.kraken.com")
COINGECKO_API_URL = env.str("COINGECKO_API_URL", default="https://api.coingecko.com")
COINGECKO_API_KEY = env.str("COINGECKO_API_KEY", default="")
RATE_HTTP_TIMEOUT_SECONDS = env.float("RATE_HTTP_TIMEOUT_SECONDS", default=5.0)
RATE_HTTP_ATTEMPTS = env.int("RATE_HTTP_ATTEMPTS", default=3)
RATE_HTTP_BACKOFF_SECONDS = env.float("RATE_HTTP_BACKOFF_SECONDS", default=0.5)
# Two sources further apart than this (percent) are not averaged: no rate until they agree.
RATE_MAX_SPREAD_PCT = Decimal(env.str("RATE_MAX_SPREAD_PCT", default="5"))

# Chain watchers (billing/chains/watchers.py). A chain whose watch-only key and node
# RPC URL are both set is scanned every CHAIN_SCAN_SECONDS (new blocks, then the
# mempool), by one worker at a time. A run reads at most CHAIN_SCAN_MAX_BLOCKS blocks
# (catching up continues on the next run); the last CHAIN_REORG_WINDOW block hashes are
# kept to find fork points; after failures runs back off exponentially, up to
# CHAIN_BACKOFF_MAX_SECONDS between attempts.
CHAIN_SCAN_SECONDS = env.float("CHAIN_SCAN_SECONDS", default=5.0)
CHAIN_SCAN_MAX_BLOCKS = env.int("CHAIN_SCAN_MAX_BLOCKS", default=200)
CHAIN_REORG_WINDOW = env.int("CHAIN_REORG_WINDOW", default=100)
CHAIN_BACKOFF_MAX_SECONDS = env.int("CHAIN_BACKOFF_MAX_SECONDS", default=300)
# Push (`manage.py listen_chain <currency>`, docs/chains/push.md): the nodes' publishers;
# each announcement queues a scan, at most one per CHAIN_PUSH_DEBOUNCE_SECONDS.
BTC_ZMQ_URL = env.str("BTC_ZMQ_URL", default="")
LTC_ZMQ_URL = env.str("LTC_ZMQ_URL", default="")
# Or a node's P2P port (host:port; any build, with or without ZMQ; run the node with
# -whitelist=noban@<listener's address> so pool transactions are announced at once).
BTC_P2P_PEER = env.str("BTC_P2P_PEER", default="")
LTC_P2P_PEER = env.str("LTC_P2P_PEER", default="")
XMR_ZMQ_URL = env.str("XMR_ZMQ_URL", default="")
# wallet-rpc's own refresh period, set by the watcher (0: the wallet's 20 s); its --tx-notify fires then.
XMR_WALLET_REFRESH_SECONDS = env.int("XMR_WALLET_REFRESH_SECONDS", default=0)
ETH_WS_URL = env.str("ETH_WS_URL", default="")  # the node's websocket: eth_subscribe newHeads
CHAIN_PUSH_DEBOUNCE_SECONDS = env.float("CHAIN_PUSH_DEBOUNCE_SECONDS", default=0.5)
# One scan task per configured chain, from the families' declarations (billing/chains/spec.py).

CELERY_BEAT_SCHEDULE.update(chain_beat_schedule(values=globals(), seconds=CHAIN_SCAN_SECONDS))

# The local sandbox: set (with the LTC settings of a regtest node) by `make run` for
# its own processes; `manage.py sandbox_pay` works only then. Never in production.
SANDBOX = env.bool("SANDBOX", default=False)
if SANDBOX and not DEBUG:
    raise ImproperlyConfigured("SANDBOX is for local runs only: it needs DEBUG=1. Unset SANDBOX in production.")

CELERY_BEAT_SCHEDULE.update(
    {
        "billing.invoices_advance": {"task": "billing.invoices_advance", "schedule": 30.0},
        "billing.rates_refresh": {
            "task": "billing.rates_refresh",
            "schedule": float(RATE_REFRESH_SECONDS),
            "options": {"expires": float(RATE_REFRESH_SECONDS)},
        },
        "billing.rate_samples_prune": {"task": "billing.rate_samples_prune", "schedule": 86400.0},
        "rentals.orders_reconcile": {"task": "rentals.orders_reconcile", "schedule": 60.0},
        "rentals.renewals_issue": {"task": "rentals.renewals_issue", "schedule": 300.0},
        "rentals.suspend_due": {"task": "rentals.suspend_due", "schedule": 300.0},
        "rentals.terminate_due": {"task": "rentals.terminate_due", "schedule": 300.0},
        "rentals.provisioning_retry": {"task": "rentals.provisioning_retry", "schedule": 30.0},
        "rentals.idempotency_keys_prune": {"task": "rentals.idempotency_keys_prune", "schedule": 3600.0},
    }
)

# --- Checkout page ------------------------------------------------------------
# Every invoice has a public page at /pay/<token> (docs/checkout.md). The page asks
# the server for the invoice's status every CHECKOUT_POLL_SECONDS while it can still
# change. CHECKOUT_SUPPORT_URL, when set, is linked from the page where a customer
# may need help (an invalid invoice, a refused action).
CHECKOUT_POLL_SECONDS = env.int("CHECKOUT_POLL_SECONDS", default=5)
CHECKOUT_SUPPORT_URL = env.str("CHECKOUT_SUPPORT_URL", default="")
if CHECKOUT_POLL_SECONDS < 1:
    raise ImproperlyConfigured("CHECKOUT_POLL_SECONDS is a whole number of seconds, at least 1.")

# --- Customer webhooks --------------------------------------------------------
# WEBHOOK_ALLOW_PRIVATE_TARGETS lets webhooks go to http:// URLs and to
# loopback and private addresses: for local runs and tests only, so it is
# refused when DEBUG is off. Production sends to public https:// targets only.
WEBHOOK_ALLOW_PRIVATE_TARGETS = env.bool("WEBHOOK_ALLOW_PRIVATE_TARGETS", default=False)
if WEBHOOK_ALLOW_PRIVATE_TARGETS and not DEBUG:
    raise ImproperlyConfigured("WEBHOOK_ALLOW_PRIVATE_TARGETS is for local runs and tests: it needs DEBUG=1.")
# One delivery attempt, all in: connect, TLS, sending, the response's status line.
WEBHOOK_TIMEOUT_SECONDS = env.float("WEBHOOK_TIMEOUT_SECONDS", default=10.0)
# The most a webhook URL's name lookup may take (when it is registered, and at each
# attempt, as part of its WEBHOOK_TIMEOUT_SECONDS): past it, unresolvable_host.
WEBHOOK_RESOLVE_TIMEOUT_SECONDS = env.float("WEBHOOK_RESOLVE_TIMEOUT_SECONDS", default=3.0)
WEBHOOK_MAX_ENDPOINTS_PER_ACCOUNT = env.int("WEBHOOK_MAX_ENDPOINTS_PER_ACCOUNT", default=10)
# Deliveries an account asks for by hand (pings, redeliveries) in a window: each is up to
# six attempts of a worker, each up to WEBHOOK_TIMEOUT_SECONDS. More answer 429; 0: no limit.
WEBHOOK_MANUAL_PER_ACCOUNT = env.int("WEBHOOK_MANUAL_PER_ACCOUNT", default=30)
WEBHOOK_MANUAL_WINDOW_SECONDS = env.int("WEBHOOK_MANUAL_WINDOW_SECONDS", default=3600)


def _duration(name: str, default: str) -> timedelta:
    """A duration setting: seconds ("86400"), or a number with a unit s, m, h or d ("24h")."""
    text = env.str(name, default=default).strip().lower()
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    number, unit = (text[:-1], units[text[-1]]) if text[-1:] in units else (text, 1)
    try:
        seconds = float(number) * unit
    except ValueError:
        raise ImproperlyConfigured(f"{name} is a duration such as 86400, 90m, 24h or 2d; got {text!r}.") from None
    if not 0 <= seconds <= 30 * 86400:
        raise ImproperlyConfigured(f"{name} is between 0 and 30 days; got {text!r}.")
    return timedelta(seconds=seconds)


# After a signing secret is rotated, the old one keeps signing deliveries (beside
# the new one) this long, so receivers can switch without losing a delivery.
WEBHOOK_SECRET_ROTATION_OVERLAP = _duration("WEBHOOK_SECRET_ROTATION_OVERLAP", "24h")
# Retries (and first attempts whose task was lost) are made by this sweep.
CELERY_BEAT_SCHEDULE["webhooks.deliveries_sweep"] = {
    "task": "webhooks.deliveries_sweep",
    "schedule": 10.0,
    "options": {"expires": 10.0},
}

# --- Hardening ----------------------------------------------------------------
# With DEBUG off every process (web, worker, beat, manage.py) refuses to start with
# a weak or placeholder SECRET_KEY or ALLOWED_HOSTS='*' (core/checks.py, run when the
# apps load; `check --deploy` reports the same as errors).
# Error reports (the DEBUG 500 page, error mails) mask credentials inside URLs:
# passwords, keys in a path or a query, in settings, variables and messages (core/reporting.py).
DEFAULT_EXCEPTION_REPORTER_FILTER = "core.reporting.CredentialsMaskingFilter"
DEFAULT_EXCEPTION_REPORTER = "core.reporting.CredentialsMaskingReporter"
# A NUL character (%00) in a path or a query answers 400 before any view or admin
# filter hands it to the database (core/middleware.py).
MIDDLEWARE.insert(
    MIDDLEWARE.index("core.middleware.ApiJsonErrorsMiddleware") + 1, "core.middleware.NulCharacterRefusedMiddleware"
)
# The ports webhooks may be sent to on public addresses (docs/webhooks.md). Others are
# refused when a URL is registered and at every attempt; with
# WEBHOOK_ALLOW_PRIVATE_TARGETS (local runs) loopback and private targets take any port.
_webhook_ports = env.str("WEBHOOK_ALLOWED_PORTS", default="80,443")
try:
    WEBHOOK_ALLOWED_PORTS = frozenset(int(port) for port in _webhook_ports.split(",") if port.strip())
except ValueError:
    WEBHOOK_ALLOWED_PORTS = frozenset()
if not WEBHOOK_ALLOWED_PORTS or not all(0 < port < 65536 for port in WEBHOOK_ALLOWED_PORTS):
    raise ImproperlyConfigured(
        f"WEBHOOK_ALLOWED_PORTS is a list of port numbers (1-65535), e.g. 443,8443; got {_webhook_ports!r}."
    )

# --- Metrics ------------------------------------------------------------------
# GET /metrics: Prometheus's exposition (observability/, docs/operations.md#metrics).
# A scrape sends `Authorization: Bearer <METRICS_TOKEN>`; without a token the
# endpoint is off (404), except to a client on this machine with DEBUG (make run).
# Web processes count requests and orders in prometheus_client's multiprocess mode
# when PROMETHEUS_MULTIPROC_DIR is set in their environment (the web unit sets it).
METRICS_TOKEN = env.str("METRICS_TOKEN", default="")
if METRICS_TOKEN and len(METRICS_TOKEN) < 32:
    raise ImproperlyConfigured("METRICS_TOKEN is at least 32 characters (e.g. `openssl rand -hex 32`).")
# Prometheus on the same machine may scrape gunicorn over plain HTTP on loopback.
SECURE_REDIRECT_EXEMPT = [*SECURE_REDIRECT_EXEMPT, r"^metrics$"]
