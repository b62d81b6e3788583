"""Where a job's queue wait starts (Job.eligible_at) in the cases the wait tests leave out: a late
success taken while the job's retry is held, and a job waiting out its retry's backoff as the
API and the job page show it."""

from datetime import datetime, timedelta

import pytest

from jobs import actions, cycle
from jobs.clock import database_now
from jobs.models import Attempt
from tests.jobs.test_wait_from_eligibility import H, fresh, submit, submitted_ago

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("room")]


def lost_after_a_two_hour_hold(alice, alpha, normal_priority):
    """A job submitted two hours ago, held since, released now, placed at once and declared
    lost (its agent went silent): it waits out its retry's backoff. (job, lost attempt)"""
    job = submit(alice, alpha, normal_priority)
    actions.hold(job, "alice")
    submitted_ago(job, 2 * H)
    actions.release_hold(job, "alice")
    assert job.pk in cycle.run_cycle().placed
    lost = job.attempts.get()
    actions.end_attempt(lost.pk, Attempt.Outcome.LOST, reason="agent silent")
    return job, lost


def test_a_late_success_of_a_job_held_since_its_loss_counts_its_wait_from_the_lost_placement(
    alice, alpha, normal_priority
):
    job, lost = lost_after_a_two_hour_hold(alice, alpha, normal_priority)
    actions.hold(job, "alice")  # its team holds the retry while the agent is away

    actions.late_success(lost.pk)

    job, lost = fresh(job), Attempt.objects.get(pk=lost.pk)
    assert job.started_at == lost.ended_at
    # Eligible when it was placed, if not before: never from its submission, two hours of
    # which its team held it.
    assert job.eligible_at == lost.scheduled_at
    assert job.started_at - job.eligible_at < timedelta(minutes=1)


@pytest.fixture
def backing_off(client, alice, alpha, normal_priority, settings):
    """A job whose first attempt failed on the infrastructure: it waits out its retry's
    backoff, seen by Alice."""
    settings.MLSCHED_RETRY_BACKOFF_S = 300
    job = submit(alice, alpha, normal_priority)
    cycle.run_cycle()
    actions.end_attempt(job.attempts.get().pk, Attempt.Outcome.INFRA_ERROR, reason="pull failed")
    client.force_login(alice)
    return job


def test_the_api_leaves_eligible_at_empty_while_a_job_waits_out_its_retry_backoff(
    client, backing_off
):
    job = backing_off

    answer = client.get(f"/api/v1/jobs/{job.pk}/").json()

    assert fresh(job).not_before > database_now()  # it may not run yet
    assert answer["eligible_at"] is None


def test_the_job_page_never_says_a_job_is_eligible_since_a_time_to_come(client, backing_off):
    job = backing_off
    now = database_now()

    page = client.get(f"/jobs/{job.pk}/").content.decode()

    said = page.split('<dd id="eligible">since ', 1)[1][:19] if 'id="eligible"' in page else None
    assert said is None or datetime.fromisoformat(f"{said}+00:00") <= now
