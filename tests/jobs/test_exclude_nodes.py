"""The nodes a job never runs on (Slurm's --exclude, `exclude_nodes`): taken by a submission,
the submit form and the CLI, checked against the nodes the clusters have, changed while the job
waits (the constraints change), kept by a copy, and held by the cycle and its commit."""

import json
import time
from datetime import UTC, datetime

import pytest

from jobs import actions, cycle, snapshot
from jobs.cli import describe
from jobs.commit import commit_batch
from jobs.models import Job, JobEvent
from jobs.placement import PLACED, place
from jobs.serializers import submission_of
from jobs.states import State
from tests.factories import ClusterFactory, JobFactory, NodeFactory, PriorityClassFactory
from tests.jobs.test_batch_cancel import api
from tests.jobs.test_batch_shard_limit_cli import mlsched  # noqa: F401 (a fixture)
from tests.jobs.test_constraints_edit import change
from tests.jobs.test_min_workers_edit import portal_of
from tests.jobs.test_portal import FORM
from tests.jobs.test_resubmit import resubmit

pytestmark = pytest.mark.django_db

SPEC = {"tenant": "alpha", "name": "train", "family": "training", "image": "python:3.11",
        "command": ["python", "train.py"], "cpu_milli": 1000, "memory_mb": 1024, "gpus": 8,
        "max_runtime_s": 3600}  # fmt: skip


@pytest.fixture(autouse=True)
def normal(db):
    return PriorityClassFactory(name="normal", value=0)


def submit(user, **fields):
    return api(user).post("/api/v1/jobs/", {**SPEC, **fields}, format="json")


def nodes_of(job: Job) -> set[str]:
    return {node["node"] for node in Job.objects.get(pk=job.pk).attempts.get().nodes()}


def test_a_job_starts_on_a_node_it_does_not_exclude(alice, alpha, east):
    NodeFactory(cluster=east, name="east-0", gpu_count=8)
    NodeFactory(cluster=east, name="east-1", gpu_count=8)

    answer = submit(alice, exclude_nodes=["east-0"])
    cycle.run_cycle()

    assert answer.status_code == 201, answer.content
    assert answer.json()["exclude_nodes"] == ["east-0"]
    assert nodes_of(Job.objects.get(pk=answer.json()["id"])) == {"east-1"}


def test_it_waits_as_excluded_nodes_then_starts_once_it_excludes_none(alice, alpha, east):
    NodeFactory(cluster=east, name="east-0", gpu_count=8)
    job = Job.objects.get(pk=submit(alice, exclude_nodes=["east-0"]).json()["id"])
    cycle.run_cycle()
    waiting = Job.objects.get(pk=job.pk)
    assert (waiting.state, waiting.pending_reason) == (State.QUEUED, "excluded_nodes")

    answer = change(alice, job, {"exclude_nodes": []})
    cycle.run_cycle()

    assert answer.status_code == 200 and answer.json()["exclude_nodes"] == []
    assert Job.objects.get(pk=job.pk).state == State.SCHEDULED
    assert JobEvent.objects.filter(
        job=job, reason="may run on any GPU type of any cluster by alice"
    ).exists()


def test_a_name_excludes_the_node_of_that_name_in_every_cluster(alice, alpha, east):
    west = ClusterFactory(name="west")
    NodeFactory(cluster=east, name="gpu-0", gpu_count=8)
    NodeFactory(cluster=west, name="gpu-0", gpu_count=8)
    NodeFactory(cluster=west, name="gpu-1", gpu_count=8)

    job = Job.objects.get(pk=submit(alice, exclude_nodes=["gpu-0"]).json()["id"])
    cycle.run_cycle()

    assert nodes_of(job) == {"gpu-1"}


@pytest.mark.parametrize(
    ("excluded", "said"),
    [
        (["east-9"], "No cluster has a node named 'east-9'."),
        (["east-0", "east-0"], "Node 'east-0' is named twice."),
        ([""], "This field may not be blank."),
        ("east-0", 'Expected a list of items but got type "str".'),
        (["n"] * 101, "Ensure this field has no more than 100 elements."),
    ],
    ids=["unknown", "twice", "blank", "not a list", "too many"],
)
def test_what_names_no_node_once_is_a_400_naming_exclude_nodes(alice, alpha, east, excluded, said):
    NodeFactory(cluster=east, name="east-0", gpu_count=8)
    job = JobFactory(tenant=alpha, owner=alice)

    submitted = submit(alice, exclude_nodes=excluded)
    changed = change(alice, job, {"exclude_nodes": excluded})

    for answer in (submitted, changed):
        assert answer.status_code == 400
        assert said in str(answer.json()["exclude_nodes"])  # a list's item: under its index
    assert Job.objects.filter(name="train").count() == 0
    assert Job.objects.get(pk=job.pk).exclude_nodes == []


def test_a_node_excluded_after_the_snapshot_is_not_started_on(alice, alpha, east):
    NodeFactory(cluster=east, name="east-0", gpu_count=8)
    job = JobFactory(tenant=alpha, owner=alice, gpus=2)
    placed = [o for o in place(snapshot.load(time.time()).snapshot).outcomes if o.status == PLACED]
    assert len(placed) == 1

    actions.change_constraints(job, {"exclude_nodes": ["east-0"]}, "alice")

    assert commit_batch(placed, datetime.now(tz=UTC)) == set()
    assert Job.objects.get(pk=job.pk).state == State.QUEUED


def test_a_copy_keeps_the_nodes_it_excludes(alice, alpha, east):
    NodeFactory(cluster=east, name="east-0", gpu_count=8)
    job = JobFactory(tenant=alpha, owner=alice, exclude_nodes=["east-0"])

    assert submission_of(job)["exclude_nodes"] == ["east-0"]


def test_the_submit_form_and_the_job_page_take_and_show_them(alice, alpha, east):
    NodeFactory(cluster=east, name="east-0", gpu_count=8)
    NodeFactory(cluster=east, name="east-1", gpu_count=8)
    portal = portal_of(alice)

    done = portal.post("/jobs/new/", {**FORM, "exclude_nodes": "east-0, east-1"})
    job = Job.objects.get(name=FORM["name"])
    page = portal.get(f"/jobs/{job.pk}/").text
    changed = portal.post(f"/jobs/{job.pk}/constraints/", {"gpu_types": "", "cluster_selector": "",
                                                           "exclude_nodes": "east-1"})  # fmt: skip
    refused = portal.post(f"/jobs/{job.pk}/constraints/", {"exclude_nodes": "east-7"})

    assert done.status_code == 302
    assert job.exclude_nodes == ["east-0", "east-1"]
    assert '<dd id="exclude-nodes">east-0, east-1</dd>' in page
    assert 'name="exclude_nodes" value="east-0, east-1"' in page
    assert changed.status_code == 302
    assert Job.objects.get(pk=job.pk).exclude_nodes == ["east-1"]
    assert refused.status_code == 400 and "east-7" in refused.text


def test_the_cli_submits_constrains_and_describes_them(mlsched, alice, alpha, east, tmp_path):  # noqa: F811
    NodeFactory(cluster=east, name="east-0", gpu_count=8)
    NodeFactory(cluster=east, name="east-1", gpu_count=8)
    spec = tmp_path / "job.json"
    spec.write_text(json.dumps(SPEC))

    status, out, err = mlsched("submit", str(spec), "--exclude", "east-0")
    job = Job.objects.get(pk=int(out.split()[0]))
    described = mlsched("status", str(job.pk))[1]
    constrained = mlsched("constrain", str(job.pk), "--exclude", "east-0,east-1")
    cleared = mlsched("constrain", str(job.pk), "--no-exclude")

    assert status == 0, err
    assert job.exclude_nodes == ["east-0"]
    # As `status` describes it on a terminal.
    assert ("Never on nodes", "east-0") in describe.fields(json.loads(described))
    assert (
        constrained[1]
        == "may run on any GPU type of any cluster, not on nodes east-0, east-1 (1 job)\n"
    )
    assert cleared[1] == "may run on any GPU type of any cluster (1 job)\n"
    assert Job.objects.get(pk=job.pk).exclude_nodes == []


def test_a_resubmission_leaves_out_a_node_no_cluster_has_any_more(alice, alpha, east):
    NodeFactory(cluster=east, name="east-0", gpu_count=8)
    gone = NodeFactory(cluster=east, name="east-9", gpu_count=8)
    job = JobFactory(tenant=alpha, owner=alice, exclude_nodes=["east-9", "east-0"],
                     state=State.FAILED)  # fmt: skip
    gone.delete()

    answer = resubmit(alice, job)

    assert answer.status_code == 201, answer.content
    assert Job.objects.get(pk=answer.json()["id"]).exclude_nodes == ["east-0"]
