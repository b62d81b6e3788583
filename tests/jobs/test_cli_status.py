"""`status ID`: one job described for a person on a terminal (as `kubectl describe` and Slurm's
`scontrol show job`), its JSON for a script."""

import json
import subprocess
import sys

import pytest
from django.utils import timezone

from jobs import actions, cycle
from jobs.cli.describe import COMMAND_SHOWN, EVENTS_SHOWN, moment
from jobs.models import Attempt, Family
from jobs.states import State
from quotas.tokens import create_token
from tests.factories import ClusterFactory, JobFactory, NodeFactory
from tests.processes import ROOT, on_a_terminal


@pytest.fixture
def run_cli(live_server, alice):
    _, token = create_token(alice, "status tests")
    env = {"MLSCHED_URL": live_server.url, "MLSCHED_TOKEN": token, "PATH": "/usr/bin:/bin"}

    def run(*args, terminal=True) -> str:
        """The CLI's output, written to a terminal (a pseudo-terminal, as a person's) or to a
        pipe."""
        command = [sys.executable, "-m", "jobs.cli", *args]
        if not terminal:
            done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                                  timeout=60)  # fmt: skip
            assert done.returncode == 0, done.stderr
            return done.stdout
        status, written, errors = on_a_terminal(command, env)
        assert status == 0, errors
        return written

    return run


@pytest.fixture
def east():
    cluster = ClusterFactory(name="east")
    for name in ("gpu-a", "gpu-b"):
        NodeFactory(cluster=cluster, name=name, gpu_type="A100", gpu_count=8)
    return cluster


@pytest.mark.django_db(transaction=True)
def test_status_on_a_terminal_describes_the_job_where_it_ran_and_why_it_failed(
    run_cli, east, alpha, alice
):
    gang = JobFactory(tenant=alpha, owner=alice, name="llm", workers=2, gpus=8, cpu_milli=2000,
                      memory_mb=4096, max_runtime_s=5400, labels={"project": "llm"},
                      gpu_types=["A100"])  # fmt: skip
    cycle.run_cycle()
    attempt = Attempt.objects.get(job=gang)
    actions.mark_running(attempt.pk)
    actions.end_attempt(attempt.pk, Attempt.Outcome.USER_ERROR, exit_code=3,
                        reason="worker 0 exited with code 3")  # fmt: skip

    lines = run_cli("status", str(gang.pk)).splitlines()

    assert lines[0] == f"Job:             {gang.pk} llm"
    assert "State:           failed" in lines
    assert "Why:             worker 0 exited with code 3" in lines
    assert "Asks:            2 workers of 2 cores, 4096 MiB and 8 GPUs each; runtime limit " \
           "1.5 h" in lines  # fmt: skip
    assert "Labels:          project=llm" in lines
    assert "Command:         python train.py" in lines
    head = lines.index("Attempts:")
    assert lines[head + 1].startswith("  #1  user_error on east, started ")
    assert lines[head + 1].endswith(": worker 0 exited with code 3")
    eight = "GPUs 0, 1, 2, 3, 4, 5, 6, 7"
    assert lines[head + 2] == f"      gpu-a ({eight}), gpu-b ({eight})"
    moves = lines[lines.index("Moves:") + 1 :]
    assert [line.split("  ", 2)[2] for line in moves] == [  # the factory records no submission
        "queued -> scheduled: placed on gpu-a, gpu-b",
        "scheduled -> running: attempt 1 running",
        "running -> failed: worker 0 exited with code 3",
    ]


@pytest.mark.django_db(transaction=True)
def test_status_piped_or_asked_for_json_gives_the_jobs_json(run_cli, alpha, alice):
    job = JobFactory(tenant=alpha, owner=alice, name="eval")

    piped = json.loads(run_cli("status", str(job.pk), terminal=False))
    asked = json.loads(run_cli("status", str(job.pk), "--json"))

    assert piped["id"] == asked["id"] == job.pk
    assert piped["name"] == asked["name"] == "eval"


@pytest.mark.django_db(transaction=True)
def test_status_says_why_a_queued_job_waits_and_what_it_waits_for(run_cli, alpha, alice):
    first = JobFactory(tenant=alpha, owner=alice)
    waiting = JobFactory(tenant=alpha, owner=alice, name="after")
    waiting.dependency_links.create(on=first, kind="afterany")
    cycle.run_cycle()  # no cluster: the first waits for room, the second for the first

    lines = run_cli("status", str(waiting.pk)).splitlines()

    assert "State:           queued, waiting as waiting_for_dependency" in lines
    assert f"Why:             Waiting for job #{first.pk} to end." in lines
    assert f"Dependencies:    afterany:{first.pk}" in lines
    assert "Attempts:        none yet" in lines
    assert not any(line.startswith("In line:") for line in lines)


@pytest.mark.django_db(transaction=True)
def test_status_says_where_a_queued_job_stands_in_line(run_cli, alpha, alice):
    JobFactory(tenant=alpha, owner=alice, priority=5)
    job = JobFactory(tenant=alpha, owner=alice)
    cycle.run_cycle()  # no cluster: both wait

    lines = run_cli("status", str(job.pk)).splitlines()

    at = lines.index(
        "In line:         2nd in line of 2 waiting jobs (2nd of its team's 2); "
        "ahead of it: 1 of its team's."
    )
    assert lines[at + 1].startswith("                 Its points in its team's line: ")


@pytest.mark.django_db(transaction=True)
def test_a_batchs_status_counts_its_shards_and_names_whose_attempts_it_shows(run_cli, alpha, alice):
    first = JobFactory(tenant=alpha, owner=alice, name="embed", family=Family.BATCH_INFERENCE,
                       shards=3, shard_index=0, state=State.RUNNING,
                       started_at=timezone.now())  # fmt: skip
    for index, state in ((1, State.QUEUED), (2, State.SUCCEEDED)):
        JobFactory(tenant=alpha, owner=alice, name="embed", family=Family.BATCH_INFERENCE,
                   shards=3, shard_index=index, parent=first, state=state)  # fmt: skip

    lines = run_cli("status", str(first.pk)).splitlines()

    assert "State:           running" in lines
    (shards,) = [line for line in lines if line.startswith("Shards:")]
    assert shards.startswith("Shards:          3: ")
    assert sorted(shards[len("Shards:          3: ") :].split(", ")) == [
        "1 queued", "1 running", "1 succeeded"
    ]  # fmt: skip
    assert "Shard 0's attempts: none yet" in lines
    assert not any(line.startswith(("Started:", "Ended:")) for line in lines)


@pytest.mark.django_db(transaction=True)
def test_status_shows_a_long_command_cut_and_the_last_moves_of_a_long_history(
    run_cli, alpha, alice
):
    job = JobFactory(tenant=alpha, owner=alice, command=["python", "-c", "x" * 1000])
    for n in range(EVENTS_SHOWN + 2):  # a history longer than is shown
        job.events.create(from_state="queued", to_state="queued", reason=f"move {n}")

    lines = run_cli("status", str(job.pk)).splitlines()

    (command,) = [line for line in lines if line.startswith("Command:")]
    written = len("python -c ") + 1000
    assert command.endswith(f"... ({written - COMMAND_SHOWN} characters more: status --json)")
    last = lines.index(f"Last {EVENTS_SHOWN} moves:")
    assert lines[last + 1 :][-1].endswith(f"queued -> queued: move {EVENTS_SHOWN + 1}")
    assert len(lines[last + 1 :]) == EVENTS_SHOWN


def test_an_api_time_is_shown_to_the_second_in_utc():
    assert moment("2026-12-06T03:19:32.343000Z") == "2026-12-06 03:19:32 UTC"
    assert moment("2026-12-06T05:19:32+02:00") == "2026-12-06 03:19:32 UTC"
