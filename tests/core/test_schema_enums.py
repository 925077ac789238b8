"""The schema's enums are the catalog's and the registries' values, read when
the schema is generated: a region, card, template or add-on added to the catalog
is in the next schema, and every registry (currencies, terms, precisions) is
listed whole. The rules the serializers cannot state (core.schema) are in it."""

from __future__ import annotations

import pytest
from drf_spectacular.generators import SchemaGenerator

from billing.currencies import CURRENCIES
from catalog.models import TERM_CHOICES, Addon, GpuModel, Region, Template
from sizing.arithmetic import KV_PRECISION_BYTES, PRECISION_BYTES
from sizing.models import Architecture

pytestmark = pytest.mark.django_db


def generate() -> dict:
    return SchemaGenerator().get_schema(request=None, public=True)


def prop(schema: dict, component: str, name: str) -> dict:
    return schema["components"]["schemas"][component]["properties"][name]


def enum_of(schema: dict, value: dict) -> list:
    """The enum of a property, following drf-spectacular's `$ref` / `allOf` to a shared enum component."""
    if "allOf" in value:
        value = value["allOf"][0]
    if "$ref" in value:
        value = schema["components"]["schemas"][value["$ref"].rsplit("/", 1)[1]]
    return value["enum"]


def query(schema: dict, path: str, name: str) -> dict:
    [parameter] = [p for p in schema["paths"][path]["get"]["parameters"] if p["name"] == name]
    return parameter["schema"]


@pytest.fixture
def schema(catalog) -> dict:
    return generate()


def test_catalog_enums_are_the_catalog(schema):
    regions = list(Region.objects.filter(is_active=True).order_by("sort_order", "code").values_list("code", flat=True))
    gpus = set(GpuModel.objects.filter(is_active=True).values_list("slug", flat=True))
    templates = set(Template.objects.filter(is_active=True).values_list("slug", flat=True))
    addons = set(Addon.objects.filter(is_active=True, is_usage=False).values_list("slug", flat=True))
    assert regions and gpus and templates and addons
    for enum in (
        query(schema, "/api/v1/catalog/stock", "region")["enum"],
        prop(schema, "OrderCreateInputRequest", "region")["enum"],
        prop(schema, "RecommendInputRequest", "region")["enum"],
    ):
        assert sorted(enum) == sorted(regions)
    for enum in (
        query(schema, "/api/v1/catalog/stock", "gpu")["enum"],
        prop(schema, "OrderCreateInputRequest", "gpu")["enum"],
        prop(schema, "QuoteInputRequest", "gpu")["enum"],
        prop(schema, "CheckInputRequest", "gpu")["enum"],
    ):
        assert set(enum) == gpus
    models = set(Architecture.objects.filter(is_active=True).values_list("slug", flat=True))
    assert models
    for component in ("CheckInputRequest", "RecommendInputRequest"):
        assert set(prop(schema, component, "model")["enum"]) == models
    assert set(prop(schema, "OrderCreateInputRequest", "workload")["properties"]["model"]["enum"]) == models
    for component in ("OrderCreateInputRequest", "QuoteInputRequest"):
        assert set(prop(schema, component, "template")["enum"]) == templates
        assert set(prop(schema, component, "addons")["items"]["enum"]) == addons


def test_a_catalog_change_is_in_the_next_schema(catalog):
    """The catalog's version (bumped by its triggers) keys the read, so no stale enum is served."""
    gpu = GpuModel.objects.filter(is_active=True).first()
    region = Region.objects.filter(is_active=True).first()
    GpuModel.objects.filter(pk=gpu.pk).update(is_active=False)
    Region.objects.filter(pk=region.pk).update(is_active=False)
    schema = generate()
    assert gpu.slug not in prop(schema, "QuoteInputRequest", "gpu")["enum"]
    assert region.code not in prop(schema, "OrderCreateInputRequest", "region")["enum"]


def test_registry_enums_are_the_registries(schema):
    currencies = list(CURRENCIES)
    for component, name in (
        ("CurrencyChoiceInputRequest", "currency"),
        ("RequoteInputRequest", "currency"),
        ("OrderCreateInputRequest", "pay_currency"),
        ("RenewInputRequest", "pay_currency"),
    ):
        assert enum_of(schema, prop(schema, component, name)) == currencies, (component, name)
    terms = [code for code, _ in TERM_CHOICES]
    for component in ("OrderCreateInputRequest", "QuoteInputRequest", "CheckInputRequest", "RecommendInputRequest"):
        assert enum_of(schema, prop(schema, component, "term")) == terms, component
    for component in ("CheckInputRequest", "RecommendInputRequest"):
        assert enum_of(schema, prop(schema, component, "precision")) == list(PRECISION_BYTES)
        assert enum_of(schema, prop(schema, component, "kv_precision")) == list(KV_PRECISION_BYTES)


def test_rules_the_services_check_are_stated(schema, settings):
    from accounts.services import SSH_KEY_MAX_LENGTH, USERNAME_MAX_LENGTH, USERNAME_MIN_LENGTH

    username = prop(schema, "AccountCreateInputRequest", "username")
    assert (username["minLength"], username["maxLength"]) == (USERNAME_MIN_LENGTH, USERNAME_MAX_LENGTH)
    assert prop(schema, "SshKeyCreateInputRequest", "public_key")["maxLength"] == SSH_KEY_MAX_LENGTH
    assert prop(schema, "WebhookEndpointCreateInputRequest", "events")["minItems"] == 1
    for component, name in (("OrderCreateInputRequest", "workload"), ("CheckInputRequest", "architecture")):
        assert prop(schema, component, name)["type"] == "object"  # so not null, as the serializers refuse it
    [min_length] = [
        v["OPTIONS"]["min_length"]
        for v in settings.AUTH_PASSWORD_VALIDATORS
        if v["NAME"].endswith("MinimumLengthValidator")
    ]
    password = prop(schema, "AccountCreateInputRequest", "password")
    assert password["minLength"] == min_length
    assert "weak_password" in password["description"] and "entirely numeric" in password["description"]
    assert prop(schema, "TokenObtainInputRequest", "otp")["pattern"] == "^[^\\u0000]*$"  # may be blank
    assert prop(schema, "TokenObtainInputRequest", "name")["pattern"] == "^[^\\u0000]*$"
    # Not blank once DRF has trimmed the spaces around it.
    assert prop(schema, "RecoverInputRequest", "username")["pattern"] == "^[^\\u0000]*[^\\s\\u0000][^\\u0000]*$"


def test_the_patterns_agree_with_the_api(api, customer):
    """The username pattern and the NUL pattern refuse what the API refuses."""
    import re

    schema = generate()
    username = re.compile(prop(schema, "AccountCreateInputRequest", "username")["pattern"])
    no_nul = re.compile(prop(schema, "TokenObtainInputRequest", "password")["pattern"])
    for name in ("ab", "a b c", "x" * 33, "caf\u00e9"):
        assert not username.search(name)
        resp = api.post("/api/v1/accounts", {"username": name, "password": "violet-harbour-lantern-93"}, format="json")
        assert resp.status_code == 400 and resp.json()["error"]["code"] == "invalid_username", (name, resp.json())
    assert not no_nul.search("pass\x00word")
    resp = api.post("/api/v1/auth/token", {"username": "alice", "password": "pass\x00word"}, format="json")
    assert resp.status_code == 400, resp.json()
