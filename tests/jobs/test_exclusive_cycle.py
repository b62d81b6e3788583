"""Exclusive jobs in the live cycle: the snapshot gives the core what is exclusive, queued and
running, and the commit re-checks under the nodes' locks that an exclusive job's nodes hold
nothing else, whatever a stale snapshot decided."""

import csv
import io
import time
from datetime import UTC, datetime

import pytest

from clusters.models import Allocation
from jobs import cycle, snapshot
from jobs.commit import commit_batch
from jobs.models import Job
from jobs.placement import PLACED, place
from jobs.states import State
from tests.factories import JobFactory, NodeFactory, PriorityClassFactory
from tests.jobs.test_batch_cancel import api
from tests.jobs.test_cli import cli  # noqa: F401 (a fixture)
from tests.jobs.test_request_edit import change

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def normal(db):
    return PriorityClassFactory(name="normal", value=0)


def state_of(job: Job) -> str:
    return Job.objects.get(pk=job.pk).state


def placed_now() -> list:
    return [o for o in place(snapshot.load(time.time()).snapshot).outcomes if o.status == PLACED]


def test_it_takes_a_node_to_itself_holding_what_it_asked_for(alice, alpha, east):
    node = NodeFactory(cluster=east, gpu_count=8)
    solo = JobFactory(tenant=alpha, owner=alice, gpus=8, cpu_milli=2000, exclusive=True)
    cycle.run_cycle()
    small = JobFactory(tenant=alpha, owner=alice, gpus=0, cpu_milli=1000, memory_mb=1000)

    cycle.run_cycle()

    assert state_of(solo) == State.SCHEDULED
    assert state_of(small) == State.QUEUED
    held = Allocation.objects.active().filter(node=node)
    assert {a.attempt.job_id for a in held} == {solo.pk}
    assert sum(a.cpu_milli for a in held) == 2000


def test_work_beside_it_on_a_plain_job_is_placed_there(alice, alpha, east):
    NodeFactory(cluster=east, gpu_count=8)
    JobFactory(tenant=alpha, owner=alice, gpus=8, cpu_milli=2000)
    cycle.run_cycle()
    small = JobFactory(tenant=alpha, owner=alice, gpus=0, cpu_milli=1000, memory_mb=1000)

    cycle.run_cycle()

    assert state_of(small) == State.SCHEDULED


def test_it_waits_while_other_work_runs_on_the_node(alice, alpha, east):
    NodeFactory(cluster=east, gpu_count=8)
    JobFactory(tenant=alpha, owner=alice, gpus=0, cpu_milli=1000, memory_mb=1000)
    cycle.run_cycle()
    solo = JobFactory(tenant=alpha, owner=alice, gpus=8, cpu_milli=2000, exclusive=True)

    cycle.run_cycle()

    assert state_of(solo) == State.QUEUED
    assert Job.objects.get(pk=solo.pk).pending_reason in {"nodes_in_use", "head_of_line"}


def test_the_commit_refuses_work_on_a_node_an_exclusive_job_took_since_the_snapshot(
    alice, alpha, east
):
    NodeFactory(cluster=east, gpu_count=8)
    small = JobFactory(tenant=alpha, owner=alice, gpus=0, cpu_milli=1000, memory_mb=1000)
    stale = placed_now()
    small.held = "admin"
    small.save()
    solo = JobFactory(tenant=alpha, owner=alice, gpus=8, cpu_milli=2000, exclusive=True)
    assert commit_batch(placed_now(), datetime.now(tz=UTC)) == {solo.pk}
    small.held = ""
    small.save()

    assert commit_batch(stale, datetime.now(tz=UTC)) == set()
    assert state_of(small) == State.QUEUED


def test_the_commit_refuses_an_exclusive_job_a_node_taken_since_the_snapshot(alice, alpha, east):
    NodeFactory(cluster=east, gpu_count=8)
    solo = JobFactory(tenant=alpha, owner=alice, gpus=8, cpu_milli=2000, exclusive=True)
    stale = placed_now()
    small = JobFactory(tenant=alpha, owner=alice, gpus=0, cpu_milli=1000, memory_mb=1000)
    solo.held = "admin"
    solo.save()
    assert commit_batch(placed_now(), datetime.now(tz=UTC)) == {small.pk}
    solo.held = ""
    solo.save()

    assert commit_batch(stale, datetime.now(tz=UTC)) == set()
    assert state_of(solo) == State.QUEUED


def test_in_one_batch_work_after_an_exclusive_job_on_its_node_is_refused(alice, alpha, east):
    NodeFactory(cluster=east, gpu_count=8)
    small = JobFactory(tenant=alpha, owner=alice, gpus=0, cpu_milli=1000, memory_mb=1000)
    small_outcome = placed_now()
    small.held = "admin"
    small.save()
    solo = JobFactory(tenant=alpha, owner=alice, gpus=8, cpu_milli=2000, exclusive=True)
    solo_outcome = placed_now()
    small.held = ""
    small.save()

    assert commit_batch(solo_outcome + small_outcome, datetime.now(tz=UTC)) == {solo.pk}
    assert state_of(small) == State.QUEUED


@pytest.mark.parametrize(
    ("body", "field", "said"),
    [({"gpus": 0, "gpu_milli": 500}, "gpu_milli", "ask whole GPUs, or none"),
     ({"gpus": 3}, "gpus", "No node has exactly 3 GPUs")],
    ids=["a share", "no node of that many"],
)  # fmt: skip
def test_its_request_changes_only_to_one_a_node_could_take_whole(
    alice, alpha, east, body, field, said
):
    NodeFactory(cluster=east, gpu_count=8)
    solo = JobFactory(tenant=alpha, owner=alice, family="evaluation", gpus=8, exclusive=True)

    refused = change(alice, solo, body)
    done = change(alice, solo, {"gpus": 8, "cpu_milli": 1000})

    assert refused.status_code == 400
    assert said in refused.json()[field][0]
    assert done.status_code == 200
    assert Job.objects.get(pk=solo.pk).cpu_milli == 1000


def test_a_node_an_exclusive_job_holds_is_listed_allocated(alice, alpha, east):
    NodeFactory(cluster=east, name="gpu-0", gpu_count=8)
    NodeFactory(cluster=east, name="cpu-0", gpu_count=0, gpu_type="")
    JobFactory(tenant=alpha, owner=alice, gpus=8, cpu_milli=2000, exclusive=True)
    JobFactory(tenant=alpha, owner=alice, gpus=0, cpu_milli=1000, exclusive=True)
    cycle.run_cycle()

    listed = api(alice).get("/api/v1/nodes/").json()["nodes"]

    assert {n["name"]: n["state"] for n in listed} == {"gpu-0": "allocated", "cpu-0": "allocated"}


def test_the_line_the_cli_queue_and_the_job_csv_say_it(alice, alpha, east, client, cli):  # noqa: F811
    solo = JobFactory(tenant=alpha, owner=alice, gpus=8, exclusive=True, topology="rack")
    cycle.run_cycle()  # no node: it waits in line
    client.force_login(alice)

    (listed,) = api(alice).get("/api/v1/queue/").json()["jobs"]
    printed = cli("queue").stdout.splitlines()[-1].split()
    page = client.get("/queue/").content.decode()
    (row,) = csv.DictReader(io.StringIO(b"".join(client.get("/jobs.csv").streaming_content)
                                         .decode()))  # fmt: skip

    assert (listed["id"], listed["exclusive"], listed["topology"]) == (solo.pk, True, "rack")
    assert printed[4:6] == [str(solo.pk), "8!@rack"]
    assert '<td class="gpus">8!@rack</td>' in page
    assert (row["exclusive"], row["topology"]) == ("true", "rack")
