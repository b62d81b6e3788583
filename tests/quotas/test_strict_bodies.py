"""The calls that read their body field by field (a team's members, its pause, a teams file, a
secret, a node's cordon) or take none (a job's cancel, hold and release) refuse a field they do
not take, on that field, with the one meant where one is close, and a body that is not a JSON
object: nothing is done. A misspelled `dry_run` would otherwise apply a teams file for real, a
cancel's `shards` cancel every shard of a batch."""

import json

import pytest
from django.contrib.admin.models import LogEntry

from clusters.models import Node
from jobs.models import Job
from jobs.states import State
from quotas.models import Membership, Tenant, TenantSecret
from tests.factories import JobFactory, NodeFactory, UserFactory
from tests.jobs.test_api import client_for
from tests.quotas.test_apply_teams import ALPHA_AND_BETA

pytestmark = pytest.mark.django_db


@pytest.fixture
def root(db):
    return UserFactory(username="root", is_superuser=True, is_staff=True)


@pytest.fixture
def world(alpha, alice, bob, root, east):
    """A team with an owner and a member, a user to add, a node, and a queued job of alice's."""
    UserFactory(username="dave")
    NodeFactory(cluster=east, name="east-0")
    job = JobFactory(tenant=alpha, owner=alice, state=State.QUEUED)
    return {"alice": alice, "root": root, "job": job}


def nothing_done(job: Job) -> bool:
    """Nothing any of the calls below would do has been done."""
    job.refresh_from_db()
    return (
        not Membership.objects.filter(user__username="dave").exists()
        and Membership.objects.get(user__username="bob").role == Membership.Role.MEMBER
        and not TenantSecret.objects.exists()
        and not Tenant.objects.filter(slug="beta").exists()
        and Tenant.objects.get(slug="alpha").placements_paused == ""
        and Node.objects.get(name="east-0").schedulable
        and (job.state, job.held) == (State.QUEUED, "")
        and not LogEntry.objects.exists()
    )


def calls(job: Job) -> list[tuple[str, str, str, dict, str, str]]:
    """Each call: who makes it, the method, the path, a body it takes, and a field it does
    not take with the one meant ("": none is close), sent in place of the one meant."""
    members = "/api/v1/tenants/alpha/members/"
    return [
        ("alice", "post", members, {"username": "dave", "role": "viewer"}, "rol", "role"),
        ("alice", "patch", f"{members}bob/", {"role": "viewer"}, "roles", "role"),
        ("alice", "put", "/api/v1/tenants/alpha/secrets/HF_TOKEN/",
         {"value": "hf_1234", "as_file": True}, "as_files", "as_file"),
        ("root", "post", "/api/v1/tenants/apply/",
         {"document": ALPHA_AND_BETA, "dry_run": False}, "dryrun", "dry_run"),
        ("root", "post", "/api/v1/tenants/alpha/pause/", {"reason": "budget"}, "reasons",
         "reason"),
        ("root", "post", "/api/v1/nodes/east/east-0/cordon/", {"reason": "bad DIMM"}, "reson",
         "reason"),
        ("alice", "post", f"/api/v1/jobs/{job.pk}/hold/", {}, "reason", ""),
        ("alice", "post", f"/api/v1/jobs/{job.pk}/cancel/", {}, "shards", ""),
    ]  # fmt: skip


def misspelled(body: dict, field: str, meant: str) -> dict:
    """`body` with `field` in place of `meant` (beside the others where none is meant)."""
    return {field if key == meant else key: value for key, value in body.items()} | (
        {} if meant else {field: [1]}
    )


@pytest.mark.parametrize("n", range(8))
def test_a_field_the_call_does_not_take_is_a_400_naming_it_and_nothing_is_done(world, n):
    who, method, path, body, field, meant = calls(world["job"])[n]

    answer = getattr(client_for(world[who]), method)(
        path, misspelled(body, field, meant), format="json"
    )

    assert answer.status_code == 400, answer.content
    said = f"There is no field {field!r} here." + (f" Did you mean {meant!r}?" if meant else "")
    assert answer.json() == {field: [said]}
    assert nothing_done(world["job"])


@pytest.mark.parametrize("n", range(8))
def test_a_body_that_is_not_a_json_object_is_a_400_and_nothing_is_done(world, n):
    who, method, path, *_ = calls(world["job"])[n]

    answer = getattr(client_for(world[who]), method)(path, ["viewer"], format="json")

    assert answer.status_code == 400, answer.content
    assert answer.json() == {"non_field_errors": ["Send the fields as a JSON object."]}
    assert nothing_done(world["job"])


def test_the_same_calls_with_the_fields_they_take_are_done(world):
    answers = [
        getattr(client_for(world[who]), method)(path, body, format="json")
        for who, method, path, body, *_ in calls(world["job"])
    ]

    job = world["job"]
    job.refresh_from_db()
    assert [answer.status_code for answer in answers] == [201, 200, 201, 200, 200, 200, 200, 202]
    assert answers[-2].json()["held"] == Job.Hold.USER
    assert Membership.objects.get(user__username="dave").role == Membership.Role.VIEWER
    assert Membership.objects.get(user__username="bob").role == Membership.Role.VIEWER
    assert TenantSecret.objects.get().as_file
    assert Tenant.objects.filter(slug="beta").exists()
    assert Tenant.objects.get(slug="alpha").placements_paused == "budget"
    assert not Node.objects.get(name="east-0").schedulable
    assert job.state == State.CANCELED


def test_a_resume_through_the_api_keeps_its_reason_in_the_history(world, alpha):
    alpha.placements_paused = "budget"
    alpha.save(update_fields=["placements_paused"])

    answer = client_for(world["root"]).post(
        "/api/v1/tenants/alpha/resume/", {"reason": "budget raised"}, format="json"
    )

    alpha.refresh_from_db()
    assert answer.status_code == 200 and answer.json()["changed"] is True
    assert alpha.placements_paused == ""
    assert LogEntry.objects.get().change_message == (
        "Placements resumed through the API: budget raised"
    )


@pytest.mark.parametrize("text", ["bad\x00DIMM", "bad \ud800 DIMM"])
def test_text_no_field_can_store_is_a_400_on_its_field_and_nothing_is_done(world, text):
    answer = client_for(world["root"]).generic(
        "POST", "/api/v1/nodes/east/east-0/cordon/", json.dumps({"reason": text}),
        "application/json",
    )  # fmt: skip

    assert answer.status_code == 400
    assert answer.json() == {"reason": ["Cannot hold a NUL character or a lone surrogate."]}
    assert nothing_done(world["job"])
