"""The operators' endpoints (/api/v1/ops/): a named Django permission each, an
`ops` token (which only a staff account proving its second factor gets), and
the attack that found them open: a staff account with no permission and no
two-factor authentication got a token with its password alone and handed
another customer's rental over with addresses of its choosing."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.contrib.auth.models import Group, Permission
from rest_framework.test import APIClient

from accounts.models import Account, ApiToken
from accounts.services import token_create
from rentals.models import Rental, UsageReport
from tests.accounts.helpers import code_for, enrolled
from tests.rentals.helpers import T0, committed, pay

pytestmark = pytest.mark.django_db

PASSWORD = "a-long-staff-password-7"
ADDRESSES = {"ipv4": "198.51.100.66", "ipv6_prefix": "2001:db8:66::/64"}
NOVEMBER = {"month": "2026-11", "egress_tb": "21"}


@pytest.fixture
def provisioning(ordered):
    """A paid order: its rental waits to be handed over."""
    with time_machine.travel(T0 + timedelta(minutes=5), tick=False):
        pay(ordered["invoice"]["number"], 277_777_778)
    rental = Rental.objects.get(order_id=ordered["id"])
    assert rental.status == "provisioning"
    return rental


@pytest.fixture
def clerk(db):
    """A staff account: no permission, no authenticator."""
    return Account.objects.create_user("clerk", PASSWORD, is_staff=True)


def grant(account: Account, *codenames: str) -> None:
    for codename in codenames:
        account.user_permissions.add(Permission.objects.get(content_type__app_label="accounts", codename=codename))


def bearer(raw: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def login(username: str, **body) -> dict:
    resp = APIClient().post("/api/v1/auth/token", {"username": username, "password": PASSWORD, **body}, format="json")
    return {"status": resp.status_code, **resp.json()}


def ready(client: APIClient, rental: Rental):
    with committed():
        return client.post(f"/api/v1/ops/rentals/{rental.pk}/ready", ADDRESSES, format="json")


def usage(client: APIClient, rental: Rental):
    with time_machine.travel(T0 + timedelta(days=1), tick=False), committed():
        return client.post(f"/api/v1/ops/rentals/{rental.pk}/usage", NOVEMBER, format="json")


def assert_not_handed_over(rental: Rental) -> None:
    rental.refresh_from_db()
    assert rental.status == "provisioning"
    assert not rental.ipv4 and not rental.ipv6_prefix


def test_the_permissions_exist_with_their_names():
    names = dict(Permission.objects.filter(content_type__app_label="accounts").values_list("codename", "name"))
    assert names["provision_rental"] == "Can report a rental handed over (ops API)"
    assert names["record_usage"] == "Can report a rental's monthly egress (ops API)"


def test_the_attack_a_staff_password_alone_hands_nothing_over(provisioning, clerk):
    # The password alone gets no token: two-factor authentication is not set up.
    refused = login("clerk")
    assert refused["status"] == 403 and refused["error"]["code"] == "otp_not_enrolled"
    assert login("clerk", scope="ops")["error"]["code"] == "otp_not_enrolled"
    assert not ApiToken.objects.filter(account=clerk).exists()

    # A token it held from before (scope full, as every old token became) opens nothing either.
    old = bearer(token_create(account=clerk, name="old").raw)
    for resp in (ready(old, provisioning), usage(old, provisioning)):
        assert resp.status_code == 403
        error = resp.json()["error"]
        assert error["code"] == "permission_required" and set(error) == {"code", "message", "details"}
    assert ready(old, provisioning).json()["error"]["details"] == {"permissions": ["accounts.provision_rental"]}
    assert usage(old, provisioning).json()["error"]["details"] == {"permissions": ["accounts.record_usage"]}
    assert_not_handed_over(provisioning)
    assert not UsageReport.objects.exists()


def test_with_the_permission_2fa_and_an_ops_token_it_can(provisioning, clerk):
    grant(clerk, "provision_rental")
    # The permission without an ops token is not enough.
    full = bearer(token_create(account=clerk, name="full").raw)
    resp = ready(full, provisioning)
    assert resp.status_code == 403
    assert resp.json()["error"] == {
        "code": "insufficient_scope",
        "message": resp.json()["error"]["message"],
        "details": {"token_scope": "full", "required_scope": "ops"},
    }
    assert_not_handed_over(provisioning)

    device = enrolled(clerk)
    with time_machine.travel(T0 + timedelta(minutes=20), tick=False):
        without_code = login("clerk", scope="ops")
        assert without_code["status"] == 401 and without_code["error"]["code"] == "otp_required"
        issued = login("clerk", scope="ops", otp=code_for(device))
        assert issued["status"] == 201 and issued["scope"] == "ops"
        done = ready(bearer(issued["token"]), provisioning)
    assert done.status_code == 200, done.json()
    provisioning.refresh_from_db()
    assert provisioning.status == "active"
    assert (provisioning.ipv4, provisioning.ipv6_prefix) == (ADDRESSES["ipv4"], ADDRESSES["ipv6_prefix"])

    # One permission is not the other: usage is still refused, and named.
    refused = usage(bearer(issued["token"]), provisioning)
    assert refused.status_code == 403
    assert refused.json()["error"]["details"] == {"permissions": ["accounts.record_usage"]}
    grant(clerk, "record_usage")
    assert usage(bearer(issued["token"]), provisioning).status_code == 200
    assert UsageReport.objects.get(rental=provisioning).reported_by == clerk


def test_a_permission_through_a_group_counts(provisioning, clerk):
    ops = Group.objects.create(name="Operations")
    ops.permissions.add(Permission.objects.get(content_type__app_label="accounts", codename="provision_rental"))
    clerk.groups.add(ops)
    token = bearer(token_create(account=clerk, name="ops", scope="ops").raw)
    assert ready(token, provisioning).status_code == 200


def test_a_read_token_of_a_permitted_staff_member_cannot(provisioning, clerk):
    grant(clerk, "provision_rental")
    reader = bearer(token_create(account=clerk, name="r", scope="read").raw)
    resp = ready(reader, provisioning)
    assert resp.status_code == 403 and resp.json()["error"]["code"] == "insufficient_scope"
    assert_not_handed_over(provisioning)


def test_a_superuser_holds_every_permission_but_still_needs_the_ops_token(provisioning, django_user_model):
    boss = django_user_model.objects.create_superuser("boss", PASSWORD)
    assert ready(bearer(token_create(account=boss, name="full").raw), provisioning).json()["error"]["code"] == (
        "insufficient_scope"
    )
    device = enrolled(boss)
    with time_machine.travel(T0 + timedelta(minutes=20), tick=False):
        issued = login("boss", scope="ops", otp=code_for(device))
        assert issued["status"] == 201
        assert ready(bearer(issued["token"]), provisioning).status_code == 200
    assert usage(bearer(issued["token"]), provisioning).status_code == 200


def test_customers_get_no_ops_token_and_no_ops_endpoint(provisioning, customer):
    customer.set_password(PASSWORD)
    customer.save()
    refused = login(customer.username, scope="ops")
    assert refused["status"] == 403 and refused["error"]["code"] == "scope_not_allowed"
    token = bearer(login(customer.username)["token"])
    resp = ready(token, provisioning)
    assert resp.status_code == 403 and resp.json()["error"]["code"] == "permission_denied"
    # Even a permission granted by mistake opens nothing to a non-staff account.
    grant(customer, "provision_rental")
    assert ready(token, provisioning).json()["error"]["code"] == "permission_denied"
    assert_not_handed_over(provisioning)


def test_a_staff_member_made_customer_again_loses_the_endpoints(provisioning, clerk):
    grant(clerk, "provision_rental")
    token = bearer(token_create(account=clerk, name="ops", scope="ops").raw)
    Account.objects.filter(pk=clerk.pk).update(is_staff=False)
    assert ready(token, provisioning).json()["error"]["code"] == "permission_denied"
    assert_not_handed_over(provisioning)


def test_without_a_token_the_answer_is_401(provisioning):
    resp = APIClient().post(f"/api/v1/ops/rentals/{provisioning.pk}/ready", ADDRESSES, format="json")
    assert resp.status_code == 401 and resp.json()["error"]["code"] == "not_authenticated"
