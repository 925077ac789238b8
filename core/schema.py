"""Postprocessing of the OpenAPI schema (drf-spectacular): every 4xx an
operation can answer is in its responses, so clients and schema checkers
(schemathesis with all checks) can rely on the list. The views document their
own refusals; this adds the ones every operation of a kind shares:

- 400 where a body or a query is read (malformed JSON, `nesting_too_deep`, `invalid`);
- 401 where a token is needed (none, unknown or revoked);
- 403 on the staff-only /ops/ endpoints (`permission_denied`);
- 404 where the path names an object (not there, or another account's).
"""

from __future__ import annotations

from typing import Any

_ERROR_SCHEMA = {"$ref": "#/components/schemas/ErrorOutput"}

_SHARED = {
    "400": "Invalid input: `parse_error`, `nesting_too_deep`, `invalid` (details.fields), or the rule's own code.",
    "401": "No valid token (`not_authenticated`, `authentication_failed`).",
    "403": "`permission_denied`: staff tokens only.",
    "404": "`not_found`: no such object (or not yours).",
}


def _error(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": _ERROR_SCHEMA}}}


def error_responses_complete(result: dict[str, Any], generator, request, public) -> dict[str, Any]:
    for path, item in result.get("paths", {}).items():
        for operation in item.values():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            responses = operation["responses"]
            parameters = operation.get("parameters", [])
            wanted = []
            if "requestBody" in operation or any(p.get("in") == "query" for p in parameters):
                wanted.append("400")
            if operation.get("security", result.get("security")) not in (None, [], [{}]):
                wanted.append("401")
            if path.startswith("/api/v1/ops/"):
                wanted.append("403")
            if any(p.get("in") == "path" for p in parameters):
                wanted.append("404")
            for status in wanted:
                responses.setdefault(status, _error(_SHARED[status]))
    return result
