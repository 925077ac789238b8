import base64
import hashlib
import struct
import subprocess

import pytest
from cryptography.hazmat.primitives.asymmetric import ed25519
from django.db import IntegrityError

from accounts.models import Account, SshKey
from tests.accounts.helpers import openssh_line

pytestmark = pytest.mark.django_db

ACCEPTED = ["ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521", "ssh-rsa"]
BITS = {
    "ssh-ed25519": 256,
    "ecdsa-sha2-nistp256": 256,
    "ecdsa-sha2-nistp384": 384,
    "ecdsa-sha2-nistp521": 521,
    "ssh-rsa": 2048,
}


def openssh_fingerprint(line: str) -> str:
    """What `ssh-keygen -l -E sha256` prints: SHA256 of the decoded blob,
    base64 without padding."""
    blob = base64.b64decode(line.split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def _add(client, public_key, name="laptop"):
    return client.post("/api/v1/account/ssh-keys", {"name": name, "public_key": public_key}, format="json")


@pytest.mark.parametrize("key_type", ACCEPTED)
def test_every_accepted_type(alice, ssh_private_keys, key_type):
    _body, client = alice
    line = openssh_line(ssh_private_keys[key_type], "alice@laptop")

    resp = _add(client, line)

    assert resp.status_code == 201, resp.json()
    body = resp.json()
    assert body["type"] == key_type
    assert body["bits"] == BITS[key_type]
    assert body["fingerprint"] == openssh_fingerprint(line)
    assert body["name"] == "laptop"
    assert body["comment"] == "alice@laptop"
    assert body["public_key"] == line
    assert {"id", "name", "fingerprint", "type", "bits", "created_at"} <= set(body)
    stored = SshKey.objects.get(pk=body["id"])
    assert stored.fingerprint == openssh_fingerprint(line)


@pytest.mark.parametrize("key_type", ACCEPTED)
def test_fingerprint_matches_ssh_keygen(alice, ssh_private_keys, key_type, tmp_path):
    _body, client = alice
    line = openssh_line(ssh_private_keys[key_type], "alice@laptop")
    path = tmp_path / "key.pub"
    path.write_text(line + "\n")
    out = subprocess.run(
        ["ssh-keygen", "-l", "-E", "sha256", "-f", str(path)], capture_output=True, text=True, check=True
    ).stdout.split()
    resp = _add(client, line)
    assert resp.json()["fingerprint"] == out[1]
    assert resp.json()["bits"] == int(out[0])


def test_comment_with_spaces_is_kept_and_names_the_key_by_default(alice, ssh_private_keys):
    _body, client = alice
    line = openssh_line(ssh_private_keys["ssh-ed25519"], "work laptop (2025)")
    resp = client.post("/api/v1/account/ssh-keys", {"public_key": "  " + line + "\n"}, format="json")
    assert resp.status_code == 201, resp.json()
    assert resp.json()["comment"] == "work laptop (2025)"
    assert resp.json()["name"] == "work laptop (2025)"
    assert resp.json()["public_key"] == line


def test_rsa_1024_refused(alice, ssh_private_keys):
    _body, client = alice
    resp = _add(client, openssh_line(ssh_private_keys["rsa-1024"]))
    assert resp.status_code == 400
    error = resp.json()["error"]
    assert error["code"] == "invalid_ssh_key"
    assert error["details"]["bits"] == 1024
    assert error["details"]["min_bits"] == 2048
    assert not SshKey.objects.exists()


def _ed25519_b64() -> str:
    return openssh_line(ed25519.Ed25519PrivateKey.generate()).split()[1]


@pytest.mark.parametrize(
    "public_key",
    [
        pytest.param("hello world", id="words"),
        pytest.param("ssh-ed25519", id="type-only"),
        pytest.param("ssh-ed25519 not-base64!!!", id="not-base64"),
        pytest.param("ssh-ed25519 " + base64.b64encode(b"\x00" * 51).decode(), id="random-blob"),
        pytest.param("ssh-rsa " + "PLACEHOLDER", id="type-mismatch"),
        pytest.param("ecdsa-sha2-nistp384 " + "PLACEHOLDER", id="type-mismatch-ecdsa"),
        pytest.param("ssh-ed25519 " + "PLACEHOLDER" + "AAAA", id="trailing-bytes"),
        pytest.param("ssh-ed25519 PLACEHOLDER a\nssh-ed25519 PLACEHOLDER b", id="two-lines"),
        pytest.param('from="10.0.0.1" ssh-ed25519 PLACEHOLDER', id="authorized-keys-options"),
        pytest.param("ssh-ed25519 PLACEHOLDER evil\x1bcomment", id="control-character"),
        pytest.param("ssh-ed25519 PLACEHOLDER " + "c" * 300, id="comment-too-long"),
        pytest.param("sk-ssh-ed25519@openssh.com PLACEHOLDER", id="security-key-type"),
        pytest.param("-----BEGIN OPENSSH PRIVATE KEY-----", id="private-key"),
    ],
)
def test_garbage_refused(alice, public_key):
    _body, client = alice
    public_key = public_key.replace("PLACEHOLDER", _ed25519_b64())
    resp = _add(client, public_key)
    assert resp.status_code == 400, resp.json()
    assert resp.json()["error"]["code"] == "invalid_ssh_key"
    assert not SshKey.objects.exists()


def _ssh_string(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def test_dsa_refused(alice):
    _body, client = alice
    # An ssh-dss blob: the type, then p, q, g and y (values do not matter, the type is refused).
    blob = _ssh_string(b"ssh-dss") + b"".join(_ssh_string(bytes([0x7F]) * n) for n in (128, 20, 128, 128))
    resp = _add(client, "ssh-dss " + base64.b64encode(blob).decode())
    assert resp.status_code == 400
    assert resp.json()["error"]["code"] == "invalid_ssh_key"
    assert "ssh-ed25519" in resp.json()["error"]["details"]["accepted_types"]


def test_empty_key_refused(alice):
    _body, client = alice
    resp = _add(client, "")
    assert resp.status_code == 400
    assert resp.json()["error"]["code"] == "invalid"


def test_duplicates_refused_even_with_another_comment(alice, ssh_private_keys):
    _body, client = alice
    key = ssh_private_keys["ecdsa-sha2-nistp256"]
    first = _add(client, openssh_line(key, "one"))
    assert first.status_code == 201
    resp = _add(client, openssh_line(key, "two"), name="again")
    assert resp.status_code == 409
    error = resp.json()["error"]
    assert error["code"] == "duplicate_ssh_key"
    assert error["details"]["id"] == first.json()["id"]
    assert SshKey.objects.count() == 1


def test_the_same_key_on_two_accounts_is_fine(alice, signup, client_with, ssh_private_keys):
    _body, client = alice
    bob = client_with(signup("bob")["token"])
    line = openssh_line(ssh_private_keys["ssh-ed25519"])
    assert _add(client, line).status_code == 201
    assert _add(bob, line).status_code == 201


def test_database_refuses_a_duplicate_key_per_account(alice):
    account = Account.objects.get(username="alice")
    fields = {
        "name": "k",
        "key_type": "ssh-ed25519",
        "bits": 256,
        "fingerprint": "SHA256:abc",
        "public_key": "ssh-ed25519 x",
    }
    SshKey.objects.create(account=account, **fields)
    with pytest.raises(IntegrityError):
        SshKey.objects.create(account=account, **fields)


def test_database_refuses_rsa_below_2048_bits(alice):
    account = Account.objects.get(username="alice")
    with pytest.raises(IntegrityError):
        SshKey.objects.create(
            account=account, name="k", key_type="ssh-rsa", bits=1024, fingerprint="SHA256:abc", public_key="ssh-rsa x"
        )


def test_list_get_and_delete(alice, signup, client_with, ssh_private_keys):
    _body, client = alice
    a = _add(client, openssh_line(ssh_private_keys["ssh-ed25519"]), name="a").json()
    b = _add(client, openssh_line(ssh_private_keys["ssh-rsa"]), name="b").json()
    bob = client_with(signup("bob")["token"])

    listed = client.get("/api/v1/account/ssh-keys")
    assert listed.status_code == 200
    assert [k["name"] for k in listed.json()["results"]] == ["a", "b"]
    assert bob.get("/api/v1/account/ssh-keys").json()["results"] == []

    assert client.get(f"/api/v1/account/ssh-keys/{a['id']}").json()["fingerprint"] == a["fingerprint"]
    assert bob.get(f"/api/v1/account/ssh-keys/{a['id']}").status_code == 404
    denied = bob.delete(f"/api/v1/account/ssh-keys/{a['id']}")
    assert denied.status_code == 404
    assert denied.json()["error"]["code"] == "ssh_key_not_found"

    assert client.delete(f"/api/v1/account/ssh-keys/{a['id']}").status_code == 204
    assert [k["id"] for k in client.get("/api/v1/account/ssh-keys").json()["results"]] == [b["id"]]
    assert client.delete(f"/api/v1/account/ssh-keys/{a['id']}").status_code == 404


def test_ssh_keys_need_a_token(api):
    resp = api.get("/api/v1/account/ssh-keys")
    assert resp.status_code == 401
    assert resp.json()["error"]["code"] == "not_authenticated"
