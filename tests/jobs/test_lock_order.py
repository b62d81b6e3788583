"""The verbs that lock a job and its attempt take the locks in one order, job first, so two of
them running at once wait for each other instead of deadlocking."""

import threading
from contextlib import contextmanager
from datetime import timedelta

import psycopg
import pytest
from django.db import connection, transaction

from jobs import actions, cycle, janitor, tenant_limits
from jobs.models import Attempt, Job
from jobs.states import State
from tests.factories import ClusterFactory, JobFactory, NodeFactory, TenantFactory
from tests.processes import wait_until, waiting_on_a_lock

pytestmark = pytest.mark.django_db(transaction=True)


def other_connection() -> psycopg.Connection:
    db = connection.settings_dict
    return psycopg.connect(
        host=db["HOST"], port=db["PORT"], user=db["USER"], password=db["PASSWORD"],
        dbname=db["NAME"], autocommit=False,
    )  # fmt: skip


def in_a_thread(fn, *args) -> threading.Thread:
    def run():
        try:
            fn(*args)
        finally:
            connection.close()  # the thread's own connection

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def commit_once_waited_on(holder, thread, statement: str) -> None:
    """Commit `holder` (another connection) once some session waits for a lock in a statement
    naming `statement` (the thread's, which `holder`'s locks hold back), then close it and
    join the thread."""
    try:
        assert wait_until(lambda: waiting_on_a_lock(statement), 10)
        holder.commit()
    finally:
        holder.close()
        thread.join(10)


def run_beside_an_end_in_flight(job_id: int, attempt_id: int, verb, *args) -> None:
    """Run `verb(*args)` while another transaction, as an attempt's end or a cancel does, holds
    the job's row and then locks the attempt's. The verb must wait for the job before it
    touches the attempt: had it locked the attempt first, the other transaction's attempt lock
    would deadlock (or time out), and this raises."""
    holder = other_connection()
    holder.execute("SELECT 1 FROM jobs_job WHERE id = %s FOR UPDATE", [job_id])
    verbing = in_a_thread(verb, *args)
    try:
        assert wait_until(lambda: waiting_on_a_lock("jobs_job"), 10)
        holder.execute("SET lock_timeout = '5s'")
        holder.execute("SELECT 1 FROM jobs_attempt WHERE id = %s FOR UPDATE", [attempt_id])
        holder.commit()
    finally:
        holder.close()
        verbing.join(10)
    assert not verbing.is_alive()


def test_mark_running_waits_for_the_job_lock_before_it_touches_the_attempt():
    NodeFactory(cluster=ClusterFactory(name="east"), gpu_count=8)
    job = JobFactory(gpus=1)
    cycle.run_cycle()
    attempt = job.attempts.get()

    run_beside_an_end_in_flight(job.pk, attempt.pk, actions.mark_running, attempt.pk)

    assert Job.objects.get(pk=job.pk).state == State.RUNNING


def test_a_late_success_waits_for_the_job_lock_before_it_touches_the_attempt():
    NodeFactory(cluster=ClusterFactory(name="east"), gpu_count=8)
    job = JobFactory(gpus=1)
    cycle.run_cycle()
    attempt = job.attempts.get()
    actions.end_attempt(attempt.pk, Attempt.Outcome.LOST, reason="its agent went silent")

    run_beside_an_end_in_flight(job.pk, attempt.pk, actions.late_success, attempt.pk)

    assert Job.objects.get(pk=job.pk).state == State.SUCCEEDED


def test_preempt_waits_for_its_victims_job_lock_before_it_touches_their_attempts():
    NodeFactory(cluster=ClusterFactory(name="east"), gpu_count=8)
    victim = JobFactory(gpus=1)
    cycle.run_cycle()
    preemptor = JobFactory(gpus=8)
    attempt = victim.attempts.get()

    run_beside_an_end_in_flight(victim.pk, attempt.pk, actions.preempt, {preemptor.pk: [victim.pk]})

    assert Attempt.objects.get(pk=attempt.pk).stop_reason == Attempt.Outcome.PREEMPTED


def test_the_start_timeout_waits_for_the_job_lock_before_it_touches_the_attempt(settings):
    NodeFactory(cluster=ClusterFactory(name="east"), gpu_count=8)
    job = JobFactory(gpus=1)
    cycle.run_cycle()
    attempt = job.attempts.get()
    later = attempt.scheduled_at + timedelta(seconds=settings.MLSCHED_START_TIMEOUT_S + 1)

    run_beside_an_end_in_flight(job.pk, attempt.pk, janitor.stop_unstarted, later)

    assert Attempt.objects.get(pk=attempt.pk).stop_reason == Attempt.Outcome.LOST


@contextmanager
def waiting_at_most(timeout: str):
    """This connection's statements fail instead of waiting longer than `timeout` for a lock."""
    with connection.cursor() as cursor:
        cursor.execute(f"SET lock_timeout = '{timeout}'")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET lock_timeout")


def test_a_commit_waits_for_another_placing_work_in_the_same_cohort():
    # Another scheduler's commit holds a tenant of the cohort: this one re-checks the cohort's
    # quotas only once that one has committed what it placed.
    NodeFactory(cluster=ClusterFactory(name="east"), gpu_count=8)
    other = TenantFactory(cohort="pool")
    job = JobFactory(tenant=TenantFactory(cohort="pool"), gpus=1)
    holder = other_connection()
    holder.execute("SELECT 1 FROM quotas_tenant WHERE id = %s FOR NO KEY UPDATE", [other.pk])

    committing = in_a_thread(cycle.run_cycle)
    commit_once_waited_on(holder, committing, "quotas_tenant")

    assert not committing.is_alive()
    assert Job.objects.get(pk=job.pk).state == State.SCHEDULED


def test_a_commit_does_not_wait_for_work_placed_in_another_cohort():
    NodeFactory(cluster=ClusterFactory(name="east"), gpu_count=8)
    other = TenantFactory(cohort="elsewhere")
    job = JobFactory(tenant=TenantFactory(cohort="pool"), gpus=1)
    holder = other_connection()
    holder.execute("SELECT 1 FROM quotas_tenant WHERE id = %s FOR NO KEY UPDATE", [other.pk])
    try:
        with waiting_at_most("2s"):  # a wait would fail the cycle
            cycle.run_cycle()
    finally:
        holder.close()

    assert Job.objects.get(pk=job.pk).state == State.SCHEDULED


def test_a_submission_does_not_wait_for_a_commit_holding_its_tenant():
    # The commit's lock on its tenants leaves the key share a new job's reference to its
    # tenant takes: submissions go on while a batch commits.
    job = JobFactory(tenant=TenantFactory(cohort="pool"))
    locked, done = threading.Event(), threading.Event()

    def commit_in_flight():
        with transaction.atomic():
            tenant_limits.lock([job.pk])
            locked.set()
            done.wait(10)

    committing = in_a_thread(commit_in_flight)
    try:
        assert locked.wait(10)
        with waiting_at_most("2s"):
            JobFactory(tenant=job.tenant)
    finally:
        done.set()
        committing.join(10)

    assert Job.objects.filter(tenant=job.tenant).count() == 2


def test_a_commit_locks_its_tenants_before_its_jobs():
    # As a change of dependencies does (dependencies.lock_change): one holding the tenant and
    # waiting for a job's row would otherwise deadlock with a commit holding that row.
    NodeFactory(cluster=ClusterFactory(name="east"), gpu_count=8)
    job = JobFactory(gpus=1)
    holder = other_connection()
    holder.execute("SELECT 1 FROM quotas_tenant WHERE id = %s FOR NO KEY UPDATE", [job.tenant_id])
    committing = in_a_thread(cycle.run_cycle)
    try:
        assert wait_until(lambda: waiting_on_a_lock("quotas_tenant"), 10)
        holder.execute("SET lock_timeout = '2s'")
        # The waiting commit holds no job row: the holder takes it as a change would.
        holder.execute("SELECT 1 FROM jobs_job WHERE id = %s FOR UPDATE", [job.pk])
        holder.commit()
    finally:
        holder.close()
        committing.join(10)

    assert not committing.is_alive()
    assert Job.objects.get(pk=job.pk).state == State.SCHEDULED
