"""A database that goes away under a request (a restart, a fail-over: the
multi-host trial's PostgreSQL phase answered 11 requests with 500) is a 503
with Retry-After in the API's error shape, not a 500: nothing was done, and the
client may send the request again."""

from __future__ import annotations

import pytest
from django.db import OperationalError
from django.test import Client

from rentals import selectors

pytestmark = pytest.mark.django_db


def _gone(*args, **kwargs):
    raise OperationalError("terminating connection due to administrator command")


def test_the_api_answers_503_with_retry_after(customer_api, monkeypatch):
    monkeypatch.setattr(selectors, "orders_for", _gone)
    resp = customer_api.get("/api/v1/orders")
    assert resp.status_code == 503
    assert resp["Retry-After"] == "5"
    assert resp.json()["error"]["code"] == "service_unavailable"
    assert resp.json()["error"]["details"] == {"retry_after_seconds": 5}


@pytest.mark.parametrize(("path", "content_type"), [("", "text/plain"), ("/status", "application/json")])
def test_the_checkout_page_and_its_status_answer_503(monkeypatch, path, content_type):
    from billing import selectors as billing_selectors

    monkeypatch.setattr(billing_selectors, "invoice_by_checkout_token", _gone)
    resp = Client(raise_request_exception=False).get(f"/pay/abcdefabcdefabcdefabcdef{path}")
    assert resp.status_code == 503 and resp["Retry-After"] == "5"
    assert resp["Content-Type"].startswith(content_type)


def test_other_errors_stay_500(customer_api, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(selectors, "orders_for", broken)
    customer_api.raise_request_exception = False
    resp = customer_api.get("/api/v1/orders")
    assert resp.status_code == 500
    assert resp.json()["error"]["code"] == "server_error"
