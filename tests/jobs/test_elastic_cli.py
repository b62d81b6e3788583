"""The command line's side of elastic training gangs: `submit --min-workers N`, `status` with
the job's min_workers and each attempt's workers, and `efficiency` saying an elastic gang's
fewest workers and an attempt that started with fewer than all. Run in this process: its HTTP
requests are answered by the app itself (no server, no subprocess)."""

import json

import pytest

from jobs.cli import commands
from jobs.models import Attempt, Job
from tests.factories import AttemptFactory, ClusterFactory, JobFactory
from tests.jobs.test_batch_shard_limit_cli import mlsched  # noqa: F401 (a fixture)
from tests.jobs.test_elastic_submission import BODY

pytestmark = pytest.mark.django_db


def test_submit_sends_min_workers_and_status_shows_it(mlsched, normal_priority):  # noqa: F811
    status, out, err = mlsched("submit", "-", "--min-workers", "2", stdin=json.dumps(BODY))

    assert status == 0, err
    job = Job.objects.get(pk=int(out.split()[0]))
    assert (job.workers, job.min_workers) == (4, 2)
    shown = json.loads(mlsched("status", str(job.pk))[1])
    assert (shown["workers"], shown["min_workers"]) == (4, 2)


def test_submit_min_workers_replaces_the_files_own(mlsched, normal_priority):  # noqa: F811
    spec = json.dumps({**BODY, "min_workers": 3})

    status, out, err = mlsched("submit", "-", "--min-workers", "1", stdin=spec)

    assert status == 0, err
    assert Job.objects.get(pk=int(out.split()[0])).min_workers == 1


@pytest.mark.parametrize("written", ["0", "-1", "two", "1.5"])
def test_submit_refuses_min_workers_that_is_no_whole_number_above_0(
    mlsched,  # noqa: F811
    normal_priority,
    written,
):
    status, _, err = mlsched("submit", "-", f"--min-workers={written}", stdin=json.dumps(BODY))

    assert status == 2 and "--min-workers" in err
    assert not Job.objects.exists()


def test_submit_with_more_min_workers_than_workers_names_the_field(
    mlsched,  # noqa: F811
    normal_priority,
):
    status, _, err = mlsched("submit", "-", "--min-workers", "5", stdin=json.dumps(BODY))

    assert status == 1 and "error 400" in err and "min_workers" in err
    assert not Job.objects.exists()


def test_status_gives_each_attempts_workers(mlsched, alpha, alice):  # noqa: F811
    job = JobFactory(tenant=alpha, owner=alice, workers=4, min_workers=2)
    AttemptFactory(job=job, workers=3)

    shown = json.loads(mlsched("status", str(job.pk))[1])

    assert [a["workers"] for a in shown["attempts"]] == [3]


def test_efficiency_says_the_fewest_workers_and_an_attempt_that_started_with_fewer(
    mlsched,  # noqa: F811
    alpha,
    alice,
):
    job = JobFactory(tenant=alpha, owner=alice, name="llama", workers=4, min_workers=2,
                     cpu_milli=4000, memory_mb=8192)  # fmt: skip
    east = ClusterFactory(name="east")
    AttemptFactory(job=job, cluster=east, number=1, workers=3, outcome=Attempt.Outcome.PREEMPTED)
    AttemptFactory(job=job, cluster=east, number=2, workers=4)

    status, out, err = mlsched("efficiency", str(job.pk))

    assert status == 0, err
    lines = out.splitlines()
    assert lines[0] == (
        f"job {job.pk} llama (queued): asked for 4 workers of 4 cores, 8192 MiB and 1 GPU each "
        "(elastic: at least 2)"
    )
    assert lines[1].startswith("attempt 1 (preempted) on east, started with 3 of 4 workers: ")
    assert lines[2].startswith("attempt 2 (live) on east: ")


def test_efficiency_of_a_rigid_job_says_nothing_elastic(mlsched, alpha, alice):  # noqa: F811
    job = JobFactory(tenant=alpha, owner=alice, workers=4)
    AttemptFactory(job=job, cluster=ClusterFactory(name="east"), workers=4)

    out = mlsched("efficiency", str(job.pk))[1]

    assert "elastic" not in out and "started with" not in out


def test_a_test_only_answer_says_how_many_workers_a_gang_would_start_with():
    answer = {
        "starts_now": True,
        "estimated_start": None,
        "jobs": [
            {"shard_index": 0, "status": "placed", "clusters": ["east"], "nodes": 3, "workers": 3}
        ],
    }
    one = {**answer, "jobs": [{**answer["jobs"][0], "nodes": 1, "workers": 1}]}

    assert commands.trial_line(answer) == "would start now on east (3 workers on 3 nodes)"
    assert commands.trial_line(one) == "would start now on east (1 node)"


def test_the_job_list_gives_an_elastic_gangs_range_of_workers():
    gang = {"gpus": 8, "gpu_milli": 0, "workers": 4, "min_workers": 2}

    assert commands.gpus_asked(gang) == "2-4x8"
    assert commands.gpus_asked({**gang, "min_workers": None}) == "4x8"
