"""A URLconf with one view that fails, for the error-report tests
(tests/core/test_error_reports.py): its local variables hold URLs with
credentials, as a watcher's or a rate provider's frames would."""

from django.conf import settings
from django.urls import path


def fails(request):
    # Read from the settings, as a watcher's or a rate provider's code does (the
    # page also shows the source lines around each frame: no secret is written here).
    node_url = settings.LTC_RPC_URL + "/wallet/w1"  # noqa: F841 - shown among the frame's variables
    provider = {"endpoints": [settings.ETH_RPC_URL]}  # noqa: F841
    try:
        raise ConnectionError(f"Client error '401 Unauthorized' for url '{settings.SOL_RPC_URL}'")
    except ConnectionError as exc:
        raise RuntimeError(f"the node at {settings.CELERY_BROKER_URL} did not answer") from exc


urlpatterns = [path("fails", fails)]
