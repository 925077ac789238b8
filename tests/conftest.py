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
    """Load the published catalog once for the whole run; tests roll back around it."""
    from catalog.seed import catalog_seed

    with django_db_blocker.unblock():
        catalog_seed()


@pytest.fixture
def catalog(db):
    """The published catalog (seeded again when a transactional test flushed it)."""
    from catalog.models import GpuModel
    from catalog.seed import catalog_seed

    if not GpuModel.objects.exists():
        catalog_seed()
