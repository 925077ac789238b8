"""The lifecycle speaks to the outside: customer webhooks for every event of
an order's life, and signed provisioning jobs to the operators' system."""

import json
from datetime import timedelta

import pytest
import time_machine

from accounts.services import ssh_key_add
from rentals import services
from rentals.models import ProvisioningJob, Rental
from rentals.services.provisioning import provisioning_jobs_due
from tests.rentals.helpers import T0, committed, new_key_line, pay, run_jobs_twice
from webhooks import services as webhooks

pytestmark = pytest.mark.django_db

ORDER = {
    "region": "DFW-1",
    "gpu": "l4",
    "gpu_count": 1,
    "term": "monthly",
    "terms": 1,
    "template": "ollama-ubuntu-24.04",
    "addons": [],
    "pay_currency": "LTC",
}


def place_order(customer, customer_api):
    key = ssh_key_add(account=customer, public_key=new_key_line(), name="k")
    with time_machine.travel(T0, tick=False), committed():
        resp = customer_api.post("/api/v1/orders", ORDER | {"ssh_keys": [key.pk]}, format="json")
    assert resp.status_code == 201, resp.json()
    return resp.json()


def test_customer_webhooks_follow_the_whole_life(
    chains, catalog, customer, customer_api, staff_api, receiver, allow_private
):
    created = webhooks.endpoint_create(
        account=customer,
        url=receiver.url,
        events=[
            "order.created",
            "invoice.processing",
            "invoice.settled",
            "invoice.expired",
            "rental.provisioning",
            "rental.active",
            "rental.renewal_due",
            "rental.suspended",
            "rental.terminated",
        ],
    )
    receiver.secret = created.secret
    order = place_order(customer, customer_api)
    with time_machine.travel(T0 + timedelta(minutes=5), tick=False):
        pay(order["invoice"]["number"], int(order["invoice"]["amount"]), confirmations=0)
        pay(order["invoice"]["number"], int(order["invoice"]["amount"]), confirmations=6)
    rental = Rental.objects.get(order_id=order["id"])
    with time_machine.travel(T0 + timedelta(minutes=6), tick=False), committed():
        staff_api.post(
            f"/api/v1/ops/rentals/{rental.pk}/ready",
            {"ipv4": "192.0.2.1", "ipv6_prefix": "2001:db8:1::/64"},
            format="json",
        )
    rental.refresh_from_db()
    end = rental.paid_until
    for moment in (end - timedelta(days=7), end + timedelta(days=3), end + timedelta(days=10)):
        with time_machine.travel(moment, tick=False):
            run_jobs_twice(moment)

    bodies = [json.loads(r.body) for r in receiver.posts]
    assert all(r.verified for r in receiver.posts)
    assert [b["type"] for b in bodies] == [
        "order.created",
        "invoice.processing",
        "invoice.settled",
        "rental.provisioning",
        "rental.active",
        "rental.renewal_due",
        "rental.suspended",
        "invoice.expired",
        "rental.terminated",
    ]
    assert bodies[0]["data"]["order"]["id"] == order["id"]
    assert bodies[2]["data"]["invoice"]["status"] == "settled"
    assert bodies[4]["data"]["rental"]["ipv4"] == "192.0.2.1"
    assert bodies[5]["data"]["invoice"]["amount_usd"] == "250.00"
    assert len({b["id"] for b in bodies}) == len(bodies)


def test_provisioning_jobs_are_signed_and_retried(chains, catalog, customer, customer_api, settings, receiver):
    settings.PROVISIONER = "webhook"
    settings.PROVISIONER_URL = receiver.url
    settings.PROVISIONER_SECRET = "provisioning-secret-for-the-test"
    receiver.secret = settings.PROVISIONER_SECRET
    receiver.standard = False  # jobs carry GRH-Signature only
    receiver.fail_times = 1
    order = place_order(customer, customer_api)
    with time_machine.travel(T0 + timedelta(minutes=5), tick=False):
        pay(order["invoice"]["number"], int(order["invoice"]["amount"]))
    job = ProvisioningJob.objects.get(action="provision")
    assert (job.attempts, job.delivered_at, job.last_error) == (1, None, "HTTP 500")
    assert provisioning_jobs_due(now=T0 + timedelta(minutes=5, seconds=5)) == []
    due = provisioning_jobs_due(now=job.created_at + timedelta(seconds=10))
    assert due == [str(job.pk)]
    assert services.provisioning_job_deliver(job_id=due[0]) is True
    post = receiver.posts[-1]
    assert post.verified is True and post.headers["GRH-Job"] == str(job.pk)
    payload = json.loads(post.body)
    rental = Rental.objects.get(order_id=order["id"])
    assert payload["action"] == "provision" and payload["rental"]["id"] == rental.pk
    assert payload["rental"]["ssh_keys"] == [k["public_key"] for k in rental.ssh_keys]
    assert payload["rental"]["slots"] and payload["ready_url"].endswith(f"/api/v1/ops/rentals/{rental.pk}/ready")
    assert provisioning_jobs_due(now=T0 + timedelta(days=1)) == []
