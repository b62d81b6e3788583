"""A verb the database aborts to break a deadlock runs again, and the caller never sees it.

The deadlock is a real one: a submission naming two jobs locks them in id order, while the
failure of the later one, which the earlier one was changed to wait for, locks the later one
and then its dependent, the earlier one."""

import threading

import pytest
from django.db import OperationalError, connection, transaction

from clusters.models import Node
from jobs import actions, cycle, dependencies, retrying
from jobs.dependencies import Kind, Wait
from jobs.models import Attempt, Dependency, Job
from jobs.states import State
from tests.factories import ClusterFactory, JobFactory, NodeFactory
from tests.jobs.test_lock_order import in_a_thread
from tests.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def a_lock_waiter(pids: list[int]) -> bool:
    """Whether one of these database sessions waits for a lock (pg_locks is read afresh in a
    transaction, unlike pg_stat_activity)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_locks WHERE NOT granted AND pid = ANY(%s)", [pids])
        return cursor.fetchone()[0] > 0


def play_the_deadlock(monkeypatch) -> tuple[Job, Job, list[Exception], list[Job]]:
    """Job `earlier` waits for `later` to succeed; `later` runs and fails while a submission
    names both. The failure holds `later`'s row and, before it locks `earlier` to cancel it,
    waits until the submission holds `earlier` and waits for `later`: each then waits for
    the other. Returns the two jobs, what the verbs raised, and the submitted job if any."""
    NodeFactory(cluster=ClusterFactory(name="east"), gpu_count=8)
    earlier = JobFactory(gpus=1)
    later = JobFactory(gpus=1, tenant=earlier.tenant, owner=earlier.owner)
    Dependency.objects.create(job=earlier, on=later, kind=Kind.AFTEROK)
    cycle.run_cycle()
    attempt = later.attempts.get()
    actions.mark_running(attempt.pk)

    submitting: list[int] = []  # the submission's database session
    real_lock_dependents = dependencies.lock_dependents
    paused = threading.Event()

    def lock_dependents_once_the_submission_waits(ended):
        if not paused.is_set():  # the first run only: run again, it goes straight on
            paused.set()
            assert wait_until(lambda: submitting and a_lock_waiter(submitting), 10)
        return real_lock_dependents(ended)

    monkeypatch.setattr(dependencies, "lock_dependents", lock_dependents_once_the_submission_waits)
    raised: list[Exception] = []
    submitted: list[Job] = []

    def fail_later():
        try:
            actions.end_attempt(attempt.pk, Attempt.Outcome.USER_ERROR, exit_code=1)
        except Exception as error:
            raised.append(error)

    def submit_naming_both():
        connection.ensure_connection()
        submitting.append(connection.connection.info.backend_pid)
        both = [Wait(earlier.pk, Kind.AFTERANY), Wait(later.pk, Kind.AFTERANY)]
        spec = {"name": "report", "family": "evaluation", "image": "python:3.11",
                "command": ["python", "eval.py"], "cpu_milli": 1000, "memory_mb": 1000,
                "gpus": 0, "priority_class": earlier.priority_class, "max_runtime_s": 600,
                "depends_on": both}  # fmt: skip
        try:
            submitted.append(actions.submit(earlier.owner, earlier.tenant, spec)[0])
        except Exception as error:
            raised.append(error)

    failing = in_a_thread(fail_later)
    assert wait_until(paused.is_set, 10)  # the failure holds `later`'s row
    submission = in_a_thread(submit_naming_both)
    for thread in (failing, submission):
        thread.join(30)
        assert not thread.is_alive()
    return earlier, later, raised, submitted


def test_it_runs_a_verb_again_when_the_database_breaks_a_deadlock_with_it(monkeypatch):
    earlier, later, raised, submitted = play_the_deadlock(monkeypatch)

    assert raised == []
    assert Job.objects.get(pk=later.pk).state == State.FAILED
    assert Job.objects.get(pk=earlier.pk).state == State.CANCELED  # its dependency failed
    awaited = Dependency.objects.filter(job=submitted[0]).values_list("on_id", flat=True)
    assert sorted(awaited) == [earlier.pk, later.pk]


def test_the_scenario_is_a_deadlock_the_database_breaks(monkeypatch):
    """Run once only, one of the two verbs is the deadlock's victim: the test above proves the
    running again, not a scenario that never deadlocks."""
    monkeypatch.setattr(retrying, "RUNS", 1)

    _, _, raised, _ = play_the_deadlock(monkeypatch)

    assert len(raised) == 1
    assert isinstance(raised[0], OperationalError)
    assert retrying.aborted_to_break_a_deadlock(raised[0])


def raising(sqlstate: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"DO $$ BEGIN RAISE EXCEPTION USING ERRCODE = '{sqlstate}'; END $$")


def test_it_does_not_run_again_what_failed_for_another_reason():
    runs = []

    @retrying.atomic
    def canceled():
        runs.append(1)
        raising("57014")  # query_canceled: an OperationalError too

    with pytest.raises(OperationalError):
        canceled()
    assert len(runs) == 1


def test_it_gives_up_after_its_runs():
    runs = []

    @retrying.atomic
    def always_the_victim():
        runs.append(1)
        raising("40P01")

    with pytest.raises(OperationalError):
        always_the_victim()
    assert len(runs) == retrying.RUNS


def test_inside_a_callers_transaction_it_leaves_the_error_to_the_caller():
    runs = []

    @retrying.atomic
    def aborted():
        runs.append(1)
        raising("40P01")  # as the database aborts a deadlock's victim

    with pytest.raises(OperationalError), transaction.atomic():
        aborted()
    assert len(runs) == 1


def victim_once(monkeypatch, name: str) -> list:
    """actions.`name` made a deadlock's victim at its first run (the database aborts it), then
    run as it is: the calls it got."""
    real, calls = getattr(actions, name), []

    def first_aborted(*args, **kwargs):
        calls.append(args)
        if len(calls) == 1:
            raising("40P01")
        return real(*args, **kwargs)

    monkeypatch.setattr(actions, name, first_aborted)
    return calls


def test_an_admin_action_aborted_to_break_a_deadlock_runs_again_whole(monkeypatch, admin_client):
    job = JobFactory()
    calls = victim_once(monkeypatch, "cancel")

    answer = admin_client.post("/admin/jobs/job/", {"action": "cancel_jobs", "index": "0",
                                                    "_selected_action": [str(job.pk)]})  # fmt: skip

    assert answer.status_code == 302
    assert Job.objects.get(pk=job.pk).state == State.CANCELED
    assert len(calls) == 2


def test_a_node_verb_of_the_api_aborted_to_break_a_deadlock_runs_again_whole(
    monkeypatch, admin_client
):
    node = NodeFactory(cluster=ClusterFactory(name="east"), name="gpu-a")
    calls = victim_once(monkeypatch, "set_schedulable")

    answer = admin_client.post("/api/v1/nodes/east/gpu-a/cordon/", {"reason": "disk"},
                               content_type="application/json")  # fmt: skip

    assert (answer.status_code, answer.json()["changed"]) == (200, 1)
    assert Node.objects.get(pk=node.pk).schedulable is False
    assert len(calls) == 2
