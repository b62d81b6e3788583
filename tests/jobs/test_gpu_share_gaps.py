"""GPU shares and holes: the snapshot offers what the commit can give, one contiguous range."""

import time

import pytest

from clusters.models import Allocation
from jobs import actions, cycle, snapshot
from jobs.commit import NodeState, largest_gap
from jobs.models import Attempt, Family
from jobs.states import State
from tests.factories import ClusterFactory, JobFactory, NodeFactory, PriorityClassFactory


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
    node = NodeState(cpu_free=1000, memory_free=1000, gpu_count=1, available=True, cluster_id=1)
    node.gpu_taken[0] = [(0, 100), (300, 100)]

    assert node.gap(0, milli) == want


def share(milli, **kw):
    return JobFactory(
        family=Family.EVALUATION, gpus=0, gpu_milli=milli, gpu_types=["T4"],
        cpu_milli=500, memory_mb=500, **kw,
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


@pytest.mark.django_db
def test_the_snapshot_gives_a_shared_gpus_free_ranges_and_each_shares_start():
    cluster = ClusterFactory()
    node = t4_shared_node(cluster)
    quarters_with_holes_at(node, [250, 750])

    loaded = snapshot.load(time.time()).snapshot

    (free,) = [n.gpu_free_ranges for n in loaded.nodes if n.id == str(node.pk)]
    assert free == (((250, 250), (750, 250)),)
    starts = sorted(a.gpu_starts for job in loaded.running for a in job.allocations)
    assert starts == [(0,), (500,)]


def placed_alone(job, now):
    """A cycle at ``now`` places the job (on one idle GPU, shares placed one by one take its
    ranges from 0 up)."""
    assert cycle.run_cycle(now=now).placed == [job.pk]


def range_of(job):
    return list(
        Allocation.objects.filter(attempt__job=job).values_list("gpu_milli_start", "gpu_milli")
    )


def end_preempted(job):
    actions.end_attempt(job.attempts.get(outcome="").pk, Attempt.Outcome.PREEMPTED)


@pytest.mark.django_db
def test_a_share_preempts_only_the_work_whose_range_makes_room_and_starts_once_it_has_gone():
    t4_shared_node(ClusterFactory())
    low = PriorityClassFactory(name="low", value=-100)
    # a [0, 200) has run longer, yet loses less work than b [200, 600); [600, 1000) is free.
    start = time.time() - 1000
    a = share(200, preemptible=True, priority_class=low)
    placed_alone(a, start)
    b = share(400, preemptible=True, priority_class=low)
    placed_alone(b, start + 1)
    big = share(600, priority_class=PriorityClassFactory(name="high", value=100, may_preempt=True))

    first = cycle.run_cycle(now=start + 500)
    end_preempted(b)
    second = cycle.run_cycle(now=start + 510)

    assert (first.preempted, second.placed, second.preempted) == ([b.pk], [big.pk], [])
    assert range_of(big) == [(200, 600)]
    assert a.attempts.get().stop_requested_at is None


@pytest.mark.django_db
def test_a_share_placed_beside_a_preemption_keeps_off_the_room_its_preemptor_will_take():
    t4_shared_node(ClusterFactory())
    low = PriorityClassFactory(name="low", value=-100)
    start = time.time() - 1000
    placed_alone(share(200, preemptible=False), start)  # [0, 200) stays
    b = share(400, preemptible=True, priority_class=low)  # [200, 600) may be evicted
    placed_alone(b, start + 1)
    big = share(600, priority_class=PriorityClassFactory(name="high", value=100, may_preempt=True))
    small = share(200)

    first = cycle.run_cycle(now=start + 500)
    end_preempted(b)
    second = cycle.run_cycle(now=start + 510)

    assert (first.preempted, first.placed, second.placed) == ([b.pk], [small.pk], [big.pk])
    assert (range_of(small), range_of(big)) == ([(800, 200)], [(200, 600)])
