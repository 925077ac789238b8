import pytest
from drf_spectacular.generators import SchemaGenerator
from openapi_spec_validator import validate

pytestmark = pytest.mark.django_db

# path, method, request component (None: no body), success status, success component (None: no body)
ENDPOINTS = [
    ("/api/v1/accounts", "post", "AccountCreateInputRequest", "201", "AccountCreatedOutput"),
    ("/api/v1/auth/token", "post", "TokenObtainInputRequest", "201", "TokenIssuedOutput"),
    ("/api/v1/auth/tokens", "get", None, "200", "TokenOutputPage"),
    ("/api/v1/auth/tokens/{token_id}", "delete", None, "204", None),
    ("/api/v1/auth/recover", "post", "RecoverInputRequest", "200", "RecoveredOutput"),
    ("/api/v1/account", "get", None, "200", "AccountOutput"),
    ("/api/v1/account", "delete", "PasswordConfirmInputRequest", "204", None),
    ("/api/v1/account/password", "post", "PasswordChangeInputRequest", "204", None),
    ("/api/v1/account/recovery-codes", "post", "PasswordConfirmInputRequest", "200", "RecoveryCodesOutput"),
    ("/api/v1/account/ssh-keys", "get", None, "200", "SshKeyOutputPage"),
    ("/api/v1/account/ssh-keys", "post", "SshKeyCreateInputRequest", "201", "SshKeyOutput"),
    ("/api/v1/account/ssh-keys/{ssh_key_id}", "get", None, "200", "SshKeyOutput"),
    ("/api/v1/account/ssh-keys/{ssh_key_id}", "delete", None, "204", None),
]
PUBLIC = {("/api/v1/accounts", "post"), ("/api/v1/auth/token", "post"), ("/api/v1/auth/recover", "post")}


@pytest.fixture(scope="module")
def schema(django_db_blocker):
    with django_db_blocker.unblock():
        return SchemaGenerator().get_schema(request=None, public=True)


def test_schema_is_valid_openapi(schema):
    validate(schema)


@pytest.mark.parametrize(("path", "method", "request_ref", "status", "response_ref"), ENDPOINTS)
def test_every_endpoint_is_described(schema, path, method, request_ref, status, response_ref):
    operation = schema["paths"][path][method]
    if request_ref:
        body = operation["requestBody"]["content"]["application/json"]["schema"]
        assert body["$ref"] == f"#/components/schemas/{request_ref}"
    else:
        assert "requestBody" not in operation
    response = operation["responses"][status]
    if response_ref:
        content = response["content"]["application/json"]["schema"]
        ref = content.get("$ref") or content["items"]["$ref"]
        assert ref == f"#/components/schemas/{response_ref}"
    else:
        assert "content" not in response
    errors = [code for code in operation["responses"] if code.startswith("4")]
    assert errors
    for code in errors:
        ref = operation["responses"][code]["content"]["application/json"]["schema"]["$ref"]
        assert ref == "#/components/schemas/ErrorOutput"
    if (path, method) in PUBLIC:
        assert not operation.get("security")
    else:
        assert operation["security"] == [{"bearerAuth": []}]
        assert "401" in operation["responses"]


def test_schema_is_served(api):
    resp = api.get("/api/schema/", {"format": "json"})
    assert resp.status_code == 200
    assert "/api/v1/accounts" in resp.json()["paths"]
