"""A job whose workers each take a node to itself (Slurm's --exclusive, `exclusive`): taken by
a submission and a test-only one, answered with the job, checked against the nodes the clusters
have, kept by a resubmission and a job's spec; and the command line's side of it, against a live
server: `submit --exclusive`, `status`, `spec` read back by `submit`, and `list`'s marker."""

import json
import subprocess
import sys

import pytest
from rest_framework.test import APIClient

from jobs.models import Job, JobEvent
from jobs.states import State
from quotas.tokens import create_token
from tests.factories import JobFactory, NodeFactory, PriorityClassFactory
from tests.processes import ROOT, on_a_terminal

pytestmark = pytest.mark.django_db

SPEC = {"tenant": "alpha", "name": "pretrain", "family": "training", "image": "pytorch:2",
        "command": ["torchrun", "train.py"], "cpu_milli": 8000, "memory_mb": 32_000,
        "gpus": 8, "workers": 2, "max_runtime_s": 3600}  # fmt: skip
SHARE = {**SPEC, "family": "evaluation", "workers": 1, "gpus": 0, "gpu_milli": 500}

A_SHARE = "An exclusive job takes whole nodes: ask whole GPUs, or none."


@pytest.fixture(autouse=True)
def normal(db):
    return PriorityClassFactory(name="normal", value=0)


@pytest.fixture
def eights(east):
    """Two nodes of 8 GPUs: what an exclusive worker of 8 GPUs takes whole."""
    return NodeFactory.create_batch(2, cluster=east, gpu_count=8)


def api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def submit(user, path: str = "/api/v1/jobs/", **changes):
    return api(user).post(path, {**SPEC, **changes}, format="json")


def test_a_submission_takes_exclusive_and_the_job_answers_it(alice, alpha, eights):
    answer = submit(alice, exclusive=True)

    assert answer.status_code == 201, answer.content
    job = Job.objects.get(pk=answer.json()["id"])
    assert answer.json()["exclusive"] is True and job.exclusive is True
    assert api(alice).get(f"/api/v1/jobs/{job.pk}/").json()["exclusive"] is True


def test_exclusive_left_out_is_false(alice, alpha, eights):
    answer = submit(alice)

    assert answer.status_code == 201, answer.content
    assert answer.json()["exclusive"] is False
    assert Job.objects.get(pk=answer.json()["id"]).exclusive is False


def test_a_share_of_a_gpu_is_a_400_naming_exclusive_and_nothing_is_written(alice, alpha, eights):
    answer = api(alice).post("/api/v1/jobs/", {**SHARE, "exclusive": True}, format="json")

    assert answer.status_code == 400
    assert answer.json() == {"exclusive": [A_SHARE]}
    assert not Job.objects.exists() and not JobEvent.objects.exists()


@pytest.mark.parametrize(
    ("gpus", "said"),
    [
        (3, "No node has exactly 3 GPUs: each worker of an exclusive job takes every GPU of a "
            "node of its own."),
        (1, "No node has exactly 1 GPU: each worker of an exclusive job takes every GPU of a "
            "node of its own."),
        (0, "No node without GPUs: a CPU-only exclusive job takes a node without GPUs."),
    ],
    ids=["3 GPUs", "1 GPU", "CPU only"],
)  # fmt: skip
def test_no_node_with_exactly_its_gpus_is_a_400_naming_exclusive_and_nothing_is_written(
    alice, alpha, eights, gpus, said
):
    answer = submit(alice, gpus=gpus, exclusive=True)

    assert answer.status_code == 400
    assert answer.json() == {"exclusive": [said]}
    assert not Job.objects.exists() and not JobEvent.objects.exists()


def test_a_node_with_exactly_its_gpus_in_any_cluster_takes_it(alice, alpha, east, eights):
    NodeFactory(gpu_count=4)  # another cluster's
    NodeFactory(cluster=east, gpu_count=0, gpu_type="")

    four = submit(alice, gpus=4, exclusive=True)
    cpu_only = submit(alice, gpus=0, exclusive=True)

    assert four.status_code == 201, four.content
    assert cpu_only.status_code == 201, cpu_only.content
    assert Job.objects.filter(exclusive=True).count() == 2


def test_a_job_that_is_not_exclusive_is_not_checked_against_the_nodes(alice, alpha, eights):
    answer = submit(alice, gpus=3)

    assert answer.status_code == 201, answer.content
    assert answer.json()["exclusive"] is False


def test_the_test_only_submission_takes_it_and_refuses_it_as_a_submission_does(
    alice, alpha, eights
):
    taken = submit(alice, "/api/v1/jobs/test/", exclusive=True)
    share = api(alice).post("/api/v1/jobs/test/", {**SHARE, "exclusive": True}, format="json")
    three = submit(alice, "/api/v1/jobs/test/", gpus=3, exclusive=True)

    assert taken.status_code == 200, taken.content
    assert taken.json()["starts_now"] is True
    assert share.status_code == 400 and share.json() == {"exclusive": [A_SHARE]}
    assert three.status_code == 400 and "No node has exactly 3 GPUs" in three.json()["exclusive"][0]
    assert not Job.objects.exists() and not JobEvent.objects.exists()


def test_a_resubmission_keeps_it(alice, alpha, eights):
    job = JobFactory(tenant=alpha, owner=alice, gpus=8, workers=2, exclusive=True,
                     state=State.FAILED)  # fmt: skip

    answer = api(alice).post(f"/api/v1/jobs/{job.pk}/resubmit/")

    assert answer.status_code == 201, answer.content
    assert answer.json()["exclusive"] is True
    again = Job.objects.get(pk=answer.json()["id"])
    assert again.resubmitted_from_id == job.pk and again.exclusive is True


def test_a_jobs_spec_gives_it_and_a_submission_of_the_spec_keeps_it(alice, alpha, eights):
    first = submit(alice, exclusive=True).json()

    spec = api(alice).get(f"/api/v1/jobs/{first['id']}/spec/").json()
    again = api(alice).post("/api/v1/jobs/", spec, format="json")

    assert spec["exclusive"] is True
    assert again.status_code == 201, again.content
    assert Job.objects.get(pk=again.json()["id"]).exclusive is True


# The command line, against the live server.


@pytest.fixture
def mlsched(live_server, alice):
    """The command line as Alice, with a token of hers: run(*args, terminal=False) gives
    (exit status, standard output, standard error); on a terminal (a pseudo-terminal, as a
    person's), its output is what `status` describes for people."""
    _, token = create_token(alice, "exclusive tests")
    env = {"MLSCHED_URL": live_server.url, "MLSCHED_TOKEN": token, "PATH": "/usr/bin:/bin"}

    def run(*args: str, stdin: str | None = None, terminal: bool = False):
        command = [sys.executable, "-m", "jobs.cli", *args]
        if not terminal:
            done = subprocess.run(command, cwd=ROOT, env=env, input=stdin, capture_output=True,
                                  text=True, timeout=60)  # fmt: skip
            return done.returncode, done.stdout, done.stderr
        return on_a_terminal(command, env)

    return run


@pytest.mark.django_db(transaction=True)
def test_submit_exclusive_sends_it(mlsched, alpha, eights):
    status, out, err = mlsched("submit", "-", "--exclusive", stdin=json.dumps(SPEC))
    plain = mlsched("submit", "-", stdin=json.dumps(SPEC))

    assert status == 0, err
    assert Job.objects.get(pk=int(out.split()[0])).exclusive is True
    assert Job.objects.get(pk=int(plain[1].split()[0])).exclusive is False


@pytest.mark.django_db(transaction=True)
def test_submit_exclusive_of_a_share_is_the_apis_refusal_naming_it(mlsched, alpha, eights):
    status, _, err = mlsched("submit", "-", "--exclusive", stdin=json.dumps(SHARE))

    assert status == 1 and "error 400" in err and "exclusive" in err and A_SHARE in err
    assert not Job.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_status_says_its_nodes_are_its_own_only_when_exclusive(mlsched, alpha, alice, eights):
    job = JobFactory(tenant=alpha, owner=alice, gpus=8, workers=2, exclusive=True)
    plain = JobFactory(tenant=alpha, owner=alice, gpus=8, workers=2)

    status, described, err = mlsched("status", str(job.pk), terminal=True)
    shown = mlsched("status", str(plain.pk), terminal=True)[1]
    as_json = json.loads(mlsched("status", str(job.pk))[1])

    assert status == 0, err
    assert "Nodes:           to itself, one per worker (exclusive)\n" in described
    assert "Nodes:" not in shown and "exclusive" not in shown
    assert as_json["exclusive"] is True


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("form", ["json", "yaml"])
def test_spec_gives_it_and_submit_reads_it_back(mlsched, alpha, alice, eights, tmp_path, form):
    job = JobFactory(tenant=alpha, owner=alice, gpus=8, workers=2, exclusive=True)

    status, written, err = mlsched("spec", str(job.pk), *(["--yaml"] if form == "yaml" else []))
    (tmp_path / "job").write_text(written)
    again = mlsched("submit", str(tmp_path / "job"))

    assert status == 0, err
    assert ("exclusive: true" in written) if form == "yaml" else json.loads(written)["exclusive"]
    assert again[0] == 0, again[2]
    copy = Job.objects.get(pk=int(again[1].split()[0]))
    assert copy.pk != job.pk and copy.exclusive is True


@pytest.mark.django_db(transaction=True)
def test_list_marks_an_exclusive_jobs_gpus_with_a_bang(mlsched, alpha, alice, eights):
    gang = JobFactory(tenant=alpha, owner=alice, name="gang", workers=2, gpus=8, exclusive=True)
    kept = JobFactory(tenant=alpha, owner=alice, name="kept", workers=4, gpus=8, exclusive=True,
                      topology="rack")  # fmt: skip
    cpu = JobFactory(tenant=alpha, owner=alice, name="cpu", workers=2, gpus=0, exclusive=True)
    one = JobFactory(tenant=alpha, owner=alice, name="one", workers=1, gpus=8, exclusive=True)
    loose = JobFactory(tenant=alpha, owner=alice, name="loose", workers=2, gpus=8)

    status, out, err = mlsched("list")

    assert status == 0, err
    rows = {int(row.split()[0]): [row.split()[4], row.split()[6]] for row in out.splitlines()}
    assert rows[gang.pk] == ["2x8!", "gang"]
    assert rows[kept.pk] == ["4x8!@rack", "kept"]
    assert rows[cpu.pk] == ["2w!", "cpu"]
    assert rows[one.pk] == ["8!", "one"]
    assert rows[loose.pk] == ["2x8", "loose"]
