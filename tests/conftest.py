import os

import pytest
from django.core.cache import cache
from rest_framework.test import APIClient

# A Celery worker started inside a test (start_worker, or app.loader.import_default_modules() as a
# worker's start does) runs Django's system checks first unless told to skip them (celery's
# --skip-checks, this variable). From Django 6.1 on (django/core/checks/registry.py,
# CheckRegistry.run_checks: no `databases` means every alias) those checks probe the test-only SQLite
# alias too (config/settings_test.py), whose connection pytest-django forbids in a test that did not
# ask for it. The checks have their own runs: `make check` and
# tests/billing/test_chain_config.py's `manage.py check`.
os.environ.setdefault("CELERY_SKIP_CHECKS", "true")


@pytest.fixture(scope="session", autouse=True)
def _redis_databases_exist():
    """Stop the run at once, saying why, when this worker's Redis database does
    not exist (each xdist worker uses its own: see config/settings_test.py)."""
    from django.conf import settings
    from redis.exceptions import ResponseError

    try:
        cache.clear()
    except ResponseError as exc:
        if "out of range" not in str(exc):
            raise
        pytest.exit(
            f"Redis has no database for {settings.CACHES['default']['LOCATION']} "
            f"(xdist worker {os.environ.get('PYTEST_XDIST_WORKER', '-')} uses the configured database + 2 x its "
            "number): run fewer workers (TEST_WORKERS) or point CACHE_URL and CELERY_BROKER_URL lower.",
            returncode=3,
        )


@pytest.fixture(scope="session", autouse=True)
def _test_payable():
    """Invoices the tests issue for nothing the system sells pay for ("test", n)."""
    from billing.payable import NOTHING, payable_register

    payable_register(kind="test", payable=NOTHING)


@pytest.fixture(autouse=True)
def _clear_cache():
    from core.views import SchemaView

    cache.clear()
    SchemaView.kept.clear()  # kept per catalog version, which a test's rolled-back catalog may repeat
    yield
    cache.clear()


@pytest.fixture
def api() -> APIClient:
    return APIClient()


@pytest.fixture(scope="session")
def django_db_setup(
    request,
    django_test_environment,
    django_db_blocker,
    django_db_modify_db_settings,
    django_db_keepdb,
    django_db_createdb,
):
    """The test database, with the published catalog (and the sizing
    architectures) loaded once for the whole run; tests roll back around it. A
    copy of the seeded tables is kept beside them (schema test_seed_snapshot), so
    that after a transactional test has flushed the database they come back in
    one statement per table instead of a whole seed (845 hosts, 6,300 slots).

    Under pytest-xdist the workers do not each migrate and seed: the first builds
    one template database for the run and each worker's database is a copy of it
    (tests/database_template.py). In one process, or with --reuse-db, the
    database is made the usual way. Replaces pytest-django's fixture of this name."""
    from django.conf import settings
    from django.db import connection
    from django.test.utils import setup_databases, teardown_databases

    from tests.database_template import worker_database_create

    verbosity = request.config.option.verbose
    keepdb = django_db_keepdb and not django_db_createdb
    workerinput = getattr(request.config, "workerinput", None)
    with django_db_blocker.unblock():
        if workerinput is None or keepdb or len(settings.DATABASES) != 1:
            db_cfg = setup_databases(verbosity=verbosity, interactive=False, keepdb=keepdb, serialized_aliases=set())
            _catalog_seed()

            def teardown():
                teardown_databases(db_cfg, verbosity=verbosity)

        else:
            base_name = connection.settings_dict["NAME"]
            worker_name = connection.creation._get_test_db_name()

            def build(name: str) -> None:
                connection.settings_dict["TEST"]["NAME"] = name
                try:
                    connection.creation.create_test_db(verbosity=verbosity, autoclobber=True, serialize=False)
                    _catalog_seed()
                finally:
                    connection.close()
                    connection.settings_dict["TEST"]["NAME"] = worker_name
                    settings.DATABASES[connection.alias]["NAME"] = base_name
                    connection.settings_dict["NAME"] = base_name

            worker_database_create(
                base_name=base_name, worker_name=worker_name, run_id=workerinput["testrunuid"], build=build
            )

            def teardown():
                connection.creation.destroy_test_db(base_name, verbosity=verbosity)

    yield

    if not django_db_keepdb:
        with django_db_blocker.unblock():
            teardown()


def _catalog_seed() -> None:
    from django.core.management import call_command

    from tests.seeding import seed_snapshot_take

    call_command("seed_catalog", verbosity=0)
    seed_snapshot_take()


def pytest_sessionfinish(session):
    """The controller of an xdist run drops the run's template database once
    every worker has finished (tests/database_template.py)."""
    if hasattr(session.config, "workerinput") or not getattr(session.config.option, "numprocesses", None):
        return
    from django.conf import settings
    from pytest_django.plugin import blocking_manager_key

    from tests.database_template import template_drop

    if len(settings.DATABASES) == 1 and settings.DATABASES["default"]["ENGINE"].endswith("postgresql"):
        with session.config.stash[blocking_manager_key].unblock():
            template_drop(base_name=settings.DATABASES["default"]["NAME"])


@pytest.fixture
def catalog(db):
    """The published catalog (put back when a transactional test flushed it)."""
    from catalog.models import GpuModel
    from tests.seeding import seed_restore

    if not GpuModel.objects.exists():
        seed_restore()


@pytest.fixture
def chains(settings):
    """Every currency enabled from test-generated watch-only keys, at fixed rates."""
    from tests.keys import TEST_RATES, watch_only

    for name, value in watch_only().settings().items():
        setattr(settings, name, value)
    settings.MANUAL_RATES_USD = TEST_RATES
    return watch_only()


@pytest.fixture
def customer(db, django_user_model):
    return django_user_model.objects.create_user("alice", "correct horse battery staple")


@pytest.fixture
def other_customer(db, django_user_model):
    return django_user_model.objects.create_user("mallory", "another long passphrase")


@pytest.fixture
def customer_api(customer):
    client = APIClient()
    client.force_authenticate(customer)
    return client


# --- A real browser against the live server (tests/browser.py) ----------------


@pytest.fixture(scope="session")
def browser_session(django_db_setup, live_server):
    """One headless Chromium for the whole run (started on first use). It quits
    before the live server stops and the test database goes, so no request
    thread keeps a database connection open past the run."""
    from tests.browser import browser_launch

    browser = browser_launch()
    yield browser
    browser.quit()
    # The browser's keep-alive connections are closed now: let the server's
    # request threads finish and close their database connections.
    import threading

    for thread in threading.enumerate():
        if getattr(getattr(thread, "_target", None), "__name__", "") == "process_request_thread":
            thread.join(timeout=10)


@pytest.fixture
def browser(browser_session, live_server):
    """The session's browser, reset (no cookies, desktop width, English) and
    bound to the live server: `browser.open("/pay/...")`."""
    browser_session.reset(base_url=live_server.url)
    yield browser_session
    browser_session.reset()
