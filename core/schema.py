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

from typing import Any

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


def error_responses_complete(result: dict[str, Any], generator, request, public) -> dict[str, Any]:
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
