"""What a SCIM list or read asks for beyond the resources (quotas/scim_query.py,
quotas/scim_filter.py): RFC 7644's filters on Users and Groups, each against three users and
three groups, and those it cannot read a 400 invalidFilter naming what is wrong, a hostile one
too; `attributes` and `excludedAttributes`; a user's read-only `groups`; `sortBy` and
`sortOrder`; and the discovery documents saying so."""

from datetime import UTC, datetime

import hypothesis
import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext
from hypothesis import given
from hypothesis import strategies as st

from quotas.models import ScimGroup, ScimUser
from quotas.scim_filter import MAX_CHARS
from tests.quotas.scim_provider import ERROR, USER, okta_user
from tests.security.test_fuzz import FUZZ

pytestmark = pytest.mark.django_db

User = get_user_model()


def at(month: int, microsecond: int = 0) -> datetime:
    return datetime(2025, month, 1, microsecond=microsecond, tzinfo=UTC)


def person(username, first, last, email, joined, external=None, modified=None, active=True):
    """An account without a password, as SCIM or a sign-on made it (`external`: SCIM's)."""
    user = User.objects.create_user(username, email=email, first_name=first, last_name=last,
                                    is_active=active)  # fmt: skip
    User.objects.filter(pk=user.pk).update(date_joined=joined)
    if external is not None:
        ScimUser.objects.create(user=user, external_id=external, modified=modified)
    return user


@pytest.fixture
def rows(scim, alice):
    """Three users SCIM sees (ada, ben inactive, cy without email, surname nor SCIM row), alice
    with a password whom it never sees, and three groups: ml-team (ada, ben), auditors (ada),
    empty. Their ids by name, for the filters naming them."""
    ada = person("ada@corp.example.com", "Ada", "Lovelace", "ada@corp.example.com", at(1),
                 "00u-ada", at(4))  # fmt: skip
    ben = person("Ben@corp.example.com", "Ben", "Byrne", "ben@lab.example.org", at(2, 400_000),
                 "00u-BEN", at(1).replace(day=15), active=False)  # fmt: skip
    cy = person("cy", "Cy", "", "", at(3))
    ml = ScimGroup.objects.create(display_name="ml-team", external_id="ext-ml", created=at(1))
    auditors = ScimGroup.objects.create(display_name="auditors", created=at(2))
    empty = ScimGroup.objects.create(display_name="empty", created=at(3))
    ml.members.set([ada, ben])
    auditors.members.set([ada])
    people = {"ada": ada, "ben": ben, "cy": cy, "alice": alice}
    return {name: str(row.pk) for name, row in [*people.items(), ("ml-team", ml),
            ("auditors", auditors), ("empty", empty)]}  # fmt: skip


def names(answer, key: str = "userName") -> list[str]:
    assert answer.status_code == 200, answer.content
    return [resource[key].split("@")[0].lower() for resource in answer.json()["Resources"]]


def refused(answer, scim_type: str) -> str:
    """The 400's detail, checked to be an RFC 7644 error of `scim_type`."""
    assert answer.status_code == 400, answer.content
    error = answer.json()
    assert error["schemas"] == [ERROR] and error["scimType"] == scim_type
    return error["detail"]


USER_FILTERS = [
    ('userName eq "ADA@corp.example.com"', ["ada"]),
    ('username EQ "ada@corp.example.com"', ["ada"]),
    (f'{USER}:userName eq "cy"', ["cy"]),
    ('userName eq "\\u0063y"', ["cy"]),
    ('userName ne "cy"', ["ada", "ben"]),
    ('userName co "CORP"', ["ada", "ben"]),
    ('userName sw "b"', ["ben"]),
    ('userName ew ".COM"', ["ada", "ben"]),
    ('userName gt "b"', ["ben", "cy"]),
    ('userName le "ben@corp.example.com"', ["ada", "ben"]),
    ('userName eq "alice"', []),
    ('userName co "%"', []),
    ('name.givenName eq "cy"', ["cy"]),
    ("name.familyName pr", ["ada", "ben"]),
    ("not (name.familyName pr)", ["cy"]),
    ('emails.value ew "@LAB.example.org"', ["ben"]),
    ("emails pr", ["ada", "ben"]),
    ("emails.value eq null", ["cy"]),
    ('emails[type eq "work"]', ["ada", "ben"]),
    ('emails[type eq "work" and value co "ada"]', ["ada"]),
    ('emails[type eq "work"].value eq "BEN@lab.example.org"', ["ben"]),
    ('emails[type eq "home"]', []),
    ("emails.primary eq true", ["ada", "ben"]),
    ("active eq false", ["ben"]),
    ('active eq TRUE and userName sw "a"', ["ada"]),
    ('externalId eq "00u-BEN"', ["ben"]),
    ('externalId eq "00u-ben"', []),
    ("externalId pr", ["ada", "ben"]),
    ("externalId eq null", ["cy"]),
    ('externalId ne "00u-ada"', ["ben"]),
    ('not (externalId eq "00u-ada")', ["ben", "cy"]),
    ('userName eq "cy" or (active eq false and not (emails pr))', ["cy"]),
    ('userName eq "cy" or active eq false and emails pr', ["ben", "cy"]),
    ('not (not (userName eq "cy" or userName eq "ada@corp.example.com"))', ["ada", "cy"]),
    ('meta.created gt "2025-01-15T00:00:00Z"', ["ben", "cy"]),
    ('meta.created eq "2025-02-01T01:00:00+01:00"', ["ben"]),
    ('meta.lastModified lt "2025-02-01T00:00:00Z"', ["ben"]),
    ('meta.lastModified ge "2025-03-01T00:00:00"', ["ada", "cy"]),
    ('groups.display eq "ML-TEAM"', ["ada", "ben"]),
    ('groups[display eq "auditors"]', ["ada"]),
    ("groups pr", ["ada", "ben"]),
    ("not (groups pr)", ["cy"]),
    ('groups.value eq "{auditors}"', ["ada"]),
    ('id eq "{ben}"', ["ben"]),
    ('id eq "{alice}"', []),
    ('id eq "ben"', []),
]


@pytest.mark.parametrize("written, want", USER_FILTERS)
def test_a_users_filter_selects_the_users_it_says(scim, rows, written, want):
    answer = scim.get("/Users", filter=written.format(**rows))

    assert names(answer) == want
    assert answer.json()["totalResults"] == len(want)


GROUP_FILTERS = [
    ('displayName eq "ML-Team"', ["ml-team"]),
    ('displayName sw "A"', ["auditors"]),
    ('displayName co "-" or displayName ew "ty"', ["ml-team", "empty"]),
    ('urn:ietf:params:scim:schemas:core:2.0:Group:displayName gt "b"', ["ml-team", "empty"]),
    ("externalId pr", ["ml-team"]),
    ('externalId eq "EXT-ml"', []),
    ("members pr", ["ml-team", "auditors"]),
    ("not (members pr)", ["empty"]),
    ('members.value eq "{ben}"', ["ml-team"]),
    ('members[value eq "{ada}"]', ["ml-team", "auditors"]),
    ('members.display eq "BEN@corp.example.com"', ["ml-team"]),
    ('members[display sw "ben" and value eq "{ada}"]', []),
    ('members.value ne "{ada}"', ["ml-team"]),
    ('not (members.value eq "{ben}")', ["auditors", "empty"]),
    ('members.value eq "{alice}"', []),
    ('meta.created lt "2025-03-01T00:00:00Z"', ["ml-team", "auditors"]),
    ('id eq "{empty}"', ["empty"]),
]


@pytest.mark.parametrize("written, want", GROUP_FILTERS)
def test_a_groups_filter_selects_the_groups_it_says(scim, rows, written, want):
    answer = scim.get("/Groups", filter=written.format(**rows))

    assert names(answer, "displayName") == want


INVALID = [
    ('userName is "x"', "Expected an operator"),
    ('title eq "x"', "'title' is no attribute"),
    ('urn:ietf:params:scim:schemas:extension:enterprise:2.0:User:department eq "x"',
     "is no attribute"),
    ("name pr", "'name' is no attribute"),
    ("userName eq dana", "Expected a value"),
    ('userName eq "a" and', "Expected an attribute at character 20"),
    ('(userName eq "a"', "Expected ')'"),
    ('userName eq "a")', "Expected and, or or the end"),
    ('not userName eq "a"', "Expected '(' after not"),
    ('emails[value eq "a"', "Expected ']'"),
    ('userName eq "a', "not closed"),
    ('active co "t"', "true or false"),
    ('active eq "true"', "true or false"),
    ("userName eq 3", "a string"),
    ("userName gt null", "null is compared by eq and ne alone"),
    ('id sw "1"', "an id"),
    ('meta.created gt "yesterday"', "a date and time"),
    ('meta.created gt "2025-02-30T00:00:00Z"', "a date and time"),
    ('meta.created sw "2025"', "a date and time"),
    ('emails eq "a@corp.example.com"', "has sub-attributes"),
    ('userName[value eq "x"]', "no multi-valued attribute"),
    ('emails[kind eq "x"]', "'kind' is no attribute"),
    ('emails.type eq true', "a string"),
    ('userName eq "\\ud800"', "unpaired surrogate"),
    ('userName eq "\\u0000"', "NUL"),
    ('userName eq "\\x41"', "no JSON string"),
    ("   ", "empty"),
]  # fmt: skip


@pytest.mark.parametrize("written, problem", INVALID)
def test_a_filter_it_cannot_read_is_a_400_naming_the_problem(scim, written, problem):
    detail = refused(scim.get("/Users", filter=written), "invalidFilter")

    assert problem in detail and written.strip()[:20] in detail


@pytest.mark.parametrize("written, problem", [('members eq "3"', "has sub-attributes"),
                                              ('userName eq "x"', "'userName' is no attribute"),
                                              ('members[type eq "User"]', "'type'")])  # fmt: skip
def test_a_groups_filter_it_cannot_read_is_a_400_naming_the_problem(scim, written, problem):
    assert problem in refused(scim.get("/Groups", filter=written), "invalidFilter")


HOSTILE = [
    ("x" * (MAX_CHARS + 1), f"at most {MAX_CHARS} characters"),
    ("(" * 1000 + "userName pr" + ")" * 1000, "nests at most"),
    ("not (" * 500 + "userName pr" + ")" * 500, "nests at most"),
    ("emails[" * 500, "nests at most"),
    (" or ".join(['userName eq "a"'] * 100), "at most 64 comparisons"),
    ('userName eq "\t"', "no JSON string"),
    ("\x7f", "U+007F"),
    ('\ufeffuserName eq "a"', "U+FEFF"),
    ('ｕserName eq "a"', "U+FF55"),
    ('userName eq "a" \u202e or userName pr', "U+202E"),
    ('userName eq "' + "\\" * 3001 + '"', "not closed"),
    ('userName eq "\\ud83d\\ude00" and name.givenName co "\\udc00"', "surrogate"),
    ('meta.created gt "9999-12-31T23:59:59-23:59"', "a date and time"),
]


@pytest.mark.parametrize("written, problem", HOSTILE)
@pytest.mark.parametrize("kind", ["Users", "Groups"])
def test_a_hostile_filter_is_a_400_not_a_500(scim, written, problem, kind):
    if kind == "Groups":
        written = written.replace("userName", "displayName").replace("emails", "members")
        written = written.replace("name.givenName", "displayName")

    assert problem in refused(scim.get(f"/{kind}", filter=written), "invalidFilter")


@pytest.mark.parametrize("written", ['userName eq "\x00"', "\x00"])
def test_a_nul_in_the_filter_is_a_400_before_scim_reads_it(scim, written):
    answer = scim.get("/Users", filter=written)  # the site's refuse_nul answers it

    assert "filter: cannot contain a NUL" in refused(answer, "invalidFilter")


def test_odd_unicode_in_a_value_is_compared_not_refused(scim, rows):
    answer = scim.get("/Users", filter='userName eq "𝟙\u202e\u00e9" or name.givenName co "ﬁ"')

    assert names(answer) == []


PIECES = ['userName', 'emails[', ']', '.value', 'eq', 'co', 'gt', 'pr', 'and', 'or', 'not',
          '(', ')', '"a"', '"\\u00', 'null', 'true', '1e999', '-', '\x01', '\u202e', 'é',
          'meta.created', '"2025-01-01T00:00:00Z"', 'members.value', 'groups', ' ']  # fmt: skip


@hypothesis.settings(FUZZ, max_examples=80)
@given(pieces=st.lists(st.sampled_from(PIECES), max_size=12),
       kind=st.sampled_from(["Users", "Groups"]))  # fmt: skip
def test_any_filter_is_answered_never_a_500(scim, pieces, kind):
    answer = scim.get(f"/{kind}", filter=" ".join(pieces))

    assert answer.status_code in (200, 400), answer.content
    if answer.status_code == 400:
        assert answer.json()["scimType"] == "invalidFilter"


# attributes, excludedAttributes


def test_attributes_returns_those_asked_and_id_and_schemas(scim, rows):
    listed = scim.get("/Users", filter='userName eq "cy"', attributes="userName")
    read = scim.get(f"/Users/{rows['ada']}",
                    attributes=f"{USER}:name.givenName,EMAILS.value,meta.lastModified")  # fmt: skip

    assert listed.json()["Resources"] == [{"schemas": [USER], "id": rows["cy"], "userName": "cy"}]
    assert read.json() == {"schemas": [USER], "id": rows["ada"], "name": {"givenName": "Ada"},
                           "emails": [{"value": "ada@corp.example.com"}],
                           "meta": {"lastModified": "2025-04-01T00:00:00Z"}}  # fmt: skip


def test_excluded_attributes_leaves_those_out_but_id_and_schemas(scim, rows):
    read = scim.get(f"/Users/{rows['ada']}",
                    excludedAttributes="id,schemas,emails,meta,groups,name.familyName")  # fmt: skip

    assert read.json() == {"schemas": [USER], "id": rows["ada"], "userName":
                           "ada@corp.example.com", "active": True, "name": {"givenName": "Ada"},
                           "externalId": "00u-ada"}  # fmt: skip


def test_a_group_asked_for_its_name_alone_is_read_without_its_members(scim, rows):
    with CaptureQueriesContext(connection) as queries:
        listed = scim.get("/Groups", attributes="displayName")

    assert [set(group) for group in listed.json()["Resources"]] == [
        {"schemas", "id", "displayName"}] * 3  # fmt: skip
    assert not any("scimgroup_members" in query["sql"] for query in queries.captured_queries)


def test_a_groups_members_narrowed_to_their_values(scim, rows):
    read = scim.get(f"/Groups/{rows['ml-team']}", attributes="members.value")

    assert read.json()["members"] == [{"value": rows["ada"]}, {"value": rows["ben"]}]


def test_a_push_is_answered_with_the_attributes_asked(scim):
    made = scim.call("post", "/Users?attributes=userName,active", okta_user("dana"))

    assert made.status_code == 201 and set(made.json()) == {"schemas", "id", "userName", "active"}


# groups


def test_a_user_reads_the_groups_they_are_in(scim, rows):
    ada = scim.get(f"/Users/{rows['ada']}").json()
    cy = scim.get(f"/Users/{rows['cy']}").json()

    base = "http://testserver/scim/v2/Groups"
    assert ada["groups"] == [
        {"value": rows["ml-team"], "display": "ml-team", "$ref": f"{base}/{rows['ml-team']}"},
        {"value": rows["auditors"], "display": "auditors", "$ref": f"{base}/{rows['auditors']}"},
    ]
    assert cy["groups"] == []


def test_a_users_groups_follow_a_change_of_the_groups_members(scim):
    dana = scim.user("dana")
    group = scim.group("ml-team", dana)
    before = scim.get(f"/Users/{dana['id']}").json()["groups"]

    scim.patch(f"/Groups/{group['id']}",
               {"op": "remove", "path": f'members[value eq "{dana["id"]}"]'})  # fmt: skip

    assert [g["display"] for g in before] == ["ml-team"]
    assert scim.get(f"/Users/{dana['id']}").json()["groups"] == []


def test_a_users_groups_pushed_are_ignored(scim, rows):
    replaced = scim.put(f"/Users/{rows['cy']}",
                        okta_user("cy", groups=[{"value": rows["ml-team"]}]))  # fmt: skip
    patched = scim.patch(
        f"/Users/{rows['cy']}",
        {"op": "add", "path": "groups", "value": [{"value": rows["auditors"]}]},
    )

    assert replaced.json()["groups"] == [] and patched.json()["groups"] == []
    assert not ScimGroup.objects.filter(members__pk=rows["cy"]).exists()


def test_listing_users_with_their_groups_takes_as_many_queries_for_many_users(scim, rows):
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert scim.get("/Users").status_code == 200
        return len(captured.captured_queries)

    few = queries()
    for n in range(5):
        ScimGroup.objects.get(display_name="auditors").members.add(
            person(f"extra{n}", "E", "X", "", at(5)))  # fmt: skip

    assert queries() == few


# sortBy, sortOrder


@pytest.mark.parametrize(
    "sort_by, order, want",
    [("userName", None, ["ada", "ben", "cy"]), ("username", "DESCENDING", ["cy", "ben", "ada"]),
     ("name.familyName", "ascending", ["ben", "ada", "cy"]),
     ("name.familyName", "descending", ["cy", "ada", "ben"]),
     ("meta.created", "descending", ["cy", "ben", "ada"]),
     ("meta.lastModified", None, ["ben", "cy", "ada"]),
     ("emails", None, ["ada", "ben", "cy"]), (f"{USER}:name.givenName", None, ["ada", "ben", "cy"]),
     ("active", None, ["ben", "ada", "cy"])],
)  # fmt: skip
def test_users_are_sorted_by_the_attribute_asked(scim, rows, sort_by, order, want):
    query = {"sortBy": sort_by} | ({"sortOrder": order} if order else {})

    assert names(scim.get("/Users", **query)) == want


def test_groups_are_sorted_by_display_name_and_paged_in_that_order(scim, rows):
    first = scim.get("/Groups", sortBy="displayName", count="2")
    second = scim.get("/Groups", sortBy="displayName", count="2", startIndex="3")
    newest = scim.get("/Groups", sortBy="meta.created", sortOrder="descending",
                      filter="members pr")  # fmt: skip

    assert names(first, "displayName") == ["auditors", "empty"]
    assert names(second, "displayName") == ["ml-team"]
    assert names(newest, "displayName") == ["auditors", "ml-team"]


@pytest.mark.parametrize(
    "query, problem",
    [({"sortBy": "title"}, "'title' is no attribute lists sort by"),
     ({"sortBy": "groups"}, "no attribute lists sort by"),
     ({"sortBy": "emails.type"}, "no attribute lists sort by"),
     ({"sortBy": "userName", "sortOrder": "up"}, "ascending or descending")],
)  # fmt: skip
def test_a_sort_it_cannot_take_is_a_400_naming_it(scim, query, problem):
    assert problem in refused(scim.get("/Users", **query), "invalidValue")


# What it says of itself


def test_the_discovery_documents_say_filters_and_sorting_are_supported(scim):
    config = scim.get("/ServiceProviderConfig").json()
    user = scim.get("/Schemas").json()["Resources"][0]

    assert config["filter"] == {"supported": True, "maxResults": 200}
    assert config["sort"] == {"supported": True}
    groups = next(a for a in user["attributes"] if a["name"] == "groups")
    assert groups["mutability"] == "readOnly" and groups["multiValued"]
    assert {a["name"] for a in groups["subAttributes"]} == {"value", "$ref", "display"}
