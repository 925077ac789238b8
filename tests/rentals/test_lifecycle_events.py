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


@pytest.fixture
def webhook_provisioner(settings, receiver):
    settings.PROVISIONER = "webhook"
    settings.PROVISIONER_URL = receiver.url
    settings.PROVISIONER_SECRET = "provisioning-secret-for-the-test"
    receiver.secret = settings.PROVISIONER_SECRET
    receiver.standard = False
    return receiver


def test_a_deprovision_job_lists_the_slots_the_rental_held(active_rental, webhook_provisioner):
    """The job is made before the slots go back to stock: it names the cards to wipe."""
    provision = ProvisioningJob.objects.get(rental=active_rental, action="provision")
    assert provision.payload["rental"]["slots"]
    with committed():
        services.rental_terminate(rental_id=active_rental.pk, reason="ended by staff", now=T0 + timedelta(days=1))
    job = ProvisioningJob.objects.get(rental=active_rental, action="deprovision")
    assert job.payload["rental"]["slots"] == provision.payload["rental"]["slots"]
    assert services.provisioning_job_deliver(job_id=str(job.pk)) is True
    assert job.payload["created_at"] == (T0 + timedelta(days=1)).isoformat().replace("+00:00", "Z")
    sent = json.loads(webhook_provisioner.posts[-1].body)
    assert sent["action"] == "deprovision" and sent["rental"]["slots"] == provision.payload["rental"]["slots"]


def test_a_power_off_not_yet_sent_is_never_sent_after_the_power_on(active_rental, webhook_provisioner):
    """Suspended while the operators' endpoint was down, then resumed (a renewal
    paid): the power-off still waiting would switch the paid server off for good
    if it went out after the power-on. It is superseded and never sent."""
    webhook_provisioner.fail_times = 10
    later = T0 + timedelta(days=40)
    with committed():
        services.rental_suspend(rental_id=active_rental.pk, reason="unpaid", now=later)
    off = ProvisioningJob.objects.get(rental=active_rental, action="power_off")
    assert services.provisioning_job_deliver(job_id=str(off.pk)) is False  # the endpoint is down
    webhook_provisioner.fail_times = 0
    with committed():
        services.rental_extend(
            rental_id=active_rental.pk, days=30, actor=active_rental.account, reason="paid", now=later
        )
    on = ProvisioningJob.objects.get(rental=active_rental, action="power_on")
    assert services.provisioning_job_deliver(job_id=str(on.pk)) is True
    on.refresh_from_db()
    off.refresh_from_db()
    assert off.superseded_at is not None and off.delivered_at is None
    assert on.delivered_at is not None
    assert provisioning_jobs_due(now=later + timedelta(days=1)) == []
    assert services.provisioning_job_deliver(job_id=str(off.pk)) is True  # a retry queued before: nothing sent
    sent = [json.loads(p.body)["action"] for p in webhook_provisioner.posts]
    # Its attempts that failed while the endpoint was down, and nothing after the power-on.
    assert sent[-1] == "power_on" and sent.count("power_off") == off.attempts >= 1


def test_a_rentals_jobs_go_out_in_the_order_they_were_made(active_rental, webhook_provisioner):
    """A later job waits while an earlier one of the same rental is undelivered."""
    from rentals.services.provisioning import provisioning_job_create

    webhook_provisioner.fail_times = 10
    with committed():
        first = provisioning_job_create(rental=active_rental, action="provision", now=T0 + timedelta(days=2))
    with committed():
        second = provisioning_job_create(rental=active_rental, action="power_off", now=T0 + timedelta(days=2, hours=1))
    webhook_provisioner.fail_times = 0
    assert services.provisioning_job_deliver(job_id=str(second.pk)) is False
    second.refresh_from_db()
    assert second.delivered_at is None and second.last_error == "waiting for an earlier job of this rental"
    due = provisioning_jobs_due(now=T0 + timedelta(days=3))
    assert due.index(str(first.pk)) < due.index(str(second.pk))
    assert services.provisioning_job_deliver(job_id=str(first.pk)) is True
    assert services.provisioning_job_deliver(job_id=str(second.pk)) is True
