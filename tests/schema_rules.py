"""What the API refuses that a request's shape cannot show, by name: the suite's
schemathesis run (tests/core/test_schema.py) and the live run (bench/schema_live.py,
through tests/schema_hooks.py) accept a refusal of a schema-valid request only when
it is one of these, each with why JSON Schema cannot state it. Each is also in the
operation's or the field's text in the schema, with its error code."""

from __future__ import annotations

# Every check schemathesis has, each as configured by default: a request the schema
# calls valid is accepted (2xx), or refused for want of credentials or a conflict
# with the account's state (401, 403, 404, 409, 429). A 400 or 422 on such a request
# is a rule missing from the schema, except for the rules below, which JSON Schema
# cannot state: each is described in its operation's text with its error code. Keyed
# by name (rule_names): the error code, with details.reason or the field where the
# code covers more than one rule.
RULES_THE_SCHEMA_CANNOT_STATE = {
    "weak_password": "a password's strength (common, numeric, like the username) is judged by the validators",
    "invalid_username:reserved": "reserved names (admin, support, ...) are a list, not a pattern",
    "invalid_ssh_key": "a public key's base64 must decode to a key of the type named, of enough bits",
    "idempotency_key_reused": "an Idempotency-Key remembers the first body sent with it (state, not shape)",
    "unknown_ssh_key": "the SSH key ids must be the account's own",
    "invalid_gpu_count": "a card's allowed counts (catalog: allowed_counts) depend on the card chosen",
    "min_gpus": "a card's minimum count depends on the card chosen",
    "template_incompatible": "a template runs on some cards only",
    "malformed_config": "a config.json must carry the keys of a known architecture (docs/sizing.md)",
    "unsupported_checkpoint": "a config.json's quantization sizing cannot read",
    "format_mismatch": "a precision that contradicts the config.json's quantization_config",
    "invalid:active_params_b: exceeds params_b": "active parameters at most the total (given, or the model's)",
    "context_too_long": "a model's longest context is the model's own",
    "lengths_exceed_context": "a request's mean lengths (input_tokens + output_tokens) must fit its context",
    # A model that does not fit the card(s) asked for (an order's workload; a recommendation with no candidate).
    **dict.fromkeys(
        (
            "does_not_fit",
            "no_kv_cache_room",
            "fp8_unsupported",
            "fp8_load_does_not_fit",
            "format_unsupported",
            "model_unsupported",
            "checkpoint_unknown",
            "tp_indivisible",
            "tp_misaligned",
        ),
        "whether a model fits depends on the model, the card and the count together",
    ),
    "invalid_cursor": "a list's cursor is a value the server made (a `next` or `previous` link's), not a shape",
    "invalid_url": "a URL's syntax and characters (no spaces, control or invisible ones)",
    "https_required": "a webhook URL is https://",
    "target_not_allowed": "a webhook URL may not lead to a private, loopback or reserved address",
    "unresolvable_host": "a webhook URL's host must resolve",
}


def content_type(response) -> str:
    return (response.headers.get("content-type") or [""])[0]  # schemathesis: lower-case names, lists of values


def rule_names(error: dict) -> set[str]:
    """The names a refusal goes by in RULES_THE_SCHEMA_CANNOT_STATE: its code, `code:reason`, and
    for `invalid` with one field's one message `invalid:field: message`."""
    details = error["details"] if isinstance(error["details"], dict) else {}
    names = {error["code"], f"{error['code']}:{details.get('reason')}"}
    fields = details.get("fields")
    if isinstance(fields, dict) and len(fields) == 1:
        [(field, messages)] = fields.items()
        if isinstance(messages, list) and len(messages) == 1:
            names.add(f"{error['code']}:{field}: {messages[0]}")
    return names


def refusal_allowed(response) -> bool:
    """Whether `response` is a refusal by one of RULES_THE_SCHEMA_CANNOT_STATE (checked in the error shape)."""
    if not (400 <= response.status_code < 500 and content_type(response).startswith("application/json")):
        return False
    body = response.json()
    assert set(body) == {"error"} and {"code", "message", "details"} <= set(body["error"]), body
    return bool(rule_names(body["error"]) & set(RULES_THE_SCHEMA_CANNOT_STATE))
