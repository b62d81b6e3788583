"""Queue wait runs from when a job became eligible to run (Job.eligible_at, Slurm's EligibleTime)
to its first start: the time its team held it, chained it behind other jobs or its retry backed
off is not the queue's. The usage report, its daily roll-up and /metrics count it the same."""

from datetime import UTC, datetime, time, timedelta

import pytest
from django.db import connection
from django.db.models import F
from django.test.utils import CaptureQueriesContext

from jobs import actions, cycle, dependencies, metrics, reports, rollup
from jobs.clock import database_now
from jobs.models import Attempt, Family, Job, JobEvent, UsageDay
from jobs.states import State
from tests.factories import JobFactory
from tests.jobs.conftest import STEP

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("room")]

MINUTES_10 = timedelta(minutes=10)
H = timedelta(hours=1)
DAY = timedelta(days=1)


def submit(alice, alpha, normal_priority, *after: Job, kind="afterok", **spec) -> Job:
    waits = [dependencies.Wait(job.pk, kind) for job in after]
    fields = {**STEP, "priority_class": normal_priority, "depends_on": waits, **spec}
    return actions.submit(alice, alpha, fields)[0]


def fresh(job: Job) -> Job:
    return Job.objects.get(pk=job.pk)


def submitted_ago(job: Job, ago: timedelta) -> None:
    """As if the job had been submitted `ago` earlier (the database wrote `created` now)."""
    Job.objects.filter(pk=job.pk).update(created=F("created") - ago)


def start_after(job: Job, wait: timedelta) -> datetime:
    """Place the job, if it is not yet, and start it `wait` after it became eligible."""
    if fresh(job).state == State.QUEUED:
        assert job.pk in cycle.run_cycle().placed
    started = fresh(job).eligible_at + wait
    actions.mark_running(job.attempts.get(outcome="").pk, started)
    return started


def succeed(job: Job) -> None:
    actions.end_attempt(job.attempts.get(outcome="").pk, Attempt.Outcome.SUCCEEDED, exit_code=0)


def held_two_hours(alice, alpha, normal_priority) -> Job:
    """A job submitted two hours ago, held since, released now and started ten minutes later."""
    job = submit(alice, alpha, normal_priority)
    actions.hold(job, "alice")
    submitted_ago(job, 2 * H)
    actions.release_hold(job, "alice")
    start_after(job, MINUTES_10)
    return job


def chained_two_hours(alice, alpha, normal_priority) -> Job:
    """A job submitted two hours ago to run after another ends (afterany), which is canceled
    now before it ever started; started ten minutes after the cycle that found it free."""
    first = submit(alice, alpha, normal_priority)
    actions.hold(first, "alice")
    job = submit(alice, alpha, normal_priority, first, kind="afterany")
    cycle.run_cycle()
    submitted_ago(job, 2 * H)
    actions.cancel(first, "canceled by alice")
    start_after(job, MINUTES_10)
    return job


def plain(alice, alpha, normal_priority) -> Job:
    """A job with nothing to wait for, started ten minutes after its submission."""
    job = submit(alice, alpha, normal_priority)
    start_after(job, MINUTES_10)
    return job


def live_report(alpha, around: datetime) -> reports.TenantUsage:
    since = datetime.combine(around.date(), time(), tzinfo=UTC) - DAY
    return reports.usage([alpha], since, since + 3 * DAY, around + H).tenants[0]


def metric_waits(around: datetime) -> dict:
    by_family, _ = metrics.queue_wait(around + H, Job.objects.all())
    return {labels["quantile"]: value for labels, value in by_family.samples}


@pytest.mark.parametrize(
    "shape",
    [held_two_hours, chained_two_hours, plain],
    ids=["held two hours, then released", "waited two hours for a dependency", "plain"],
)
def test_a_job_started_ten_minutes_after_it_became_eligible_waited_ten_minutes(
    alice, alpha, normal_priority, shape
):
    job = shape(alice, alpha, normal_priority)
    started = fresh(job).started_at

    usage = live_report(alpha, started)
    waits = metric_waits(started)

    assert usage.started == 1
    assert usage.mean_wait_s == pytest.approx(600, abs=0.01)
    assert usage.p95_wait_s == pytest.approx(600, abs=0.01)
    assert waits[0.5] == waits["mean"] == pytest.approx(600, abs=0.01)


def test_a_plain_jobs_wait_still_runs_from_its_submission(alice, alpha, normal_priority):
    job = fresh(plain(alice, alpha, normal_priority))

    assert job.eligible_at == job.created
    assert live_report(alpha, job.started_at).mean_wait_s == pytest.approx(
        (job.started_at - job.created).total_seconds()
    )


def test_every_shard_of_a_batch_with_nothing_to_wait_for_is_eligible_from_its_submission(
    alice, alpha, normal_priority
):
    first = submit(alice, alpha, normal_priority, family=Family.BATCH_INFERENCE, shards=3)

    shards = list(first.batch())

    assert first.eligible_at == first.created
    assert len(shards) == 3
    assert all(shard.eligible_at == shard.created for shard in shards)


def test_a_held_job_is_eligible_from_its_release_not_its_submission(alice, alpha, normal_priority):
    job = fresh(held_two_hours(alice, alpha, normal_priority))
    released = JobEvent.objects.get(job=job, reason="released by alice").time

    assert job.eligible_at - job.created > 2 * H
    assert abs(job.eligible_at - released) < timedelta(seconds=5)


def test_a_job_waiting_for_a_dependency_is_eligible_from_the_cycle_after_it_succeeded(
    alice, alpha, normal_priority
):
    first = submit(alice, alpha, normal_priority)
    job = submit(alice, alpha, normal_priority, first)
    cycle.run_cycle()
    assert fresh(job).eligible_at is None

    succeed(first)
    cycle.run_cycle()

    assert fresh(first).finished_at <= fresh(job).eligible_at <= database_now()


def test_a_singleton_job_is_eligible_once_the_earlier_job_of_its_name_has_ended(
    alice, alpha, normal_priority
):
    first = submit(alice, alpha, normal_priority)
    job = submit(alice, alpha, normal_priority, singleton=True)
    cycle.run_cycle()
    assert fresh(job).eligible_at is None

    succeed(first)
    cycle.run_cycle()

    assert fresh(job).eligible_at >= fresh(first).finished_at


def test_a_job_released_while_its_dependency_runs_is_eligible_only_once_it_succeeds(
    alice, alpha, normal_priority
):
    first = submit(alice, alpha, normal_priority)
    job = submit(alice, alpha, normal_priority, first)
    actions.hold(job, "alice")
    cycle.run_cycle()

    actions.release_hold(job, "alice")
    cycle.run_cycle()
    still = fresh(job).eligible_at
    succeed(first)
    cycle.run_cycle()

    assert still is None
    assert fresh(job).eligible_at >= fresh(first).finished_at


def test_a_new_dependency_not_met_makes_a_job_wait_anew_and_dropping_it_makes_it_eligible(
    alice, alpha, normal_priority
):
    first = submit(alice, alpha, normal_priority)
    job = submit(alice, alpha, normal_priority)
    actions.hold(first, "alice")  # it stays queued: never met while the test runs

    actions.set_dependencies(job, [dependencies.Wait(first.pk, "afterok")], False, "alice")
    waiting = fresh(job).eligible_at
    before = database_now()
    actions.set_dependencies(job, [], False, "alice")

    assert waiting is None
    assert fresh(job).eligible_at >= before


def test_a_retry_of_a_job_that_never_started_is_eligible_when_its_backoff_ends(
    alice, alpha, normal_priority
):
    job = submit(alice, alpha, normal_priority)
    cycle.run_cycle()

    actions.end_attempt(job.attempts.get().pk, Attempt.Outcome.INFRA_ERROR, reason="pull failed")

    job = fresh(job)
    assert job.state == State.QUEUED
    assert job.eligible_at == job.not_before > job.created


def test_a_job_that_started_keeps_its_eligibility_when_requeued_held_or_retried(
    alice, alpha, normal_priority
):
    job = submit(alice, alpha, normal_priority)
    start_after(job, MINUTES_10)
    eligible = fresh(job).eligible_at

    actions.end_attempt(job.attempts.get().pk, Attempt.Outcome.PREEMPTED)
    actions.hold(job, "alice")
    actions.release_hold(job, "alice")
    cycle.run_cycle()
    actions.end_attempt(job.attempts.get(outcome="").pk, Attempt.Outcome.INFRA_ERROR)

    assert fresh(job).eligible_at == eligible
    assert live_report(alpha, fresh(job).started_at).mean_wait_s == pytest.approx(600, abs=0.01)


def test_a_late_success_after_a_retry_counts_its_wait_from_the_lost_attempts_placement(
    alice, alpha, normal_priority
):
    job = submit(alice, alpha, normal_priority)
    cycle.run_cycle()
    lost = job.attempts.get()
    actions.end_attempt(lost.pk, Attempt.Outcome.LOST, reason="agent silent")

    actions.late_success(lost.pk)

    job, lost = fresh(job), Attempt.objects.get(pk=lost.pk)
    assert job.state == State.SUCCEEDED
    assert job.eligible_at == lost.scheduled_at  # the retry had moved it to its backoff's end
    assert job.started_at == lost.ended_at >= job.eligible_at


def test_the_cycle_stamps_a_job_with_nothing_to_wait_for_from_its_submission(alice, alpha):
    job = JobFactory(owner=alice, tenant=alpha)  # not through submit: no eligibility recorded
    submitted_ago(job, H)

    cycle.run_cycle()

    job = fresh(job)
    assert job.eligible_at == job.created


def test_a_cycle_that_finds_every_queued_job_stamped_writes_no_stamp(alice, alpha, normal_priority):
    submit(alice, alpha, normal_priority, gpus=8, workers=3)  # more than there is: it waits

    with CaptureQueriesContext(connection) as seen:
        cycle.run_cycle()

    assert not [q["sql"] for q in seen if "eligible_at" in q["sql"].split("WHERE")[0]
                and q["sql"].startswith("UPDATE")]  # fmt: skip


def test_a_started_job_without_eligibility_waits_from_its_submission(alpha):
    started = database_now()
    JobFactory(tenant=alpha, created=started - H, started_at=started)

    assert live_report(alpha, started).mean_wait_s == pytest.approx(3600)
    assert metric_waits(started)["mean"] == pytest.approx(3600)


def test_a_queued_job_never_eligible_has_no_wait(alice, alpha, normal_priority):
    first = submit(alice, alpha, normal_priority)
    job = submit(alice, alpha, normal_priority, first)
    actions.hold(first, "alice")
    cycle.run_cycle()

    assert fresh(job).eligible_at is None
    assert live_report(alpha, database_now()).started == 0


def test_the_roll_up_and_the_live_report_agree(alice, alpha, normal_priority):
    jobs = [shape(alice, alpha, normal_priority)
            for shape in (held_two_hours, chained_two_hours, plain)]  # fmt: skip
    starts = sorted(fresh(job).started_at for job in jobs)
    since = datetime.combine(starts[0].date(), time(), tzinfo=UTC)
    until = datetime.combine(starts[-1].date(), time(), tzinfo=UTC) + DAY
    now = until + 2 * DAY
    live = reports.usage([alpha], since, until, now).tenants[0]

    assert rollup.roll_up(now) >= 1
    rolled = reports.usage([alpha], since, until, now)

    assert rolled.rolled_up == (since.date(), until.date())
    assert (live.started, live.mean_wait_s) == (3, pytest.approx(600, abs=0.01))
    day = rolled.tenants[0]
    assert (day.started, day.mean_wait_s) == (3, pytest.approx(600, abs=0.01))
    assert day.p95_wait_s == pytest.approx(live.p95_wait_s, rel=0.19)
    days = UsageDay.objects.filter(tenant=alpha, day__gte=since.date(), day__lt=until.date())
    assert sum(d.wait_seconds for d in days) == pytest.approx(1800, abs=0.03)


def test_the_api_and_the_job_page_say_since_when_a_released_job_is_eligible(
    client, alice, alpha, normal_priority
):
    job = submit(alice, alpha, normal_priority)
    actions.hold(job, "alice")
    submitted_ago(job, 2 * H)
    actions.release_hold(job, "alice")
    client.force_login(alice)

    answer = client.get(f"/api/v1/jobs/{job.pk}/").json()
    page = client.get(f"/jobs/{job.pk}/").content.decode()

    eligible = fresh(job).eligible_at
    assert datetime.fromisoformat(answer["eligible_at"]) == eligible
    assert f'<dd id="eligible">since {eligible:%Y-%m-%d %H:%M:%S} UTC' in page


def test_the_job_page_says_nothing_of_eligibility_for_a_job_eligible_when_submitted(
    client, alice, alpha, normal_priority
):
    job = submit(alice, alpha, normal_priority)
    client.force_login(alice)

    page = client.get(f"/jobs/{job.pk}/").content.decode()

    assert fresh(job).eligible_at == fresh(job).created
    assert 'id="eligible"' not in page
