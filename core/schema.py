"""Postprocessing of the OpenAPI schema (drf-spectacular): every 4xx an
operation can answer is in its responses, so clients and schema checkers
(schemathesis with all checks) can rely on the list. The views document their
own refusals; this adds the ones every operation of a kind shares:

- 400 where a body or a query is read (malformed JSON, `nesting_too_deep`, `invalid`);
- 401 where a token is needed (none, unknown or revoked);
- 403 where a token's scope may fall short (`insufficient_scope`: a `read` token
  on a write; on the staff-only /ops/ endpoints also `permission_denied` and
  `permission_required`, core/permissions.py);
- 404 where the path names an object (not there, or another account's).
"""

from __future__ import annotations

import copy
import logging
from typing import Any

log = logging.getLogger(__name__)

_ERROR_SCHEMA = {"$ref": "#/components/schemas/ErrorOutput"}

_SHARED = {
    "400": "Invalid input: `parse_error`, `nesting_too_deep`, `invalid` (details.fields), or the rule's own code.",
    "401": "No valid token (`not_authenticated`, `authentication_failed`).",
    "403": "`insufficient_scope`: the token's scope does not allow this (a `read` token writing).",
    "403-ops": "Staff only: `permission_denied` (not staff), `permission_required` (`details.permissions` missing), "
    "`insufficient_scope` (not an `ops` token).",
    "404": "`not_found`: no such object (or not yours).",
}


def _error(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": _ERROR_SCHEMA}}}


def error_responses_complete(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    for path, item in result.get("paths", {}).items():
        for method, operation in item.items():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            responses = operation["responses"]
            parameters = operation.get("parameters", [])
            wanted = []
            if "requestBody" in operation or any(p.get("in") == "query" for p in parameters):
                wanted.append("400")
            secured = operation.get("security", result.get("security")) not in (None, [], [{}])
            if secured:
                wanted.append("401")
            if path.startswith("/api/v1/ops/"):
                wanted.append("403-ops")
            elif secured and method.upper() not in ("GET", "HEAD", "OPTIONS"):
                wanted.append("403")
            if any(p.get("in") == "path" for p in parameters):
                wanted.append("404")
            for wanted_key in wanted:
                status = wanted_key[:3]
                own = responses.get(status)
                if own is None:
                    responses[status] = _error(_SHARED[wanted_key])
                elif status == "403" and "insufficient_scope" not in own.get("description", ""):
                    own["description"] = f"{own.get('description', '')} {_SHARED[wanted_key]}".strip()
    return result


# --- Rules the serializers cannot state ------------------------------------------
#
# Values a field takes from the catalog (a database table) or a registry, lengths and
# patterns a service checks after the serializer, and nullability: stated here, when
# the schema is generated, so the schema and the rules cannot drift apart. The value
# lists come from functions named by dotted path (core imports no app); each returns
# the list an enum holds, read when the schema is generated.

# No NUL in any string: PostgreSQL stores none, so DRF refuses it in every CharField
# (`null_characters_not_allowed`) and core.middleware refuses it in every query.
NO_NUL_PATTERN = "^[^\\u0000]*$"

# What the value lists are read at (the catalog version), by dotted path: a schema
# generated at one value of it is kept and sent again until it changes (core.views.SchemaView).
ENUMS_VERSION = "catalog.serializers.schema_version"

# (component, property) or ("query", path, parameter) -> dotted path of the values' function.
ENUMS: dict[tuple[str, ...], str] = {
    ("query", "/api/v1/catalog/stock", "region"): "catalog.serializers.schema_regions",
    ("query", "/api/v1/catalog/stock", "gpu"): "catalog.serializers.schema_gpus",
    ("OrderCreateInputRequest", "region"): "catalog.serializers.schema_regions",
    ("OrderCreateInputRequest", "gpu"): "catalog.serializers.schema_gpus",
    ("OrderCreateInputRequest", "template"): "catalog.serializers.schema_templates",
    ("OrderCreateInputRequest", "addons[]"): "catalog.serializers.schema_addons",
    ("QuoteInputRequest", "gpu"): "catalog.serializers.schema_gpus",
    ("QuoteInputRequest", "template"): "catalog.serializers.schema_templates",
    ("QuoteInputRequest", "addons[]"): "catalog.serializers.schema_addons",
    ("CheckInputRequest", "gpu"): "catalog.serializers.schema_gpus",
    ("RecommendInputRequest", "region"): "catalog.serializers.schema_regions",
    ("CheckInputRequest", "model"): "rentals.serializers.schema_models",
    ("RecommendInputRequest", "model"): "rentals.serializers.schema_models",
    ("CompareInputRequest", "model"): "rentals.serializers.schema_models",
    ("CompareInputRequest", "region"): "catalog.serializers.schema_regions",
    ("CompareCandidateInputRequest", "gpu"): "catalog.serializers.schema_gpus",
}

# (component, property) -> keywords that property's schema gains.
USERNAME_RULES = {
    "minLength": 3,
    "maxLength": 32,
    "pattern": "^[A-Za-z0-9_.-]{3,32}$",
    "description": "3-32 characters of a-z 0-9 _ . - (lower-cased). Names that pass for the company, its staff "
    "or the system (admin, support, root, ...; compared without separators) are refused with `invalid_username` "
    "(details.reason `reserved`).",
}
OBJECT = {"type": "object"}
# A webhook URL's scheme (webhooks/targets.py refuses any other with invalid_url, reason
# `scheme`); the rest of its syntax and where it leads are rules of their own (invalid_url,
# target_not_allowed, unresolvable_host), in the operation's text.
HTTPS_URL = {"pattern": "^[Hh][Tt][Tt][Pp][Ss]://[^\\u0000]*$"}
KEYWORDS: dict[tuple[str, str], dict[str, Any]] = {
    ("AccountCreateInputRequest", "username"): USERNAME_RULES,
    ("CheckInputRequest", "architecture"): OBJECT,
    ("RecommendInputRequest", "architecture"): OBJECT,
    ("CompareInputRequest", "architecture"): OBJECT,
    ("CompareInputRequest", "candidates"): {"minItems": 2, "maxItems": 5},
    ("OrderCreateInputRequest", "addons"): {"uniqueItems": True},
    ("OrderCreateInputRequest", "ssh_keys"): {"minItems": 1},
    ("QuoteInputRequest", "addons"): {"uniqueItems": True},
    ("WebhookEndpointCreateInputRequest", "events"): {"minItems": 1},
    ("WebhookEndpointCreateInputRequest", "url"): HTTPS_URL,
    ("PatchedWebhookEndpointUpdateInputRequest", "url"): HTTPS_URL,
    ("PatchedWebhookEndpointUpdateInputRequest", "events"): {"minItems": 1},
}

# Decimal inputs (strings): drf-spectacular's pattern admits a sign and no digits;
# these admit what the fields' bounds do (sizing.serializers.WorkloadInput).
POSITIVE_12_4 = r"^(0*[1-9]\d{0,7}(\.\d{0,4})?|0*\.([1-9]\d{0,3}|0[1-9]\d{0,2}|00[1-9]\d?|000[1-9]))$"  # > 0, at most 8 digits and 4 decimals
OVERHEAD_GB = r"^0*(\d{1,3}(\.\d{0,2})?|1000(\.0{0,2})?|\.\d{1,2})$"  # 0 to 1000, 2 decimals
API_PRICE = r"^0*(\d{1,6}(\.\d{0,4})?|\.\d{1,4})$"  # 0 to 999999.9999, 4 decimals
DECIMALS: dict[tuple[str, str], str] = {
    (component, name): pattern
    for component in ("CheckInputRequest", "RecommendInputRequest", "CompareInputRequest")
    for name, pattern in (("params_b", POSITIVE_12_4), ("active_params_b", POSITIVE_12_4), ("overhead_gb", OVERHEAD_GB))
} | {
    ("CompareInputRequest", "api_usd_per_million_input"): API_PRICE,
    ("CompareInputRequest", "api_usd_per_million_output"): API_PRICE,
}

# (component, property) -> the setting (a timedelta) that bounds it from above, in seconds.
SETTING_MAXIMA: dict[tuple[str, str], str] = {
    ("WebhookSecretRotateInputRequest", "overlap_seconds"): "WEBHOOK_SECRET_ROTATION_OVERLAP",
}

# (component, property) -> text added to the property's description: its rules that JSON Schema cannot say.
CONFIG_RULES = (
    " A config.json without the keys sizing reads of its architecture is refused with `malformed_config` "
    "(details.field); one sizing cannot read, with `unsupported_checkpoint` or `format_unsupported`."
)
DESCRIPTIONS: dict[tuple[str, str], str] = {
    ("CheckInputRequest", "architecture"): CONFIG_RULES,
    ("RecommendInputRequest", "architecture"): CONFIG_RULES,
    ("CompareInputRequest", "architecture"): CONFIG_RULES,
}

# (path, method) -> the refusals an operation answers for rules JSON Schema cannot say (its 400's text).
SIZING_RULES = (
    "Rules between fields, with their codes: `invalid` (details.fields.active_params_b) when `active_params_b` "
    "exceeds `params_b` (given, or the model's), `context_too_long` (the model's longest context), "
    "`lengths_exceed_context` (`input_tokens` + `output_tokens`, given or their defaults, longer than `context`), "
    "`malformed_config`, `unsupported_checkpoint`, `format_mismatch` (a config.json sizing cannot read, or a "
    "precision its quantization_config contradicts), `invalid` when `precision` is missing and the config.json "
    "has no quantization_config, and a model that does not fit: `does_not_fit`, `no_kv_cache_room`, "
    "`fp8_unsupported`, `fp8_load_does_not_fit`, `format_unsupported`, `model_unsupported`, "
    "`checkpoint_unknown`, `tp_indivisible`, `tp_misaligned` (docs/sizing.md)."
)
OPERATION_RULES: dict[tuple[str, str], str] = {
    ("/api/v1/sizing/check", "post"): SIZING_RULES + " `invalid_gpu_count`: a count the card does not come in.",
    ("/api/v1/sizing/recommend", "post"): SIZING_RULES,
    # compare answers a candidate that does not run the workload in its row, not with a refusal.
    ("/api/v1/sizing/compare", "post"): SIZING_RULES.split(", and a model that does not fit")[0]
    + ". A candidate that does not run the workload is a row with `fits` false and its reasons.",
}

# component -> keywords the component gains: a sizing body names `model` or
# `architecture`, exactly one; a rental's PATCH changes its one field.
# With `model`, `precision` is required (with `architecture` it may come from the
# config's quantization_config: a rule the schema cannot state).
MODEL_OR_ARCHITECTURE = {
    "oneOf": [
        {"required": ["model", "precision"], "not": {"required": ["architecture"]}},
        {"required": ["architecture"], "not": {"required": ["model"]}},
    ]
}
COMPONENT_KEYWORDS: dict[str, dict[str, Any]] = {
    "CheckInputRequest": MODEL_OR_ARCHITECTURE,
    "RecommendInputRequest": MODEL_OR_ARCHITECTURE,
    # A load is `concurrency` clients or a `requests_per_s` target, not both.
    "CompareInputRequest": {**MODEL_OR_ARCHITECTURE, "not": {"required": ["concurrency", "requests_per_s"]}},
    "PatchedRentalUpdateInputRequest": {"required": ["auto_renew"]},
}
# Header parameters -> keywords: an Idempotency-Key is 1 to 255 printable characters
# (rentals.services.idempotency; HTTP carries Latin-1, and drops the spaces around a value).
_PRINTABLE = "\\u0021-\\u007e\\u00a1-\\u00ac\\u00ae-\\u00ff"
HEADERS: dict[str, dict[str, Any]] = {
    "Idempotency-Key": {"pattern": f"^[{_PRINTABLE}]([{_PRINTABLE} ]{{0,253}}[{_PRINTABLE}])?$", "maxLength": 255},
}
# An order's `workload` is the body of /sizing/check without these.
WORKLOAD = ("CheckInputRequest", ("gpu", "gpu_count", "term"))

# New passwords: the validators' rules (AUTH_PASSWORD_VALIDATORS) in the text, their
# minimum length and "not only spaces" in the keywords.
NEW_PASSWORDS = (
    ("AccountCreateInputRequest", "password"),
    ("RecoverInputRequest", "new_password"),
    ("PasswordChangeInputRequest", "new_password"),
)
NOT_BLANK_PATTERN = "^[^\\u0000]*[^\\s\\u0000][^\\u0000]*$"


def _values(dotted: str, cache: dict[str, list[str]]) -> list[str]:
    """The values `dotted` lists; none when the database cannot be read (not
    migrated yet, or not reachable, as when `check --deploy` generates the
    schema on a host before its first migrate): the schema then has no enum
    there, and the API still refuses an unknown value with its code."""
    from django.db import DatabaseError
    from django.utils.module_loading import import_string

    if dotted not in cache:
        try:
            cache[dotted] = list(import_string(dotted)())
        except DatabaseError as exc:
            log.warning("schema: %s could not be read (%s); no enum for it", dotted, type(exc).__name__)
            cache[dotted] = []
    return cache[dotted]


def _property(components: dict[str, Any], component: str, name: str) -> dict[str, Any]:
    """The schema of `component`'s property `name` (`name[]`: its items); a
    KeyError names what is missing, so a renamed field fails the schema's tests."""
    item = name.endswith("[]")
    prop: dict[str, Any] = components[component]["properties"][name.removesuffix("[]")]
    return prop["items"] if item else prop


def _password_rules() -> tuple[int | None, str]:
    """The validators' minimum length (MinimumLengthValidator.min_length) and their rules in words."""
    from django.contrib.auth.password_validation import get_default_password_validators, password_validators_help_texts

    min_length = None
    for validator in get_default_password_validators():
        min_length = getattr(validator, "min_length", min_length)
    text = " ".join(password_validators_help_texts())
    return min_length, f"Refused with `weak_password` (details.messages) unless: {text}"


def _no_nul(schema: Any) -> None:
    """Every string schema under `schema` without a pattern, enum or format gains NO_NUL_PATTERN."""
    if isinstance(schema, list):
        for item in schema:
            _no_nul(item)
        return
    if not isinstance(schema, dict):
        return
    if schema.get("type") == "string" and not ({"pattern", "enum", "format"} & set(schema)):
        # DRF trims the spaces around a value before it checks that it is not blank.
        schema["pattern"] = NOT_BLANK_PATTERN if schema.get("minLength", 0) >= 1 else NO_NUL_PATTERN
    for key in ("properties", "items", "allOf", "anyOf", "oneOf"):
        value = schema.get(key)
        if isinstance(value, dict) and key == "properties":
            _no_nul(list(value.values()))
        elif value is not None:
            _no_nul(value)


def rules_complete(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    """The rules above, written into the schema (a drf-spectacular postprocessing hook)."""
    components = result.get("components", {}).get("schemas", {})
    cache: dict[str, list[str]] = {}
    for key, dotted in ENUMS.items():
        values = _values(dotted, cache)
        if not values:  # an empty catalog: no enum (OpenAPI wants at least one value)
            continue
        if key[0] == "query":
            _, path, name = key
            [parameter] = [
                p for p in result["paths"][path]["get"]["parameters"] if p["in"] == "query" and p["name"] == name
            ]
            target = parameter["schema"]
        else:
            target = _property(components, *key)
        target["enum"] = values
        target.pop("pattern", None)
    for key, keywords in KEYWORDS.items():
        _property(components, *key).update(keywords)
    for key, pattern in DECIMALS.items():
        _property(components, *key)["pattern"] = pattern
    for key, setting in SETTING_MAXIMA.items():
        from django.conf import settings

        _property(components, *key)["maximum"] = int(getattr(settings, setting).total_seconds())
    for (path, method), text in OPERATION_RULES.items():
        responses = result["paths"][path][method]["responses"]
        own = responses.setdefault("400", _error(_SHARED["400"]))
        own["description"] = f"{own['description']} {text}"
    for key, text in DESCRIPTIONS.items():
        prop = _property(components, *key)
        prop["description"] = prop.get("description", "") + text
    for name, keywords in COMPONENT_KEYWORDS.items():
        components[name].update(copy.deepcopy(keywords))
    check, left_out = WORKLOAD
    workload = _property(components, "OrderCreateInputRequest", "workload")
    workload.update(
        type="object",
        properties={k: copy.deepcopy(v) for k, v in components[check]["properties"].items() if k not in left_out},
        **copy.deepcopy(MODEL_OR_ARCHITECTURE),
    )
    min_length, text = _password_rules()
    for key in NEW_PASSWORDS:
        prop = _property(components, *key)
        prop["pattern"] = NOT_BLANK_PATTERN
        if min_length:
            prop["minLength"] = min_length
        prop["description"] = f"{prop.get('description', '')} {text}".strip()
    for name, component in components.items():
        if name.endswith("Request"):
            _no_nul(component)
    for item in result.get("paths", {}).values():
        for operation in item.values():
            if not isinstance(operation, dict):
                continue
            for parameter in operation.get("parameters", []):
                if parameter.get("in") == "query":
                    _no_nul(parameter.get("schema"))
                elif parameter.get("in") == "header" and parameter.get("name") in HEADERS:
                    parameter["schema"].update(HEADERS[parameter["name"]])
            # A body with a required field (or a choice of them) must be sent.
            body = operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
            ref = body.get("$ref", "").rsplit("/", 1)[-1]
            if ref in components and ({"required", "oneOf"} & set(components[ref])):
                operation["requestBody"]["required"] = True
    return result


# --- Links ----------------------------------------------------------------------
#
# Each create (a POST to a collection answering 201 with the new object's `id`)
# links to every operation on that object (the paths under `<collection>/{id}`),
# so a client, and schemathesis's stateful phase, can follow one to the others.


def _id_parameter(path: str, collection: str) -> str | None:
    """The path parameter naming the created object in `path`, when `path` is under `collection/{...}`."""
    prefix = f"{collection}/{{"
    if not path.startswith(prefix):
        return None
    name, _, _ = path[len(prefix) :].partition("}")
    return name


# A create whose objects are listed under another path.
COLLECTIONS = {"/api/v1/auth/token": "/api/v1/auth/tokens"}


def links_complete(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    paths = result.get("paths", {})
    for create_path, item in paths.items():
        collection = COLLECTIONS.get(create_path, create_path)
        create = item.get("post")
        if not isinstance(create, dict) or "201" not in create.get("responses", {}):
            continue
        links: dict[str, Any] = {}
        for path, other in paths.items():
            name = _id_parameter(path, collection)
            if name is None or path.count("{") != collection.count("{") + 1:
                continue
            for operation in other.values():
                if isinstance(operation, dict) and "operationId" in operation:
                    links[operation["operationId"]] = {
                        "operationId": operation["operationId"],
                        "parameters": {name: "$response.body#/id"},
                    }
        if links:
            create["responses"]["201"]["links"] = links
    return result
