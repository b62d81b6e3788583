"""A SCIM call that loses the database partway leaves nothing half-written and answers 503 in
SCIM's error document with a Retry-After, which identity providers send again: each call that
changes a user or a group, cut before each of its writes in turn (tests/test_api_faults.py's
sweep). A group a team names gives its members the team, so a group's calls change teams too."""

import pytest
import yaml

from quotas.models import Tenant
from tests.factories import TenantFactory
from tests.quotas.scim_provider import ERROR, GROUP, PATCH_OP, members, okta_user
from tests.test_api_faults import sweep

pytestmark = pytest.mark.django_db(transaction=True)

DETAIL = "The database did not answer: try again in a few seconds."


def scim_503(answer) -> str | None:
    """What is wrong with the answer of a SCIM call that lost the database: None if nothing."""
    if answer.status_code != 503 or answer.headers.get("Retry-After") != "5":
        return f"answered {answer.status_code}: {answer.content[:200]!r}"
    if answer.json() != {"schemas": [ERROR], "status": "503", "detail": DETAIL}:
        return f"said {answer.content[:200]!r}"
    return None


def test_a_scim_call_that_loses_the_database_at_any_write_writes_nothing_and_answers_503(scim):
    research = TenantFactory(slug="research")
    made = iter(range(1_000_000))

    def user() -> dict:
        return scim.user(f"user{next(made)}.doe@corp.example.com")

    def named() -> str:
        """A new group's name, which the team names: its members are the team's."""
        name = f"ml-team-{next(made)}"
        Tenant.objects.filter(pk=research.pk).update(member_groups=name)
        return name

    def group(*users) -> dict:
        return scim.group(named(), *users)

    def patch(path: str, *operations: dict):
        return "patch", path, {"schemas": [PATCH_OP], "Operations": list(operations)}

    def prepare(name: str):
        if name == "create user":
            return "post", "/Users", okta_user(f"new{next(made)}.doe@corp.example.com")
        if name == "replace user":
            given = user()
            return "put", f"/Users/{given['id']}", okta_user(given["userName"], title="Lead")
        if name == "deactivate user":
            dana = user()
            group(dana)
            return patch(f"/Users/{dana['id']}", {"op": "replace", "value": {"active": False}})
        if name == "delete user":
            dana = user()
            group(dana)
            return "delete", f"/Users/{dana['id']}", None
        if name == "create group":
            body = {"schemas": [GROUP], "displayName": named(), "members": members(user())}
            return "post", "/Groups", body
        if name == "replace group":
            body = {"schemas": [GROUP], "displayName": named(), "members": members(user())}
            return "put", f"/Groups/{group(user())['id']}", body
        if name == "add members":
            added = {"op": "add", "path": "members", "value": members(user(), user())}
            return patch(f"/Groups/{group(user())['id']}", added)
        if name == "delete group":
            return "delete", f"/Groups/{group(user())['id']}", None
        raise AssertionError(name)

    names = ["create user", "replace user", "deactivate user", "delete user", "create group",
             "replace group", "add members", "delete group"]  # fmt: skip
    found = sweep(prepare, names, send=lambda call: scim.call(*call), said=scim_503)

    assert not found, yaml.safe_dump(found, width=200)
