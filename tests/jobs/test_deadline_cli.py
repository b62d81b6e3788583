"""The command line's --deadline, written as --begin is (a time with its zone, or now+N), on a
live server, as a user runs it."""

import json
import time
from datetime import UTC, datetime, timedelta

import pytest

from jobs.models import Job
from tests.jobs.test_cli import SPEC as CLI_SPEC
from tests.jobs.test_cli import cli  # noqa: F401 - the fixture, for the command line's tests

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_cli_submits_with_a_deadline_three_hours_from_now_and_shows_it(cli):  # noqa: F811
    before = int(time.time())
    submitted = cli("submit", "-", "--deadline", "now+3h", stdin=json.dumps(CLI_SPEC))
    after = time.time()

    assert submitted.returncode == 0, submitted.stderr
    job = Job.objects.get(pk=int(submitted.stdout.split()[0]))
    assert before + 3 * 3600 <= job.deadline.timestamp() <= after + 3 * 3600
    shown = json.loads(cli("status", str(job.pk)).stdout)
    assert datetime.fromisoformat(shown["deadline"]) == job.deadline


def test_the_cli_passes_a_deadline_with_its_zone_and_a_begin_together(cli):  # noqa: F811
    deadline = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=5)

    submitted = cli("submit", "-", "--begin", "now+2h", "--deadline", deadline.isoformat(),
                    stdin=json.dumps(CLI_SPEC))  # fmt: skip

    assert submitted.returncode == 0, submitted.stderr
    job = Job.objects.get()
    assert (job.deadline, job.begin < job.deadline) == (deadline, True)


def test_the_cli_refuses_a_deadline_it_cannot_read_or_the_job_could_not_end_by(cli):  # noqa: F811
    unreadable = cli("submit", "-", "--deadline", "now+2w", stdin=json.dumps(CLI_SPEC))
    too_soon = cli("submit", "-", "--deadline", "now+5m", stdin=json.dumps(CLI_SPEC))
    after_begin = cli("submit", "-", "--begin", "now+2h", "--deadline", "now+125m",
                      stdin=json.dumps(CLI_SPEC))  # fmt: skip

    assert unreadable.returncode == 2 and "--deadline" in unreadable.stderr
    assert too_soon.returncode == 1 and "deadline" in too_soon.stderr
    assert "could not end by then" in too_soon.stderr
    assert after_begin.returncode == 1 and "started at its begin" in after_begin.stderr
    assert not Job.objects.exists()
