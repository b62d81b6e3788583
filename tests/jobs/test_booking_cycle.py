"""Bookings in the live scheduler: the snapshot gives each booked node its booking and tenant,
the cycle places there only that tenant's work in the window (and other work that ends by
its start), and the sweep stops other tenants' work there when the booking begins."""

from datetime import timedelta

import pytest
from django.utils import timezone

from clusters.models import Booking, MaintenanceWindow, Node
from jobs import cycle, janitor, metrics, snapshot
from jobs.models import Attempt
from jobs.states import State
from tests.factories import JobFactory, NodeFactory

pytestmark = pytest.mark.django_db
HOUR = timedelta(hours=1)


def book(cluster, tenant, start, end, *nodes):
    booking = Booking.objects.create(cluster=cluster, tenant=tenant, starts_at=start, ends_at=end)
    booking.nodes.set(nodes)
    return booking


def by_name(now):
    return {n.name: n for n in snapshot.load(now.timestamp()).snapshot.nodes}


def test_the_snapshot_gives_a_booked_node_its_booking_and_tenant_unless_maintenance_overlaps(
    east, alpha, gamma
):
    a, b = (NodeFactory(cluster=east, name=name, gpu_count=8) for name in ("a", "b"))
    now = timezone.now()
    book(east, alpha, now + HOUR, now + 2 * HOUR, a)
    book(east, alpha, now + 2 * HOUR, now + 3 * HOUR, a)  # touches the first: one booking
    book(east, gamma, now - HOUR, now + HOUR, b)
    later = MaintenanceWindow.objects.create(
        cluster=east, starts_at=now + HOUR / 2, ends_at=now + 2 * HOUR
    )
    later.nodes.set([b])  # inside gamma's booking: maintenance wins, from the booking's start

    nodes = by_name(now)

    assert (nodes["a"].closes_at, nodes["a"].opens_at, nodes["a"].reserved_for) == (
        (now + HOUR).timestamp(), (now + 3 * HOUR).timestamp(), str(alpha.pk),
    )  # fmt: skip
    assert (nodes["b"].closes_at, nodes["b"].opens_at, nodes["b"].reserved_for) == (
        (now - HOUR).timestamp(), (now + 2 * HOUR).timestamp(), "",
    )  # fmt: skip


def test_in_its_window_the_tenants_work_is_placed_and_others_wait_for_its_end(east, alpha, gamma):
    node = NodeFactory(cluster=east, name="a", gpu_count=8)
    now = timezone.now()
    book(east, alpha, now - HOUR, now + 2 * HOUR, node)
    theirs = [JobFactory(tenant=gamma, gpus=4, name=f"theirs-{i}") for i in range(2)]
    ours = JobFactory(tenant=alpha, gpus=4, name="ours")

    cycle.run_cycle(now.timestamp())

    ours.refresh_from_db()
    assert ours.state == State.SCHEDULED
    for job in theirs:
        job.refresh_from_db()
        assert (job.state, job.pending_reason) == (State.QUEUED, "booked")
        assert job.estimated_start == now + 2 * HOUR
        assert "alpha" not in job.pending_message.lower()


def test_the_sweep_stops_other_tenants_work_when_the_booking_begins(east, alpha, gamma):
    node = NodeFactory(cluster=east, name="a", gpu_count=2)
    ours, theirs = JobFactory(tenant=alpha, gpus=1), JobFactory(tenant=gamma, gpus=1)
    cycle.run_cycle()
    now = timezone.now()
    book(east, alpha, now - timedelta(seconds=5), now + HOUR, node)

    stopped = janitor.sweep(now)["maintenance"]

    theirs_attempt, ours_attempt = theirs.attempts.get(), ours.attempts.get()
    assert stopped == 1
    assert theirs_attempt.stop_reason == Attempt.Outcome.PREEMPTED
    assert "booked for another team" in theirs_attempt.reason
    assert "alpha" not in theirs_attempt.reason.lower()
    assert ours_attempt.stop_requested_at is None


def test_only_other_tenants_running_work_is_expected_gone_by_the_booking(
    east, alpha, gamma, settings
):
    NodeFactory(cluster=east, name="a", gpu_count=2)
    ours = JobFactory(tenant=alpha, gpus=1, max_runtime_s=10 * 3600)
    theirs = JobFactory(tenant=gamma, gpus=1, max_runtime_s=10 * 3600)
    cycle.run_cycle()
    now = timezone.now()
    book(east, alpha, now + HOUR, now + 2 * HOUR, *Node.objects.all())

    running = {j.id: j for j in snapshot.load(now.timestamp()).snapshot.running}

    grace = 2 * settings.MLSCHED_STOP_GRACE_S
    assert running[str(theirs.pk)].expected_end == pytest.approx((now + HOUR).timestamp() + grace)
    assert running[str(ours.pk)].expected_end > (now + 9 * HOUR).timestamp()


def test_a_booked_nodes_idle_gpus_are_counted_apart_not_as_idle_nor_in_maintenance(east, alpha):
    booked = NodeFactory(cluster=east, name="a", gpu_count=8)
    NodeFactory(cluster=east, name="b", gpu_count=4)
    soon = NodeFactory(cluster=east, name="c", gpu_count=2)
    now = timezone.now()
    book(east, alpha, now - HOUR, now + HOUR, booked)
    book(east, alpha, now + HOUR, now + 2 * HOUR, soon)  # not begun: idle for everyone now

    figures = {m.name: m for m in metrics.idle_gpus(now)}

    assert figures["mlsched_gpus_in_maintenance"].samples == []
    assert figures["mlsched_gpus_booked_idle"].samples == [
        ({"cluster": "east", "gpu_type": "A100"}, 8)
    ]
    assert sum(v for _, v in figures["mlsched_gpus_idle"].samples) == 4 + 2
    assert figures["mlsched_gpus_largest_free_block"].samples[0][1] == 4


def maintenance(cluster, start, end, *nodes):
    window = MaintenanceWindow.objects.create(cluster=cluster, starts_at=start, ends_at=end)
    window.nodes.set(nodes)
    return window


def test_the_snapshot_gives_a_booking_the_window_of_another_kind_after_it(east, alpha, gamma):
    a, b = (NodeFactory(cluster=east, name=name, gpu_count=8) for name in ("a", "b"))
    now = timezone.now()
    book(east, alpha, now - HOUR, now + HOUR, a, b)
    book(east, alpha, now + 2 * HOUR, now + 3 * HOUR, a)  # its own again: no stop for it
    maintenance(east, now + 4 * HOUR, now + 5 * HOUR, a)
    book(east, gamma, now + 6 * HOUR, now + 7 * HOUR, b)

    nodes = by_name(now)

    start, end = (now + 4 * HOUR).timestamp(), (now + 5 * HOUR).timestamp()
    assert nodes["a"].after == (start, end, "")
    assert nodes["b"].after == (start + 2 * 3600, end + 2 * 3600, str(gamma.pk))


def test_the_booked_tenants_work_keeps_off_the_maintenance_after_its_booking(east, alpha, settings):
    node = NodeFactory(cluster=east, name="a", gpu_count=8)
    running = JobFactory(tenant=alpha, gpus=4, max_runtime_s=10 * 3600)
    cycle.run_cycle()
    now = timezone.now()
    book(east, alpha, now - HOUR, now + HOUR, node)
    maintenance(east, now + 2 * HOUR, now + 3 * HOUR, node)
    long = JobFactory(tenant=alpha, gpus=4, max_runtime_s=3 * 3600)
    short = JobFactory(tenant=alpha, gpus=4, max_runtime_s=3600)

    loaded = snapshot.load(now.timestamp()).snapshot
    cycle.run_cycle(now.timestamp())

    grace = 2 * settings.MLSCHED_STOP_GRACE_S
    (expected,) = [j.expected_end for j in loaded.running if j.id == str(running.pk)]
    assert expected == pytest.approx((now + 2 * HOUR).timestamp() + grace)
    long.refresh_from_db()
    assert (long.state, long.pending_reason) == (State.QUEUED, "maintenance")
    short.refresh_from_db()
    assert short.state == State.SCHEDULED
