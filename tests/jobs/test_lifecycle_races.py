"""The job lifecycle when several processes act on the same rows at once: the cycle between its
snapshot and its writes, users canceling, agents reporting starts and ends, a second scheduler.

Races are played with real PostgreSQL sessions: another thread's connection commits between two
steps of the cycle, or holds a row lock the cycle must wait for."""

import time
from datetime import UTC, datetime

import pytest
from django.utils import timezone

from clusters.models import Allocation
from jobs import actions, commit, cycle, snapshot
from jobs.models import Attempt, Family, Job, JobEvent
from jobs.placement import PLACED, place
from jobs.states import State
from tests.factories import (
    AttemptFactory,
    ClusterFactory,
    JobFactory,
    NodeFactory,
    PriorityClassFactory,
)
from tests.faults.whole import assert_whole
from tests.jobs.test_lock_order import in_a_thread, other_connection
from tests.processes import wait_until, waiting_on_a_lock

pytestmark = pytest.mark.django_db(transaction=True)

Outcome = Attempt.Outcome


def n8_a100_node():
    return NodeFactory(cluster=ClusterFactory(name="east"), gpu_type="A100", gpu_count=8)


def low_job():
    low = PriorityClassFactory(name="low", value=-100)
    return JobFactory(family=Family.TRAINING, gpus=8, preemptible=True, priority_class=low)


def high_job():
    high = PriorityClassFactory(name="high", value=100, may_preempt=True)
    return JobFactory(family=Family.TRAINING, gpus=8, priority_class=high)


def after_deciding(monkeypatch, meanwhile):
    """Make the cycle run `meanwhile` on another connection, committed, right after its
    decision: between its snapshot and its writes."""
    real = cycle.place

    def place_then(snap):
        decision = real(snap)
        thread = in_a_thread(meanwhile)
        thread.join(30)
        assert not thread.is_alive()
        return decision

    monkeypatch.setattr(cycle, "place", place_then)


def a_session_waits(watcher, table: str) -> bool:
    """Whether some session waits on a row lock in a statement that names `table`."""
    waiting = watcher.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query ILIKE %s",
        [f"%{table}%"],
    ).fetchone()[0]
    watcher.rollback()
    return waiting > 0


def commit_after(monkeypatch, verb, *args, table: str = "jobs_job") -> list:
    """Make the cycle's commit start ``verb(*args)`` in a thread and write only once that waits
    for a row lock in a statement naming ``table`` (a job's, or for a verb that locks its tenant
    first, the tenant's); the threads started."""
    real_write, started = commit.write, []

    def write_while_it_waits(*written):
        started.append(in_a_thread(verb, *args))
        # Asked from outside: inside a transaction pg_stat_activity is read once and kept.
        with other_connection() as watcher:
            assert wait_until(lambda: a_session_waits(watcher, table), 10)
        real_write(*written)

    monkeypatch.setattr(commit, "write", write_while_it_waits)
    return started


def test_a_job_canceled_between_snapshot_and_commit_is_not_placed(monkeypatch):
    n8_a100_node()
    job = JobFactory(gpus=1)
    after_deciding(monkeypatch, lambda: actions.cancel(Job.objects.get(pk=job.pk)))

    result = cycle.run_cycle()

    job.refresh_from_db()
    assert (result.placed, job.state) == ([], State.CANCELED)
    assert not Attempt.objects.filter(job=job).exists()
    assert not Allocation.objects.exists()
    assert (job.pending_reason, job.pending_message) == ("", "")


def test_a_batch_cancel_waiting_on_the_commit_stops_every_shard_it_placed(
    monkeypatch, alice, alpha
):
    n8_a100_node()
    spec = {"name": "embed", "family": Family.BATCH_INFERENCE, "image": "i", "command": ["x"],
            "cpu_milli": 1000, "memory_mb": 1000, "gpus": 1, "max_runtime_s": 60,
            "shards": 4, "priority_class": PriorityClassFactory()}  # fmt: skip
    batch, _ = actions.submit(alice, alpha, spec)
    canceling = commit_after(monkeypatch, actions.cancel, Job.objects.get(pk=batch.pk))

    placed = cycle.run_cycle().placed
    canceling[0].join(10)

    assert len(placed) == 4
    assert set(batch.batch().values_list("state", flat=True)) == {State.CANCELED}
    attempts = Attempt.objects.filter(job__in=batch.batch())
    assert set(attempts.values_list("outcome", "stop_reason")) == {("", Outcome.CANCELED)}
    for attempt in attempts:  # the agent ends them: nothing stays held
        actions.end_attempt(attempt.pk, Outcome.CANCELED)
    assert not Allocation.objects.active().exists()
    events = JobEvent.objects.filter(job__in=batch.batch())
    each = [("", State.QUEUED), (State.QUEUED, State.SCHEDULED), (State.SCHEDULED, State.CANCELED)]
    assert sorted(events.values_list("from_state", "to_state")) == sorted(each * 4)


def test_a_preemptor_canceled_after_the_decision_has_nobody_stopped_for_it(monkeypatch):
    n8_a100_node()
    low = low_job()
    cycle.run_cycle()
    high = high_job()
    after_deciding(monkeypatch, lambda: actions.cancel(Job.objects.get(pk=high.pk)))

    result = cycle.run_cycle()

    assert result.preempted == []
    victim = low.attempts.get()
    assert (victim.stop_requested_at, victim.stop_reason) == (None, "")
    high.refresh_from_db()
    assert (high.state, high.preempting_until, high.pending_reason) == (State.CANCELED, None, "")


def test_the_preempt_step_waits_for_a_cancel_in_flight_on_the_preemptor():
    n8_a100_node()
    low = low_job()
    cycle.run_cycle()
    high = high_job()
    canceler = other_connection()  # a cancel: it locks the job, then writes it
    canceler.execute("SELECT 1 FROM jobs_job WHERE id = %s FOR UPDATE", [high.pk])
    results = []
    cycling = in_a_thread(lambda: results.append(cycle.run_cycle()))
    try:
        assert wait_until(lambda: waiting_on_a_lock("jobs_job"), 10)
        canceler.execute("UPDATE jobs_job SET state = 'canceled' WHERE id = %s", [high.pk])
        canceler.commit()
    finally:
        canceler.close()
        cycling.join(10)

    assert results[0].preempted == []
    assert low.attempts.get().stop_requested_at is None


def test_a_batch_cancel_racing_the_preemption_of_its_shards_waits_for_it():
    east = ClusterFactory(name="east")
    root = JobFactory(family=Family.BATCH_INFERENCE, shards=3, state=State.RUNNING)
    shards = [root] + [
        JobFactory(tenant=root.tenant, family=Family.BATCH_INFERENCE, shards=3, shard_index=i,
                   parent=root, state=State.RUNNING)
        for i in (1, 2)
    ]  # fmt: skip
    # The commit inserts attempts in the core's order, not by job id: here shard 2, 0, then 1;
    # a heartbeat has written shard 2's since, so a scan meets it last.
    attempts = {i: AttemptFactory(job=shards[i], cluster=east) for i in (2, 0, 1)}
    Attempt.objects.filter(pk=attempts[2].pk).update(worker_ran_at=timezone.now())
    preemptor = JobFactory(state=State.QUEUED)
    holder = other_connection()  # an agent's beat ending shard 1's attempt holds it a moment
    holder.execute("SELECT 1 FROM jobs_attempt WHERE id = %s FOR UPDATE", [attempts[1].pk])
    try:
        preempting = in_a_thread(actions.preempt, {preemptor.pk: [job.pk for job in shards]})
        assert wait_until(lambda: waiting_on_a_lock("jobs_attempt"), 10)
        canceling = in_a_thread(actions.cancel, Job.objects.get(pk=root.pk))
        assert wait_until(lambda: waiting_on_a_lock("jobs_", sessions=2), 10)
        holder.commit()
    finally:
        holder.close()
    preempting.join(20)
    canceling.join(20)

    # Both went through, one after the other: neither was aborted as a deadlock's victim.
    assert set(root.batch().values_list("state", flat=True)) == {State.CANCELED}
    stops = Attempt.objects.filter(job__in=shards).values_list("stop_reason", flat=True)
    assert set(stops) == {Outcome.PREEMPTED}


def test_a_canceled_preemptor_keeps_no_claim_on_the_room_it_asked_for():
    n8_a100_node()
    low_job()
    cycle.run_cycle()
    high = high_job()
    cycle.run_cycle()
    high.refresh_from_db()
    assert high.preempting_until > timezone.now()

    actions.cancel(high)

    assert Job.objects.get(pk=high.pk).preempting_until is None


def test_a_job_retried_since_the_snapshot_is_not_placed_before_its_backoff(monkeypatch):
    n8_a100_node()
    job = JobFactory(gpus=8)

    def another_scheduler_places_it_and_its_attempt_is_lost():
        now = time.time()
        decision = place(snapshot.load(now).snapshot)
        placed = [o for o in decision.outcomes if o.status == PLACED]
        commit.commit_batch(placed, datetime.fromtimestamp(now, tz=UTC))
        actions.end_attempt(Attempt.objects.get(job_id=job.pk).pk, Outcome.LOST)

    after_deciding(monkeypatch, another_scheduler_places_it_and_its_attempt_is_lost)

    result = cycle.run_cycle()

    job.refresh_from_db()
    assert result.placed == []
    assert (job.state, job.retries_used) == (State.QUEUED, 1)
    assert job.not_before > timezone.now()
    assert job.attempts.count() == 1


def test_a_start_reported_after_the_attempt_ended_leaves_it_unstarted():
    n8_a100_node()
    job = JobFactory(gpus=1)
    cycle.run_cycle()
    attempt = job.attempts.get()
    actions.end_attempt(attempt.pk, Outcome.LOST, reason="its cluster agent stopped reporting")

    actions.mark_running(attempt.pk)  # the agent's report, read before the end, lands late

    attempt.refresh_from_db()
    job.refresh_from_db()
    assert (attempt.outcome, attempt.started_at) == (Outcome.LOST, None)
    assert (job.state, job.started_at) == (State.QUEUED, None)


def test_an_attempt_ended_twice_moves_its_job_once():
    n8_a100_node()
    job = JobFactory(gpus=1, max_retries=1)
    cycle.run_cycle()
    attempt = job.attempts.get()

    actions.end_attempt(attempt.pk, Outcome.INFRA_ERROR, reason="evicted")
    actions.end_attempt(attempt.pk, Outcome.INFRA_ERROR, reason="evicted")
    actions.end_attempt(attempt.pk, Outcome.SUCCEEDED)  # a late success for the same attempt

    job.refresh_from_db()
    assert (job.state, job.retries_used) == (State.QUEUED, 1)
    assert job.events.filter(from_state=State.SCHEDULED, to_state=State.QUEUED).count() == 1
    assert not job.attempts.filter(outcome="").exists()


def test_the_snapshot_reads_one_moment_even_when_an_attempt_ends_between_its_queries(
    monkeypatch,
):
    n8_a100_node()
    job = JobFactory(family=Family.TRAINING, gpus=8, max_retries=3)
    cycle.run_cycle()
    attempt = job.attempts.get()
    real = snapshot.queued_jobs

    def queued_after_an_end(now):
        # Between the allocations' query and the queued jobs': the attempt is lost, its job
        # requeued (no backoff), committed by another session.
        def end():
            actions.end_attempt(attempt.pk, Outcome.LOST)
            Job.objects.filter(pk=job.pk).update(not_before=None)

        in_a_thread(end).join()
        return real(now)

    monkeypatch.setattr(snapshot, "queued_jobs", queued_after_an_end)

    loaded = snapshot.load(time.time()).snapshot

    running = [j.id for j in loaded.running]
    queued = [j.id for j in loaded.queued]
    assert (running, queued) == ([str(job.pk)], [])


def lost_and_queued() -> tuple[Job, Attempt]:
    """A one-GPU job placed, then its attempt lost (its agent went silent): queued for a retry
    whose backoff has passed."""
    n8_a100_node()
    job = JobFactory(gpus=1)
    cycle.run_cycle()
    first = job.attempts.get()
    actions.end_attempt(first.pk, Outcome.LOST, reason="its cluster agent stopped reporting")
    Job.objects.filter(pk=job.pk).update(not_before=None)
    return job, first


def test_a_late_success_waiting_on_the_retrys_commit_ends_the_job_and_stops_the_retry(
    monkeypatch,
):
    job, first = lost_and_queued()
    reporting = commit_after(monkeypatch, actions.late_success, first.pk)

    placed = cycle.run_cycle().placed
    reporting[0].join(10)

    job.refresh_from_db()
    first.refresh_from_db()
    retry = job.attempts.get(number=2)
    assert (placed, job.state) == ([job.pk], State.SUCCEEDED)
    assert (first.outcome, retry.outcome, retry.stop_reason) == (
        Outcome.SUCCEEDED, "", Outcome.CANCELED
    )  # fmt: skip
    ended = job.events.latest("id")
    assert (ended.from_state, ended.to_state, ended.attempt_id) == (
        State.SCHEDULED, State.SUCCEEDED, first.pk
    )  # fmt: skip
    actions.end_attempt(retry.pk, Outcome.CANCELED)  # its agent sees the stop through
    assert_whole()


def test_a_retry_is_not_placed_while_a_late_success_holds_its_job(monkeypatch):
    job, first = lost_and_queued()
    real_take, cycles = actions.take_late_success, []

    def take_after_a_cycle_ran(*args):
        thread = in_a_thread(lambda: cycles.append(cycle.run_cycle()))
        thread.join(30)
        assert not thread.is_alive()
        real_take(*args)

    monkeypatch.setattr(actions.attempts, "take_late_success", take_after_a_cycle_ran)

    actions.late_success(first.pk)

    job.refresh_from_db()
    assert (cycles[0].placed, job.state) == ([], State.SUCCEEDED)
    assert cycle.run_cycle().placed == []
    assert job.attempts.count() == 1
    assert not Allocation.objects.active().exists()
    assert_whole()
