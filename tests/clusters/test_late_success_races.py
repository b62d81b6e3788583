"""A lost attempt's late success beside the verbs that lock the same job at once: a cancel, and
an attempt's end. Played with real PostgreSQL sessions, as in tests/jobs/test_lifecycle_races.py
(where the race with the scheduler's commit is)."""

import pytest

from jobs import actions, cycle
from jobs.models import Attempt, Job
from jobs.states import State
from tests.faults.whole import assert_whole
from tests.jobs.test_lifecycle_races import a_session_waits, lost_and_queued
from tests.jobs.test_lock_order import in_a_thread, other_connection, run_beside_an_end_in_flight
from tests.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

Outcome = Attempt.Outcome
SUPERSEDED = "superseded by attempt 1, which succeeded after it was declared lost"


def retry_placed() -> tuple[Job, Attempt, Attempt]:
    """A job whose first attempt was lost and whose retry has been placed since."""
    job, first = lost_and_queued()
    assert cycle.run_cycle().placed == [job.pk]
    return job, first, job.attempts.get(number=2)


def test_a_cancel_waiting_on_a_late_success_finds_the_job_succeeded_and_stops_nothing_more(
    monkeypatch,
):
    job, first, retry = retry_placed()
    real_take, canceling, canceled = actions.take_late_success, [], []

    def cancel():
        canceled.append(actions.cancel(Job.objects.get(pk=job.pk)))

    def take_while_a_cancel_waits(*args):
        real_take(*args)
        canceling.append(in_a_thread(cancel))
        # Asked from outside: inside a transaction pg_stat_activity is read once and kept.
        with other_connection() as watcher:
            assert wait_until(lambda: a_session_waits(watcher, "jobs_job"), 10)

    monkeypatch.setattr(actions.attempts, "take_late_success", take_while_a_cancel_waits)

    actions.late_success(first.pk)
    canceling[0].join(10)

    retry.refresh_from_db()
    assert (canceled, Job.objects.get(pk=job.pk).state) == ([None], State.SUCCEEDED)
    assert not job.events.filter(to_state=State.CANCELED).exists()
    assert (retry.stop_reason, retry.reason) == (Outcome.CANCELED, SUPERSEDED)
    actions.end_attempt(retry.pk, Outcome.CANCELED)  # its agent sees the stop through
    assert_whole()


def test_a_late_success_waits_for_the_job_lock_before_it_stops_the_retry():
    job, first, retry = retry_placed()

    run_beside_an_end_in_flight(job.pk, retry.pk, actions.late_success, first.pk)

    retry.refresh_from_db()
    assert Job.objects.get(pk=job.pk).state == State.SUCCEEDED
    assert (retry.stop_reason, retry.reason) == (Outcome.CANCELED, SUPERSEDED)
