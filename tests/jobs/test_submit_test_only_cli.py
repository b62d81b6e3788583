"""The command line's `submit FILE --test-only`, on a live server, as a user runs it."""

import json

import pytest

from jobs.models import Job
from tests.factories import ClusterFactory, NodeFactory
from tests.jobs.test_cli import SPEC as CLI_SPEC
from tests.jobs.test_cli import cli  # noqa: F401 - the fixture, for the command line's tests

pytestmark = pytest.mark.django_db(transaction=True)


def test_submit_test_only_prints_where_the_job_would_start_now_and_submits_nothing(cli):  # noqa: F811
    NodeFactory(cluster=ClusterFactory(name="east"), gpu_type="T4", gpu_count=1,
                gpu_shareable=True)  # fmt: skip

    tested = cli("submit", "-", "--test-only", stdin=json.dumps(CLI_SPEC))

    assert tested.returncode == 0, tested.stderr
    assert tested.stdout == "would start now on east (1 node)\n"
    assert not Job.objects.exists()


def test_submit_test_only_prints_why_the_job_would_wait_and_its_begin(cli):  # noqa: F811
    tested = cli("submit", "-", "--test-only", "--begin", "2099-01-01T00:00:00Z",
                 stdin=json.dumps({**CLI_SPEC, "gpus": 1, "gpu_milli": 0}))  # fmt: skip
    deferred = cli("submit", "-", "--test-only", "--begin", "now+2h", stdin=json.dumps(CLI_SPEC))

    assert tested.returncode == 1 and "begin" in tested.stderr  # checked as a submission is
    lines = deferred.stdout.splitlines()
    assert deferred.returncode == 0, deferred.stderr
    assert lines[0].startswith("would wait: no_such_gpu_type: ")
    assert lines[0].endswith("; estimated start unknown")
    assert lines[1].startswith("Deferred until ") and lines[1].endswith(" UTC (begin).")
    assert not Job.objects.exists()
