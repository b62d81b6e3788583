"""Why a node takes no work (Slurm's sinfo -R): a platform admin cordons or drains nodes with a
reason typed beside the node list's actions, recorded with who and when, and cleared when they
are uncordoned; every user reads it in the nodes API, the CLI's `nodes` and the clusters page,
beside the reasons the platform knows itself (an agent's silence, a window, a quarantine)."""

import pytest

from clusters.models import Node
from jobs import actions
from tests.clusters.test_drain import act
from tests.jobs.test_cli import cli  # noqa: F401 (a fixture)
from tests.jobs.test_nodes_api import NODES, client_for, fleet  # noqa: F401 (fleet: a fixture)

pytestmark = pytest.mark.django_db


def reasons(user) -> dict[str, str]:
    return {n["name"]: n["reason"] for n in client_for(user).get(NODES).json()["nodes"]}


def act_with(client, action: str, reason: str, *nodes):
    return client.post(
        "/admin/clusters/node/",
        {"action": action, "_selected_action": [n.pk for n in nodes], "reason": reason},
        follow=True,
    )


def test_a_cordon_and_a_drain_record_why_who_and_when_and_an_uncordon_clears_it(
    admin_client, alice, east
):
    a, b = (Node.objects.create(cluster=east, name=f"gpu-{i}", cpu_milli=8000, memory_mb=8000)
            for i in range(2))  # fmt: skip

    act_with(admin_client, "cordon", "flaky NCCL on this host", a)
    act_with(admin_client, "drain", "GPU 3 Xid 79", b)
    said = reasons(alice)

    a.refresh_from_db()
    assert (a.cordon_reason, a.cordoned_by) == ("flaky NCCL on this host", "admin")
    assert said["gpu-0"] == f"flaky NCCL on this host (admin, {a.cordoned_at:%Y-%m-%d %H:%M} UTC)"
    assert said["gpu-1"].startswith("GPU 3 Xid 79 (admin, ")
    act(admin_client, "uncordon", a)
    a.refresh_from_db()
    assert (a.schedulable, a.cordon_reason, a.cordoned_by, a.cordoned_at) == (True, "", "", None)
    assert reasons(alice)["gpu-0"] == ""


def test_a_reason_given_again_replaces_it_and_none_given_keeps_it(east):
    node = Node.objects.create(cluster=east, name="gpu-0", cpu_milli=8000, memory_mb=8000)
    actions.set_schedulable([node.pk], False, "root", "disk full")

    actions.set_schedulable([node.pk], False, "bob")  # cordoned already, no reason: kept
    kept = Node.objects.get(pk=node.pk).cordon_reason
    actions.drain([node.pk], "carol", reason="replacing the PSU")

    node.refresh_from_db()
    assert kept == "disk full"
    assert (node.cordon_reason, node.cordoned_by) == ("replacing the PSU", "carol")


def test_the_platforms_own_reasons_are_given_for_the_other_states(alice, fleet):  # noqa: F811
    _, node = fleet
    Node.objects.filter(pk=node["quarantined"].pk).update(
        quarantine_reason="4 attempts failed on it in 10 min"
    )

    said = reasons(alice)

    assert said["down"] == "its agent does not report it ready"
    assert said["maintenance"].startswith("in a maintenance window until ")
    assert said["quarantined"] == "4 attempts failed on it in 10 min"
    assert said["drained"] == "cordoned, no reason given"  # cordoned before reasons were kept
    assert {said[name] for name in ("idle", "mixed", "allocated")} == {""}


def test_the_cli_and_the_clusters_page_say_it(cli, client, alice, east):  # noqa: F811
    node = Node.objects.create(cluster=east, name="gpu-0", cpu_milli=8000, memory_mb=8000)
    actions.set_schedulable([node.pk], False, "root", "flaky NCCL")
    client.force_login(alice)

    listed = cli("nodes")
    page = client.get("/clusters/").text

    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[0].split()[-1] == "reason"
    assert "flaky NCCL (root, " in listed.stdout.splitlines()[1]
    assert '<td class="reason">flaky NCCL (root, ' in page


def test_the_agents_word_on_a_node_not_ready_is_given_and_a_node_it_drops_says_so(
    agent, alice, east
):
    node = {"cpu_milli": 64000, "memory_mb": 512000, "gpu_type": "A100", "gpu_count": 8}
    tainted = "tainted dedicated:NoExecute, which the agent's pods do not tolerate"
    nodes = [{**node, "name": "gpu-0", "ready": False, "not_ready": tainted},
             {**node, "name": "gpu-1"}, {**node, "name": "gpu-2"}]  # fmt: skip
    first = agent.post("/api/v1/agent/east/inventory/", {"nodes": nodes}, format="json")
    agent.post("/api/v1/agent/east/inventory/", {"nodes": nodes[:2]}, format="json")

    said = reasons(alice)

    assert first.status_code == 200, first.content
    assert said["gpu-0"] == f"its agent does not report it ready: {tainted}"
    assert said["gpu-1"] == ""
    assert said["gpu-2"] == "its agent does not report it ready: its agent no longer lists it"


def test_a_node_ready_again_forgets_why_it_was_not(agent, alice, east):
    node = {"name": "gpu-0", "cpu_milli": 64000, "memory_mb": 512000}
    down = {**node, "ready": False, "not_ready": "cordoned in Kubernetes (spec.unschedulable)"}
    agent.post("/api/v1/agent/east/inventory/", {"nodes": [down]}, format="json")
    agent.post("/api/v1/agent/east/inventory/", {"nodes": [node]}, format="json")

    assert Node.objects.get(name="gpu-0").not_ready_reason == ""
    assert reasons(alice)["gpu-0"] == ""
