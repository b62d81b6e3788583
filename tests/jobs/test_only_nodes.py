"""The nodes a job runs on alone (`only_nodes`, Kubernetes' node affinity on the hostname: a
job to reproduce a fault on one machine, or to measure one): taken by a submission, checked
against the nodes the clusters have and against the nodes it excludes, changed while the job
waits (the constraints change), kept by a copy, and held by the cycle and its commit."""

import time
from datetime import UTC, datetime

import pytest

from jobs import actions, cycle, snapshot
from jobs.commit import commit_batch
from jobs.models import Job, JobEvent
from jobs.placement import PLACED, place
from jobs.placement.decision import REASONS
from jobs.serializers import submission_of
from jobs.states import State
from tests.factories import ClusterFactory, JobFactory, NodeFactory
from tests.jobs.test_constraints_edit import change
from tests.jobs.test_exclude_nodes import nodes_of, normal, submit  # noqa: F401 (a fixture)
from tests.jobs.test_resubmit import resubmit

pytestmark = pytest.mark.django_db


@pytest.fixture
def three(east):
    return [NodeFactory(cluster=east, name=f"east-{i}", gpu_count=8) for i in range(3)]


def test_a_job_starts_only_on_a_node_it_names(alice, alpha, three):
    answer = submit(alice, only_nodes=["east-2"])
    cycle.run_cycle()

    assert answer.status_code == 201, answer.content
    assert answer.json()["only_nodes"] == ["east-2"]
    assert nodes_of(Job.objects.get(pk=answer.json()["id"])) == {"east-2"}


def test_a_gang_takes_the_nodes_it_names_and_no_other(alice, alpha, three):
    job = Job.objects.get(pk=submit(alice, workers=2, only_nodes=["east-0", "east-2"]).json()["id"])
    cycle.run_cycle()

    assert nodes_of(job) == {"east-0", "east-2"}


def test_it_waits_while_its_nodes_are_busy_and_then_starts_there(alice, alpha, three):
    busy = JobFactory(tenant=alpha, owner=alice, gpus=8, only_nodes=["east-1"])
    cycle.run_cycle()
    job = Job.objects.get(pk=submit(alice, only_nodes=["east-1"]).json()["id"])

    cycle.run_cycle()
    waiting = Job.objects.get(pk=job.pk)
    answer = change(alice, job, {"only_nodes": ["east-1", "east-0"]})
    cycle.run_cycle()

    assert nodes_of(busy) == {"east-1"}
    assert waiting.state == State.QUEUED  # east-0 and east-2 are free
    assert answer.status_code == 200 and answer.json()["only_nodes"] == ["east-1", "east-0"]
    assert nodes_of(job) == {"east-0"}
    assert JobEvent.objects.filter(
        job=job, reason="may run on any GPU type of any cluster, only on nodes east-1, east-0 "
        "by alice"
    ).exists()  # fmt: skip


def test_one_that_only_other_nodes_could_take_says_so(alice, alpha, east):
    NodeFactory(cluster=east, name="small", gpu_count=2)
    NodeFactory(cluster=east, name="large", gpu_count=8)

    job = Job.objects.get(pk=submit(alice, only_nodes=["small"]).json()["id"])
    cycle.run_cycle()

    waiting = Job.objects.get(pk=job.pk)
    assert (waiting.state, waiting.pending_reason) == (State.QUEUED, "excluded_nodes")
    assert waiting.pending_message.endswith(REASONS["excluded_nodes"])


def test_one_whose_named_nodes_are_all_gone_says_so_until_it_names_others(alice, alpha, three):
    job = JobFactory(tenant=alpha, owner=alice, gpus=8, only_nodes=["east-8", "east-9"])
    cycle.run_cycle()
    waiting = Job.objects.get(pk=job.pk)

    change(alice, job, {"only_nodes": ["east-2"]})
    cycle.run_cycle()

    assert (waiting.pending_reason, waiting.eligible_at) == ("named_nodes_gone", None)
    assert waiting.pending_message.startswith("None of the nodes it names to run on")
    assert nodes_of(job) == {"east-2"}
    assert Job.objects.get(pk=job.pk).eligible_at is not None


def test_an_empty_list_takes_any_node_again(alice, alpha, three):
    job = JobFactory(tenant=alpha, owner=alice, gpus=8, only_nodes=["east-9"])

    answer = change(alice, job, {"only_nodes": []})
    cycle.run_cycle()

    assert answer.status_code == 200, answer.content
    assert Job.objects.get(pk=job.pk).state == State.SCHEDULED


def test_a_name_stands_for_the_node_of_that_name_in_every_cluster(alice, alpha, east):
    west = ClusterFactory(name="west")
    NodeFactory(cluster=east, name="gpu-0", gpu_count=8)
    NodeFactory(cluster=west, name="gpu-1", gpu_count=8)
    taken = JobFactory(tenant=alpha, owner=alice, gpus=8, only_nodes=["gpu-0"])
    cycle.run_cycle()
    NodeFactory(cluster=west, name="gpu-0", gpu_count=8)

    job = Job.objects.get(pk=submit(alice, only_nodes=["gpu-0"]).json()["id"])
    cycle.run_cycle()

    assert nodes_of(taken) == nodes_of(job) == {"gpu-0"}
    (allocation,) = (
        Job.objects.get(pk=job.pk)
        .attempts.get()
        .allocations.values_list("node__cluster__name", flat=True)
        .distinct()
    )
    assert allocation == "west"


@pytest.mark.parametrize(
    ("only", "said"),
    [
        (["east-9"], "No cluster has a node named 'east-9'."),
        (["east-0", "east-0"], "Node 'east-0' is named twice."),
        ("east-0", 'Expected a list of items but got type "str".'),
        (["n"] * 101, "Ensure this field has no more than 100 elements."),
    ],
    ids=["unknown", "twice", "not a list", "too many"],
)
def test_what_names_no_node_once_is_a_400_naming_only_nodes(alice, alpha, three, only, said):
    job = JobFactory(tenant=alpha, owner=alice)

    submitted = submit(alice, only_nodes=only)
    changed = change(alice, job, {"only_nodes": only})

    for answer in (submitted, changed):
        assert answer.status_code == 400
        assert said in str(answer.json()["only_nodes"])
    assert Job.objects.filter(name="train").count() == 0
    assert Job.objects.get(pk=job.pk).only_nodes == []


def test_a_node_both_excluded_and_named_is_a_400_naming_only_nodes(alice, alpha, three):
    job = JobFactory(tenant=alpha, owner=alice, exclude_nodes=["east-1"])
    said = "'east-1' is in exclude_nodes too: a node it runs on is not excluded."

    submitted = submit(alice, only_nodes=["east-0", "east-1"], exclude_nodes=["east-1"])
    changed = change(alice, job, {"only_nodes": ["east-1"]})

    assert (submitted.status_code, submitted.json()) == (400, {"only_nodes": [said]})
    assert (changed.status_code, changed.json()) == (400, {"only_nodes": [said]})
    assert Job.objects.get(pk=job.pk).only_nodes == []


def test_a_node_named_after_the_snapshot_decides_where_it_starts(alice, alpha, three):
    job = JobFactory(tenant=alpha, owner=alice, gpus=2)
    placed = [o for o in place(snapshot.load(time.time()).snapshot).outcomes if o.status == PLACED]
    (worker,) = placed[0].workers
    other = next(node.name for node in three if str(node.pk) != worker.node_id)

    actions.change_constraints(job, {"only_nodes": [other]}, "alice")

    assert commit_batch(placed, datetime.now(tz=UTC)) == set()
    assert Job.objects.get(pk=job.pk).state == State.QUEUED


def test_a_resubmission_leaves_out_the_nodes_gone_while_one_it_names_is_there(alice, alpha, three):
    job = JobFactory(tenant=alpha, owner=alice, only_nodes=["east-1", "east-9"], state="failed")
    gone = JobFactory(tenant=alpha, owner=alice, only_nodes=["east-8", "east-9"], state="failed")

    again = resubmit(alice, job)
    refused = resubmit(alice, gone)

    assert again.status_code == 201, again.content
    assert Job.objects.get(pk=again.json()["id"]).only_nodes == ["east-1"]
    assert refused.status_code == 400
    assert "only_nodes" in refused.json()


def test_a_copy_and_a_resubmission_keep_them(alice, alpha, three):
    job = JobFactory(tenant=alpha, owner=alice, only_nodes=["east-1"], state=State.FAILED)

    again = resubmit(alice, job)

    assert submission_of(job)["only_nodes"] == ["east-1"]
    assert again.status_code == 201, again.content
    assert Job.objects.get(pk=again.json()["id"]).only_nodes == ["east-1"]
