"""A NUL character (%00) in a path or a query answers 400, never 500
(core.middleware.NulCharacterRefusedMiddleware): PostgreSQL stores no NUL in
text, so a checkout token or an admin filter that reached the database with
one failed. Under /api/ the answer has the error shape; elsewhere plain text."""

from __future__ import annotations

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db

MESSAGE = "The address contains a NUL character (%00)."


@pytest.fixture
def client() -> Client:
    return Client(raise_request_exception=False)


@pytest.fixture
def staff(client, django_user_model) -> Client:
    client.force_login(django_user_model.objects.create_superuser("boss", "violet-harbour-lantern-93"))
    return client


def assert_plain_400(response) -> None:
    assert response.status_code == 400
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    assert response.content.decode() == MESSAGE


def assert_api_400(response) -> None:
    assert response.status_code == 400
    assert response.json() == {
        "error": {"code": "bad_request", "message": MESSAGE, "details": {"reason": "nul_character"}}
    }


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/pay/%00"),
        ("get", "/pay/%00/status"),
        ("get", "/pay/%00/qr.svg"),
        ("post", "/pay/%00/currency"),
        ("post", "/pay/%00/requote"),
        ("get", "/pay/abc%00def"),
        ("get", "/pay/%00?lang=es"),
        ("get", "/pay/unknown-token?x=%00"),
        ("get", "/pay/unknown-token/status?%00=1"),  # a NUL in a parameter's name
        ("get", "/healthz?probe=%00"),
    ],
)
def test_checkout_pages_refuse_nul(client, method, path):
    assert_plain_400(getattr(client, method)(path, HTTP_ACCEPT="text/html"))


def test_without_a_nul_the_same_pages_answer_as_before(client):
    assert client.get("/pay/unknown-token").status_code == 404
    assert client.get("/pay/unknown-token/status").status_code == 404
    assert client.get("/pay/unknown-token/qr.svg").status_code == 404


@pytest.mark.parametrize(
    "path",
    [
        "/admin/billing/invoice/?status=%00",
        "/admin/billing/invoice/?q=%00",
        "/admin/billing/payment/?currency=%00",
        "/admin/rentals/order/?status__exact=%00",
        "/admin/accounts/account/?q=a%00b",
        "/admin/billing/invoice/%00/change/",
        "/admin/webhooks/webhookdelivery/?status=%00",
    ],
)
def test_admin_lists_and_pages_refuse_nul(staff, path):
    assert_plain_400(staff.get(path))


def test_admin_lists_still_filter(staff):
    assert staff.get("/admin/billing/invoice/?status=new").status_code == 200
    assert staff.get("/admin/billing/invoice/?q=GRH").status_code == 200


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/api/v1/catalog/gpus?vendor=%00"),
        ("get", "/api/v1/catalog/stock?region=%00"),
        ("get", "/api/v1/invoices/%00"),
        ("get", "/api/v1/orders/1%00"),
        ("post", "/api/v1/auth/token?next=%00"),
        ("get", "/api/v1/%00"),
    ],
)
def test_the_api_refuses_nul_in_its_error_shape(client, method, path):
    assert_api_400(getattr(client, method)(path))


def test_the_api_still_answers_without_a_nul(client):
    assert client.get("/api/v1/catalog/regions").status_code == 200
