"""A job's spec (`GET /api/v1/jobs/<id>/spec/`, CLI `spec ID`, the job page's link): the job as
a submission of it is written, which `POST /api/v1/jobs/` takes back as it is."""

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest
from guardian.shortcuts import assign_perm
from rest_framework.test import APIClient

from jobs.models import Job
from quotas.tokens import create_token
from tests.factories import JobFactory
from tests.processes import ROOT

pytestmark = pytest.mark.django_db

BEGIN = (datetime.now(UTC) + timedelta(days=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
SUBMITTED = {
    "tenant": "alpha", "name": "llm", "family": "training", "image": "python:3.11",
    "command": ["torchrun", "train.py"], "env": {"LR": "3e-4"}, "cpu_milli": 2000,
    "memory_mb": 4096, "gpus": 8, "workers": 2, "min_workers": 1, "max_runtime_s": 7200,
    "max_retries": 1, "labels": {"project": "llm"}, "begin": BEGIN,
    "idempotency_key": "llm-1",
}  # fmt: skip


def api_of(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_a_jobs_spec_submitted_again_makes_the_same_job(alpha, alice, normal_priority):
    client = api_of(alice)
    first = client.post("/api/v1/jobs/", SUBMITTED, format="json").json()

    spec = client.get(f"/api/v1/jobs/{first['id']}/spec/").json()
    again = client.post("/api/v1/jobs/", spec, format="json")

    assert again.status_code == 201, again.json()
    assert list(spec)[:4] == ["tenant", "name", "family", "image"]  # as a person writes one
    assert "idempotency_key" not in spec  # under it, the first job would be the answer
    second = again.json()
    same = {key for key in SUBMITTED if key not in ("idempotency_key", "tenant")}
    assert {key: second[key] for key in same} == {key: first[key] for key in same}
    assert second["id"] != first["id"]


def test_a_shards_spec_is_its_batchs_with_the_batchs_dependencies(alpha, alice, normal_priority):
    before = JobFactory(tenant=alpha, owner=alice)
    batch = api_of(alice).post("/api/v1/jobs/", {**SUBMITTED, "family": "batch_inference",
                               "gpus": 1, "workers": 1, "min_workers": None, "shards": 3,
                               "depends_on": [before.pk], "idempotency_key": "embed-1"},
                               format="json").json()  # fmt: skip
    shard = Job.objects.get(parent_id=batch["id"], shard_index=2)

    spec = api_of(alice).get(f"/api/v1/jobs/{shard.pk}/spec/").json()

    assert spec["shards"] == 3
    assert spec["depends_on"] == [{"id": before.pk, "kind": "afterok"}]


def test_an_outsiders_spec_leaves_out_the_jobs_of_the_team_they_cannot_see(
    alpha, alice, charlie, normal_priority
):
    before = JobFactory(tenant=alpha, owner=alice)
    job = JobFactory(tenant=alpha, owner=alice)
    job.dependency_links.create(on=before, kind="afterany")
    assign_perm("view_job", charlie, job)

    theirs = api_of(charlie).get(f"/api/v1/jobs/{job.pk}/spec/").json()
    ours = api_of(alice).get(f"/api/v1/jobs/{job.pk}/spec/").json()

    assert theirs["depends_on"] == []
    assert ours["depends_on"] == [{"id": before.pk, "kind": "afterany"}]


def test_another_teams_jobs_spec_is_a_404(alpha, charlie):
    job = JobFactory(tenant=alpha)

    assert api_of(charlie).get(f"/api/v1/jobs/{job.pk}/spec/").status_code == 404


def test_the_job_page_links_its_spec_as_a_file(client, alpha, alice):
    job = JobFactory(tenant=alpha, owner=alice)
    client.force_login(alice)

    page = client.get(f"/jobs/{job.pk}/").text

    assert f'href="/api/v1/jobs/{job.pk}/spec/" download="job-{job.pk}.json"' in page


@pytest.mark.django_db(transaction=True)
def test_the_cli_prints_a_spec_that_it_submits_again(live_server, alpha, alice, normal_priority):
    _, token = create_token(alice, "spec tests")
    env = {"MLSCHED_URL": live_server.url, "MLSCHED_TOKEN": token, "PATH": "/usr/bin:/bin"}
    first = api_of(alice).post("/api/v1/jobs/", SUBMITTED, format="json").json()

    def cli(*args, stdin=None):
        done = subprocess.run([sys.executable, "-m", "jobs.cli", *args], cwd=ROOT, env=env,
                              input=stdin, capture_output=True, text=True, timeout=60)  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout

    spec = cli("spec", str(first["id"]))
    again = int(cli("submit", "-", stdin=spec).split()[0])

    assert json.loads(spec)["command"] == ["torchrun", "train.py"]
    assert Job.objects.get(pk=again).labels == {"project": "llm"}


@pytest.mark.django_db(transaction=True)
def test_the_cli_writes_a_spec_as_yaml_and_submits_it_and_a_yaml_file_again(
    live_server, alpha, alice, normal_priority, tmp_path
):
    _, token = create_token(alice, "spec tests")
    env = {"MLSCHED_URL": live_server.url, "MLSCHED_TOKEN": token, "PATH": "/usr/bin:/bin"}
    labelled = {**SUBMITTED, "labels": {"project": "llm", "ablation": "no", "lr": "1e-3"}}
    tomorrow = (datetime.now(tz=UTC) + timedelta(days=1)).replace(microsecond=0)
    first = api_of(alice).post("/api/v1/jobs/", labelled, format="json").json()

    def cli(*args, stdin=None):
        return subprocess.run([sys.executable, "-m", "jobs.cli", *args], cwd=ROOT, env=env,
                              input=stdin, capture_output=True, text=True, timeout=60)  # fmt: skip

    written = cli("spec", str(first["id"]), "--yaml").stdout
    again = cli("submit", "-", stdin=written)
    (tmp_path / "job.yaml").write_text(
        "tenant: alpha\nname: by-hand\nfamily: evaluation\nimage: python:3.11\n"
        "command: [python, eval.py]\ncpu_milli: 1000\nmemory_mb: 2000\nmax_runtime_s: 600\n"
        f"begin: {tomorrow:%Y-%m-%dT%H:%M:%SZ}  # a time, kept as written\n"
    )
    by_hand = cli("submit", str(tmp_path / "job.yaml"))
    neither = cli("submit", "-", stdin="- just\n- a list\n")

    assert written.startswith("tenant: alpha\n") and "ablation: 'no'" in written
    assert again.returncode == 0, again.stderr
    resubmitted = Job.objects.get(pk=int(again.stdout.split()[0]))
    assert resubmitted.pk != first["id"] and resubmitted.labels == labelled["labels"]
    assert by_hand.returncode == 0, by_hand.stderr
    assert Job.objects.get(name="by-hand").begin == tomorrow
    assert neither.returncode == 1
    assert "not a readable job description" in neither.stderr and "no mapping" in neither.stderr
