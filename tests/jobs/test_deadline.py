"""A deadline (`deadline`, Slurm's --deadline): a job that could never end by it is refused; a
queued job that can no longer end by it, started at once and run for its whole runtime limit,
is canceled as any cancel cancels (its dependents with it) and is never placed meanwhile."""

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from jobs import actions, commit, cycle, dependencies, janitor, scheduler
from jobs.clock import database_now
from jobs.models import Attempt, Family, Job, JobEvent
from jobs.states import State
from tests.jobs.conftest import STEP
from tests.jobs.test_begin import BAD_BEGINS, SPEC, ahead, fresh, post, zulu
from tests.jobs.test_notify import hooked, queued, receiver  # noqa: F401 - fixtures

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("room", "normal_priority")]

RUNTIME = timedelta(seconds=STEP["max_runtime_s"])  # SPEC's and STEP's: 600 s
H = timedelta(hours=1)


def with_deadline(alice, alpha, normal_priority, deadline: datetime, **spec) -> Job:
    fields = {**STEP, "priority_class": normal_priority, "deadline": deadline, **spec}
    return actions.submit(alice, alpha, fields)[0]


def too_late_to_start(deadline: datetime) -> datetime:
    """The first whole second from which a job of STEP's runtime could not end by `deadline`."""
    return deadline - RUNTIME + timedelta(seconds=1)


def reason_of(deadline: datetime) -> str:
    return f"deadline {zulu(deadline)}: could not end by then"


# -- the API ---------------------------------------------------------------------------------


def test_a_submission_with_a_deadline_keeps_it_and_answers_it(client, alice, alpha):
    deadline = ahead()

    response = post(alice, {**SPEC, "deadline": zulu(deadline)})

    assert response.status_code == 201
    job = Job.objects.get()
    assert (job.state, job.deadline) == (State.QUEUED, deadline)
    client.force_login(alice)
    shown = client.get(f"/api/v1/jobs/{job.pk}/").json()
    assert shown["deadline"] == zulu(deadline)


def test_a_deadline_with_an_offset_is_the_same_time_in_utc(alice, alpha):
    deadline = ahead()
    paris = deadline.astimezone(UTC).replace(tzinfo=None) + H

    response = post(alice, {**SPEC, "deadline": f"{paris.isoformat()}+01:00"})

    assert response.status_code == 201
    assert Job.objects.get().deadline == deadline


def test_a_job_submitted_without_a_deadline_answers_deadline_null(alice, alpha):
    response = post(alice, SPEC)

    assert response.status_code == 201
    assert response.json()["deadline"] is None
    assert Job.objects.get().deadline is None


def test_a_deadline_no_later_than_now_and_the_runtime_limit_is_a_400_naming_deadline(alice, alpha):
    soon = database_now() + RUNTIME - timedelta(seconds=5)

    refused = post(alice, {**SPEC, "deadline": zulu(soon)})
    met = post(alice, {**SPEC, "deadline": zulu(soon + timedelta(minutes=1))})

    assert refused.status_code == 400
    assert list(refused.json()) == ["deadline"]
    assert "could not end by then" in refused.json()["deadline"][0]
    assert "max_runtime_s (600 s)" in refused.json()["deadline"][0]
    assert met.status_code == 201
    assert Job.objects.count() == 1


def test_a_deadline_no_later_than_the_begin_and_the_runtime_limit_is_a_400_naming_deadline(
    alice, alpha
):
    begin = ahead()

    refused = post(alice, {**SPEC, "begin": zulu(begin), "deadline": zulu(begin + RUNTIME)})
    met = post(alice, {**SPEC, "begin": zulu(begin), "deadline": zulu(begin + 2 * RUNTIME)})

    assert refused.status_code == 400
    assert list(refused.json()) == ["deadline"]
    assert "if it started at its begin" in refused.json()["deadline"][0]
    assert met.status_code == 201
    assert Job.objects.get().deadline == begin + 2 * RUNTIME


@pytest.mark.parametrize("bad", BAD_BEGINS.values(), ids=BAD_BEGINS.keys())
def test_a_deadline_is_read_as_a_begin_is_and_refused_in_the_same_words(alice, alpha, bad):
    as_begin = post(alice, {**SPEC, "begin": bad})
    as_deadline = post(alice, {**SPEC, "deadline": bad})

    assert as_deadline.status_code == 400
    assert as_deadline.json() == {"deadline": as_begin.json()["begin"]}
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    "deadline", ["2020-01-01T00:00:00Z", "0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00"]
)
def test_a_deadline_past_or_at_either_end_of_time_is_a_400_naming_deadline(alice, alpha, deadline):
    refused = post(alice, {**SPEC, "deadline": deadline})

    assert (refused.status_code, list(refused.json())) == (400, ["deadline"])


def test_a_deadline_is_taken_as_far_as_a_years_begin_and_the_longest_runtime_reach(alice, alpha):
    begin = ahead(timedelta(days=365))
    longest = {**SPEC, "max_runtime_s": 30 * 24 * 3600, "begin": zulu(begin)}

    taken = post(alice, {**longest, "deadline": zulu(begin + timedelta(days=30, hours=1))})
    too_far = post(alice, {**longest, "deadline": zulu(ahead(timedelta(days=397)))})

    assert taken.status_code == 201
    assert too_far.status_code == 400
    assert "396 days" in too_far.json()["deadline"][0]


def test_every_shard_of_a_batch_carries_the_deadline(alice, alpha):
    deadline = ahead()
    batch = {**SPEC, "family": Family.BATCH_INFERENCE, "gpus": 0, "shards": 3}

    response = post(alice, {**batch, "deadline": zulu(deadline)})

    assert response.status_code == 201
    first = Job.objects.get(pk=response.json()["id"])
    assert [shard.deadline for shard in first.batch()] == [deadline] * 3


# -- the sweep -------------------------------------------------------------------------------


def test_the_sweep_cancels_a_queued_job_that_can_no_longer_end_by_its_deadline_saying_so(
    alice, alpha, normal_priority
):
    deadline = ahead()
    job = with_deadline(alice, alpha, normal_priority, deadline)
    actions.hold(job, "alice")

    still = janitor.cancel_past_deadline(deadline - RUNTIME)
    late = janitor.cancel_past_deadline(too_late_to_start(deadline))

    assert (still, late) == (0, 1)
    job = fresh(job)
    assert (job.state, job.held) == (State.CANCELED, "")
    event = JobEvent.objects.filter(job=job).latest("id")
    assert (event.from_state, event.to_state) == (State.QUEUED, State.CANCELED)
    assert event.reason == reason_of(deadline)


def late_jobs_canceled(alice, alpha, normal_priority, count: int) -> int:
    """Queries of a sweep canceling `count` jobs, each late for a deadline of its own."""
    deadline = ahead()
    for minute in range(count):
        with_deadline(alice, alpha, normal_priority, deadline - minute * timedelta(minutes=1))
    with CaptureQueriesContext(connection) as queries:
        assert janitor.cancel_past_deadline(too_late_to_start(deadline)) == count
    return len(queries)


def test_jobs_late_for_deadlines_of_their_own_are_canceled_at_once_each_saying_its_own(
    alice, alpha, normal_priority
):
    few = late_jobs_canceled(alice, alpha, normal_priority, 2)
    many = late_jobs_canceled(alice, alpha, normal_priority, 20)

    assert many == few
    for job in Job.objects.all():
        said = JobEvent.objects.filter(job=job).latest("id").reason
        assert said == reason_of(job.deadline)


def test_the_sweeps_cancel_takes_an_afterok_dependent_with_it(alice, alpha, normal_priority):
    deadline = ahead()
    job = with_deadline(alice, alpha, normal_priority, deadline)
    waits = [dependencies.Wait(job.pk, "afterok")]
    dependent = actions.submit(alice, alpha, {**STEP, "priority_class": normal_priority,
                                              "depends_on": waits})[0]  # fmt: skip

    janitor.cancel_past_deadline(too_late_to_start(deadline))

    assert fresh(job).state == fresh(dependent).state == State.CANCELED
    said = JobEvent.objects.filter(job=dependent).latest("id").reason
    assert said == f"dependency {job.pk} was canceled"


def test_a_job_waiting_for_a_dependency_or_deferred_is_canceled_by_its_deadline_too(
    alice, alpha, normal_priority
):
    deadline = ahead(2 * H)
    first = with_deadline(alice, alpha, normal_priority, None)
    actions.hold(first, "alice")
    waiting = with_deadline(alice, alpha, normal_priority, deadline,
                            depends_on=[dependencies.Wait(first.pk, "afterok")])  # fmt: skip
    deferred = with_deadline(alice, alpha, normal_priority, deadline, begin=deadline - H)

    canceled = janitor.cancel_past_deadline(too_late_to_start(deadline))

    assert canceled == 2
    assert {fresh(waiting).state, fresh(deferred).state} == {State.CANCELED}
    assert fresh(first).state == State.QUEUED


def test_the_sweep_leaves_a_running_job_to_its_runtime_limit(alice, alpha, normal_priority):
    deadline = ahead()
    job = with_deadline(alice, alpha, normal_priority, deadline)
    assert cycle.run_cycle().placed == [job.pk]
    actions.mark_running(job.attempts.get().pk)

    canceled = janitor.cancel_past_deadline(deadline + H)

    assert canceled == 0
    assert fresh(job).state == State.RUNNING


def test_a_job_requeued_for_a_retry_is_canceled_once_it_can_no_longer_end_by_its_deadline(
    alice, alpha, normal_priority
):
    deadline = ahead()
    job = with_deadline(alice, alpha, normal_priority, deadline)
    cycle.run_cycle()
    actions.end_attempt(job.attempts.get().pk, Attempt.Outcome.INFRA_ERROR)
    assert (fresh(job).state, fresh(job).retries_used) == (State.QUEUED, 1)

    janitor.cancel_past_deadline(too_late_to_start(deadline))

    assert fresh(job).state == State.CANCELED


def test_the_sweep_cancels_a_batchs_queued_shard_and_leaves_its_running_ones(
    alice, alpha, normal_priority
):
    deadline = ahead()
    # Shards of a whole node's cores each: the two nodes run two, the third waits.
    first = with_deadline(alice, alpha, normal_priority, deadline, family=Family.BATCH_INFERENCE,
                          gpus=0, cpu_milli=96_000, shards=3)  # fmt: skip
    placed = cycle.run_cycle().placed
    for attempt in Attempt.objects.filter(job__in=placed):
        actions.mark_running(attempt.pk)

    canceled = janitor.cancel_past_deadline(too_late_to_start(deadline))

    states = sorted(shard.state for shard in first.batch())
    assert (len(placed), canceled) == (2, 1)
    assert states == [State.CANCELED, State.RUNNING, State.RUNNING]


def test_a_scheduler_tick_cancels_a_queued_job_that_can_no_longer_end_by_its_deadline(
    alice, alpha, normal_priority
):
    job = with_deadline(alice, alpha, normal_priority, ahead())
    # Its deadline now five minutes off, its runtime limit ten.
    Job.objects.filter(pk=job.pk).update(deadline=database_now() + timedelta(minutes=5))

    result = scheduler.tick()

    job = fresh(job)
    assert result.placed == []
    assert job.state == State.CANCELED
    assert JobEvent.objects.filter(job=job).latest("id").reason == reason_of(job.deadline)


@pytest.mark.usefixtures("queued")  # the notification sent at once, to the receiver
def test_the_job_end_notification_of_a_job_canceled_by_its_deadline_gives_the_reason(
    hooked,  # noqa: F811 - the fixture
    receiver,  # noqa: F811 - the fixture
    alice,
    normal_priority,
    django_capture_on_commit_callbacks,
):
    deadline = ahead()
    job = with_deadline(alice, hooked, normal_priority, deadline)

    with django_capture_on_commit_callbacks(execute=True):
        janitor.cancel_past_deadline(too_late_to_start(deadline))

    (sent,) = receiver.received
    assert (sent.document["job"], sent.document["state"]) == (job.pk, State.CANCELED)
    assert sent.document["reason"] == reason_of(deadline)


# -- the cycle -------------------------------------------------------------------------------


def test_a_job_whose_deadline_is_far_enough_is_left_by_the_sweep_and_placed(
    alice, alpha, normal_priority
):
    deadline = ahead()
    job = with_deadline(alice, alpha, normal_priority, deadline)

    canceled = janitor.cancel_past_deadline(deadline - RUNTIME)
    result = cycle.run_cycle(now=(deadline - RUNTIME).timestamp())

    assert (canceled, result.placed) == (0, [job.pk])
    assert fresh(job).state == State.SCHEDULED


def test_the_cycle_does_not_place_a_job_that_could_not_end_by_its_deadline_before_any_sweep(
    alice, alpha, normal_priority
):
    deadline = ahead()
    job = with_deadline(alice, alpha, normal_priority, deadline)

    result = cycle.run_cycle(now=too_late_to_start(deadline).timestamp())

    assert (result.considered, result.placed) == (0, [])
    assert fresh(job).state == State.QUEUED  # for the sweep to cancel


def test_the_commits_claim_skips_a_job_that_could_no_longer_end_by_its_deadline(
    alice, alpha, normal_priority
):
    deadline = ahead()
    job = with_deadline(alice, alpha, normal_priority, deadline)

    in_time = commit.claim([job.pk], deadline - RUNTIME)
    too_late = commit.claim([job.pk], too_late_to_start(deadline))

    assert (in_time, too_late) == ({job.pk}, set())


# -- resubmit --------------------------------------------------------------------------------


def resubmitted(client, user, job: Job):
    client.force_login(user)
    return client.post(f"/api/v1/jobs/{job.pk}/resubmit/", {}, content_type="application/json")


def test_a_resubmitted_job_keeps_a_deadline_it_can_still_end_by(
    client, alice, alpha, normal_priority
):
    deadline = ahead()
    job = with_deadline(alice, alpha, normal_priority, deadline)
    actions.cancel(job, "canceled by alice")

    response = resubmitted(client, alice, job)

    assert response.status_code == 201
    assert response.json()["deadline"] == zulu(deadline)
    assert Job.objects.get(pk=response.json()["id"]).deadline == deadline


def test_a_resubmission_of_a_job_that_could_no_longer_end_by_its_deadline_is_a_400(
    client, alice, alpha, normal_priority
):
    job = with_deadline(alice, alpha, normal_priority, ahead())
    actions.cancel(job, "canceled by alice")
    # Its deadline now five minutes off, its runtime limit ten.
    Job.objects.filter(pk=job.pk).update(deadline=database_now() + timedelta(minutes=5))

    response = resubmitted(client, alice, job)

    assert response.status_code == 400
    assert list(response.json()) == ["deadline"]
    assert "could not end by then" in response.json()["deadline"][0]
    assert response.json()["deadline"][0].startswith("A resubmission keeps the job's deadline, ")
    assert response.json()["deadline"][0].endswith(
        "Submit the job again with a later deadline, or none."
    )
    assert Job.objects.count() == 1
