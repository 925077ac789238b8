"""Error reports mask credentials inside URLs (core/reporting.py): the DEBUG
500 page of `make run` (rendered here for real) and the reports of error mails
show where connections go, never the passwords and keys in the URLs."""

from __future__ import annotations

import sys

import pytest
from django.test import Client, override_settings

from core.reporting import CredentialsMaskingFilter, CredentialsMaskingReporter

STARS = CredentialsMaskingFilter.cleansed_substitute

# URL-like settings as an operator writes them: each carries one secret.
URL_SETTINGS = {
    "LTC_RPC_URL": "http://ltcrpc:rpc-pass-3141@127.0.0.1:19443",
    "CELERY_BROKER_URL": "redis://:broker-pass-2718@redis.internal:6379/0",
    "ETH_RPC_URL": "https://eth-mainnet.g.alchemy.com/v2/Zx9kQ2mLp4Rt7Vw1Yb3Nc5Hd8Fg0Js6A",
    "SOL_RPC_URL": "https://mainnet.helius-rpc.com/?api-key=7c1e5b2a-4d3f-4e6a-9b8c-0d1e2f3a4b5c&commitment=finalized",
    "RATE_PROVIDER_URLS": {"primary": ["https://rates.example/prices?access_token=tok-1618-golden"]},  # nested
}
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
        "LOCATION": "redis://:cache-pass-1414@cache.internal:6379/1",
    }
}
SECRETS = (
    "rpc-pass-3141",
    "broker-pass-2718",
    "Zx9kQ2mLp4Rt7Vw1Yb3Nc5Hd8Fg0Js6A",
    "7c1e5b2a-4d3f-4e6a-9b8c-0d1e2f3a4b5c",
    "tok-1618-golden",
    "cache-pass-1414",
    "meta-pass-1732",
)
# What stays readable: where each connection goes.
SHOWN = (
    f"http://ltcrpc:{STARS}@127.0.0.1:19443",
    f"redis://:{STARS}@redis.internal:6379/0",
    f"https://eth-mainnet.g.alchemy.com/v2/{STARS}",
    f"https://mainnet.helius-rpc.com/?api-key={STARS}&amp;commitment=finalized",
    f"redis://:{STARS}@cache.internal:6379/1",
    f"http://ltcrpc:{STARS}@127.0.0.1:19443/wallet/w1",  # a frame's variable
)


@pytest.mark.django_db
def test_the_debug_500_page_masks_credentials_in_urls():
    client = Client(raise_request_exception=False)
    with override_settings(DEBUG=True, ROOT_URLCONF="tests.core.error_page_urls", CACHES=CACHES, **URL_SETTINGS):
        # request.META holds the process environment under runserver: a URL there is masked too.
        response = client.get("/fails", DATABASE_URL="postgres://grh:meta-pass-1732@db.internal:5432/grh")
    assert response.status_code == 500
    page = response.content.decode()
    assert "RuntimeError" in page and "Traceback" in page and "Settings" in page  # Django's technical page
    for secret in SECRETS:
        assert secret not in page, secret
    for shown in SHOWN:
        assert shown in page, shown
    assert f"postgres://grh:{STARS}@db.internal:5432/grh" in page
    # The exception's message and its cause, which an HTTP client writes the URL into.
    assert f"the node at redis://:{STARS}@redis.internal:6379/0 did not answer" in page
    assert f"for url &#x27;https://mainnet.helius-rpc.com/?api-key={STARS}&amp;commitment=finalized&#x27;" in page
    assert "0x" not in STARS and page.count(STARS) >= len(SECRETS)


def test_error_mail_reports_mask_the_same():
    """AdminEmailHandler and other reports build on ExceptionReporter with the same filter."""
    from django.conf import settings

    with override_settings(CACHES=CACHES, **URL_SETTINGS):
        try:
            node_url = settings.LTC_RPC_URL  # noqa: F841
            raise RuntimeError(f"no answer from {settings.ETH_RPC_URL}")
        except RuntimeError:
            text = CredentialsMaskingReporter(None, *sys.exc_info()).get_traceback_text()
    for secret in ("rpc-pass-3141", "broker-pass-2718", "cache-pass-1414", "Zx9kQ2mLp4Rt7Vw1Yb3Nc5Hd8Fg0Js6A"):
        assert secret not in text
    assert f"redis://:{STARS}@redis.internal:6379/0" in text


@pytest.mark.parametrize(
    ("value", "masked"),
    [
        ("redis://:pw@h:6379/1", f"redis://:{STARS}@h:6379/1"),
        ("http://user:pa/ss@h:80/x", f"http://user:{STARS}@h:80/x"),  # an unescaped slash in the password
        ("https://tok3nAlone@h/", f"https://{STARS}@h/"),  # a user name that is the credential
        ("https://h/v3/0123456789abcdef0123456789abcdef", f"https://h/v3/{STARS}"),
        (
            "https://h/?apikey=a&signature=b&sig=c&page=2",
            f"https://h/?apikey={STARS}&signature={STARS}&sig={STARS}&page=2",
        ),
        ("went to https://u:p@h and redis://:q@r", f"went to https://u:{STARS}@h and redis://:{STARS}@r"),
        ("https://api.kraken.com/0/public/Ticker?pair=XBTUSD", "https://api.kraken.com/0/public/Ticker?pair=XBTUSD"),
        ("sqlite:////var/lib/gpurenthub/db.sqlite3", "sqlite:////var/lib/gpurenthub/db.sqlite3"),
        ("no url here: user:pass", "no url here: user:pass"),
        (
            ("a://u:p@h", ["b://:q@h"], {"k": "c://x:y@h"}),
            (f"a://u:{STARS}@h", [f"b://:{STARS}@h"], {"k": f"c://x:{STARS}@h"}),
        ),
        (42, 42),
        (ValueError("to https://u:p@h"), f"ValueError('to https://u:{STARS}@h')"),
    ],
)
def test_masking_rules(value, masked):
    reporter_filter = CredentialsMaskingFilter()
    shown = reporter_filter.mask(value)
    assert (repr(shown) if isinstance(value, Exception) else shown) == masked
    again = reporter_filter.mask(shown)  # masking twice changes nothing
    assert (repr(again) if isinstance(value, Exception) else again) == masked


def test_the_filter_is_the_default():
    from django.conf import settings
    from django.views.debug import get_default_exception_reporter_filter

    assert settings.DEFAULT_EXCEPTION_REPORTER_FILTER == "core.reporting.CredentialsMaskingFilter"
    assert settings.DEFAULT_EXCEPTION_REPORTER == "core.reporting.CredentialsMaskingReporter"
    assert isinstance(get_default_exception_reporter_filter(), CredentialsMaskingFilter)
