"""The commit re-checks maintenance windows and bookings under the nodes' locks: a window planned
between a cycle's snapshot and its commit keeps that cycle's work off its nodes as the next
cycle's decision would (work sure to end before it still goes), and saving a window waits for a
commit in flight on its nodes."""

import time
from datetime import UTC, datetime, timedelta

import pytest
from django.db import transaction

from clusters.models import Booking, MaintenanceWindow
from clusters.window_forms import BookingForm, MaintenanceWindowForm
from jobs import cycle, snapshot
from jobs.commit import commit_batch
from jobs.models import Job
from jobs.placement import PLACED, place
from jobs.states import State
from tests.factories import JobFactory, NodeFactory, TenantFactory
from tests.jobs.test_lock_order import commit_once_waited_on, in_a_thread, other_connection

HOUR = timedelta(hours=1)


def decided() -> list:
    """The placements of a cycle decided now, not yet committed."""
    return [o for o in place(snapshot.load(time.time()).snapshot).outcomes if o.status == PLACED]


def planned(model, cluster, start, end, nodes=(), **fields):
    window = model.objects.create(cluster=cluster, starts_at=start, ends_at=end, **fields)
    window.nodes.set(nodes)
    return window


@pytest.mark.django_db
def test_a_window_planned_after_the_snapshot_keeps_the_commit_off_its_nodes(east):
    node = NodeFactory(cluster=east, gpu_count=8)
    long, short = JobFactory(gpus=1, max_runtime_s=7200), JobFactory(gpus=1, max_runtime_s=600)
    placements = decided()
    now = datetime.now(tz=UTC)
    planned(MaintenanceWindow, east, now + HOUR / 2, now + 2 * HOUR, [node])

    placed = commit_batch(placements, now)

    assert len(placements) == 2
    assert placed == {short.pk}  # it ends before the window starts
    assert Job.objects.get(pk=long.pk).state == State.QUEUED
    cycle.run_cycle()
    assert Job.objects.get(pk=long.pk).pending_reason == "maintenance"


@pytest.mark.django_db
def test_a_booking_made_after_the_snapshot_keeps_other_tenants_work_off_its_nodes(east, alpha):
    beta = TenantFactory(slug="beta")
    NodeFactory(cluster=east, gpu_count=8)
    ours, theirs = (JobFactory(tenant=t, gpus=1, max_runtime_s=7200) for t in (alpha, beta))
    placements = decided()
    now = datetime.now(tz=UTC)
    planned(Booking, east, now - HOUR, now + 2 * HOUR, tenant=alpha)  # every node of east

    placed = commit_batch(placements, now)

    assert placed == {ours.pk}
    assert Job.objects.get(pk=theirs.pk).state == State.QUEUED


@pytest.mark.django_db
def test_a_window_over_nodes_the_commit_does_not_lock_places_its_work_all_the_same(east):
    # The commit reads and locks only the nodes its placements go to: a window naming other
    # nodes alone has nothing to say of them.
    used, other = NodeFactory(cluster=east, gpu_count=8), NodeFactory(cluster=east, gpu_count=0)
    job = JobFactory(gpus=1, max_runtime_s=7200)
    now = datetime.now(tz=UTC)
    planned(MaintenanceWindow, east, now + HOUR / 2, now + 2 * HOUR, [other])
    planned(Booking, east, now + HOUR, now + 2 * HOUR, [other], tenant=job.tenant)

    assert commit_batch(decided(), now) == {job.pk}
    assert job.attempts.get().allocations.filter(node=used).exists()


@pytest.mark.django_db
def test_a_window_that_has_ended_stops_nothing(east):
    node = NodeFactory(cluster=east, gpu_count=8)
    job = JobFactory(gpus=1, max_runtime_s=7200)
    placements = decided()
    now = datetime.now(tz=UTC)
    planned(MaintenanceWindow, east, now - 2 * HOUR, now - HOUR, [node])

    assert commit_batch(placements, now) == {job.pk}


def window_form(form_class, cluster, nodes, **more):
    starts = datetime.now(tz=UTC) + HOUR
    ends = starts + HOUR
    return form_class(
        data={
            "cluster": cluster.pk,
            "nodes": [n.pk for n in nodes],
            "reason": "new PSUs",
            "starts_at": f"{starts:%Y-%m-%d %H:%M:%S}",
            "ends_at": f"{ends:%Y-%m-%d %H:%M:%S}",
            **more,
        }  # fmt: skip
    )


def save(form) -> None:
    """Validate and save as the admin does, in one transaction."""
    with transaction.atomic():
        assert form.is_valid(), form.errors
        form.save()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("form_class", "chosen"), [
    (MaintenanceWindowForm, True), (MaintenanceWindowForm, False), (BookingForm, True),
])  # fmt: skip
def test_saving_a_window_waits_for_a_commit_holding_its_nodes(east, alpha, form_class, chosen):
    nodes = [NodeFactory(cluster=east, name=name) for name in "ab"]
    more = {"tenant": alpha.pk} if form_class is BookingForm else {}
    form = window_form(form_class, east, nodes[1:] if chosen else [], **more)
    commit = other_connection()  # a scheduler's commit in flight, holding the node's lock
    commit.execute("SELECT 1 FROM clusters_node WHERE id = %s FOR UPDATE", [nodes[1].pk])

    saving = in_a_thread(save, form)
    commit_once_waited_on(commit, saving, "clusters_node")

    assert not saving.is_alive()
    assert form_class._meta.model.objects.count() == 1


@pytest.mark.django_db
def test_the_booked_tenants_work_keeps_off_a_window_planned_after_its_booking(east, alpha):
    node = NodeFactory(cluster=east, gpu_count=8)
    now = datetime.now(tz=UTC)
    planned(Booking, east, now - HOUR, now + HOUR, [node], tenant=alpha)
    long = JobFactory(tenant=alpha, gpus=1, max_runtime_s=3 * 3600)
    short = JobFactory(tenant=alpha, gpus=1, max_runtime_s=3600)
    placements = decided()
    planned(MaintenanceWindow, east, now + 2 * HOUR, now + 3 * HOUR, [node])

    assert len(placements) == 2
    assert commit_batch(placements, now) == {short.pk}
    assert Job.objects.get(pk=long.pk).state == State.QUEUED
