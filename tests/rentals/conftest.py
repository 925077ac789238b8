"""Fixtures of the rentals tests: staff, an order placed at T0, the rental it
becomes; and the webhook receiver fixtures (tests.webhooks.receiver) for the
tests of what the lifecycle sends out."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine

from accounts.services import ssh_key_add
from rentals import services
from rentals.models import Rental
from tests.rentals.helpers import T0, committed, new_key_line, pay
from tests.webhooks.receiver import allow_private, dns, receiver  # noqa: F401


@pytest.fixture
def staff(django_user_model):
    return django_user_model.objects.create_superuser("opsperson", "a-long-staff-password")


@pytest.fixture
def staff_api(staff):
    from rest_framework.test import APIClient

    from accounts.services import token_create

    client = APIClient()
    # The /ops/ endpoints want an `ops` token besides the permission (a superuser holds every one).
    client.force_authenticate(staff, token=token_create(account=staff, name="ops", scope="ops").token)
    return client


@pytest.fixture
def ordered(chains, customer, customer_api, catalog):
    """A paid-for-nothing-yet order: 1x L4 in DFW-1, monthly, paid in LTC."""
    key = ssh_key_add(account=customer, public_key=new_key_line(), name="k")
    with time_machine.travel(T0, tick=False):
        resp = customer_api.post(
            "/api/v1/orders",
            {
                "region": "DFW-1",
                "gpu": "l4",
                "gpu_count": 1,
                "term": "monthly",
                "terms": 1,
                "template": "ollama-ubuntu-24.04",
                "addons": [],
                "ssh_keys": [key.pk],
                "pay_currency": "LTC",
            },
            format="json",
        )
    assert resp.status_code == 201, resp.json()
    return resp.json()


@pytest.fixture
def active_rental(ordered, staff):
    with time_machine.travel(T0 + timedelta(minutes=5), tick=False):
        pay(ordered["invoice"]["number"], 277_777_778)
    rental = Rental.objects.get(order_id=ordered["id"])
    with committed():
        services.rental_activate(
            rental_id=rental.pk,
            ipv4="203.0.113.11",
            ipv6_prefix="2001:db8:11::/64",
            actor=staff,
            now=T0 + timedelta(minutes=10),
        )
    rental.refresh_from_db()
    return rental
