"""Node features (Slurm's node Features and --constraint): the features each node offers, as its
agent reports them, and the jobs that require some, through the inventory API, the real cycle
and commit, the submission and its change, the portal, the nodes API and the CLI."""

# ruff: noqa: F811 (the CLI tests' fixture, imported, is a test's argument)

import json

import pytest
from rest_framework.test import APIClient

from clusters.backends.local import parse_inventory
from clusters.models import Node
from jobs import commit, cycle
from jobs.models import Job, JobEvent
from jobs.states import State
from tests.clusters.test_agent_api import post
from tests.factories import JobFactory, NodeFactory, PriorityClassFactory
from tests.jobs.test_cli import cli  # noqa: F401 (a fixture)
from tests.jobs.test_notify_start import FORM, SPEC

pytestmark = pytest.mark.django_db


def inventory(features) -> dict:
    return {"nodes": [{"name": "east-0", "cpu_milli": 64000, "memory_mb": 512000,
                       "gpu_type": "A100", "gpu_count": 8, "features": features}]}  # fmt: skip


def test_an_agent_reports_what_each_node_offers(agent):
    response = post(agent, "east", "inventory", inventory(["nvme", "ib"]))
    again = post(agent, "east", "inventory", inventory([]))  # taken away

    assert response.status_code == again.status_code == 200
    assert Node.objects.get(name="east-0").features == []


@pytest.mark.parametrize(
    ("features", "why"),
    [(["IB"], "'IB' is no feature name"), (["ib", "ib"], "Feature 'ib' is named twice.")],
)
def test_an_inventory_naming_a_feature_no_job_could_require_is_refused(agent, features, why):
    response = post(agent, "east", "inventory", inventory(features))

    assert response.status_code == 400
    assert why in str(response.json()["nodes"]["0"]["features"])
    assert not Node.objects.exists()


def test_the_features_reported_are_kept_in_order(agent):
    post(agent, "east", "inventory", inventory(["nvme", "ib"]))

    assert Node.objects.get(name="east-0").features == ["ib", "nvme"]


def test_a_local_inventory_gives_its_nodes_features():
    nodes = parse_inventory("1x8xA100@nvme+ib,1x4xT4", "east")

    assert [node.features for node in nodes] == [("ib", "nvme"), ()]
    with pytest.raises(ValueError, match="'IB' is no feature"):
        parse_inventory("1x8xA100@IB", "east")


@pytest.fixture
def ib(east):
    """East's node with InfiniBand, beside a plain one."""
    NodeFactory(cluster=east, name="plain")
    return NodeFactory(cluster=east, name="ib-0", features=["ib"])


def test_the_cycle_places_a_job_only_on_a_node_that_offers_its_features(alpha, alice, ib):
    jobs = [JobFactory(tenant=alpha, owner=alice, gpus=8, features=["ib"]) for _ in range(2)]

    cycle.run_cycle()

    first, second = (Job.objects.get(pk=job.pk) for job in jobs)
    assert first.state == State.SCHEDULED
    assert [a.node.name for a in first.attempts.get().allocations.all()] == ["ib-0"] * 8
    assert second.state == State.QUEUED  # the plain node is free, but not for it
    assert second.pending_reason in {"lacking_features", "head_of_line"}


def test_a_job_requiring_what_no_node_offers_says_so(alpha, alice, ib):
    job = JobFactory(tenant=alpha, owner=alice, features=["nvme"])

    cycle.run_cycle()

    assert Job.objects.get(pk=job.pk).pending_reason == "no_node_with_features"


def test_the_commit_keeps_a_job_off_a_node_that_no_longer_offers_its_features():
    node = commit.NodeState(0, 0, 8, True, 1, name="ib-0", features=frozenset({"nvme"}))
    claimed = _claimed(features=frozenset({"ib"}))
    outcome = _outcome_on(node_id=7)

    assert not commit.allowed_on(outcome, claimed, {7: node})
    assert commit.allowed_on(outcome, _claimed(), {7: node})


def _claimed(**fields):
    from jobs.tenant_limits import Claimed

    return Claimed("1", "1", None, None, 3600, 1, (1000, 1000, 1, 1000), **fields)


def _outcome_on(node_id: int):
    from jobs.placement.decision import Outcome, WorkerPlacement

    worker = WorkerPlacement(0, "1", str(node_id), "A100", (0,), 1000, 1000, 1000)
    return Outcome("1", "placed", workers=(worker,))


def test_the_api_takes_them_gives_them_back_and_refuses_what_no_node_offers(alpha, alice, ib):
    PriorityClassFactory(name="normal")
    client = APIClient()
    client.force_authenticate(alice)

    job = client.post("/api/v1/jobs/", {**SPEC, "features": ["ib"]}, format="json").json()
    spec = client.get(f"/api/v1/jobs/{job['id']}/spec/").json()
    unknown = client.post("/api/v1/jobs/", {**SPEC, "features": ["nvme"]}, format="json")
    twice = client.post("/api/v1/jobs/", {**SPEC, "features": ["ib", "ib"]}, format="json")

    assert job["features"] == spec["features"] == ["ib"]
    assert unknown.status_code == twice.status_code == 400
    assert unknown.json() == {"features": ["No node offers feature 'nvme'."]}
    assert twice.json() == {"features": ["Feature 'ib' is named twice."]}
    assert Job.objects.count() == 1


def test_a_queued_jobs_features_change_saying_where_it_may_run(alpha, alice, ib):
    job = JobFactory(tenant=alpha, owner=alice)
    client = APIClient()
    client.force_authenticate(alice)

    answer = client.post(f"/api/v1/jobs/{job.pk}/constraints/", {"features": ["ib"]},
                         format="json")  # fmt: skip

    assert answer.status_code == 200, answer.json()
    assert answer.json()["features"] == ["ib"]
    assert Job.objects.get(pk=job.pk).features == ["ib"]
    event = JobEvent.objects.filter(job=job).last()
    assert event.reason.startswith("may run on any GPU type of any cluster, on nodes with ib")


def test_the_submit_form_takes_them_and_the_job_page_says_them(alpha, alice, client, ib):
    PriorityClassFactory(name="normal")
    client.force_login(alice)
    client.post("/jobs/new/", {**FORM, "features": "ib"})
    job = Job.objects.get(name="x")
    page = client.get(f"/jobs/{job.pk}/").content.decode()

    assert job.features == ["ib"]
    assert '<dt>Only on nodes with</dt><dd id="features">ib</dd>' in page


def test_the_nodes_api_and_the_clusters_page_say_what_each_node_offers(alpha, alice, client, ib):
    api = APIClient()
    api.force_authenticate(alice)
    client.force_login(alice)

    nodes = {n["name"]: n["features"] for n in api.get("/api/v1/nodes/").json()["nodes"]}
    page = client.get("/clusters/").content.decode()

    assert nodes == {"plain": [], "ib-0": ["ib"]}
    assert '<td class="features">ib</td>' in page


@pytest.mark.django_db(transaction=True)
def test_the_cli_submits_them_as_slurm_writes_them_and_lists_them_on_nodes(cli, east):
    NodeFactory(cluster=east, name="ib-0", features=["ib", "nvme"])

    done = cli("submit", "-", "--constraint", "ib&nvme", stdin=json.dumps(SPEC))
    listed = cli("nodes")
    job = Job.objects.get(name="told")

    assert done.returncode == 0, done.stderr
    assert job.features == ["ib", "nvme"]
    header, row = listed.stdout.splitlines()
    assert row[header.index("features") :].split()[0] == "ib,nvme"
