"""A job list of the jobs named (`?id=12,13,14`, Slurm's squeue -j), which the CLI's `wait`
for several jobs reads them by, a hundred a request."""

import json
import subprocess
import sys

import pytest
from rest_framework.test import APIClient

from quotas.tokens import create_token
from tests.factories import JobFactory
from tests.jobs.test_cli import Canned, answering
from tests.processes import ROOT


def api_of(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.mark.django_db
def test_the_list_gives_the_jobs_named_alone_and_none_of_another_team(alpha, alice, charlie):
    mine = [JobFactory(tenant=alpha, owner=alice) for _ in range(3)]
    theirs = JobFactory(tenant=charlie.memberships.get().tenant)
    asked = f"{mine[0].pk},{mine[2].pk},{theirs.pk}"

    listed = api_of(alice).get("/api/v1/jobs/", {"id": asked}).json()["jobs"]

    assert [job["id"] for job in listed] == [mine[2].pk, mine[0].pk]


@pytest.mark.django_db
@pytest.mark.parametrize("asked", ["12,x", "12,,13", ",".join(["1"] * 101)])
def test_ids_that_are_none_or_too_many_are_a_400_naming_id(alpha, alice, asked):
    answer = api_of(alice).get("/api/v1/jobs/", {"id": asked})

    assert answer.status_code == 400
    assert "at most 100" in answer.json()["id"][0]


class Sweep(Canned):
    """Three jobs that have ended, read by the list: the requests it was asked."""

    asked: list = []

    def do_GET(self):
        type(self).asked.append(self.path)
        jobs = [{"id": pk, "state": "succeeded", "pending_reason": "", "end_reason": "",
                 "attempts": []} for pk in (3, 2, 1)]  # fmt: skip
        self.reply(200, json.dumps({"jobs": jobs, "next": None}).encode())


def test_wait_reads_several_jobs_in_one_list_request():
    handler = type("Handler", (Sweep,), {"asked": []})
    with answering(handler) as url:
        env = {"MLSCHED_URL": url, "MLSCHED_TOKEN": "t", "PATH": "/usr/bin:/bin"}
        done = subprocess.run([sys.executable, "-m", "jobs.cli", "wait", "1", "2", "3"],
                              cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=60)  # fmt: skip

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["1 succeeded", "2 succeeded", "3 succeeded"]
    assert handler.asked == ["/api/v1/jobs/?id=1%2C2%2C3&fold=1"]


@pytest.mark.django_db(transaction=True)
def test_the_cli_lists_the_jobs_named(live_server, alpha, alice):
    jobs = [JobFactory(tenant=alpha, owner=alice) for _ in range(3)]
    _, token = create_token(alice, "list ids")
    env = {"MLSCHED_URL": live_server.url, "MLSCHED_TOKEN": token, "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-m", "jobs.cli", "list", "--id",
                           f"{jobs[0].pk},{jobs[2].pk}"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip

    assert done.returncode == 0, done.stderr
    assert [int(row.split()[0]) for row in done.stdout.splitlines()] == [jobs[2].pk, jobs[0].pk]
