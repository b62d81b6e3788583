"""SCIM's Users as Okta and Entra ID push them (quotas/scim.py): an account made without a
password, found by their filters, changed by PUT and PATCH; deactivated, it is shut out at
once (API tokens revoked, browser sessions logged out, OpenID Connect sessions ended), its jobs
running on; deleted, it is kept but seen no more."""

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth import get_user_model
from django.contrib.sessions.models import Session
from django.test import Client

from jobs.models import Job
from jobs.states import State
from quotas.models import ApiToken, OidcSession
from quotas.tokens import create_token
from tests.factories import JobFactory, UserFactory
from tests.oidc_provider import sign_on, who
from tests.quotas.scim_provider import USER, okta_user

pytestmark = pytest.mark.django_db

ME = "/api/v1/me/"
User = get_user_model()


def account(resource: dict):
    return User.objects.get(pk=resource["id"])


def deactivated_by(scim, how: str, user: dict):
    """Deactivate the user as a provider does it: `how` names the provider's way."""
    path = f"/Users/{user['id']}"
    if how == "okta patch":
        return scim.patch(path, {"op": "replace", "value": {"active": False}})
    if how == "entra patch":
        return scim.patch(path, {"op": "Replace", "path": "active", "value": "False"})
    if how == "put":
        return scim.put(path, okta_user(user["userName"], active=False))
    return scim.delete(path)


DEACTIVATIONS = ["okta patch", "entra patch", "put", "delete"]


def test_okta_makes_a_user_without_a_password_and_finds_it_by_its_filter(scim):
    made = scim.post("/Users", okta_user("dana.smith@corp.example.com"))

    found = scim.get("/Users", filter='userName eq "Dana.Smith@corp.example.com"')
    read = scim.get(f"/Users/{made.json()['id']}")
    dana = account(made.json())
    assert made.status_code == 201 and made["Content-Type"] == "application/scim+json"
    assert made["Location"] == f"http://testserver/scim/v2/Users/{dana.pk}"
    assert made.json() | {"meta": None} == {
        "schemas": [USER], "id": str(dana.pk), "userName": "dana.smith@corp.example.com",
        "active": True, "name": {"givenName": "Dana", "familyName": "Smith"},
        "emails": [{"value": "dana.smith@corp.example.com", "primary": True, "type": "work"}],
        "externalId": "00u-dana", "groups": [], "meta": None,
    }  # fmt: skip
    assert made.json()["meta"]["resourceType"] == "User"
    assert found.json()["totalResults"] == 1 and found.json()["Resources"] == [made.json()]
    assert read.status_code == 200 and read.json() == made.json()
    assert dana.is_active and not dana.has_usable_password()
    assert not (dana.is_staff or dana.is_superuser or dana.memberships.exists())


def test_a_user_is_found_by_their_external_id(scim):
    dana = scim.user()

    found = scim.get("/Users", filter='externalId eq "00u-dana"')
    other = scim.get("/Users", filter='externalId eq "00U-DANA"')

    assert [r["id"] for r in found.json()["Resources"]] == [dana["id"]]
    assert other.json()["totalResults"] == 0  # an externalId is compared as written


def test_a_filter_matching_nobody_is_an_empty_list(scim):
    scim.user()

    found = scim.get("/Users", filter='userName eq "nobody@corp.example.com"')

    assert found.status_code == 200
    assert found.json() == {"schemas": ["urn:ietf:params:scim:api:messages:2.0:ListResponse"],
                            "totalResults": 0, "itemsPerPage": 0, "startIndex": 1,
                            "Resources": []}  # fmt: skip


def test_users_are_paged_by_start_index_and_count(scim):
    made = [scim.user(f"user{n}@corp.example.com")["id"] for n in range(5)]

    second = scim.get("/Users", startIndex="3", count="2")
    past = scim.get("/Users", startIndex="9", count="2")
    capped = scim.get("/Users", count="100000")

    assert [r["id"] for r in second.json()["Resources"]] == made[2:4]
    assert (second.json()["totalResults"], second.json()["itemsPerPage"]) == (5, 2)
    assert second.json()["startIndex"] == 3
    assert past.json()["Resources"] == [] and past.json()["totalResults"] == 5
    assert len(capped.json()["Resources"]) == 5


def test_a_password_account_is_neither_listed_nor_read_nor_changed(scim, alice):
    listed = scim.get("/Users")
    read = scim.get(f"/Users/{alice.pk}")
    patched = scim.patch(f"/Users/{alice.pk}", {"op": "replace", "path": "active", "value": False})

    assert listed.json()["totalResults"] == 0
    assert (read.status_code, patched.status_code) == (404, 404)
    assert User.objects.get(pk=alice.pk).is_active


def test_put_replaces_the_users_attributes_and_clears_those_it_leaves_out(scim):
    dana = scim.user()

    body = {"schemas": [USER], "userName": "dana.jones@corp.example.com",
            "name": {"givenName": "Dana"}, "active": True}  # fmt: skip
    replaced = scim.put(f"/Users/{dana['id']}", body)

    user = account(dana)
    assert replaced.status_code == 200
    assert (user.username, user.first_name, user.last_name, user.email) == (
        "dana.jones@corp.example.com", "Dana", "", ""
    )  # fmt: skip
    assert "externalId" not in replaced.json() and replaced.json()["emails"] == []


def test_patch_takes_the_paths_okta_and_entra_send_and_ignores_attributes_not_kept(scim):
    dana = scim.user()

    patched = scim.patch(
        f"/Users/{dana['id']}",
        {"op": "Replace", "path": "userName", "value": "dana.w@corp.example.com"},
        {"op": "Add", "path": "name.givenName", "value": "Danielle"},
        {"op": "replace", "path": 'emails[type eq "work"].value', "value": "dw@corp.example.com"},
        {"op": "replace", "value": {"name": {"familyName": "West"}, "title": "Engineer"}},
        {"op": "Add", "path": "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User:"
         "department", "value": "ML"},
        {"op": "Replace", "path": "phoneNumbers[type eq \"work\"].value", "value": "555"},
    )  # fmt: skip

    user = account(dana)
    assert patched.status_code == 200, patched.content
    assert (user.username, user.first_name, user.last_name, user.email) == (
        "dana.w@corp.example.com", "Danielle", "West", "dw@corp.example.com"
    )  # fmt: skip
    assert patched.json()["userName"] == "dana.w@corp.example.com"


def test_a_push_never_gives_the_account_a_password(scim):
    dana = scim.user()

    scim.put(f"/Users/{dana['id']}", okta_user(dana["userName"], password="S3cret-pass-1"))

    assert not account(dana).has_usable_password()


@pytest.mark.parametrize("how", DEACTIVATIONS)
def test_deactivating_revokes_the_users_api_tokens(scim, how):
    dana = scim.user()
    _, key = create_token(account(dana), "laptop")
    before = Client().get(ME, HTTP_AUTHORIZATION=f"Token {key}")

    gone = deactivated_by(scim, how, dana)

    after = Client().get(ME, HTTP_AUTHORIZATION=f"Token {key}")
    assert gone.status_code in (200, 204)
    assert (before.status_code, after.status_code) == (200, 401)
    assert not account(dana).is_active and not ApiToken.objects.exists()


@pytest.mark.parametrize("how", DEACTIVATIONS)
def test_deactivating_logs_the_users_browser_out_at_its_next_request(scim, how):
    dana = scim.user()
    browser = Client()
    browser.force_login(account(dana))
    assert who(browser) == dana["userName"]

    deactivated_by(scim, how, dana)

    assert who(browser) is None
    assert browser.get("/queue/").status_code == 302  # to the login page


@pytest.mark.parametrize("how", DEACTIVATIONS)
def test_deactivating_ends_the_users_openid_connect_sessions(scim, provider, how):
    alice = scim.user("alice")
    browser = Client()
    sign_on(browser)
    key = browser.session.session_key
    assert who(browser) == "alice" and OidcSession.objects.filter(user_id=alice["id"]).exists()

    deactivated_by(scim, how, alice)

    assert not OidcSession.objects.exists()
    assert not Session.objects.filter(session_key=key).exists()
    assert who(browser) is None


@pytest.mark.parametrize("how", DEACTIVATIONS)
def test_a_deactivated_users_running_jobs_run_on(scim, alpha, how):
    dana = scim.user()
    job = JobFactory(tenant=alpha, owner=account(dana), state=State.RUNNING)

    deactivated_by(scim, how, dana)

    assert Job.objects.get(pk=job.pk).state == State.RUNNING


def test_reactivating_lets_the_user_in_again_but_their_tokens_stay_revoked(scim):
    dana = scim.user()
    _, key = create_token(account(dana), "laptop")
    deactivated_by(scim, "entra patch", dana)

    back = scim.patch(f"/Users/{dana['id']}", {"op": "Replace", "path": "active", "value": "True"})

    browser = Client()
    browser.force_login(account(dana))
    assert back.status_code == 200 and back.json()["active"] is True
    assert who(browser) == dana["userName"]
    assert Client().get(ME, HTTP_AUTHORIZATION=f"Token {key}").status_code == 401


def test_a_deactivation_revokes_the_tokens_a_deactivation_by_hand_left(scim):
    dana = scim.user()
    _, key = create_token(account(dana), "laptop")
    User.objects.filter(pk=dana["id"]).update(is_active=False)  # a platform admin, in the admin

    deactivated_by(scim, "okta patch", dana)
    deactivated_by(scim, "okta patch", dana)
    scim.patch(f"/Users/{dana['id']}", {"op": "replace", "value": {"active": True}})

    assert not ApiToken.objects.exists()
    assert Client().get(ME, HTTP_AUTHORIZATION=f"Token {key}").status_code == 401
    deactivations = LogEntry.objects.filter(change_message__startswith="SCIM: deactivated")
    assert deactivations.count() == 1  # the second changed nothing


def test_a_deleted_user_is_kept_inactive_but_neither_listed_nor_read(scim, alpha):
    dana = scim.user()
    job = JobFactory(tenant=alpha, owner=account(dana))

    deleted = scim.delete(f"/Users/{dana['id']}")

    assert deleted.status_code == 204
    assert scim.get(f"/Users/{dana['id']}").status_code == 404
    assert scim.delete(f"/Users/{dana['id']}").status_code == 404
    found = scim.get("/Users", filter=f'userName eq "{dana["userName"]}"')
    assert found.json()["totalResults"] == 0
    assert not account(dana).is_active
    assert Job.objects.get(pk=job.pk).owner_id == int(dana["id"])


def test_a_push_of_a_deleted_users_name_makes_them_again(scim):
    dana = scim.user()
    scim.delete(f"/Users/{dana['id']}")

    again = scim.post("/Users", okta_user(dana["userName"]))

    assert again.status_code == 201 and again.json()["id"] == dana["id"]
    assert again.json()["active"] is True and account(dana).is_active


def test_each_change_is_in_the_history_as_scims(scim):
    dana = scim.user()
    create_token(account(dana), "laptop")
    scim.patch(f"/Users/{dana['id']}", {"op": "replace", "path": "name.givenName", "value": "D"})
    deactivated_by(scim, "okta patch", dana)
    scim.delete(f"/Users/{dana['id']}")

    entries = LogEntry.objects.filter(user__username="system:scim").order_by("pk")
    said = [entry.change_message for entry in entries]
    assert said == [
        "SCIM: made",
        "SCIM: changed name.givenName",
        "Revoked (of dana@corp.example.com): SCIM deactivated them",
        "SCIM: deactivated (1 API tokens revoked, 0 OpenID Connect sessions ended)",
        "SCIM: deleted (the account kept, inactive)",
    ]
    actor = User.objects.get(username="system:scim")
    assert not actor.is_active and not actor.has_usable_password()
    assert scim.get("/Users").json()["totalResults"] == 0  # the actor is no user SCIM sees


def test_an_account_a_sign_on_made_is_scims_to_change(scim):
    made = UserFactory(username="erin")
    made.set_unusable_password()
    made.save()

    found = scim.get("/Users", filter='userName eq "erin"').json()["Resources"]
    patched = scim.patch(f"/Users/{made.pk}", {"op": "replace", "value": {"active": "false"}})

    assert [r["id"] for r in found] == [str(made.pk)]
    assert patched.status_code == 200 and not User.objects.get(pk=made.pk).is_active
