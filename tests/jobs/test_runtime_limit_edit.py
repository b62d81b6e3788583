"""Changing a job's runtime limit (Slurm's `scontrol update TimeLimit=`):
actions.set_runtime_limit, POST /api/v1/jobs/<id>/runtime-limit/, the job page's form and the
CLI's `runtime-limit ID DURATION`. A shorter limit is a smaller job, which starts in a gap a
longer one does not fit; a job placed takes only a lower limit (its agent then lowers its
workers': tests/clusters/test_runtime_limit_lowered.py)."""

import time
from datetime import UTC, datetime, timedelta

import pytest

from clusters.models import MaintenanceWindow
from jobs import actions, cycle, snapshot
from jobs.cycle import CycleResult
from jobs.models import Job, JobEvent
from jobs.placement import place
from jobs.states import State
from quotas.models import Membership
from tests.factories import (
    JobFactory,
    MembershipFactory,
    NodeFactory,
    PriorityClassFactory,
    UserFactory,
)
from tests.jobs.test_batch_cancel import api
from tests.jobs.test_batch_shard_limit import batch
from tests.jobs.test_batch_shard_limit_cli import mlsched  # noqa: F401 (a fixture)
from tests.jobs.test_commit_windows import planned
from tests.jobs.test_min_workers_edit import portal_of

pytestmark = pytest.mark.django_db

HOUR = timedelta(hours=1)


def change(user, job, body) -> object:
    return api(user).post(f"/api/v1/jobs/{job.pk}/runtime-limit/", body, format="json")


def limit_of(job: Job) -> int:
    return Job.objects.get(pk=job.pk).max_runtime_s


def test_a_shorter_limit_starts_a_job_before_a_maintenance_window(alice, alpha, east):
    node = NodeFactory(cluster=east, gpu_count=8)
    now = datetime.now(tz=UTC)
    planned(MaintenanceWindow, east, now + HOUR / 2, now + 2 * HOUR, [node])
    job = JobFactory(tenant=alpha, owner=alice, gpus=8, max_runtime_s=7200)
    cycle.run_cycle()
    assert Job.objects.get(pk=job.pk).pending_reason == "maintenance"

    answer = change(alice, job, {"max_runtime_s": 600})
    cycle.run_cycle()

    assert answer.status_code == 200, answer.content
    assert (answer.json()["max_runtime_s"], answer.json()["changed"]) == (600, 1)
    assert Job.objects.get(pk=job.pk).state == State.SCHEDULED
    assert JobEvent.objects.filter(
        job=job, reason="runtime limit set to 10 min (600 s) by alice"
    ).exists()


def test_a_limit_raised_after_the_decision_does_not_outlast_a_reservation_it_was_backfilled_in(
    alice, alpha, east
):
    NodeFactory(cluster=east, gpu_count=8)
    JobFactory(tenant=alpha, owner=alice, gpus=4, max_runtime_s=3600)
    cycle.run_cycle()  # half the node, for an hour
    head = JobFactory(tenant=alpha, owner=alice, gpus=8, priority=100)  # reserved in an hour
    small = JobFactory(tenant=alpha, owner=alice, gpus=4, max_runtime_s=1800)
    loaded = snapshot.load(time.time()).snapshot
    decision = place(loaded)
    statuses = {o.job_id: o.status for o in decision.outcomes}
    assert statuses == {str(head.pk): "reserved", str(small.pk): "placed"}  # backfilled

    actions.set_runtime_limit(small, 7200, "alice")
    result = CycleResult()
    cycle.commit(decision, time.time(), result, loaded)

    assert (result.placed, result.skipped) == ([], [small.pk])
    cycle.run_cycle()  # decided again on its limit now: it would outlast the reservation
    assert Job.objects.get(pk=small.pk).state == State.QUEUED
    actions.set_runtime_limit(small, 1800, "alice")
    cycle.run_cycle()
    assert Job.objects.get(pk=small.pk).state == State.SCHEDULED


def test_a_batchs_queued_shards_take_a_higher_limit_and_its_placed_ones_keep_theirs(
    alice, alpha, east
):
    NodeFactory(cluster=east, gpu_count=8)
    first = batch(alice, alpha, PriorityClassFactory(name="normal"), shards=6, limit=2)
    cycle.run_cycle()
    shards = Job.objects.filter(pk__gte=first.pk, tenant=alpha).order_by("pk")
    placed = [s.pk for s in shards if s.state != State.QUEUED]
    higher = first.max_runtime_s * 2

    answer = change(alice, first, {"max_runtime_s": higher})

    assert answer.status_code == 200 and answer.json()["changed"] == 4
    limits = {s.pk: s.max_runtime_s for s in shards.all()}
    assert len(placed) == 2 and all(limits[pk] == first.max_runtime_s for pk in placed)
    assert sorted(v for pk, v in limits.items() if pk not in placed) == [higher] * 4


def test_a_lower_limit_takes_every_live_shard_of_a_batch_and_leaves_the_ended(alice, alpha, east):
    NodeFactory(cluster=east, gpu_count=8)
    first = batch(alice, alpha, PriorityClassFactory(name="normal"), shards=6, limit=2)
    cycle.run_cycle()
    shards = Job.objects.filter(pk__gte=first.pk, tenant=alpha).order_by("pk")
    ended = shards.filter(state=State.SCHEDULED).last()
    Job.objects.filter(pk=ended.pk).update(state=State.SUCCEEDED)

    answer = change(alice, first, {"max_runtime_s": 60})

    assert answer.status_code == 200 and answer.json()["changed"] == 5
    limits = {s.pk: s.max_runtime_s for s in shards.all()}
    assert limits.pop(ended.pk) == first.max_runtime_s
    assert set(limits.values()) == {60}
    events = JobEvent.objects.filter(reason="runtime limit set to 60 s by alice")
    assert sorted(events.values_list("from_state", "to_state")) == [
        (State.QUEUED, State.QUEUED)
    ] * 4 + [(State.SCHEDULED, State.SCHEDULED)]


def test_a_running_job_takes_a_lower_limit_and_refuses_a_higher_one(alice, alpha, east):
    NodeFactory(cluster=east, gpu_count=8)
    job = JobFactory(tenant=alpha, owner=alice, gpus=1, max_runtime_s=3600)
    cycle.run_cycle()
    Job.objects.filter(pk=job.pk).update(state=State.RUNNING)

    higher = change(alice, job, {"max_runtime_s": 7200})
    same = change(alice, job, {"max_runtime_s": 3600})
    lower = change(alice, job, {"max_runtime_s": 1800})

    assert (higher.status_code, same.status_code) == (409, 409)
    assert higher.json()["detail"] == (
        f"A placed job's runtime limit can only be lowered: job #{job.pk} runs under 60 min "
        "(3600 s)."
    )
    assert lower.status_code == 200, lower.content
    assert (lower.json()["max_runtime_s"], lower.json()["changed"]) == (1800, 1)
    assert limit_of(job) == 1800
    assert JobEvent.objects.filter(
        job=job, from_state=State.RUNNING, to_state=State.RUNNING,
        reason="runtime limit set to 30 min (1800 s) by alice",
    ).exists()  # fmt: skip


def test_an_ended_job_is_a_409_and_keeps_its_limit(alice, alpha):
    job = JobFactory(tenant=alpha, owner=alice, max_runtime_s=3600, state=State.SUCCEEDED)

    answer = change(alice, job, {"max_runtime_s": 60})

    assert answer.status_code == 409
    assert answer.json()["detail"] == (
        f"Job #{job.pk} has ended: its runtime limit no longer changes."
    )
    assert limit_of(job) == 3600


@pytest.mark.parametrize(
    "body, said",
    [
        ({"max_runtime_s": 7200}, "At most 3600 s at 'capped'"),
        ({"max_runtime_s": 0}, "greater than or equal to 1"),
        ({"max_runtime_s": "2h"}, "A valid integer is required"),
        ({}, "This field is required"),
        ({"max_runtime_s": 31 * 86400}, "less than or equal to 2592000"),
    ],
)
def test_a_limit_it_may_not_have_is_a_400_naming_the_field_and_changes_nothing(
    alice, alpha, body, said
):
    capped = PriorityClassFactory(name="capped", value=5, max_runtime_s=3600)
    job = JobFactory(tenant=alpha, owner=alice, priority_class=capped, max_runtime_s=600)

    answer = change(alice, job, body)

    assert answer.status_code == 400
    assert said in answer.json()["max_runtime_s"][0]
    assert limit_of(job) == 600


def test_a_limit_past_which_its_deadline_could_not_be_met_is_a_400(alice, alpha):
    deadline = datetime.now(tz=UTC) + 2 * HOUR
    job = JobFactory(tenant=alpha, owner=alice, max_runtime_s=600, deadline=deadline)

    refused = change(alice, job, {"max_runtime_s": 3 * 3600})
    allowed = change(alice, job, {"max_runtime_s": 3600})

    assert refused.status_code == 400
    assert "it could not end by then" in refused.json()["max_runtime_s"][0]
    assert allowed.status_code == 200 and limit_of(job) == 3600


def test_a_viewer_may_not_and_another_team_finds_no_job(alice, alpha, charlie):
    vera = UserFactory(username="vera")
    MembershipFactory(tenant=alpha, user=vera, role=Membership.Role.VIEWER)
    job = JobFactory(tenant=alpha, owner=alice, max_runtime_s=600)

    assert change(vera, job, {"max_runtime_s": 60}).status_code == 403
    assert change(charlie, job, {"max_runtime_s": 60}).status_code == 404
    assert limit_of(job) == 600


def test_the_job_page_changes_it_and_says_a_refusal_on_the_field(alice, bob, alpha):
    job = JobFactory(tenant=alpha, owner=alice, max_runtime_s=600)
    portal = portal_of(bob)

    page = portal.get(f"/jobs/{job.pk}/").text
    done = portal.post(f"/jobs/{job.pk}/runtime-limit/", {"max_runtime_s": "1200"})
    refused = portal.post(f"/jobs/{job.pk}/runtime-limit/", {"max_runtime_s": "0"})

    assert (
        f'<form id="runtime-limit-form" method="post" action="/jobs/{job.pk}/runtime-limit/">'
        in (page)
    )
    assert 'name="max_runtime_s" type="number" min="1" max="2592000" value="600"' in page
    assert done.status_code == 302 and limit_of(job) == 1200
    assert refused.status_code == 400
    assert 'aria-invalid="true"' in refused.text.split('id="runtime-limit-input"')[1][:200]
    assert limit_of(job) == 1200


def test_a_running_jobs_page_offers_only_a_lower_limit_and_an_ended_ones_none(alice, alpha):
    running = JobFactory(tenant=alpha, owner=alice, max_runtime_s=3600, state=State.RUNNING)
    ended = JobFactory(tenant=alpha, owner=alice, max_runtime_s=3600, state=State.FAILED)
    portal = portal_of(alice)

    page = portal.get(f"/jobs/{running.pk}/").text
    gone = portal.get(f"/jobs/{ended.pk}/").text

    form = page.split('<form id="runtime-limit-form"')[1].split("</form>")[0]
    assert not form.split(">")[0].endswith("hidden")
    assert 'type="number" min="1" max="3600" value="3600"' in form
    assert "once it is placed, only lower" in form
    assert 'id="runtime-limit-form"' not in gone


def test_the_cli_takes_a_duration_with_its_unit(mlsched, alice, alpha):  # noqa: F811
    job = JobFactory(tenant=alpha, owner=alice, max_runtime_s=600)

    status, out, err = mlsched("runtime-limit", str(job.pk), "90m")
    wrong = mlsched("runtime-limit", str(job.pk), "2w")
    changed = limit_of(job)
    short = mlsched("runtime-limit", str(job.pk), "45")

    assert (status, out) == (0, "runtime limit 1.5 h (5400 s) for 1 job\n"), err
    assert changed == 5400
    assert wrong[0] == 2 and "not N[s|m|h|d]: '2w'" in wrong[2]
    assert short[1] == "runtime limit 45 s for 1 job\n"  # in seconds, said once
