"""A scheduler that stops without dying (SIGSTOP here; in life a swap storm, a paused VM, its
host cut off the network) while it holds the cycle's lock and its commit's node rows.

Its TCP connection stays open, so PostgreSQL keeps its session, and with it the single-flight
lock, for as long as the process is frozen: every other scheduler would skip its turn meanwhile.
The session is ended once it has sat idle past MLSCHED_CYCLE_STALL_S; the other scheduler
then places the jobs, and the frozen one, woken, finds its batch gone.
"""

import signal
import subprocess

import psycopg
import pytest
from django.db import connection
from django.db.models import Count

from jobs import cycle
from jobs.models import Attempt, Family, Job
from jobs.states import State
from tests.factories import JobFactory
from tests.faults.test_scheduler_processes import assert_nothing_over_committed, cluster_with_nodes
from tests.faults.whole import assert_whole
from tests.processes import Child, manage, process_env, wait_until, waiting_on_a_lock

pytestmark = pytest.mark.django_db(transaction=True)
STALL_S = 2


def scheduler_process(*args) -> Child:
    """run_scheduler, with the stall limit cut to STALL_S so the test need not wait minutes."""
    return manage("run_scheduler", *args, env=process_env(MLSCHED_CYCLE_STALL_S=STALL_S))


def blocker_session() -> psycopg.Connection:
    db = connection.settings_dict
    return psycopg.connect(host=db["HOST"], port=db["PORT"], user=db["USER"],
                           password=db["PASSWORD"], dbname=db["NAME"])  # fmt: skip


def freeze_at_the_end_of_its_commit(scheduler: subprocess.Popen) -> None:
    """Let the scheduler write its whole batch, stop it before COMMIT, then let its last
    statement through: its session sits idle in its transaction, holding every lock."""
    blocker = blocker_session()
    blocker.execute("SELECT * FROM jobs_schedulershard WHERE name = 'default' FOR UPDATE")
    try:
        waiting = wait_until(lambda: waiting_on_a_lock("jobs_schedulershard"), 60)
        assert waiting, "the scheduler never reached the end of its commit"
        scheduler.send_signal(signal.SIGSTOP)
    finally:
        blocker.rollback()
        blocker.close()


def test_a_frozen_scheduler_holding_the_cycle_lock_is_cut_off_and_another_takes_over():
    cluster_with_nodes(2)
    jobs = [JobFactory(family=Family.TRAINING, gpus=4) for _ in range(4)]
    cycle.beat()  # the shard row exists
    frozen = scheduler_process("--ticks", "1")
    freeze_at_the_end_of_its_commit(frozen)
    other = scheduler_process("--interval", "0.2")
    try:
        placed = wait_until(
            lambda: Job.objects.filter(state=State.SCHEDULED).count() == len(jobs), timeout=15
        )
    finally:
        frozen.send_signal(signal.SIGCONT)
        frozen_output = frozen.communicate(timeout=30)[0]
        other.kill()
        other_output = other.communicate(timeout=30)[0]

    assert placed, (frozen_output, other_output)
    # Woken, it finds its session ended: its tick fails, its batch was never committed.
    assert frozen.returncode == 0 and "errors: 1" in frozen_output, frozen_output
    per_job = Attempt.objects.values("job_id").annotate(n=Count("id"))
    assert sorted((row["job_id"], row["n"]) for row in per_job) == [(j.pk, 1) for j in jobs]
    assert_nothing_over_committed()
    assert_whole()
