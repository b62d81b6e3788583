"""Maintenance windows in the live scheduler: the snapshot gives each node its next window, the
cycle keeps work that would run into it off the node, and the sweep stops what is still there
when the window begins."""

from datetime import timedelta

import pytest
from django.utils import timezone

from clusters.models import MaintenanceWindow, Node
from jobs import cycle, janitor, snapshot
from jobs.models import Attempt
from jobs.states import State
from tests.factories import ClusterFactory, JobFactory, NodeFactory

pytestmark = pytest.mark.django_db
HOUR = timedelta(hours=1)


def window(cluster, start, end, *nodes, reason=""):
    planned = MaintenanceWindow.objects.create(
        cluster=cluster, starts_at=start, ends_at=end, reason=reason
    )
    planned.nodes.set(nodes)
    return planned


def by_name(loaded):
    return {n.name: n for n in loaded.snapshot.nodes}


def test_the_snapshot_gives_each_node_its_next_window(east):
    a, b = (NodeFactory(cluster=east, name=name, gpu_count=8) for name in ("a", "b"))
    now = timezone.now()
    window(east, now + HOUR, now + 3 * HOUR, a)
    window(east, now + 2 * HOUR, now + 4 * HOUR, a)  # overlaps the first: one longer window
    window(east, now + 10 * HOUR, now + 11 * HOUR, a)  # after it: the next one
    window(east, now - 3 * HOUR, now - HOUR, b)  # ended

    nodes = by_name(snapshot.load(now.timestamp()))

    assert (nodes["a"].closes_at, nodes["a"].opens_at) == (
        (now + HOUR).timestamp(),
        (now + 4 * HOUR).timestamp(),
    )
    assert (nodes["b"].closes_at, nodes["b"].opens_at) == (None, None)


def test_a_window_without_nodes_takes_out_every_node_of_its_cluster(east):
    west = ClusterFactory(name="west")
    for cluster, name in ((east, "e0"), (east, "e1"), (west, "w0")):
        NodeFactory(cluster=cluster, name=name, gpu_count=8)
    now = timezone.now()
    window(east, now - HOUR, now + HOUR)

    nodes = by_name(snapshot.load(now.timestamp()))

    assert {name for name, n in nodes.items() if n.closes_at is not None} == {"e0", "e1"}


def test_running_work_is_expected_gone_by_its_nodes_window(east, settings):
    node = NodeFactory(cluster=east, name="a", gpu_count=8)
    job = JobFactory(gpus=8, max_runtime_s=10 * 3600)
    cycle.run_cycle()
    assert job.attempts.get().allocations.filter(node=node).exists()
    now = timezone.now()
    window(east, now + HOUR, now + 2 * HOUR, node)

    (running,) = snapshot.load(now.timestamp()).snapshot.running

    grace = 2 * settings.MLSCHED_STOP_GRACE_S
    assert running.expected_end == pytest.approx((now + HOUR).timestamp() + grace)


def test_the_cycle_places_only_work_that_ends_before_the_window(east):
    node = NodeFactory(cluster=east, name="a", gpu_count=8)
    now = timezone.now()
    window(east, now + 2 * HOUR, now + 5 * HOUR, node)
    long = JobFactory(gpus=4, max_runtime_s=3 * 3600, name="long")
    short = JobFactory(gpus=4, max_runtime_s=3600, name="short")

    cycle.run_cycle(now.timestamp())

    long.refresh_from_db(), short.refresh_from_db()
    assert short.state == State.SCHEDULED
    assert long.state == State.QUEUED
    assert long.pending_reason == "maintenance"
    assert long.estimated_start == now + 5 * HOUR


def test_a_job_waiting_for_the_window_is_told_so(east):
    node = NodeFactory(cluster=east, name="a", gpu_count=8)
    now = timezone.now()
    window(east, now - HOUR, now + 2 * HOUR, node)
    first = JobFactory(gpus=8, name="first", priority=10)
    second = JobFactory(gpus=8, name="second")

    cycle.run_cycle(now.timestamp())

    first.refresh_from_db(), second.refresh_from_db()
    assert (first.state, second.state) == (State.QUEUED, State.QUEUED)
    assert second.pending_reason == "maintenance"
    assert "maintenance window" in second.pending_message
    assert second.estimated_start == now + 2 * HOUR


def test_the_sweep_stops_work_on_a_node_whose_window_has_begun(east):
    inside = NodeFactory(cluster=east, name="inside", gpu_count=1)
    outside = NodeFactory(cluster=east, name="outside", gpu_count=1)
    jobs = [JobFactory(gpus=1) for _ in range(2)]
    cycle.run_cycle()
    now = timezone.now()
    window(east, now - timedelta(seconds=5), now + HOUR, inside, reason="BIOS update")

    stopped = janitor.sweep(now)["maintenance"]

    on = {
        Node.objects.get(pk=j.attempts.get().allocations.get().node_id).name: j.attempts.get()
        for j in jobs
    }
    assert stopped == 1
    assert on["inside"].stop_reason == Attempt.Outcome.PREEMPTED
    assert "maintenance of east" in on["inside"].reason
    assert "BIOS update" in on["inside"].reason
    assert on["outside"].stop_requested_at is None
    assert outside.pk != inside.pk


def test_the_sweep_leaves_work_alone_before_the_window_and_after_it(east):
    node = NodeFactory(cluster=east, name="a", gpu_count=1)
    job = JobFactory(gpus=1)
    cycle.run_cycle()
    now = timezone.now()
    window(east, now + HOUR, now + 2 * HOUR, node)
    window(east, now - 2 * HOUR, now - HOUR, node)

    assert janitor.sweep(now)["maintenance"] == 0
    assert job.attempts.get().stop_requested_at is None
