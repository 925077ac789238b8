"""The webhooks API: registering endpoints (the secret shown once), changing,
rotating, deleting them, the delivery log, redelivery and ping; 404 for every
other account; SSRF refusals when a URL is registered; the schema."""

from __future__ import annotations

import ipaddress
import socket
import threading

import pytest
from drf_spectacular.generators import SchemaGenerator
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from webhooks import services as webhooks
from webhooks.models import WEBHOOK_EVENTS, DeliveryStatus, WebhookDelivery, WebhookEndpoint

pytestmark = pytest.mark.django_db

PUBLIC_URL = "https://93.184.215.14/hooks"  # a literal public address: nothing is contacted on registration


def create(client, url=PUBLIC_URL, events=("invoice.settled",), **extra):
    return client.post("/api/v1/webhooks", {"url": url, "events": list(events), **extra}, format="json")


@pytest.fixture
def endpoint(customer_api) -> dict:
    resp = create(customer_api, events=["invoice.settled", "rental.active"], description="billing bot")
    assert resp.status_code == 201, resp.json()
    return resp.json()


@pytest.fixture
def mallory_api(other_customer) -> APIClient:
    client = APIClient()
    client.force_authenticate(other_customer)
    return client


# =============================================================================
# Endpoints and the secret
# =============================================================================


def test_create_shows_the_secret_once(customer_api, customer):
    resp = create(customer_api, events=["rental.active", "invoice.settled", "rental.active"], description=" ci ")
    assert resp.status_code == 201
    body = resp.json()
    assert body["secret"].startswith("whsec_") and len(body["secret"]) > 40
    assert body["url"] == PUBLIC_URL
    assert body["events"] == ["invoice.settled", "rental.active"]  # canonical order, no duplicates
    assert body["description"] == "ci"
    assert body["is_active"] is True
    stored = WebhookEndpoint.objects.get(pk=body["id"])
    assert stored.account == customer and stored.secret == body["secret"]

    listed = customer_api.get("/api/v1/webhooks")
    fetched = customer_api.get(f"/api/v1/webhooks/{body['id']}")
    assert listed.status_code == fetched.status_code == 200
    for shown in (listed.json()["results"][0], fetched.json()):
        assert "secret" not in shown
        assert shown == {k: v for k, v in body.items() if k != "secret"}
    assert body["secret"] not in listed.content.decode() + fetched.content.decode()


def test_secrets_differ_between_endpoints(customer_api):
    first, second = create(customer_api).json(), create(customer_api).json()
    assert first["secret"] != second["secret"]


def test_rotate_returns_a_new_secret_once(customer_api, endpoint):
    resp = customer_api.post(f"/api/v1/webhooks/{endpoint['id']}/rotate-secret")
    assert resp.status_code == 200
    secret = resp.json()["secret"]
    assert secret.startswith("whsec_") and secret != endpoint["secret"]
    assert WebhookEndpoint.objects.get(pk=endpoint["id"]).secret == secret
    assert "secret" not in customer_api.get(f"/api/v1/webhooks/{endpoint['id']}").json()


def test_update_url_events_description_and_switch(customer_api, endpoint):
    url = f"/api/v1/webhooks/{endpoint['id']}"
    resp = customer_api.patch(
        url,
        {"url": "https://93.184.215.15/v2", "events": ["rental.terminated"], "description": "", "is_active": False},
        format="json",
    )
    assert resp.status_code == 200, resp.json()
    body = resp.json()
    assert (body["url"], body["events"], body["description"], body["is_active"]) == (
        "https://93.184.215.15/v2",
        ["rental.terminated"],
        "",
        False,
    )
    assert "secret" not in body
    resp = customer_api.patch(url, {"is_active": True}, format="json")
    assert resp.json()["is_active"] is True and resp.json()["events"] == ["rental.terminated"]
    stored = WebhookEndpoint.objects.get(pk=endpoint["id"])
    assert stored.secret == endpoint["secret"]  # an update never touches the secret


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        ({"events": []}, "invalid"),
        ({"events": ["invoice.paid"]}, "invalid"),
        ({"events": "invoice.settled"}, "invalid"),
        ({"url": ""}, "invalid"),
        ({"url": "x" * 501}, "invalid"),
        ({"description": "d" * 201}, "invalid"),
        ({"is_active": "maybe"}, "invalid"),
    ],
)
def test_update_refuses_bad_input(customer_api, endpoint, payload, code):
    resp = customer_api.patch(f"/api/v1/webhooks/{endpoint['id']}", payload, format="json")
    assert resp.status_code == 400
    assert resp.json()["error"]["code"] == code


def test_create_needs_url_and_events(customer_api):
    for payload in ({}, {"url": PUBLIC_URL}, {"events": ["invoice.settled"]}, {"url": PUBLIC_URL, "events": []}):
        resp = customer_api.post("/api/v1/webhooks", payload, format="json")
        assert resp.status_code == 400
        assert resp.json()["error"]["code"] == "invalid"
    assert not WebhookEndpoint.objects.exists()


def test_every_event_type_can_be_subscribed(customer_api):
    resp = create(customer_api, events=WEBHOOK_EVENTS)
    assert resp.status_code == 201
    assert resp.json()["events"] == list(WEBHOOK_EVENTS)


def test_delete(customer_api, endpoint):
    resp = customer_api.delete(f"/api/v1/webhooks/{endpoint['id']}")
    assert resp.status_code == 204
    assert not WebhookEndpoint.objects.exists()
    assert customer_api.get(f"/api/v1/webhooks/{endpoint['id']}").status_code == 404


def test_endpoints_per_account_are_limited(customer_api, mallory_api, settings):
    settings.WEBHOOK_MAX_ENDPOINTS_PER_ACCOUNT = 2
    assert create(customer_api).status_code == 201
    assert create(customer_api).status_code == 201
    resp = create(customer_api)
    assert resp.status_code == 409
    assert resp.json()["error"] == {
        "code": "webhook_limit_reached",
        "message": "An account has at most 2 webhook endpoints.",
        "details": {"limit": 2},
    }
    assert create(mallory_api).status_code == 201  # per account


# =============================================================================
# Another account sees nothing
# =============================================================================


def _routes(endpoint_id: int, delivery_id: int):
    base = f"/api/v1/webhooks/{endpoint_id}"
    return [
        ("get", base, None),
        ("patch", base, {"description": "mine now"}),
        ("delete", base, None),
        ("post", f"{base}/rotate-secret", None),
        ("post", f"{base}/ping", None),
        ("get", f"{base}/deliveries", None),
        ("get", f"{base}/deliveries/{delivery_id}", None),
        ("post", f"{base}/deliveries/{delivery_id}/redeliver", None),
    ]


@pytest.mark.parametrize("index", range(8))
def test_another_account_gets_404_everywhere(customer, customer_api, mallory_api, endpoint, index):
    with_secret = WebhookEndpoint.objects.get(pk=endpoint["id"])
    event = webhooks.event_emit(account=customer, type="invoice.settled", data={})
    delivery = event.deliveries.get()
    method, path, payload = _routes(endpoint["id"], delivery.pk)[index]

    call = getattr(mallory_api, method)
    resp = call(path, payload, format="json") if payload else call(path)
    assert resp.status_code == 404
    assert resp.json()["error"]["code"] == "webhook_not_found"
    assert "secret" not in resp.content.decode() and with_secret.secret not in resp.content.decode()

    after = WebhookEndpoint.objects.get(pk=endpoint["id"])
    assert (after.secret, after.description, after.url) == (with_secret.secret, "billing bot", PUBLIC_URL)
    delivery.refresh_from_db()
    assert delivery.attempts == 0 and delivery.event.deliveries.count() == 1
    assert mallory_api.get("/api/v1/webhooks").json()["results"] == []


@pytest.mark.parametrize("index", range(8))
def test_unknown_ids_are_404(customer_api, endpoint, index):
    method, path, payload = _routes(999999999, 999999999)[index]
    call = getattr(customer_api, method)
    resp = call(path, payload, format="json") if payload else call(path)
    assert resp.status_code == 404
    assert resp.json()["error"]["code"] == "webhook_not_found"


def test_a_delivery_of_another_endpoint_is_404(customer, customer_api, endpoint):
    other = create(customer_api, events=["invoice.settled"]).json()
    delivery = WebhookDelivery.objects.get(
        event=webhooks.event_emit(account=customer, type="invoice.settled", data={}), endpoint_id=other["id"]
    )
    for method, path in (
        ("get", f"/api/v1/webhooks/{endpoint['id']}/deliveries/{delivery.pk}"),
        ("post", f"/api/v1/webhooks/{endpoint['id']}/deliveries/{delivery.pk}/redeliver"),
    ):
        resp = getattr(customer_api, method)(path)
        assert resp.status_code == 404
        assert resp.json()["error"]["code"] == "delivery_not_found"


@pytest.mark.parametrize("index", range(8))
def test_no_token_is_401(api, index):
    method, path, _payload = _routes(1, 1)[index]
    resp = getattr(api, method)(path)
    assert resp.status_code == 401
    assert resp.json()["error"]["code"] == "not_authenticated"


def test_listing_without_a_token_is_401(api):
    assert api.get("/api/v1/webhooks").status_code == 401
    assert create(api).status_code == 401


# =============================================================================
# The delivery log, redeliver, ping (through a real receiver)
# =============================================================================


@pytest.fixture
def local_endpoint(customer_api, receiver, allow_private) -> dict:
    resp = create(customer_api, url=receiver.url, events=["invoice.settled"])
    assert resp.status_code == 201, resp.json()
    receiver.secret = resp.json()["secret"]
    return resp.json()


def test_the_delivery_log_shows_every_attempt(
    customer, customer_api, receiver, local_endpoint, django_capture_on_commit_callbacks
):
    receiver.fail_times, receiver.fail_status = 1, 502
    with django_capture_on_commit_callbacks(execute=True):
        event = webhooks.event_emit(account=customer, type="invoice.settled", data={"invoice": "GRH-000007"})
    delivery = event.deliveries.get()
    with django_capture_on_commit_callbacks(execute=True):
        resp = customer_api.post(f"/api/v1/webhooks/{local_endpoint['id']}/deliveries/{delivery.pk}/redeliver")
    assert resp.status_code == 202
    assert resp.json()["status"] == "pending"  # queued; the attempt is made after the answer

    resp = customer_api.get(f"/api/v1/webhooks/{local_endpoint['id']}/deliveries")
    assert resp.status_code == 200
    [shown] = resp.json()["results"]
    assert shown["id"] == delivery.pk
    assert shown["event"]["id"] == str(event.id)
    assert shown["event"]["type"] == "invoice.settled"
    assert shown["event"]["data"] == {"invoice": "GRH-000007"}
    assert (shown["status"], shown["attempts"], shown["next_attempt_at"]) == ("succeeded", 2, None)
    assert shown["delivered_at"] is not None
    first, second = shown["attempt_log"]
    assert (first["status_code"], first["error_category"], first["error"]) == (
        502,
        "http_status",
        "The receiver answered 502.",
    )
    assert (second["status_code"], second["error_category"], second["error"]) == (200, "", "")
    assert first["at"] <= second["at"]
    assert isinstance(first["duration_ms"], int)
    assert receiver.posts[0].verified and receiver.posts[1].verified
    single = customer_api.get(f"/api/v1/webhooks/{local_endpoint['id']}/deliveries/{delivery.pk}")
    assert single.json() == shown


def test_the_delivery_log_pages_and_filters(customer, customer_api, receiver, local_endpoint):
    receiver.status = 500
    events = [webhooks.event_emit(account=customer, type="invoice.settled", data={"n": n}) for n in range(5)]
    ids = [e.deliveries.get().pk for e in events]
    WebhookDelivery.objects.filter(pk=ids[0]).update(status=DeliveryStatus.FAILED)
    base = f"/api/v1/webhooks/{local_endpoint['id']}/deliveries"

    page = customer_api.get(base, {"page_size": 2}).json()
    assert [d["id"] for d in page["results"]] == ids[::-1][:2]
    assert page["previous"] is None
    page = customer_api.get(page["next"]).json()
    assert [d["id"] for d in page["results"]] == ids[::-1][2:4]
    page = customer_api.get(page["next"]).json()
    assert [d["id"] for d in page["results"]] == ids[::-1][4:] and page["next"] is None
    back = customer_api.get(page["previous"]).json()
    assert [d["id"] for d in back["results"]] == ids[::-1][2:4]
    failed = customer_api.get(base, {"status": "failed"}).json()["results"]
    assert [d["id"] for d in failed] == [ids[0]]
    for bad in ({"page_size": 0}, {"page_size": 201}, {"status": "lost"}, {"cursor": "x" * 600}):
        resp = customer_api.get(base, bad)
        assert resp.status_code == 400
        assert resp.json()["error"]["code"] == "invalid"
    for forged in ("x", "cD1ub3QtYW4taWQ="):  # not base64 of a cursor; "p=not-an-id"
        resp = customer_api.get(base, {"cursor": forged})
        assert resp.status_code == 400
        assert resp.json()["error"]["code"] == "invalid_cursor"


def test_ping_through_the_api(customer_api, receiver, local_endpoint, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        resp = customer_api.post(f"/api/v1/webhooks/{local_endpoint['id']}/ping")
    assert resp.status_code == 202
    queued = resp.json()
    assert queued["event"]["type"] == "ping"
    assert (queued["status"], queued["attempt_log"]) == ("pending", [])
    assert receiver.posts[0].verified
    done = customer_api.get(f"/api/v1/webhooks/{local_endpoint['id']}/deliveries/{queued['id']}").json()
    assert done["status"] == "succeeded"
    assert [a["status_code"] for a in done["attempt_log"]] == [200]


def test_a_switched_off_endpoint_refuses_ping_and_redeliver(customer, customer_api, local_endpoint):
    event = webhooks.event_emit(account=customer, type="invoice.settled", data={})
    delivery = event.deliveries.get()
    customer_api.patch(f"/api/v1/webhooks/{local_endpoint['id']}", {"is_active": False}, format="json")
    for path in (
        f"/api/v1/webhooks/{local_endpoint['id']}/ping",
        f"/api/v1/webhooks/{local_endpoint['id']}/deliveries/{delivery.pk}/redeliver",
    ):
        resp = customer_api.post(path)
        assert resp.status_code == 409
        assert resp.json()["error"]["code"] == "webhook_inactive"
    delivery.refresh_from_db()
    assert delivery.attempts == 0


def test_pings_and_redeliveries_are_limited_per_account(customer, customer_api, local_endpoint, settings):
    """Each takes a worker for up to six attempts: past WEBHOOK_MANUAL_PER_ACCOUNT
    in the window, 429 with Retry-After, and nothing is written or queued."""
    settings.WEBHOOK_MANUAL_PER_ACCOUNT = 2
    delivery = webhooks.event_emit(account=customer, type="invoice.settled", data={}).deliveries.get()
    ping = f"/api/v1/webhooks/{local_endpoint['id']}/ping"
    redeliver = f"/api/v1/webhooks/{local_endpoint['id']}/deliveries/{delivery.pk}/redeliver"
    assert customer_api.post(ping).status_code == 202
    assert customer_api.post(redeliver).status_code == 202
    deliveries = WebhookDelivery.objects.count()
    for path in (ping, redeliver):
        refused = customer_api.post(path)
        assert refused.status_code == 429 and refused.json()["error"]["code"] == "throttled"
        wait = refused.json()["error"]["details"]["retry_after_seconds"]
        assert refused["Retry-After"] == str(wait) and 1 <= wait <= settings.WEBHOOK_MANUAL_WINDOW_SECONDS
    assert WebhookDelivery.objects.count() == deliveries
    # Events the system emits are not counted.
    assert webhooks.event_emit(account=customer, type="invoice.settled", data={}).deliveries.count() == 1
    settings.WEBHOOK_MANUAL_PER_ACCOUNT = 0
    assert customer_api.post(ping).status_code == 202


# =============================================================================
# SSRF refusals when a URL is registered (the allow setting off)
# =============================================================================


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("https://127.0.0.1/hook", "loopback"),
        ("https://127.9.9.9/hook", "loopback"),
        ("https://localhost/hook", "loopback"),  # a name that resolves to loopback
        ("https://[::1]/hook", "loopback"),
        ("https://[::ffff:127.0.0.1]/hook", "loopback"),
        ("https://[2002:7f00:1::]/hook", "loopback"),  # 6to4 around 127.0.0.1
        ("https://10.0.0.5/hook", "private"),
        ("https://172.16.3.4/hook", "private"),
        ("https://192.168.1.10/hook", "private"),
        ("https://[fd12:3456::1]/hook", "private"),
        ("https://169.254.169.254/latest/meta-data", "link_local"),
        ("https://[fe80::1]/hook", "link_local"),
        ("https://224.0.0.1/hook", "multicast"),
        ("https://[ff02::1]/hook", "multicast"),
        ("https://0.0.0.0/hook", "unspecified"),
        ("https://[::]/hook", "unspecified"),
        ("https://240.0.0.1/hook", "reserved"),
        ("https://100.64.0.1/hook", "not_global"),
        ("https://192.0.2.1/hook", "private"),  # documentation range
    ],
)
def test_private_and_special_targets_are_refused(customer_api, url, reason):
    resp = create(customer_api, url=url)
    assert resp.status_code == 400, resp.json()
    error = resp.json()["error"]
    assert error["code"] == "target_not_allowed"
    assert error["details"]["reason"] == reason
    assert not WebhookEndpoint.objects.exists()


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (["10.20.30.40"], "private"),
        (["93.184.215.14", "192.168.0.1"], "private"),  # every address is checked
        (["2606:4700::1111", "fe80::2"], "link_local"),
        (["127.0.0.53"], "loopback"),
    ],
)
def test_names_that_resolve_to_private_addresses_are_refused(customer_api, dns, answer, reason):
    dns.set("hooks.example.com", *answer)
    resp = create(customer_api, url="https://hooks.example.com/grh")
    assert resp.status_code == 400
    assert resp.json()["error"]["code"] == "target_not_allowed"
    assert resp.json()["error"]["details"]["reason"] == reason


def test_a_name_that_resolves_to_public_addresses_is_accepted(customer_api, dns):
    dns.set("hooks.example.com", "93.184.215.14", "2606:4700::1111")
    resp = create(customer_api, url="https://hooks.example.com/grh")
    assert resp.status_code == 201, resp.json()


def test_a_name_whose_lookup_hangs_is_refused_within_the_resolve_timeout(customer_api, monkeypatch, settings):
    """A nameserver that never answers holds the request WEBHOOK_RESOLVE_TIMEOUT_SECONDS,
    not the system resolver's timeouts: the lookup here answers only when the test ends."""
    settings.WEBHOOK_RESOLVE_TIMEOUT_SECONDS = 0.2
    released = threading.Event()
    real = socket.getaddrinfo
    asked = []

    def getaddrinfo(host, port, *args, **kwargs):
        if host == "slow.example.com":
            asked.append(host)
            released.wait(30)
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.215.14", int(port or 0)))]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    try:
        resp = create(customer_api, url="https://slow.example.com/grh")
        assert resp.status_code == 400, resp.json()
        error = resp.json()["error"]
        assert error["code"] == "unresolvable_host" and error["details"] == {
            "host": "slow.example.com",
            "reason": "timeout",
        }
        assert not released.is_set() and not WebhookEndpoint.objects.exists()
        # Asked again while the first lookup still hangs: it waits on that one, no second thread.
        again = create(customer_api, url="https://slow.example.com/other")
        assert again.json()["error"]["details"]["reason"] == "timeout" and asked == ["slow.example.com"]
    finally:
        released.set()


def test_a_lookup_done_before_its_callback_is_added_does_not_hang(monkeypatch, dns):
    """A name the resolver answers at once (a hosts file, a cache) may be done before the
    lookup is registered as in flight: forgetting it then runs in the same thread."""
    from concurrent.futures import Future

    from webhooks import targets

    class AtOnce:
        def submit(self, fn, *args, **kwargs):
            done = Future()
            done.set_result(fn(*args, **kwargs))
            return done

    monkeypatch.setattr(targets, "_LOOKUPS", AtOnce())
    dns.set("fast.example.com", "93.184.215.14")
    answered = []
    worker = threading.Thread(target=lambda: answered.append(targets.target_resolve(url="https://fast.example.com/")))
    worker.start()
    worker.join(10)
    assert answered and answered[0].host == "fast.example.com"


def test_an_update_is_checked_too(customer_api, endpoint):
    resp = customer_api.patch(f"/api/v1/webhooks/{endpoint['id']}", {"url": "https://10.1.1.1/"}, format="json")
    assert resp.status_code == 400
    assert resp.json()["error"]["code"] == "target_not_allowed"
    assert WebhookEndpoint.objects.get(pk=endpoint["id"]).url == PUBLIC_URL


@pytest.mark.parametrize(
    ("url", "code"),
    [
        ("http://93.184.215.14/hook", "https_required"),
        ("ftp://93.184.215.14/hook", "invalid_url"),
        ("file:///etc/passwd", "invalid_url"),
        ("gopher://93.184.215.14/", "invalid_url"),
        ("https://user:pass@93.184.215.14/hook", "invalid_url"),
        ("https:///hook", "invalid_url"),
        ("not a url", "invalid_url"),
        ("https://93.184.215.14/a b", "invalid_url"),
        (" https://93.184.215.14/hook", "invalid_url"),
        ("https://93.184.215.14:99999/hook", "invalid_url"),
        ("https://93.184.215.14:0/hook", "invalid_url"),
        ("https://no-such-host.invalid/hook", "unresolvable_host"),
    ],
)
def test_urls_that_are_not_https_or_not_urls_are_refused(customer_api, url, code):
    resp = create(customer_api, url=url)
    assert resp.status_code == 400, resp.json()
    assert resp.json()["error"]["code"] == code


def test_the_allow_setting_lets_http_and_loopback_through(customer_api, allow_private):
    assert create(customer_api, url="http://127.0.0.1:8080/hook").status_code == 201
    assert create(customer_api, url="http://localhost:8080/hook").status_code == 201
    # Never a target, even then.
    assert create(customer_api, url="http://0.0.0.0:8080/hook").json()["error"]["details"]["reason"] == "unspecified"
    assert create(customer_api, url="http://224.0.0.1/hook").json()["error"]["details"]["reason"] == "multicast"


# =============================================================================
# Schema
# =============================================================================

ENDPOINTS = [
    ("/api/v1/webhooks", "get", None, "200", "WebhookEndpointOutputPage"),
    ("/api/v1/webhooks", "post", "WebhookEndpointCreateInputRequest", "201", "WebhookEndpointWithSecretOutput"),
    ("/api/v1/webhooks/{endpoint_id}", "get", None, "200", "WebhookEndpointOutput"),
    (
        "/api/v1/webhooks/{endpoint_id}",
        "patch",
        "PatchedWebhookEndpointUpdateInputRequest",
        "200",
        "WebhookEndpointOutput",
    ),
    ("/api/v1/webhooks/{endpoint_id}", "delete", None, "204", None),
    (
        "/api/v1/webhooks/{endpoint_id}/rotate-secret",
        "post",
        "WebhookSecretRotateInputRequest",
        "200",
        "WebhookEndpointWithSecretOutput",
    ),
    ("/api/v1/webhooks/{endpoint_id}/ping", "post", None, "202", "WebhookDeliveryOutput"),
    ("/api/v1/webhooks/{endpoint_id}/deliveries", "get", None, "200", "WebhookDeliveryOutputPage"),
    ("/api/v1/webhooks/{endpoint_id}/deliveries/{delivery_id}", "get", None, "200", "WebhookDeliveryOutput"),
    ("/api/v1/webhooks/{endpoint_id}/deliveries/{delivery_id}/redeliver", "post", None, "202", "WebhookDeliveryOutput"),
]


@pytest.fixture(scope="module")
def schema(django_db_blocker):
    with django_db_blocker.unblock():
        return SchemaGenerator().get_schema(request=None, public=True)


@pytest.mark.parametrize(("path", "method", "request_ref", "status", "response_ref"), ENDPOINTS)
def test_every_webhook_endpoint_is_described(schema, path, method, request_ref, status, response_ref):
    operation = schema["paths"][path][method]
    assert operation["tags"] == ["webhooks"]
    if request_ref:
        body = operation["requestBody"]["content"]["application/json"]["schema"]
        assert body["$ref"] == f"#/components/schemas/{request_ref}"
    else:
        assert "requestBody" not in operation
    response = operation["responses"][status]
    if response_ref:
        content = response["content"]["application/json"]["schema"]
        assert (content.get("$ref") or content["items"]["$ref"]) == f"#/components/schemas/{response_ref}"
    else:
        assert "content" not in response
    assert operation["security"] == [{"bearerAuth": []}]
    errors = [code for code in operation["responses"] if code.startswith("4")]
    assert "401" in errors
    for code in errors:
        ref = operation["responses"][code]["content"]["application/json"]["schema"]["$ref"]
        assert ref == "#/components/schemas/ErrorOutput"


def test_the_secret_is_only_in_the_create_and_rotate_answers(schema):
    components = schema["components"]["schemas"]
    with_secret = [name for name, spec in components.items() if "secret" in spec.get("properties", {})]
    assert with_secret == ["WebhookEndpointWithSecretOutput"]
    ref = components["WebhookEndpointCreateInputRequest"]["properties"]["events"]["items"]["$ref"]
    assert components[ref.rsplit("/", 1)[1]]["enum"] == list(WEBHOOK_EVENTS)


# =============================================================================
# No input is a 5xx
# =============================================================================

_url_like = st.one_of(
    st.text(max_size=600),
    st.builds(
        lambda scheme, host, rest: f"{scheme}{host}{rest}",
        st.sampled_from(["https://", "http://", "HTTPS://", "ftp://", "https:/", "//", ""]),
        st.one_of(
            st.text(max_size=80),
            st.ip_addresses().map(lambda ip: f"[{ip}]" if ip.version == 6 else str(ip)),
            st.sampled_from(
                ["localhost", "93.184.215.14", "[::1]", "xn--", "a..b", "0x7f.1", "127.1", "[::ffff:10.0.0.1]"]
            ),
        ),
        st.text(max_size=60),
    ),
)


@pytest.fixture
def no_dns(monkeypatch):
    """Names never resolve here (literal addresses still do): no lookups leave the machine."""
    real = socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):
        try:
            ipaddress.ip_address(host.decode() if isinstance(host, bytes) else host)
        except ValueError:
            raise socket.gaierror(socket.EAI_NONAME, "not here") from None
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


@hypothesis_settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    url=_url_like,
    events=st.lists(st.sampled_from([*WEBHOOK_EVENTS, "ping", "", "x"]), max_size=12),
    description=st.one_of(st.none(), st.text(max_size=250)),
)
def test_any_registration_input_is_answered_without_a_5xx(customer_api, no_dns, url, events, description):
    payload = {"url": url, "events": events}
    if description is not None:
        payload["description"] = description
    resp = customer_api.post("/api/v1/webhooks", payload, format="json")
    assert resp.status_code in (201, 400, 409), resp.content
    if resp.status_code == 201:
        assert resp.json()["url"].lower().startswith("https://")
    else:
        assert resp.json()["error"]["code"]
