"""Draining nodes for maintenance: cordoned, their work stopped as a preemption, requeued."""

import re

import pytest
from django.contrib.admin.models import LogEntry

from clusters.backends import base
from clusters.models import Allocation, Node
from jobs import actions, cycle
from jobs.models import Attempt
from jobs.states import State
from tests.clusters.test_agent_api import post, report
from tests.factories import JobFactory, NodeFactory

pytestmark = pytest.mark.django_db
Outcome = Attempt.Outcome


def act(client, action, *nodes):
    return client.post(
        "/admin/clusters/node/",
        {"action": action, "_selected_action": [n.pk for n in nodes]},
        follow=True,
    )


def test_draining_a_node_cordons_it_and_stops_the_gang_on_it_as_a_preemption(admin_client, gang):
    attempt = gang.attempts.get()
    east_0, east_1 = Node.objects.order_by("name")

    page = act(admin_client, "drain", east_0)

    east_0.refresh_from_db(), east_1.refresh_from_db(), attempt.refresh_from_db()
    assert (east_0.schedulable, east_1.schedulable) == (False, True)
    assert attempt.stop_requested_at is not None
    assert (attempt.stop_reason, attempt.reason) == (
        Outcome.PREEMPTED,
        "node drained by admin; requeued to run elsewhere",
    )
    assert "1 attempt asked to stop" in page.text


def test_drained_work_is_requeued_without_using_a_retry_and_runs_off_the_drained_node(
    agent, gang, east
):
    attempt = gang.attempts.get()
    post(agent, "east", "heartbeat", {"workers": report(attempt, base.RUNNING, base.RUNNING)})
    NodeFactory(cluster=east, name="east-2", gpu_count=8)
    drained = Node.objects.get(name="east-0")

    actions.drain([drained.pk], "root")
    post(agent, "east", "heartbeat", {"workers": report(attempt, base.STOPPED, base.STOPPED,
                                                         codes=[-15, -15])})  # fmt: skip
    cycle.run_cycle()

    gang.refresh_from_db(), attempt.refresh_from_db()
    assert (attempt.outcome, gang.retries_used) == (Outcome.PREEMPTED, 0)
    assert gang.state == State.SCHEDULED
    again = gang.attempts.get(number=2)
    used = set(again.allocations.values_list("node__name", flat=True))
    assert used == {"east-1", "east-2"}


def test_a_node_without_work_is_only_cordoned(gang, east):
    idle = NodeFactory(cluster=east, name="east-9", gpu_count=8)

    stopped = actions.drain([idle.pk], "root")

    idle.refresh_from_db()
    assert (stopped, idle.schedulable) == (0, False)
    assert gang.attempts.get().stop_requested_at is None


def test_work_already_stopping_keeps_its_reason(gang):
    actions.cancel(gang)

    stopped = actions.drain(list(Node.objects.values_list("pk", flat=True)), "root")

    attempt = gang.attempts.get()
    assert (stopped, attempt.stop_reason) == (0, Outcome.CANCELED)


def test_the_node_list_counts_the_workers_running_on_each_node(admin_client, gang, east):
    NodeFactory(cluster=east, name="east-2", gpu_count=8)
    JobFactory(gpus=2), JobFactory(gpus=2)  # beside the gang's two workers
    cycle.run_cycle()
    per_node = {n.name: 0 for n in Node.objects.all()}
    for name in Allocation.objects.active().filter(slot=0).values_list("node__name", flat=True):
        per_node[name] += 1

    page = admin_client.get("/admin/clusters/node/")

    rows = re.findall(r'<th class="field-name"><a [^>]*>([^<]+)</a></th>.*?'
                      r'<td class="field-workers">(\d+)</td>', page.text, re.S)  # fmt: skip
    assert {name: int(n) for name, n in rows} == per_node
    assert sum(per_node.values()) == 4


def test_cordons_drains_and_uncordons_are_kept_in_each_nodes_admin_history(admin_client, east):
    a, b, c = (NodeFactory(cluster=east, name=f"east-{i}") for i in range(3))
    Node.objects.filter(pk=b.pk).update(schedulable=False)  # cordoned already: not changed

    act(admin_client, "cordon", a, b)
    act(admin_client, "drain", c)
    act(admin_client, "uncordon", a)

    entries = LogEntry.objects.order_by("pk")
    assert [(e.object_id, e.get_change_message(), e.user.username) for e in entries] == [
        (str(a.pk), "Cordoned", "admin"),
        (str(c.pk), "Drained: cordoned, the work on it asked to stop", "admin"),
        (str(a.pk), "Uncordoned", "admin"),
    ]
    history = admin_client.get(f"/admin/clusters/node/{a.pk}/history/")
    assert "Cordoned" in history.text and "Uncordoned" in history.text
