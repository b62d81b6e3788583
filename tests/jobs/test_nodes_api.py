"""GET /api/v1/nodes/ and GET /api/v1/clusters/: every node's state as Slurm's sinfo gives it,
each cluster's nodes counted by state and its GPUs by type, to any user, naming no team and no
job, in a few queries whatever the number of nodes; and the CLI's `nodes` and `clusters`."""

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from clusters.models import Allocation, Booking, Cluster, MaintenanceWindow
from tests.factories import AttemptFactory, ClusterFactory, NodeFactory
from tests.jobs.test_cli import cli  # noqa: F401

pytestmark = pytest.mark.django_db

NODES, CLUSTERS = "/api/v1/nodes/", "/api/v1/clusters/"


def client_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def allocate(node, gpus=0, gpu_milli=1000, cpu_milli=4000, memory_mb=1000):
    """One worker holding `gpus` GPUs of the node (each `gpu_milli` of it), or none."""
    attempt = AttemptFactory(cluster=node.cluster)
    for slot in range(max(gpus, 1)):
        Allocation.objects.create(
            attempt=attempt, slot=slot, node=node, gpu_index=slot if gpus else None,
            gpu_milli=gpu_milli if gpus else 0, cpu_milli=cpu_milli if slot == 0 else 0,
            memory_mb=memory_mb if slot == 0 else 0,
        )  # fmt: skip


def window(model, cluster, nodes, starts_in=timedelta(hours=-1), **fields):
    start = timezone.now() + starts_in
    made = model.objects.create(
        cluster=cluster, starts_at=start, ends_at=start + timedelta(hours=4), **fields
    )
    made.nodes.set(nodes)
    return made


@pytest.fixture
def fleet(db):
    """A node in each state, named after it."""
    east = ClusterFactory(name="east")
    node = {name: NodeFactory(cluster=east, name=name) for name in (
        "idle", "mixed", "allocated", "drained", "draining", "quarantined", "down",
        "maintenance", "booked", "ours", "cpu-full",
    )}  # fmt: skip
    allocate(node["mixed"], gpus=1, gpu_milli=500)
    allocate(node["allocated"], gpus=8)
    allocate(node["draining"], gpus=2)
    node["cpu-full"].gpu_count, node["cpu-full"].gpu_type = 0, ""
    node["cpu-full"].save()
    allocate(node["cpu-full"], cpu_milli=96_000)
    for name in ("drained", "draining"):
        node[name].schedulable = False
        node[name].save()
    node["quarantined"].schedulable, node["quarantined"].quarantined_at = False, timezone.now()
    node["quarantined"].save()
    node["down"].healthy = False
    node["down"].save()
    window(MaintenanceWindow, east, [node["maintenance"]], reason="firmware")
    return east, node


def states(user, **params) -> dict[str, str]:
    response = client_for(user).get(NODES, params)
    assert response.status_code == 200
    return {n["name"]: n["state"] for n in response.json()["nodes"]}


def test_each_node_says_its_state_as_sinfo_does(alice, alpha, gamma, fleet):
    cluster, node = fleet
    window(Booking, cluster, [node["booked"]], tenant=gamma)
    window(Booking, cluster, [node["ours"]], tenant=alpha)

    assert states(alice) == {
        "idle": "idle", "mixed": "mixed", "allocated": "allocated", "drained": "drained",
        "draining": "draining", "quarantined": "quarantined", "down": "down",
        "maintenance": "maintenance", "booked": "booked", "ours": "idle",
        "cpu-full": "allocated",
    }  # fmt: skip


def test_a_node_says_what_of_it_is_allocated_and_its_window(alice, fleet):
    cluster, node = fleet
    window(MaintenanceWindow, cluster, [node["idle"]], starts_in=timedelta(hours=2))

    shown = {n["name"]: n for n in client_for(alice).get(NODES).json()["nodes"]}

    mixed = shown["mixed"]
    assert (mixed["gpus"], mixed["gpus_allocated"], mixed["gpus_idle"]) == (8, 0.5, 7)
    assert (mixed["cpu_milli"], mixed["cpu_milli_allocated"]) == (96_000, 4000)
    assert (mixed["memory_mb_allocated"], mixed["window"]) == (1000, None)
    assert shown["idle"]["state"] == "idle"  # its window has not begun
    assert shown["idle"]["window"]["kind"] == "maintenance"
    assert shown["maintenance"]["window"]["yours"] is False


def test_a_booking_says_only_whether_it_is_for_one_of_your_teams(alice, charlie, alpha, fleet):
    cluster, node = fleet
    window(Booking, cluster, [node["booked"]], tenant=alpha, reason="alpha's launch")

    for_alice = client_for(alice).get(NODES, {"state": "idle"}).json()["nodes"]
    for_charlie = client_for(charlie).get(NODES)

    assert next(n for n in for_alice if n["name"] == "booked")["window"]["yours"] is True
    booked = next(n for n in for_charlie.json()["nodes"] if n["name"] == "booked")
    assert (booked["state"], booked["window"]["yours"]) == ("booked", False)
    assert "alpha" not in for_charlie.content.decode().lower()


def test_a_cluster_counts_its_nodes_by_state_and_the_idle_gpus_your_work_could_start_on(
    alice, charlie, gamma, fleet
):
    cluster, node = fleet
    window(Booking, cluster, [node["booked"]], tenant=gamma)
    ClusterFactory(name="west", health=Cluster.Health.UNHEALTHY)

    mine = client_for(alice).get(CLUSTERS).json()["clusters"]
    theirs = client_for(charlie).get(CLUSTERS).json()["clusters"]

    east_, west = mine
    assert (east_["name"], east_["health"], west["name"], west["health"]) == (
        "east", "healthy", "west", "unhealthy")  # fmt: skip
    assert east_["nodes"] == {
        "down": 1, "maintenance": 1, "quarantined": 1, "drained": 1, "draining": 1,
        "booked": 1, "allocated": 2, "mixed": 1, "idle": 2,
    }  # fmt: skip
    # 10 GPU nodes of 8; idle for alice: the idle node, ours (no booking here) and 7 of mixed.
    assert east_["gpus"] == [
        {"gpu_type": "A100", "total": 80, "allocated": 10.5, "idle_for_you": 23}
    ]
    # gamma's booked node takes charlie's work: its 8 GPUs are idle for charlie.
    assert theirs[0]["nodes"]["booked"] == 0 and theirs[0]["nodes"]["idle"] == 3
    assert theirs[0]["gpus"][0]["idle_for_you"] == 31
    assert west["nodes"] == dict.fromkeys(west["nodes"], 0) and west["gpus"] == []


def test_the_nodes_of_a_silent_clusters_agent_are_down(alice, fleet):
    cluster, _ = fleet
    Cluster.objects.filter(pk=cluster.pk).update(health=Cluster.Health.UNHEALTHY)

    assert set(states(alice).values()) == {"down"}


def test_it_narrows_by_cluster_gpu_type_and_state(alice, fleet):
    NodeFactory(cluster=ClusterFactory(name="west"), name="w1", gpu_type="H100")

    assert states(alice, cluster="west") == {"w1": "idle"}
    assert states(alice, gpu_type="H100") == {"w1": "idle"}
    assert states(alice, state="draining", cluster="east") == {"draining": "draining"}


@pytest.mark.parametrize(("field", "value"), [("state", "busy"), ("cluster", "nowhere")])
def test_an_unknown_state_or_cluster_is_refused_naming_it(alice, fleet, field, value):
    response = client_for(alice).get(NODES, {field: value})

    assert response.status_code == 400
    assert list(response.json()) == [field]


@pytest.mark.parametrize("url", [NODES, CLUSTERS])
def test_it_asks_who_you_are(url):
    assert APIClient().get(url).status_code in (401, 403)


@pytest.mark.parametrize("url", [NODES, CLUSTERS])
def test_it_takes_as_many_queries_for_thirty_nodes_as_for_three(alice, url):
    def queries(nodes: int) -> int:
        cluster = ClusterFactory()
        for _ in range(nodes):
            allocate(NodeFactory(cluster=cluster), gpus=1)
        window(MaintenanceWindow, cluster, [])
        with CaptureQueriesContext(connection) as captured:
            assert client_for(alice).get(url).status_code == 200
        return len(captured)

    assert queries(3) == queries(30)


def test_the_cli_lists_the_clusters_and_their_nodes(cli, fleet):  # noqa: F811
    clusters = cli("clusters")
    nodes = cli("nodes", "--state", "mixed")
    refused = cli("nodes", "--state", "busy")

    assert clusters.returncode == 0, clusters.stderr
    assert clusters.stdout.split("\n")[1].split() == [
        "east", "healthy", "11", "3", "1", "2", "5", "A100", "80", "10.5", "31", "0",
        "no"]  # fmt: skip
    assert nodes.returncode == 0, nodes.stderr
    assert [line.split()[:4] for line in nodes.stdout.splitlines()] == [
        ["cluster", "node", "state", "gpu"], ["east", "mixed", "mixed", "A100"]]  # fmt: skip
    assert refused.returncode == 1 and "state" in refused.stderr


def test_the_portal_page_lists_the_clusters_and_the_nodes_asked_for(client, alice, fleet):
    client.force_login(alice)

    page = client.get("/clusters/", {"state": "draining"}).content.decode()
    refused = client.get("/clusters/", {"cluster": "nowhere"})

    clusters = page[page.index('id="clusters"') : page.index("</table>")]
    assert "<td>east</td><td>healthy</td><td>1</td>" in clusters  # one down
    assert "<td>A100</td><td>80</td><td>10.50</td><td>31</td><td>0</td>" in clusters
    nodes = page[page.index('id="nodes"') :]
    assert ">draining</td>" in nodes and ">mixed</td>" not in nodes
    assert "<td>2 of 8</td>" in nodes
    assert refused.status_code == 400
    assert "No cluster is named &#x27;nowhere&#x27;." in refused.content.decode()


def test_the_portal_pages_node_filter_offers_every_cluster_and_gpu_type(client, alice, fleet):
    client.force_login(alice)

    page = client.get("/clusters/", {"cluster": "nowhere"}).content.decode()

    clusters = re.search(r'<select name="cluster".*?</select>', page, re.S).group(0)
    kinds = re.search(r'<select name="gpu_type".*?</select>', page, re.S).group(0)
    assert re.findall(r'<option value="([^"]*)"', clusters) == ["", "east", "nowhere"]
    assert '<option value="nowhere" selected>' in clusters  # what was asked, shown
    assert re.findall(r'<option value="([^"]*)"', kinds) == ["", "A100"]
