import pytest
from django.db import IntegrityError, connection

from accounts.models import Account
from tests.accounts.helpers import PASSWORD

pytestmark = pytest.mark.django_db


def _signup(api, username):
    return api.post("/api/v1/accounts", {"username": username, "password": PASSWORD}, format="json")


@pytest.mark.parametrize(
    "username",
    ["abc", "a" * 32, "user.name", "under_score", "dash-name", "0xdeadbeef", "node-42.dfw"],
)
def test_accepted_usernames(api, username):
    resp = _signup(api, username)
    assert resp.status_code == 201, resp.json()
    assert resp.json()["username"] == username


@pytest.mark.parametrize("username", ["ab", "a" * 33, "", "x"])
def test_length_is_3_to_32(api, username):
    resp = _signup(api, username)
    assert resp.status_code == 400
    error = resp.json()["error"]
    if username:  # an empty string is refused by the input serializer already
        assert error["code"] == "invalid_username"
        assert error["details"]["reason"] == "length"
    else:
        assert error["code"] == "invalid"
    assert not Account.objects.exists()


@pytest.mark.parametrize(
    "username", ["with space", "ümlaut", "semi;colon", "at@sign", "slash/name", "tab\tname", "emoji🙂"]
)
def test_only_a_to_z_digits_underscore_dot_hyphen(api, username):
    resp = _signup(api, username)
    assert resp.status_code == 400
    assert resp.json()["error"]["code"] == "invalid_username"
    assert resp.json()["error"]["details"]["reason"] == "characters"


@pytest.mark.parametrize(
    "username",
    [
        "admin",
        "root",
        "support",
        "staff",
        "security",
        "billing",
        "abuse",
        "api",
        "system",
        "Admin",
        "SUPPORT",
        "ad.min",
        "root_",
        "sys-admin",
        "postmaster",
        "gpurenthub",
    ],
)
def test_reserved_names_refused(api, username):
    resp = _signup(api, username)
    assert resp.status_code == 400
    error = resp.json()["error"]
    assert error["code"] == "invalid_username"
    assert error["details"]["reason"] == "reserved"


def test_names_that_merely_contain_a_reserved_word_are_fine(api):
    assert _signup(api, "rootbeer").status_code == 201
    assert _signup(api, "adminton").status_code == 201


def test_case_insensitive_uniqueness(api):
    assert _signup(api, "Carol").status_code == 201
    for variant in ("carol", "CAROL", "cArOl"):
        resp = _signup(api, variant)
        assert resp.status_code == 409
        assert resp.json()["error"]["code"] == "username_taken"
    assert list(Account.objects.values_list("username", flat=True)) == ["carol"]


def test_database_refuses_upper_case_and_bad_characters():
    with pytest.raises(IntegrityError):
        Account.objects.create(username="Dave")


def test_database_holds_a_case_insensitive_unique_index():
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'account_username_ci_unique'")
        (indexdef,) = cursor.fetchone()
    assert indexdef.startswith("CREATE UNIQUE INDEX")
    assert "lower((username)" in indexdef.lower()
