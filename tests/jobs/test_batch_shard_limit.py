"""A batch's limit on how many of its shards run at once (Slurm's array throttle,
`--array=0-999%10`): `max_running_shards` at submit and in the job's answer, changed on a live
batch (POST /api/v1/jobs/<id>/shard-limit/), loaded into the placement core's snapshot, and
kept by the cycle against the real database."""

import time
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from jobs import actions, cycle, snapshot
from jobs.models import Attempt, Family, Job, JobEvent
from jobs.states import State
from quotas.models import Membership
from tests.factories import JobFactory, MembershipFactory, NodeFactory, UserFactory
from tests.jobs.test_batch_cancel import api

pytestmark = pytest.mark.django_db

BODY = {"tenant": "alpha", "name": "embed", "family": Family.BATCH_INFERENCE, "image": "i",
        "command": ["x"], "cpu_milli": 1000, "memory_mb": 1000, "gpus": 1,
        "max_runtime_s": 600}  # fmt: skip


def batch(owner, tenant, priority_class, shards: int = 6, limit: int | None = 2) -> Job:
    """A batch of `shards` one-GPU shards, at most `limit` of them running at once."""
    spec = {**BODY, "shards": shards, "max_running_shards": limit,
            "priority_class": priority_class}  # fmt: skip
    spec.pop("tenant")
    return actions.submit(owner, tenant, spec)[0]


def change(user, job, limit) -> object:
    return api(user).post(
        f"/api/v1/jobs/{job.pk}/shard-limit/", {"max_running_shards": limit}, format="json"
    )


def limits(job: Job) -> set:
    return set(job.batch().values_list("max_running_shards", flat=True))


def scheduled(job: Job) -> int:
    return job.batch().filter(state=State.SCHEDULED).count()


def end_scheduled(job: Job, count: int) -> None:
    """End `count` of the batch's placed shards, as their agent reports them done."""
    for attempt in Attempt.objects.filter(job__in=job.batch(), outcome="")[:count]:
        actions.end_attempt(attempt.pk, Attempt.Outcome.SUCCEEDED, exit_code=0)


@pytest.fixture
def vera(alpha):
    """A viewer of Alice's team: she sees its jobs and changes none."""
    user = UserFactory(username="vera")
    MembershipFactory(tenant=alpha, user=user, role=Membership.Role.VIEWER)
    return user


# -- submit -------------------------------------------------------------------------------------


def test_a_batch_submitted_with_a_limit_carries_it_on_every_shard(alice, normal_priority):
    response = api(alice).post(
        "/api/v1/jobs/", {**BODY, "shards": 4, "max_running_shards": 2}, format="json"
    )

    assert response.status_code == 201
    assert response.json()["max_running_shards"] == 2
    first = Job.objects.get(pk=response.json()["id"])
    assert (first.batch().count(), limits(first)) == (4, {2})


def test_a_batch_submitted_without_a_limit_has_none(alice, normal_priority):
    response = api(alice).post("/api/v1/jobs/", {**BODY, "shards": 4}, format="json")

    assert response.json()["max_running_shards"] is None
    assert limits(Job.objects.get(pk=response.json()["id"])) == {None}


@pytest.mark.parametrize("limit", [0, -1, "two", 2.5, True])
def test_a_limit_that_is_no_whole_number_above_0_is_a_400_naming_it(alice, normal_priority, limit):
    response = api(alice).post(
        "/api/v1/jobs/", {**BODY, "shards": 4, "max_running_shards": limit}, format="json"
    )

    assert response.status_code == 400
    assert list(response.json()) == ["max_running_shards"]
    assert not Job.objects.exists()


def test_a_limit_on_a_single_job_is_a_400_naming_it(alice, normal_priority):
    response = api(alice).post("/api/v1/jobs/", {**BODY, "max_running_shards": 2}, format="json")

    assert response.status_code == 400
    assert "Only a batch" in response.json()["max_running_shards"][0]
    assert not Job.objects.exists()


def test_a_resubmission_and_a_rerun_of_some_shards_keep_the_limit(alice, alpha, normal_priority):
    whole, some = (batch(alice, alpha, normal_priority, shards=4, limit=3) for _ in range(2))
    Job.objects.filter(tenant=alpha).update(state=State.FAILED)

    again, _ = actions.resubmit(alice, whole)
    rerun, _ = actions.resubmit(alice, some, shards=[1, 2])

    assert (again.batch().count(), limits(again)) == (4, {3})
    assert (rerun.batch().count(), limits(rerun)) == (2, {3})


# -- change ---------------------------------------------------------------------------------------


def test_a_member_changes_every_shards_limit_in_one_statement(
    alice, bob, alpha, normal_priority, django_capture_on_commit_callbacks
):
    first = batch(alice, alpha, normal_priority, shards=50)

    with (
        CaptureQueriesContext(connection) as queries,
        django_capture_on_commit_callbacks() as hooks,
    ):
        response = change(bob, first, 5)

    assert response.status_code == 200
    assert (response.json()["max_running_shards"], response.json()["changed"]) == (5, 50)
    assert limits(first) == {5}
    updates = [q["sql"] for q in queries if q["sql"].startswith('UPDATE "jobs_job"')]
    assert len(updates) == 1
    assert actions.kick in hooks  # the scheduler hears of it
    noted = JobEvent.objects.filter(reason__startswith="shards running at once").get()
    assert (noted.job_id, noted.from_state, noted.to_state, noted.reason) == (
        first.pk, State.QUEUED, State.QUEUED, "shards running at once: at most 5, set by bob",
    )  # fmt: skip


def test_null_removes_the_limit(alice, alpha, normal_priority):
    first = batch(alice, alpha, normal_priority)

    response = change(alice, first, None)

    assert (response.status_code, response.json()["max_running_shards"]) == (200, None)
    assert limits(first) == {None}


def test_a_running_batchs_limit_changes_its_ended_shards_with_it(alice, alpha, normal_priority):
    first = batch(alice, alpha, normal_priority, shards=3)
    Job.objects.filter(pk=first.pk).update(state=State.SUCCEEDED)
    Job.objects.filter(parent=first, shard_index=1).update(state=State.RUNNING)

    response = change(alice, first, 1)

    assert (response.status_code, response.json()["changed"]) == (200, 3)
    assert limits(first) == {1}


@pytest.mark.parametrize("limit", [0, -3, "two", 1.5, ""])
def test_a_change_to_no_whole_number_above_0_is_a_400_naming_it(alice, alpha, normal_priority,
                                                                 limit):  # fmt: skip
    first = batch(alice, alpha, normal_priority)

    response = change(alice, first, limit)

    assert response.status_code == 400
    assert list(response.json()) == ["max_running_shards"]
    assert limits(first) == {2}


def test_a_change_giving_no_limit_at_all_is_a_400_naming_it(alice, alpha, normal_priority):
    first = batch(alice, alpha, normal_priority)

    response = api(alice).post(f"/api/v1/jobs/{first.pk}/shard-limit/", {}, format="json")

    assert (response.status_code, list(response.json())) == (400, ["max_running_shards"])


def test_a_single_jobs_limit_is_a_400_naming_it(alice, alpha):
    job = JobFactory(tenant=alpha, owner=alice)

    response = change(alice, job, 2)

    assert response.status_code == 400
    assert "is not a batch" in response.json()["max_running_shards"][0]
    assert Job.objects.get(pk=job.pk).max_running_shards is None


def test_another_shard_than_the_first_or_an_ended_batch_is_a_409(alice, alpha, normal_priority):
    first = batch(alice, alpha, normal_priority)
    shard = first.batch().last()
    ended = batch(alice, alpha, normal_priority)
    ended.batch().update(state=State.CANCELED)

    on_shard, on_ended = change(alice, shard, 3), change(alice, ended, 3)

    assert on_shard.status_code == 409 and f"#{first.pk}" in on_shard.json()["detail"]
    assert on_ended.status_code == 409 and "has ended" in on_ended.json()["detail"]
    assert limits(first) == limits(ended) == {2}


def test_a_viewer_gets_a_403_and_another_team_a_404(alice, alpha, vera, charlie, normal_priority):
    first = batch(alice, alpha, normal_priority)

    assert change(vera, first, 3).status_code == 403
    assert change(charlie, first, 3).status_code == 404
    assert limits(first) == {2}


# -- the snapshot ---------------------------------------------------------------------------------


def test_the_snapshot_gives_each_queued_shard_its_batch_and_limit(alice, alpha, normal_priority):
    first = batch(alice, alpha, normal_priority, shards=3)
    single = JobFactory(tenant=alpha, owner=alice, priority_class=normal_priority)

    loaded = snapshot.load(time.time()).snapshot

    got = {job.id: (job.batch, job.max_running_shards) for job in loaded.queued}
    shards = {str(pk): (str(first.pk), 2) for pk in first.batch().values_list("pk", flat=True)}
    assert got == {**shards, str(single.pk): (None, None)}


def test_the_snapshot_gives_each_running_shard_its_batch(alice, alpha, normal_priority):
    NodeFactory()
    first = batch(alice, alpha, normal_priority, shards=3, limit=None)
    single = JobFactory(tenant=alpha, owner=alice, priority_class=normal_priority)
    cycle.run_cycle()

    loaded = snapshot.load(time.time()).snapshot

    got = {job.id: job.batch for job in loaded.running}
    shards = {str(pk): str(first.pk) for pk in first.batch().values_list("pk", flat=True)}
    assert got == {**shards, str(single.pk): None}


def test_a_rerun_of_some_shards_is_a_batch_of_its_own(alice, alpha, normal_priority):
    first = batch(alice, alpha, normal_priority, shards=4)
    first.batch().update(state=State.FAILED)
    rerun, _ = actions.resubmit(alice, first, shards=[2])  # one row, of a batch of 4

    (queued,) = snapshot.load(time.time()).snapshot.queued

    assert (queued.id, queued.batch, queued.max_running_shards) == (str(rerun.pk),) * 2 + (2,)


def test_the_snapshot_costs_the_same_queries_for_one_limited_batch_as_for_five(
    alice, alpha, normal_priority
):
    NodeFactory(gpu_count=2)
    batch(alice, alpha, normal_priority, shards=4)
    cycle.run_cycle()  # two shards running, two queued
    with CaptureQueriesContext(connection) as one:
        snapshot.load(time.time())
    for _ in range(4):
        batch(alice, alpha, normal_priority, shards=4, limit=3)
    NodeFactory(gpu_count=8)
    cycle.run_cycle()

    with CaptureQueriesContext(connection) as five:
        snapshot.load(time.time())

    assert len(five) == len(one)


# -- the cycle ------------------------------------------------------------------------------------


def test_a_batch_of_6_with_a_limit_of_2_runs_2_at_a_time(alice, alpha, normal_priority):
    NodeFactory(gpu_count=8)  # room for all 6
    first = batch(alice, alpha, normal_priority, shards=6, limit=2)

    cycle.run_cycle()

    assert scheduled(first) == 2
    waiting = first.batch().filter(state=State.QUEUED)
    assert set(waiting.values_list("pending_reason", flat=True)) == {"batch_shard_limit"}
    assert waiting.first().pending_message.endswith(
        "2 of its batch's shards run, at most 2 may run at once: it starts when one of them ends."
    )

    end_scheduled(first, 2)
    cycle.run_cycle()

    assert scheduled(first) == 2
    assert first.batch().filter(state=State.SUCCEEDED).count() == 2
    assert first.batch().filter(state=State.QUEUED).count() == 2


def test_a_raised_limit_places_more_at_the_next_cycle(alice, alpha, normal_priority):
    NodeFactory(gpu_count=8)
    first = batch(alice, alpha, normal_priority, shards=6, limit=2)
    cycle.run_cycle()

    change(alice, first, 5)
    cycle.run_cycle()

    assert scheduled(first) == 5


def test_a_lowered_limit_stops_nothing_and_starts_nothing_until_fewer_run(
    alice, alpha, normal_priority
):
    NodeFactory(gpu_count=8)
    first = batch(alice, alpha, normal_priority, shards=6, limit=3)
    cycle.run_cycle()

    change(alice, first, 1)
    cycle.run_cycle()

    assert scheduled(first) == 3
    waiting = first.batch().filter(state=State.QUEUED).first()
    assert waiting.pending_message.endswith(
        "3 of its batch's shards run, at most 1 may run at once: it starts when 3 of them end."
    )


def test_a_test_only_submission_counts_its_shards_as_one_batch(alice, normal_priority):
    NodeFactory(gpu_count=8)

    response = api(alice).post(
        "/api/v1/jobs/test/", {**BODY, "shards": 6, "max_running_shards": 2}, format="json"
    )

    jobs = response.json()["jobs"]
    assert [job["status"] for job in jobs] == ["placed"] * 2 + ["pending"] * 4
    assert {job["pending_reason"] for job in jobs[2:]} == {"batch_shard_limit"}
    assert not Job.objects.exists()


def test_a_held_shard_stores_when_one_of_its_batch_should_end(alice, alpha, normal_priority):
    NodeFactory(gpu_count=8)
    first = batch(alice, alpha, normal_priority, shards=3, limit=1)  # max_runtime_s 600

    cycle.run_cycle()

    (placed,) = Attempt.objects.filter(job__in=first.batch())
    waiting = first.batch().filter(state=State.QUEUED)
    estimates = set(waiting.values_list("estimated_start", flat=True))
    assert estimates == {placed.scheduled_at + timedelta(seconds=600)}
