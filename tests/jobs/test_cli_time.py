"""The CLI's `list` TIME column, as Slurm's squeue writes a job's time: how long a queued job
has waited, a scheduled one has been placed, a running one has run, an ended one ran, counted
to the server's clock (the Date header every answer carries)."""

import json
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime, parsedate_to_datetime

import pytest

from jobs.cli.commands import clock, time_in
from tests.jobs.test_cli import Canned, answering, run_cli


@pytest.mark.parametrize(
    ("seconds", "written"),
    [(0, "0:00"), (59, "0:59"), (61, "1:01"), (3600, "1:00:00"), (86_399, "23:59:59"),
     (90_061, "1-01:01:01")],
)  # fmt: skip
def test_list_writes_a_jobs_time_as_slurm_does(seconds, written):
    assert clock(seconds) == written


def test_list_gives_a_queued_jobs_wait_a_running_ones_run_and_an_ended_ones_length():
    now = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
    at = "2026-12-06T11:{}:00Z".format

    assert time_in({"state": "queued", "created": at(50)}, now) == "10:00"
    assert (
        time_in({"state": "scheduled", "scheduled_at": at(59), "started_at": None}, now) == "1:00"
    )
    assert time_in({"state": "running", "started_at": at(30), "finished_at": None}, now) == "30:00"
    ended = {"state": "failed", "started_at": at(10), "finished_at": at(12)}
    assert time_in(ended, now) == "2:00"
    assert time_in({"state": "canceled", "started_at": None, "finished_at": at(12)}, now) == "-"


class BehindClock(Canned):
    """A server whose clock is three hours behind this machine's: its list holds one queued
    job submitted an hour before its own now."""

    now = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=3)

    def date_time_string(self, timestamp=None):  # the Date header send_response writes
        return format_datetime(self.now, usegmt=True)

    def do_GET(self):
        job = {"id": 7, "state": "queued", "family": "training", "owner": "alice", "workers": 1,
               "gpus": 1, "gpu_milli": 0, "name": "waits", "pending_reason": "",
               "created": (self.now - timedelta(hours=1)).isoformat()}  # fmt: skip
        self.reply(200, json.dumps({"jobs": [job], "next": None}).encode())


def test_list_counts_a_jobs_time_to_the_servers_clock_not_this_machines():
    with answering(BehindClock) as url:
        out = run_cli(url, "t", "list")

    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[:5] == ["7", "queued", "training", "alice", "1"]
    assert out.stdout.split()[5] == "1:00:00"  # this machine's clock would say 4:00:00


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/api/v1/jobs/", "/healthz", "/accounts/login/", "/nowhere/"])
def test_every_answer_says_when_it_was_made(client, alice, path):
    client.force_login(alice)
    before = datetime.now(UTC).replace(microsecond=0)

    said = parsedate_to_datetime(client.get(path).headers["Date"])

    assert before <= said <= datetime.now(UTC)
