"""The scheduler's snapshot in the embedded mode: on SQLite too it reads one moment. Run in a
child process on a SQLite database of its own, as `make run` serves it."""

from tests.processes import sqlite_shell

# An attempt lost (its job requeued, its backoff passed) by another thread between the
# snapshot's query of the allocations and its query of the queued jobs.
SNAPSHOT_ACROSS_AN_END = """
import threading, time
from django.core.management import call_command
from django.db import connection
from jobs import actions, cycle, snapshot
from jobs.models import Attempt, Family, Job
from tests.factories import ClusterFactory, JobFactory, NodeFactory

call_command("migrate", verbosity=0)
NodeFactory(cluster=ClusterFactory(name="east"), gpu_type="A100", gpu_count=8)
job = JobFactory(family=Family.TRAINING, gpus=8, max_retries=3)
cycle.run_cycle()
attempt = job.attempts.get()
real, ends = snapshot.queued_jobs, []

def end():
    try:
        actions.end_attempt(attempt.pk, Attempt.Outcome.LOST)
        Job.objects.filter(pk=job.pk).update(not_before=None)
    finally:
        connection.close()

def queued_after_an_end(now):
    ends.append(threading.Thread(target=end))
    ends[0].start()
    ends[0].join(2)  # an end that waits for the snapshot's transaction comes after it
    return real(now)

snapshot.queued_jobs = queued_after_an_end
loaded = snapshot.load(time.time()).snapshot
ends[0].join()
print("RUNNING", [j.id for j in loaded.running], "QUEUED", [j.id for j in loaded.queued])
print("JOB", job.pk)
"""


def test_the_snapshot_reads_one_moment_on_sqlite_when_an_attempt_ends_between_its_queries(
    tmp_path,
):
    run = sqlite_shell(SNAPSHOT_ACROSS_AN_END, tmp_path)

    job = run.stdout.split("JOB ")[-1].strip()
    assert f"RUNNING ['{job}'] QUEUED []" in run.stdout, (run.stdout, run.stderr)
