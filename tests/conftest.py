import pytest
from django.core.cache import cache
from rest_framework.test import APIClient


@pytest.fixture(autouse=True)
def _clear_cache():
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def api() -> APIClient:
    return APIClient()


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """Load the published catalog (and the sizing architectures) once for the
    whole run; tests roll back around it."""
    from django.core.management import call_command

    with django_db_blocker.unblock():
        call_command("seed_catalog", verbosity=0)


@pytest.fixture
def catalog(db):
    """The published catalog (seeded again when a transactional test flushed it)."""
    from django.core.management import call_command

    from catalog.models import GpuModel

    if not GpuModel.objects.exists():
        call_command("seed_catalog", verbosity=0)


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
