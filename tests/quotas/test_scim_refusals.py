"""What SCIM refuses (quotas/scim_views.py): a wrong token, a body that is no JSON, a filter
not taken, a name taken, a password account, an id that is no user's or group's, an operation
it does not know; each an RFC 7644 error, never a 500, writing nothing. SCIM off: 404s. And
what it says of itself (ServiceProviderConfig, ResourceTypes, Schemas)."""

import json

import hypothesis
import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth import get_user_model
from django.test import Client
from hypothesis import given
from hypothesis import strategies as st

from quotas.models import Membership, ScimGroup, ScimUser
from tests.factories import TenantFactory
from tests.quotas.scim_provider import ERROR, TOKEN, ScimClient, members, okta_user
from tests.security.test_fuzz import FUZZ, JSON_VALUES
from tests.test_settings import load_settings

pytestmark = pytest.mark.django_db

User = get_user_model()
HUGE = "9" * 25
ATTRIBUTES = ["userName", "name", "emails", "active", "externalId", "displayName", "members",
              "name.givenName", 'emails[type eq "work"].value', 'members[value eq "1"]',
              "id"]  # fmt: skip
RESOURCES = st.dictionaries(st.sampled_from(ATTRIBUTES), JSON_VALUES, max_size=4)
OPERATIONS = st.lists(
    st.fixed_dictionaries({}, optional={"op": st.one_of(st.sampled_from(["add", "Remove",
                           "replace"]), JSON_VALUES), "path": st.one_of(st.sampled_from(
                           ATTRIBUTES), JSON_VALUES), "value": st.one_of(RESOURCES, JSON_VALUES)}),
    max_size=3,
)  # fmt: skip


def refused(answer, status: int, scim_type: str | None = None) -> dict:
    """The answer's error, checked to be the RFC 7644 error it is said to be."""
    assert answer.status_code == status, answer.content
    assert answer["Content-Type"] == "application/scim+json"
    error = answer.json()
    assert error["schemas"] == [ERROR] and error["status"] == str(status) and error["detail"]
    assert error.get("scimType") == scim_type
    return error


def nothing_written() -> bool:
    """Whether no push has written anything: no account, SCIM group, membership or history."""
    return not (
        User.objects.exclude(username__in=["AnonymousUser", "system:scim"]).exists()
        or ScimUser.objects.exists()
        or ScimGroup.objects.exists()
        or Membership.objects.exists()
        or LogEntry.objects.exists()
    )


@pytest.mark.parametrize("authorization", [None, "Bearer " + "w" * 40, f"Token {TOKEN}",
                                           f"Bearer {TOKEN}x", "Bearer"])  # fmt: skip
def test_a_missing_or_wrong_token_is_a_401_and_writes_nothing(scim, authorization):
    client = Client()
    headers = {"Authorization": authorization} if authorization else {}

    listed = client.get("/scim/v2/Users", headers=headers)
    made = client.post("/scim/v2/Users", okta_user("dana"), content_type="application/scim+json",
                       headers=headers)  # fmt: skip

    refused(listed, 401)
    assert refused(made, 401) and made["WWW-Authenticate"].startswith("Bearer")
    assert nothing_written()


@pytest.mark.parametrize("body", ["{not json", "[1, 2]", '"x"', "[" * 100_000, b"\xff\xfe{}"])
def test_a_body_that_is_no_json_object_is_a_400_and_writes_nothing(scim, body):
    answer = scim.post("/Users", body)

    assert "JSON" in refused(answer, 400, "invalidSyntax")["detail"]
    assert nothing_written()


@pytest.mark.parametrize(
    "written",
    ['userName is "da"', 'title eq "x"', 'userName eq "a" and', 'active co "t"',
     "userName eq dana", 'userName eq "\\ud800"', 'userName eq "\\u0000"', 'name eq "x\\"'],
)  # fmt: skip
def test_a_filter_not_taken_is_a_400_invalid_filter(scim, written):
    answer = scim.get("/Users", filter=written)

    assert written[:20] in refused(answer, 400, "invalidFilter")["detail"]


def test_a_groups_filter_not_taken_is_a_400_invalid_filter(scim):
    refused(scim.get("/Groups", filter='members eq "3"'), 400, "invalidFilter")


@pytest.mark.parametrize("parameter", ["startIndex", "count"])
def test_a_page_that_is_no_number_is_a_400_naming_it(scim, parameter):
    answer = scim.get("/Users", **{parameter: "ten"})

    assert parameter in refused(answer, 400, "invalidValue")["detail"]


def test_a_page_far_past_the_end_is_an_empty_list(scim):
    scim.user()

    answer = scim.get("/Users", startIndex=HUGE, count=HUGE)

    assert answer.status_code == 200 and answer.json()["Resources"] == []


@pytest.mark.parametrize("taken", ["dana@corp.example.com", "DANA@corp.example.com"])
def test_a_username_taken_is_a_409_and_writes_nothing(scim, taken):
    dana = scim.user("dana@corp.example.com")
    entries = LogEntry.objects.count()

    answer = scim.post("/Users", okta_user(taken, externalId="other"))

    refused(answer, 409, "uniqueness")
    assert User.objects.filter(username__iexact=taken).count() == 1
    assert ScimUser.objects.get(user_id=dana["id"]).external_id == "00u-dana"
    assert LogEntry.objects.count() == entries


def test_a_rename_to_a_name_taken_is_a_409_and_writes_nothing(scim):
    scim.user("dana")
    erin = scim.user("erin")

    answer = scim.patch(f"/Users/{erin['id']}",
                        {"op": "replace", "path": "name.givenName", "value": "Erin2"},
                        {"op": "replace", "path": "userName", "value": "Dana"})  # fmt: skip

    refused(answer, 409, "uniqueness")
    assert User.objects.get(pk=erin["id"]).first_name == "Erin"


def test_a_password_account_of_the_name_is_a_409_and_is_not_taken_over(scim, alice):
    answer = scim.post("/Users", okta_user("alice", active=False))

    assert "password" in refused(answer, 409, "uniqueness")["detail"]
    alice = User.objects.get(pk=alice.pk)
    assert alice.has_usable_password() and alice.is_active
    assert not ScimUser.objects.filter(user=alice).exists()


@pytest.mark.parametrize("pk", ["999999", HUGE, "dana", "-1", "1.5"])
@pytest.mark.parametrize("kind", ["Users", "Groups"])
def test_an_id_that_is_nobodys_is_a_404_for_every_method(scim, kind, pk):
    patch = {"op": "replace", "path": "active", "value": False}

    answers = [scim.get(f"/{kind}/{pk}"), scim.put(f"/{kind}/{pk}", okta_user("x") | {
               "displayName": "g"}), scim.patch(f"/{kind}/{pk}", patch),
               scim.delete(f"/{kind}/{pk}")]  # fmt: skip

    for answer in answers:
        refused(answer, 404)
    assert nothing_written()


@pytest.mark.parametrize("op", ["move", "copy", "test", "", None, 3])
def test_a_patch_op_that_is_not_add_remove_or_replace_is_a_400_and_writes_nothing(scim, op):
    dana = scim.user()
    entries = LogEntry.objects.count()

    answer = scim.patch(f"/Users/{dana['id']}",
                        {"op": "replace", "path": "active", "value": False},
                        {"op": op, "path": "name.givenName", "value": "X"})  # fmt: skip

    assert "add, remove or replace" in refused(answer, 400, "invalidSyntax")["detail"]
    assert User.objects.get(pk=dana["id"]).is_active
    assert LogEntry.objects.count() == entries


@pytest.mark.parametrize(
    "body, field",
    [
        ({"schemas": [], "Operations": []}, "Operations"),
        ({"Operations": [{"op": "remove"}]}, "path"),
        ({"Operations": [{"op": "replace", "value": "x"}]}, "object"),
        ({"Operations": [{"op": "replace", "path": "active", "value": "maybe"}]}, "active"),
        ({"Operations": [{"op": "replace", "path": "userName", "value": "no spaces"}]}, "userName"),
        ({"Operations": [{"op": "remove", "path": "userName"}]}, "userName"),
        ({"Operations": [{"op": "add", "path": "emails", "value": "d@x.com"}]}, "emails"),
        ({"Operations": [{"op": "add", "path": "name.givenName", "value": "a\x00"}]}, "givenName"),
        ({"Operations": [{"op": "add", "path": "name.familyName", "value": "x" * 151}]}, "Name"),
        ({"Operations": [{"op": "add", "path": "externalId", "value": "\ud800"}]}, "externalId"),
    ],
)  # fmt: skip
def test_a_patch_the_user_cannot_take_is_a_400_naming_what_is_wrong(scim, body, field):
    dana = scim.user()

    answer = scim.patch(f"/Users/{dana['id']}", body=body)

    assert field in refused(answer, 400, answer.json().get("scimType"))["detail"]
    assert User.objects.get(pk=dana["id"]).first_name == "Dana"


@pytest.mark.parametrize(
    "body",
    [{"userName": "no spaces allowed"}, {"userName": ""}, {"name": {"givenName": 3}},
     {"userName": "d" * 151}, {"userName": "dana", "emails": [{"value": "not an address"}]},
     {"userName": "dana", "active": "yes"}, {"userName": "dana\x00"}],
)  # fmt: skip
def test_a_user_that_cannot_be_made_is_a_400_and_writes_nothing(scim, body):
    refused(scim.post("/Users", body), 400, "invalidValue")

    assert nothing_written()


def test_a_group_with_a_member_nobody_is_is_a_400_and_writes_nothing(scim, alice):
    TenantFactory(slug="research", member_groups="ml-team")
    dana = scim.user("dana")
    entries = LogEntry.objects.count()

    body = {"displayName": "ml-team", "members": [*members(dana), {"value": str(alice.pk)}]}
    answer = scim.post("/Groups", body)

    assert str(alice.pk) in refused(answer, 400, "invalidValue")["detail"]
    assert not ScimGroup.objects.exists()
    assert not Membership.objects.exclude(from_group="").exists()
    assert LogEntry.objects.count() == entries


def test_a_group_name_taken_is_a_409(scim):
    scim.group("ml-team")

    refused(scim.post("/Groups", {"displayName": "ML-team"}), 409, "uniqueness")
    assert ScimGroup.objects.count() == 1


@pytest.mark.parametrize(
    "operation",
    [{"op": "remove", "path": "displayName"}, {"op": "add", "path": "members", "value": "3"},
     {"op": "add", "path": "members", "value": [{"value": "abc"}]},
     {"op": "replace", "path": "displayName", "value": ""}],
)  # fmt: skip
def test_a_group_patch_it_cannot_take_is_a_400_and_writes_nothing(scim, operation):
    group = scim.group("ml-team")

    answer = scim.patch(f"/Groups/{group['id']}", operation)

    assert answer.status_code == 400 and answer.json()["schemas"] == [ERROR]
    assert ScimGroup.objects.get().display_name == "ml-team"


def test_a_method_not_answered_is_a_405(scim):
    refused(scim.delete("/Users"), 405)
    refused(scim.call("post", "/ServiceProviderConfig", {}), 405)


def test_an_endpoint_not_served_is_a_scim_404(scim):
    refused(scim.get("/Bulk"), 404)


def test_a_post_needs_no_csrf_token(scim):
    browser = Client(enforce_csrf_checks=True)

    made = browser.post("/scim/v2/Users", json.dumps(okta_user("dana")),
                        content_type="application/scim+json",
                        headers={"Authorization": f"Bearer {TOKEN}"})  # fmt: skip

    assert made.status_code == 201


@pytest.mark.parametrize(
    "path", ["/Users", "/Users/1", "/Groups", "/Groups/1", "/ServiceProviderConfig",
             "/ResourceTypes", "/Schemas", "/Bulk"],
)  # fmt: skip
def test_with_scim_off_every_url_is_a_404(settings, path):
    settings.MLSCHED_SCIM_TOKEN = ""

    answer = ScimClient().get(path)
    made = ScimClient().post("/Users", okta_user("dana"))

    assert (answer.status_code, made.status_code) == (404, 404)
    assert not User.objects.filter(username="dana").exists()


def test_a_scim_token_shorter_than_32_characters_refuses_to_start():
    short = load_settings(MLSCHED_SCIM_TOKEN="x" * 31)
    enough = load_settings(MLSCHED_SCIM_TOKEN="x" * 32)

    assert short.returncode != 0 and "MLSCHED_SCIM_TOKEN" in short.stderr
    assert "ImproperlyConfigured" in short.stderr
    assert enough.returncode == 0, enough.stderr


def test_the_service_provider_config_says_what_is_supported(scim):
    answer = scim.get("/ServiceProviderConfig")

    config = answer.json()
    assert answer["Content-Type"] == "application/scim+json"
    assert config["patch"] == {"supported": True}
    assert config["filter"] == {"supported": True, "maxResults": 200}
    assert config["sort"] == {"supported": True}
    assert not any(config[name]["supported"] for name in ("bulk", "etag", "changePassword"))
    assert [scheme["type"] for scheme in config["authenticationSchemes"]] == ["oauthbearertoken"]


def test_the_resource_types_and_schemas_are_users_and_groups(scim):
    types = scim.get("/ResourceTypes").json()
    schemas = scim.get("/Schemas").json()

    assert [(t["name"], t["endpoint"]) for t in types["Resources"]] == [
        ("User", "/Users"), ("Group", "/Groups")
    ]  # fmt: skip
    assert schemas["totalResults"] == 2
    user = {a["name"]: a for a in schemas["Resources"][0]["attributes"]}
    assert user["userName"]["required"] and user["userName"]["uniqueness"] == "server"
    assert {"name", "emails", "active", "externalId"} <= set(user)


@hypothesis.settings(FUZZ, max_examples=60)
@given(body=st.one_of(RESOURCES, JSON_VALUES), kind=st.sampled_from(["Users", "Groups"]))
def test_any_resource_pushed_is_answered_and_a_refusal_writes_nothing(scim, body, kind):
    before = ScimGroup.objects.count(), ScimUser.objects.count(), LogEntry.objects.count()

    made = scim.post(f"/{kind}", json.dumps(body))

    assert made.status_code in (201, 400, 409), made.content
    if made.status_code != 201:
        assert (ScimGroup.objects.count(), ScimUser.objects.count(),
                LogEntry.objects.count()) == before  # fmt: skip


@hypothesis.settings(FUZZ, max_examples=60)
@given(operations=OPERATIONS, kind=st.sampled_from(["Users", "Groups"]), put=st.booleans(),
       body=RESOURCES)  # fmt: skip
def test_any_patch_or_put_is_answered(scim, operations, kind, put, body):
    made = ScimUser.objects.first() if kind == "Users" else ScimGroup.objects.first()
    pk = str(made.pk) if made else (scim.user() if kind == "Users" else scim.group("g"))["id"]

    path = f"/{kind}/{pk}"
    answer = scim.put(path, body) if put else scim.patch(path, *operations)

    assert answer.status_code in (200, 204, 400, 409), answer.content
