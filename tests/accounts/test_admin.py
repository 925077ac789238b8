import pytest
from django.test import Client

from accounts.models import Account, ApiToken
from core.models import AuditEntry
from tests.accounts.helpers import PASSWORD

pytestmark = pytest.mark.django_db


@pytest.fixture
def boss():
    return Account.objects.create_superuser("boss", PASSWORD)


@pytest.fixture
def admin_client(boss) -> Client:
    client = Client()
    client.force_login(boss)
    return client


def test_changelist_and_search(admin_client, signup):
    signup("alice")
    signup("bob")
    resp = admin_client.get("/admin/accounts/account/", {"q": "ali"})
    assert resp.status_code == 200
    shown = [a.username for a in resp.context["cl"].result_list]
    assert shown == ["alice"]


def test_no_email_anywhere_in_the_admin(admin_client, signup):
    signup("alice")
    alice = Account.objects.get(username="alice")
    for url in ("/admin/accounts/account/add/", f"/admin/accounts/account/{alice.pk}/change/"):
        resp = admin_client.get(url)
        assert resp.status_code == 200
        assert not [name for name in resp.context["adminform"].form.fields if "mail" in name]
    changelist = admin_client.get("/admin/accounts/account/")
    assert "email" not in [str(c) for c in changelist.context["cl"].list_display]
    assert b"mail" not in changelist.content.lower()


def test_staff_create_a_staff_account(admin_client, boss):
    resp = admin_client.post(
        "/admin/accounts/account/add/",
        {"username": "Support", "password1": PASSWORD, "password2": PASSWORD},
    )
    assert resp.status_code == 302, resp.context["adminform"].form.errors if resp.context else resp
    created = Account.objects.get(username="support")  # reserved for customers, fine for staff
    assert created.is_staff is True
    assert created.is_superuser is False
    assert created.check_password(PASSWORD)
    entry = AuditEntry.objects.get(action="account.create_staff")
    assert entry.actor == boss
    assert "argon2" not in str(entry.changes)


def test_admin_refuses_bad_and_taken_usernames(admin_client, signup):
    signup("alice")
    for username in ("ALICE", "bad name", "x"):
        resp = admin_client.post(
            "/admin/accounts/account/add/", {"username": username, "password1": PASSWORD, "password2": PASSWORD}
        )
        assert resp.status_code == 200
        assert "username" in resp.context["adminform"].form.errors
    assert Account.objects.count() == 2  # alice and boss


def test_deactivate_action_revokes_tokens(admin_client, boss, signup, client_with):
    token = signup("alice")["token"]
    alice = Account.objects.get(username="alice")
    resp = admin_client.post(
        "/admin/accounts/account/",
        {"action": "deactivate_accounts", "_selected_action": [alice.pk, boss.pk]},
    )
    assert resp.status_code == 302
    alice.refresh_from_db()
    boss.refresh_from_db()
    assert alice.is_active is False
    assert boss.is_active is True  # never yourself
    assert not ApiToken.objects.filter(account=alice, revoked_at__isnull=True).exists()
    assert client_with(token).get("/api/v1/account").status_code == 401
    assert AuditEntry.objects.filter(action="account.deactivate", actor=boss).count() == 1


def test_accounts_cannot_be_deleted_in_admin(admin_client, signup):
    signup("alice")
    alice = Account.objects.get(username="alice")
    assert admin_client.get(f"/admin/accounts/account/{alice.pk}/delete/").status_code == 403
    assert Account.objects.filter(pk=alice.pk).exists()


def test_tokens_and_keys_are_shown_read_only(admin_client, signup):
    signup("alice")
    alice = Account.objects.get(username="alice")
    resp = admin_client.get(f"/admin/accounts/account/{alice.pk}/change/")
    inlines = {f.opts.model.__name__: f for f in resp.context["inline_admin_formsets"]}
    assert set(inlines) == {"ApiToken", "SshKey"}
    assert all(not f.has_add_permission and not f.has_change_permission for f in inlines.values())
    assert alice.api_tokens.get().prefix.encode() in resp.content
    assert "scope" in inlines["ApiToken"].opts.fields


def test_staff_password_reset_revokes_tokens(admin_client, signup, client_with):
    token = signup("alice")["token"]
    alice = Account.objects.get(username="alice")
    new = "brand-new-harbour-pass-7"
    resp = admin_client.post(
        f"/admin/accounts/account/{alice.pk}/password/",
        {"password1": new, "password2": new, "usable_password": "true"},
    )
    assert resp.status_code == 302
    alice.refresh_from_db()
    assert alice.check_password(new)
    assert client_with(token).get("/api/v1/account").status_code == 401
    assert AuditEntry.objects.filter(action="account.password_reset").exists()


def test_non_superuser_staff_cannot_grant_rights(signup):
    from django.contrib.auth.models import Permission

    clerk = Account.objects.create_user("clerk", PASSWORD, is_staff=True)
    clerk.user_permissions.add(*Permission.objects.filter(codename__in=["view_account", "change_account"]))
    signup("alice")
    alice = Account.objects.get(username="alice")
    client = Client()
    client.force_login(clerk)
    resp = client.get(f"/admin/accounts/account/{alice.pk}/change/")
    assert resp.status_code == 200
    editable = set(resp.context["adminform"].form.fields)
    assert "is_active" in editable
    assert not editable & {"is_staff", "is_superuser", "groups", "user_permissions"}


def test_change_form_saves_and_audits_without_the_password_hash(admin_client, boss, signup):
    signup("alice")
    alice = Account.objects.get(username="alice")
    token = alice.api_tokens.get()
    inline = {"MIN_NUM_FORMS": "0", "MAX_NUM_FORMS": "1000"}
    data = {
        # is_active left out: the checkbox is cleared.
        "api_tokens-TOTAL_FORMS": "1",
        "api_tokens-INITIAL_FORMS": "1",
        "api_tokens-0-id": str(token.pk),
        "api_tokens-0-account": str(alice.pk),
        "ssh_keys-TOTAL_FORMS": "0",
        "ssh_keys-INITIAL_FORMS": "0",
        **{f"api_tokens-{k}": v for k, v in inline.items()},
        **{f"ssh_keys-{k}": v for k, v in inline.items()},
    }
    resp = admin_client.post(f"/admin/accounts/account/{alice.pk}/change/", data)
    assert resp.status_code == 302, resp.context["adminform"].form.errors if resp.context else resp
    alice.refresh_from_db()
    assert alice.is_active is False
    # Switched off: audited as a deactivation (tokens revoked), with no hash in it.
    entry = AuditEntry.objects.get(action="account.deactivate", object_id=str(alice.pk))
    assert entry.actor == boss and entry.reason == "admin form"
    assert entry.changes["is_active"] == [True, False] and "argon2" not in str(entry.changes)
    assert not AuditEntry.objects.filter(action="admin.change", object_id=str(alice.pk)).exists()


def _clerk(*codenames):
    """A member of staff, not a superuser, holding these permissions."""
    from django.contrib.auth.models import Permission

    clerk = Account.objects.create_user("clerk", PASSWORD, is_staff=True)
    clerk.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    client = Client()
    client.force_login(clerk)
    return clerk, client


def test_a_member_of_staff_cannot_take_over_another_staff_account(boss, signup):
    _clerk_account, client = _clerk("view_account", "change_account")
    colleague = Account.objects.create_user("colleague", PASSWORD, is_staff=True)
    signup("alice")
    alice = Account.objects.get(username="alice")
    new = "brand-new-harbour-pass-7"
    form = {"password1": new, "password2": new, "usable_password": "true"}
    for target in (boss, colleague):
        # Setting its password would let the clerk sign in as it, with its rights.
        assert client.get(f"/admin/accounts/account/{target.pk}/password/").status_code == 403
        assert client.post(f"/admin/accounts/account/{target.pk}/password/", form).status_code == 403
        target.refresh_from_db()
        assert target.check_password(PASSWORD)
        # Its page is shown read-only, and a post to it is refused.
        page = client.get(f"/admin/accounts/account/{target.pk}/change/")
        assert page.status_code == 200 and not page.context["has_change_permission"]
        # with the password's summary and no reset button (it would lead to the 403 above)
        html = page.content.decode()
        assert "algorithm" in html and "../password/" not in html and "Reset password" not in html
        assert client.post(f"/admin/accounts/account/{target.pk}/change/", {"username": "x"}).status_code == 403
    resp = client.post(
        "/admin/accounts/account/",
        {"action": "deactivate_accounts", "_selected_action": [boss.pk, colleague.pk, alice.pk]},
        follow=True,
    )
    assert resp.status_code == 200
    assert "only a superuser deactivates it" in resp.content.decode()
    assert set(Account.objects.filter(is_active=False).values_list("username", flat=True)) == {"alice"}
    # A customer's password is still the clerk's to reset, from its page's button.
    assert "../password/" in client.get(f"/admin/accounts/account/{alice.pk}/change/").content.decode()
    assert client.post(f"/admin/accounts/account/{alice.pk}/password/", form).status_code == 302
    alice.refresh_from_db()
    assert alice.check_password(new)


def test_ones_own_password_is_not_set_without_the_current_one(boss):
    """A member of staff (a superuser too) on their own account's reset page is
    sent to the page that asks for the current password: set there, a stolen
    session could lock the owner out."""
    clerk, client = _clerk("view_account", "change_account")
    superuser = Client()
    superuser.force_login(boss)
    new = "brand-new-harbour-pass-7"
    form = {"password1": new, "password2": new, "usable_password": "true"}
    for account, session in ((clerk, client), (boss, superuser)):
        for resp in (
            session.get(f"/admin/accounts/account/{account.pk}/password/"),
            session.post(f"/admin/accounts/account/{account.pk}/password/", form),
        ):
            assert resp.status_code == 302 and resp["Location"] == "/admin/password_change/"
        account.refresh_from_db()
        assert account.check_password(PASSWORD)


def test_groups_are_a_superusers_to_change_and_changes_are_audited(admin_client, boss):
    from django.contrib.auth.models import Group, Permission

    group = Group.objects.create(name="billing")
    clerk, client = _clerk("view_group", "add_group", "change_group", "delete_group")
    clerk.groups.add(group)
    grant = Permission.objects.get(codename="change_account")
    # Editing a group one belongs to would grant its rights to oneself.
    assert (
        client.post(f"/admin/auth/group/{group.pk}/change/", {"name": "billing", "permissions": [grant.pk]}).status_code
        == 403
    )
    assert client.post("/admin/auth/group/add/", {"name": "mine", "permissions": [grant.pk]}).status_code == 403
    assert client.post(f"/admin/auth/group/{group.pk}/delete/", {"post": "yes"}).status_code == 403
    assert not group.permissions.exists() and Group.objects.count() == 1
    clerk = Account.objects.get(pk=clerk.pk)
    assert not clerk.has_perm("accounts.change_account")

    resp = admin_client.post(f"/admin/auth/group/{group.pk}/change/", {"name": "billing", "permissions": [grant.pk]})
    assert resp.status_code == 302
    assert list(group.permissions.all()) == [grant]
    entry = AuditEntry.objects.get(action="admin.change", object_id=str(group.pk))
    assert entry.actor == boss
    assert entry.changes == {"permissions": [[], ["accounts.change_account"]]}
    # A group added with permissions: what it grants is audited too, not only its name.
    resp = admin_client.post("/admin/auth/group/add/", {"name": "ops", "permissions": [grant.pk]})
    assert resp.status_code == 302
    added = Group.objects.get(name="ops")
    granted = AuditEntry.objects.get(action="admin.change", object_id=str(added.pk))
    assert granted.changes == {"permissions": [[], ["accounts.change_account"]]}


def test_rights_granted_to_an_account_are_audited(admin_client, boss, signup):
    from django.contrib.auth.models import Group, Permission

    signup("alice")
    alice = Account.objects.get(username="alice")
    group = Group.objects.create(name="support")
    grant = Permission.objects.get(codename="view_account")
    inline = {"TOTAL_FORMS": "0", "INITIAL_FORMS": "0", "MIN_NUM_FORMS": "0", "MAX_NUM_FORMS": "1000"}
    data = {
        "is_active": "on",
        "groups": [group.pk],
        "user_permissions": [grant.pk],
        **{f"api_tokens-{k}": v for k, v in inline.items()},
        **{f"ssh_keys-{k}": v for k, v in inline.items()},
    }
    # The signup token is an inline row: keep it as it is.
    token = alice.api_tokens.get()
    data.update({"api_tokens-TOTAL_FORMS": "1", "api_tokens-INITIAL_FORMS": "1", "api_tokens-0-id": str(token.pk)})
    data["api_tokens-0-account"] = str(alice.pk)
    resp = admin_client.post(f"/admin/accounts/account/{alice.pk}/change/", data)
    assert resp.status_code == 302, resp.context["adminform"].form.errors if resp.context else resp
    entry = AuditEntry.objects.get(action="admin.change", object_id=str(alice.pk))
    assert entry.actor == boss
    assert entry.changes == {
        "groups": [[], ["support"]],
        "user_permissions": [[], ["accounts.view_account"]],
    }


def test_no_one_deletes_a_workers_lease_by_hand(admin_client):
    from core.models import Lease

    lease = Lease.objects.create(name="scan:litecoin", owner="worker-1")
    assert admin_client.get(f"/admin/core/lease/{lease.pk}/delete/").status_code == 403
    assert admin_client.post(f"/admin/core/lease/{lease.pk}/delete/", {"post": "yes"}).status_code == 403
    assert admin_client.get("/admin/core/lease/").status_code == 200
    assert Lease.objects.filter(pk=lease.pk).exists()


def _change_form_data(resp) -> dict:
    """What the account's change page posts back as it stands."""
    form = resp.context["adminform"].form
    data: dict[str, object] = {}
    for name, field in form.fields.items():
        if field.disabled:
            continue
        value = form.initial.get(name, field.initial)
        if isinstance(value, bool):
            if value:
                data[name] = "on"
        elif isinstance(value, list | tuple):
            data[name] = [getattr(v, "pk", v) for v in value]
        elif value is not None:
            data[name] = getattr(value, "pk", value)
    for inline in resp.context["inline_admin_formsets"]:
        management = inline.formset.management_form
        for name in ("TOTAL_FORMS", "INITIAL_FORMS", "MIN_NUM_FORMS", "MAX_NUM_FORMS"):
            data[f"{management.prefix}-{name}"] = management[name].value()
        for i, sub in enumerate(inline.formset.forms):
            if sub.instance.pk is not None:
                data[f"{inline.formset.prefix}-{i}-id"] = sub.instance.pk
                data[f"{inline.formset.prefix}-{i}-account"] = sub.instance.account_id
    return data


def test_unticking_active_on_the_form_deactivates_as_the_action_does(signup, client_with):
    """Staff who may change accounts switch one off on its page: its tokens are
    revoked and its unpaid orders released, as by the action (the form only
    saved the flag: a token kept working the day the account came back)."""
    from django.contrib.auth.models import Permission

    token = signup("alice")["token"]
    alice = Account.objects.get(username="alice")
    clerk = Account.objects.create_user("clerk", PASSWORD, is_staff=True)
    clerk.user_permissions.add(
        Permission.objects.get(codename="change_account"), Permission.objects.get(codename="view_account")
    )
    client = Client()
    client.force_login(clerk)
    url = f"/admin/accounts/account/{alice.pk}/change/"
    data = _change_form_data(client.get(url))
    assert data.pop("is_active") == "on"
    resp = client.post(url, data)
    assert resp.status_code == 302, resp.context["adminform"].form.errors if resp.context else resp
    alice.refresh_from_db()
    assert alice.is_active is False
    assert not ApiToken.objects.filter(account=alice, revoked_at__isnull=True).exists()
    assert AuditEntry.objects.filter(action="account.deactivate", actor=clerk).count() == 1
    # Switched on again, the old token stays revoked.
    Account.objects.filter(pk=alice.pk).update(is_active=True)
    assert client_with(token).get("/api/v1/account").status_code == 401


def test_the_admins_own_password_page_revokes_tokens_and_is_throttled(boss, settings):
    """Staff changing their own password on the admin's page: a leaked `ops`
    token dies with the old password, the change is audited, and guesses of
    the old password count against the login throttle."""
    from django.core.cache import cache

    from accounts.services import token_create

    cache.clear()
    token = token_create(account=boss, name="ops", scope="ops").token
    client = Client()
    client.force_login(boss)
    new = "another-long-harbour-pass-9"
    resp = client.post(
        "/admin/password_change/", {"old_password": PASSWORD, "new_password1": new, "new_password2": new}
    )
    assert resp.status_code == 302 and resp["Location"].endswith("/admin/password_change/done/")
    boss.refresh_from_db()
    assert boss.check_password(new)
    assert ApiToken.objects.get(pk=token.pk).revoked_at is not None
    assert AuditEntry.objects.filter(action="account.password_change", actor=boss).count() == 1
    assert client.get("/admin/").status_code == 200  # still signed in
    # Wrong old passwords: refused on the form, then throttled (per address: this one is known
    # to the username now, whose own limit applies to unknown addresses).
    settings.AUTH_FAILURES_PER_ADDRESS = 3
    answers = []
    for i in range(settings.AUTH_FAILURES_PER_ADDRESS + 1):
        wrong = client.post(
            "/admin/password_change/",
            {
                "old_password": f"not-it-{i}",
                "new_password1": "yet-another-pass-77",
                "new_password2": "yet-another-pass-77",
            },
        )
        assert wrong.status_code == 200
        answers.append(str(wrong.context["form"].errors.get("old_password")))
        assert answers[-1] in wrong.content.decode()  # shown on the page, beside the field
    assert all("The password is wrong." in a for a in answers[:-1]), answers
    assert "Too many failed attempts." in answers[-1], answers[-1]
    boss.refresh_from_db()
    assert boss.check_password(new)
    cache.clear()
