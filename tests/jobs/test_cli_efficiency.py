"""CLI `efficiency ID` (Slurm's seff) against a live server: each attempt's use of what its
job asked for, as the server words it."""

from datetime import timedelta

import pytest
from django.utils import timezone

from jobs import actions
from jobs.models import Attempt
from tests.factories import AttemptFactory, ClusterFactory, JobFactory
from tests.jobs.test_cli import cli  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db(transaction=True)


def test_efficiency_says_what_each_attempt_used_of_the_request(cli, alpha, alice):  # noqa: F811
    job = JobFactory(tenant=alpha, owner=alice, name="train", workers=2, cpu_milli=4000,
                     memory_mb=8192, state="running", max_runtime_s=86_400, gpus=1)  # fmt: skip
    east = ClusterFactory(name="east")
    began = timezone.now() - timedelta(hours=2)
    # 2 workers x 4 cores for an hour: 8 core-hours asked, 2 busy; 2,048 of 8,192 MiB reached.
    AttemptFactory(
        job=job, cluster=east, number=1, outcome=Attempt.Outcome.PREEMPTED, started_at=began,
        ended_at=began + timedelta(hours=1), cpu_seconds=2 * 3600, memory_peak_mb=2048,
        gpu_busy_seconds=1.5 * 3600,
    )  # fmt: skip
    AttemptFactory(job=job, cluster=east, number=2, outcome="")

    done = cli("efficiency", str(job.pk))

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"job {job.pk} train (running): asked for 2 workers of 4 cores, 8192 MiB and 1 GPU each",
        "attempt 1 (preempted) on east: ran 60 min of 24 h (4 %), CPU 2.0 of 8 cores (25 %), "
        "memory peak 2.0 of 8.0 GiB (25 %), 1.5 of 2 GPUs busy (75 %)",
        "attempt 2 (live) on east: not started, CPU not measured, memory peak not measured",
    ]


def test_efficiency_of_a_job_not_placed_says_so(cli, alpha, alice):  # noqa: F811
    job = JobFactory(tenant=alpha, owner=alice, name="eval", cpu_milli=500, memory_mb=512,
                     gpus=0, gpu_milli=250)  # fmt: skip

    done = cli("efficiency", str(job.pk))

    assert done.stdout.splitlines() == [
        f"job {job.pk} eval (queued): asked for 0.5 cores, 512 MiB and 250m of a GPU",
        "not placed yet",
    ]


def test_efficiency_of_a_failed_job_says_why_it_failed(cli, alpha, alice):  # noqa: F811
    job = JobFactory(tenant=alpha, owner=alice, name="eval", cpu_milli=1000, memory_mb=512,
                     gpus=0, gpu_milli=0)  # fmt: skip
    AttemptFactory(job=job, cluster=ClusterFactory(name="east"), outcome="user_error")
    for state, reason in (("scheduled", "placed"), ("running", "attempt 1 running"),
                          ("failed", "worker 0 exited with code 3")):  # fmt: skip
        actions.transition(job, state, reason)

    done = cli("efficiency", str(job.pk))

    assert (
        done.stdout.splitlines()[0] == f"job {job.pk} eval (failed): asked for 1 core and 512 MiB"
    )
    assert done.stdout.splitlines()[-1] == "failed: worker 0 exited with code 3"
