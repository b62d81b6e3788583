"""GPU shares and holes: the snapshot offers what the commit can give, one contiguous range."""

import time

import pytest

from clusters.models import Allocation
from jobs import actions, cycle, snapshot
from jobs.commit import NodeState, largest_gap
from jobs.models import Attempt, Family
from jobs.states import State
from tests.factories import ClusterFactory, JobFactory, NodeFactory


@pytest.mark.parametrize(
    "taken, want",
    [
        ((), 1000),
        (((0, 1000),), 0),
        (((0, 500),), 500),
        (((250, 250), (750, 250)), 250),
        (((750, 250), (250, 250)), 250),
        (((0, 100), (600, 100)), 500),
        (((0, 250), (250, 250), (600, 100)), 300),
    ],
    ids=["idle", "full", "one half taken", "two 250 holes", "unsorted", "inner hole", "tail"],
)
def test_largest_gap_is_the_largest_free_range_not_the_free_total(taken, want):
    assert largest_gap(taken) == want


@pytest.mark.parametrize(
    "milli, want", [(150, 100), (200, 100), (300, 400), (600, 400), (700, None)]
)
def test_the_commit_gives_a_share_the_tightest_hole_that_holds_it(milli, want):
    # Free: [100, 300) and [400, 1000).
    node = NodeState(cpu_free=1000, memory_free=1000, gpu_count=1, available=True)
    node.gpu_taken[0] = [(0, 100), (300, 100)]

    assert node.gap(0, milli) == want


def share(milli):
    return JobFactory(
        family=Family.EVALUATION, gpus=0, gpu_milli=milli, gpu_types=["T4"],
        cpu_milli=500, memory_mb=500,
    )  # fmt: skip


def t4_shared_node(cluster):
    return NodeFactory(cluster=cluster, gpu_type="T4", gpu_count=1, gpu_shareable=True)


def quarters_with_holes_at(node, holes):
    """Four 250-milli shares fill the node's GPU; those starting at ``holes`` end."""
    for _ in range(4):
        share(250)
    cycle.run_cycle()
    ending = Allocation.objects.filter(node=node, gpu_milli_start__in=holes)
    for attempt_id in list(ending.values_list("attempt_id", flat=True)):
        actions.end_attempt(attempt_id, Attempt.Outcome.SUCCEEDED)


@pytest.mark.django_db
def test_the_snapshot_offers_a_gpu_with_two_holes_as_its_largest_hole():
    cluster = ClusterFactory()
    node = t4_shared_node(cluster)
    quarters_with_holes_at(node, [250, 750])

    loaded = snapshot.load(time.time()).snapshot

    (gpu_free,) = [n.gpu_free_milli for n in loaded.nodes if n.id == str(node.pk)]
    assert gpu_free == (250,)


@pytest.mark.django_db
def test_a_share_larger_than_every_hole_goes_to_another_gpu_in_the_first_cycle():
    cluster = ClusterFactory()
    holed = t4_shared_node(cluster)
    quarters_with_holes_at(holed, [250, 750])  # 500 free on the GPU, in two 250 holes
    idle = t4_shared_node(cluster)
    half = share(500)

    result = cycle.run_cycle()

    half.refresh_from_db()
    assert (result.placed, result.skipped, half.state) == ([half.pk], [], State.SCHEDULED)
    assert list(Allocation.objects.filter(attempt__job=half).values_list("node", flat=True)) == [
        idle.pk
    ]


@pytest.mark.django_db
def test_a_share_takes_a_real_hole_of_its_size_in_the_first_cycle():
    cluster = ClusterFactory()
    holed = t4_shared_node(cluster)
    quarters_with_holes_at(holed, [250, 500])  # one 500 hole: [250, 750)
    t4_shared_node(cluster)
    half = share(500)

    result = cycle.run_cycle()

    assert (result.placed, result.skipped) == ([half.pk], [])
    rows = Allocation.objects.filter(attempt__job=half)
    assert list(rows.values_list("node", "gpu_milli_start", "gpu_milli")) == [(holed.pk, 250, 500)]
