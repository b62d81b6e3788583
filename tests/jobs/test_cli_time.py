"""The CLI's `list` TIME column, as Slurm's squeue writes a job's time: how long a queued job
has waited, a scheduled one has been placed, a running one has run, an ended one ran."""

from datetime import UTC, datetime

import pytest

from jobs.cli.commands import clock, time_in


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
