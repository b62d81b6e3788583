"""Shared GPUs whose free ranges the snapshot gives: what ending work frees joins only the free
ranges it touches, and a share goes where the commit will put it."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs.placement import PLACED, PREEMPTS, Decision, Node, Policy, Snapshot, place, ranges
from tests.placement.builders import (
    NOW,
    j_batch,
    j_eval,
    j_training,
    n1_t4_shared_nodes,
    running_on,
    share_running_on,
    snapshot,
    with_ranges,
)


def one_shared_t4() -> Node:
    (node,) = n1_t4_shared_nodes(1)
    return with_ranges(node)


# -- a GPU's ranges --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("free", "start", "milli", "want"),
    [
        ((), 0, 1000, ((0, 1000),)),
        (((600, 1000),), 0, 200, ((0, 200), (600, 1000))),
        (((600, 1000),), 200, 400, ((200, 1000),)),
        (((0, 200), (600, 1000)), 200, 400, ((0, 1000),)),
    ],
    ids=["idle", "apart", "joins the range after", "joins both"],
)
def test_a_freed_range_joins_only_the_free_ranges_it_touches(free, start, milli, want):
    assert ranges.give(free, start, milli) == want


@pytest.mark.parametrize(
    ("milli", "want"), [(150, 100), (200, 100), (300, 400), (600, 400), (700, None)]
)
def test_a_share_takes_the_tightest_range_that_holds_it_as_the_commit_does(milli, want):
    # Free: [100, 300) and [400, 1000), as in the commit's own test.
    assert ranges.tightest(((100, 300), (400, 1000)), milli) == want


def test_free_pairs_become_ranges_in_order_joined_where_they_touch():
    assert ranges.of([(600, 400), (0, 200), (200, 100), (900, 50)]) == ((0, 300), (600, 1000))


def test_what_a_range_keeps_outside_others_is_its_uncovered_parts():
    assert ranges.outside(200, 600, [(0, 300), (500, 100)]) == [(300, 200), (600, 200)]


# -- preemption --------------------------------------------------------------------------------


def test_a_share_preempts_the_work_whose_range_joins_the_free_room():
    node = one_shared_t4()  # a [0, 200) loses least, b [200, 600), free [600, 1000)
    node, a = share_running_on(node, "a", 0, 200, preemptible=True, started_at=NOW - 60)
    node, b = share_running_on(node, "b", 200, 400, preemptible=True, started_at=NOW - 600)

    decision = place(snapshot((node,), (j_eval("big", gpu_milli=600, tier=1),), running=(a, b)))

    big = decision.by_job()["big"]
    assert (big.status, big.victims, big.workers[0].gpu_starts) == ("preempts", ("b",), (200,))


def test_a_share_evicts_nobody_when_no_victims_range_makes_room():
    node = one_shared_t4()  # only a [0, 200) may be evicted: apart from the free [600, 1000)
    node, a = share_running_on(node, "a", 0, 200, preemptible=True)
    node, b = share_running_on(node, "b", 200, 400)

    decision = place(snapshot((node,), (j_eval("big", gpu_milli=600, tier=1),), running=(a, b)))

    assert (decision.by_job()["big"].status, decision.preempted) == ("pending", ())


def test_a_share_does_not_wait_for_stopping_work_whose_range_makes_no_room():
    node = one_shared_t4()  # a [0, 200) is stopping, b [200, 600) may be evicted
    node, a = share_running_on(node, "a", 0, 200, stopping=True, expected_end=NOW + 60)
    node, b = share_running_on(node, "b", 200, 400, preemptible=True)

    decision = place(snapshot((node,), (j_eval("big", gpu_milli=600, tier=1),), running=(a, b)))

    big = decision.by_job()["big"]
    assert (big.status, big.victims) == ("preempts", ("b",))


def test_a_share_placed_after_a_preemption_takes_a_range_beside_the_preemptors():
    node = one_shared_t4()  # x [0, 200) stays, b [200, 600) may be evicted, free [600, 1000)
    node, x = share_running_on(node, "x", 0, 200)
    node, b = share_running_on(node, "b", 200, 400, preemptible=True)
    queue = (j_eval("big", gpu_milli=600, tier=1), j_eval("small", gpu_milli=200))

    decision = place(snapshot((node,), queue, running=(x, b)))

    outcomes = decision.by_job()
    assert (outcomes["big"].status, outcomes["big"].workers[0].gpu_starts) == ("preempts", (200,))
    # [600, 800) is the big share's once b has gone; the commit alone would pick it (tighter).
    assert (outcomes["small"].status, outcomes["small"].workers[0].gpu_starts) == (
        PLACED,
        (800,),
    )


# -- placing and reserving -------------------------------------------------------------------


def test_a_share_fills_the_tightest_range_and_leaves_the_larger_one_whole():
    node = one_shared_t4()  # x [300, 500): free [0, 300) and [500, 1000)
    node, x = share_running_on(node, "x", 300, 200)
    queue = (j_eval("quarter", gpu_milli=250), j_eval("half", gpu_milli=500, submit_time=NOW + 1))

    decision = place(snapshot((node,), queue, running=(x,)))

    starts = {o.job_id: (o.status, o.workers[0].gpu_starts) for o in decision.outcomes}
    assert starts == {"quarter": (PLACED, (0,)), "half": (PLACED, (500,))}


def test_shards_of_one_batch_take_one_range_each():
    node = one_shared_t4()  # x [300, 700): free [0, 300) and [700, 1000)
    node, x = share_running_on(node, "x", 300, 400)

    decision = place(snapshot((node,), (j_batch("shards", 2, gpu_milli=300),), running=(x,)))

    shards = decision.by_job()["shards"]
    assert (shards.status, sorted(w.gpu_starts for w in shards.workers)) == (
        PLACED,
        [(0,), (700,)],
    )


def test_a_share_reserves_from_when_a_range_that_joins_the_free_room_ends():
    node = one_shared_t4()  # a [0, 200) ends first, yet only b [200, 600) joins [600, 1000)
    node, a = share_running_on(node, "a", 0, 200, expected_end=NOW + 100)
    node, b = share_running_on(node, "b", 200, 400, expected_end=NOW + 1000)

    decision = place(snapshot((node,), (j_eval("big", gpu_milli=600),), running=(a, b)))

    big = decision.by_job()["big"]
    assert (big.status, big.estimated_start) == ("reserved", NOW + 1000)


def test_a_waiting_share_is_estimated_from_when_a_range_that_joins_the_free_room_ends():
    node = one_shared_t4()  # a [0, 200) ends first, yet only b [200, 600) joins [600, 1000)
    node, a = share_running_on(node, "a", 0, 200, expected_end=NOW + 100)
    node, b = share_running_on(node, "b", 200, 400, expected_end=NOW + 1000)
    queue = (j_eval("big", gpu_milli=600),)

    decision = place(snapshot((node,), queue, running=(a, b), policy=Policy(backfill=False)))

    big = decision.by_job()["big"]
    assert (big.status, big.estimated_start) == ("pending", NOW + 1000)


def test_free_fragments_on_several_gpus_do_not_add_up_to_a_share_in_its_estimate():
    # 250 free on each of two GPUs, and 250 more once a ends: 750 free, no 600 in one range
    # until b ends and joins a's range and the free one.
    one, two = (with_ranges(node) for node in n1_t4_shared_nodes(2))
    one, a = share_running_on(one, "a", 0, 250, expected_end=NOW + 100)
    one, b = share_running_on(one, "b", 250, 500, expected_end=NOW + 800)
    two, c = share_running_on(two, "c", 0, 750, expected_end=NOW + 1500)
    queue = (j_eval("big", gpu_milli=600),)

    decision = place(snapshot((one, two), queue, running=(a, b, c), policy=Policy(backfill=False)))

    big = decision.by_job()["big"]
    assert (big.status, big.estimated_start) == ("pending", NOW + 800)


def test_a_share_estimate_counts_the_shares_each_range_holds():
    # Two shards of 350, free [0, 300) and [700, 1000): w's end makes [0, 400), which holds
    # one (700 free, as much as both ask); x's makes [0, 1000), which holds both.
    node = one_shared_t4()
    node, w = share_running_on(node, "w", 300, 100, expected_end=NOW + 100)
    node, x = share_running_on(node, "x", 400, 300, expected_end=NOW + 900)
    queue = (j_batch("shards", 2, gpu_milli=350),)

    decision = place(snapshot((node,), queue, running=(w, x), policy=Policy(backfill=False)))

    shards = decision.by_job()["shards"]
    assert (shards.status, shards.estimated_start) == ("pending", NOW + 900)


def test_whole_gpu_work_on_a_node_that_gives_ranges_takes_entirely_free_gpus():
    decision = place(snapshot((one_shared_t4(),), (j_training("one", gpus=1, gpu_types=("t4",)),)))

    one = decision.by_job()["one"]
    assert (one.status, one.workers[0].gpu_indices, one.workers[0].gpu_starts) == (
        PLACED,
        (0,),
        (0,),
    )


def test_a_share_without_its_start_leaves_the_node_to_its_largest_ranges():
    # b does not say where it lies: the node keeps one number per GPU, as a snapshot without
    # ranges, and a (losing least) seems to make room.
    node = one_shared_t4()
    node, a = share_running_on(node, "a", 0, 200, preemptible=True, started_at=NOW - 60)
    node, b = share_running_on(node, "b", 200, 400, preemptible=True, started_at=NOW - 600)
    b = dataclasses.replace(b, allocations=(dataclasses.replace(b.allocations[0], gpu_starts=()),))

    decision = place(snapshot((node,), (j_eval("big", gpu_milli=600, tier=1),), running=(a, b)))

    big = decision.by_job()["big"]
    assert (big.victims, big.workers[0].gpu_starts) == (("a",), ())


# -- on any snapshot ---------------------------------------------------------------------------

EXAMPLES = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SIZES = (100, 200, 250, 300, 400, 500)


@st.composite
def shared_snapshots(draw) -> Snapshot:
    """Shared T4 nodes whose GPUs are cut into shares, some of them running."""
    nodes, running = [], []
    for i in range(draw(st.integers(1, 3))):
        gpus = draw(st.sampled_from((1, 2)))
        node = with_ranges(Node(f"n{i}", "c1", "t4", (1000,) * gpus, 64_000, 64_000, True))
        for g in range(gpus):
            start = 0
            for size in draw(st.lists(st.sampled_from(SIZES), max_size=6)):
                if start + size > 1000:
                    break
                if draw(st.booleans()):
                    node, job = share_running_on(
                        node,
                        f"r{i}-{g}-{start}",
                        start,
                        size,
                        gpu=g,
                        tier=draw(st.integers(0, 2)),
                        preemptible=draw(st.booleans()),
                        stopping=draw(st.booleans()) and draw(st.booleans()),
                        expected_end=draw(st.sampled_from((None, NOW + 100, NOW + 1000))),
                        started_at=NOW - draw(st.integers(1, 5000)),
                    )
                    running.append(job)
                start += size
        nodes.append(node)
    queue = []
    for k in range(draw(st.integers(1, 8))):
        milli = draw(st.sampled_from((*SIZES, 600, 700, 1000)))
        tier = draw(st.integers(0, 3))
        if milli == 1000:
            queue.append(j_training(f"q{k}", gpus=1, tier=tier, gpu_types=("t4",)))
        else:
            shards = draw(st.integers(1, 3))
            queue.append(j_batch(f"q{k}", shards, gpu_milli=milli, tier=tier, max_runtime=300.0))
    return snapshot(nodes, queue, running=running)


def _granted(decision: Decision, status: str):
    for outcome in decision.outcomes:
        if outcome.status == status:
            for w in outcome.workers:
                for index, start in zip(w.gpu_indices, w.gpu_starts, strict=True):
                    yield (w.node_id, index), start, w.gpu_milli


@EXAMPLES
@given(shared_snapshots())
def test_placed_shares_take_free_ranges_and_preemptors_their_victims_room(snap: Snapshot):
    decision = place(snap)
    free = {(n.id, g): ranges.of(r) for n in snap.nodes for g, r in enumerate(n.gpu_free_ranges)}

    def take(gpu, start, milli):
        assert any(s <= start and start + milli <= e for s, e in free[gpu])
        free[gpu] = ranges.take(free[gpu], start, milli)

    for gpu, start, milli in _granted(decision, PLACED):
        take(gpu, start, milli)  # what the commit accepts now
    victims = set(decision.preempted)
    for job in snap.running:
        if job.id in victims:
            for a in job.allocations:
                for (index, milli), start in zip(a.gpus, a.gpu_starts, strict=True):
                    free[a.node_id, index] = ranges.give(free[a.node_id, index], start, milli)
    for gpu, start, milli in _granted(decision, PREEMPTS):
        take(gpu, start, milli)  # what the commit accepts once the victims have gone


@st.composite
def whole_gpu_snapshots(draw) -> Snapshot:
    """Shareable nodes with whole-GPU work only, running and queued."""
    nodes, running = [], []
    for i in range(draw(st.integers(1, 4))):
        gpus = draw(st.sampled_from((1, 2, 4)))
        node = Node(f"n{i}", "c1", "t4", (1000,) * gpus, 64_000, 64_000, True)
        busy = draw(st.integers(0, gpus))
        if busy:
            node, job = running_on(
                node,
                f"r{i}",
                busy,
                tier=draw(st.integers(0, 2)),
                preemptible=draw(st.booleans()),
                stopping=draw(st.booleans()) and draw(st.booleans()),
                expected_end=draw(st.sampled_from((None, NOW + 100, NOW + 1000))),
            )
            running.append(job)
        nodes.append(node)
    queue = [
        j_training(
            f"q{k}",
            workers=draw(st.integers(1, 2)),
            gpus=draw(st.sampled_from((1, 2, 4))),
            tier=draw(st.integers(0, 3)),
            gpu_types=("t4",),
            max_runtime=draw(st.sampled_from((None, 300.0))),
        )
        for k in range(draw(st.integers(1, 6)))
    ]
    return snapshot(nodes, queue, running=running)


def _without_starts(decision: Decision) -> Decision:
    outcomes = tuple(
        dataclasses.replace(
            o, workers=tuple(dataclasses.replace(w, gpu_starts=()) for w in o.workers)
        )
        for o in decision.outcomes
    )
    return dataclasses.replace(decision, outcomes=outcomes)


@EXAMPLES
@given(whole_gpu_snapshots())
def test_giving_ranges_changes_no_decision_on_whole_gpu_work(snap: Snapshot):
    ranged = dataclasses.replace(snap, nodes=tuple(with_ranges(n) for n in snap.nodes))

    assert _without_starts(place(ranged)) == place(snap)
