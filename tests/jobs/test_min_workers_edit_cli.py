"""The command line's `min-workers ID N|none`: a queued training gang made elastic, or rigid
again. Run in this process: its HTTP requests are answered by the app itself (no server, no
subprocess)."""

import pytest

from jobs.models import Job
from jobs.states import State
from tests.factories import JobFactory
from tests.jobs.test_batch_shard_limit_cli import mlsched  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db


def gang(alice, alpha, **fields) -> Job:
    """Alice's queued training gang of four 8-GPU workers, rigid unless told."""
    return JobFactory(tenant=alpha, owner=alice, workers=4, gpus=8, **fields)


def test_min_workers_makes_a_gang_elastic_and_none_makes_it_rigid(mlsched, alice, alpha):  # noqa: F811
    job = gang(alice, alpha)

    elastic = mlsched("min-workers", str(job.pk), "2")
    assert elastic[0] == 0, elastic[2]
    assert elastic[1] == f"job {job.pk}: starts with at least 2 of its 4 workers\n"
    assert Job.objects.get(pk=job.pk).min_workers == 2

    rigid = mlsched("min-workers", str(job.pk), "none")
    assert rigid[1] == f"job {job.pk}: starts with all 4 of its workers together\n"
    assert Job.objects.get(pk=job.pk).min_workers is None


def test_min_workers_equal_to_its_workers_says_all_together(mlsched, alice, alpha):  # noqa: F811
    job = gang(alice, alpha, min_workers=2)

    status, out, _ = mlsched("min-workers", str(job.pk), "4")

    assert (status, out) == (0, f"job {job.pk}: starts with all 4 of its workers together\n")
    assert Job.objects.get(pk=job.pk).min_workers is None


@pytest.mark.parametrize("written", ["0", "-1", "two", "1.5"])
def test_min_workers_refuses_what_is_no_whole_number_above_0(mlsched, alice, alpha, written):  # noqa: F811
    job = gang(alice, alpha)

    status, _, err = mlsched("min-workers", str(job.pk), written)

    assert status == 2 and "N|none" in err
    assert Job.objects.get(pk=job.pk).min_workers is None


def test_more_than_its_workers_is_an_error_naming_min_workers(mlsched, alice, alpha):  # noqa: F811
    job = gang(alice, alpha)

    status, out, err = mlsched("min-workers", str(job.pk), "5")

    assert (status, out) == (1, "")
    assert "error 400" in err and "min_workers" in err and "more than its 4 workers" in err


def test_a_running_job_is_an_error_409_saying_why(mlsched, alice, alpha):  # noqa: F811
    job = gang(alice, alpha, state=State.RUNNING)

    status, _, err = mlsched("min-workers", str(job.pk), "2")

    assert status == 1 and "error 409" in err and "Only a queued job" in err
    assert Job.objects.get(pk=job.pk).min_workers is None


def test_the_help_lists_min_workers(mlsched):  # noqa: F811
    status, out, _ = mlsched("--help")

    assert status == 0
    assert "\n    min-workers ID N|none" in out
    assert "NumNodes=MIN-MAX" in out
