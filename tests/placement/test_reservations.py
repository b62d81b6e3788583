"""Head-of-line reservations: one per disjoint node pool, each with its own EASY backfill."""

from __future__ import annotations

from jobs.placement import Policy, place
from tests.placement.builders import (
    NOW,
    j_training,
    n8_a100_nodes,
    n8_h100_nodes,
    running_on,
    snapshot,
)

HOUR = 3600.0


def one_busy_h100_node_and_one_a100_node_with_one_free_gpu():
    """An H100 node free in 10 h, an A100 node with 1 GPU free now and 7 more in 1 h."""
    (h,) = n8_h100_nodes(1)
    h, rh = running_on(h, "rh", 8, tenant="x", expected_end=NOW + 10 * HOUR)
    (a,) = n8_a100_nodes(1)
    a, ra = running_on(a, "ra", 7, tenant="x", expected_end=NOW + HOUR)
    return (h, a), (rh, ra)


def h100_and_a100_gangs(*later):
    """An H100 gang and, below it, an A100 gang, both blocked; then the ``later`` jobs."""
    return (
        j_training("h100-gang", gpus=8, gpu_types=("h100",), tenant="t1", tier=10),
        j_training("a100-gang", gpus=8, gpu_types=("a100",), tenant="t2", tier=5),
        *later,
    )


def test_it_reserves_for_a_blocked_gang_in_each_pool():
    nodes, running = one_busy_h100_node_and_one_a100_node_with_one_free_gpu()
    day_long = j_training("day-long", gpus=1, gpu_types=("a100",), tenant="t3", max_runtime=86400)

    got = place(snapshot(nodes, h100_and_a100_gangs(day_long), running)).by_job()

    h, a = nodes
    assert (got["h100-gang"].status, got["h100-gang"].reserved_nodes) == ("reserved", (h.id,))
    assert got["h100-gang"].estimated_start == NOW + 10 * HOUR
    assert (got["a100-gang"].status, got["a100-gang"].reserved_nodes) == ("reserved", (a.id,))
    assert got["a100-gang"].estimated_start == NOW + HOUR
    assert (got["day-long"].status, got["day-long"].reason) == (
        "pending",
        "waiting_for_reservation",
    )


def test_it_backfills_a_pool_with_work_that_ends_before_its_reservation():
    nodes, running = one_busy_h100_node_and_one_a100_node_with_one_free_gpu()
    short = j_training("short", gpus=1, gpu_types=("a100",), tenant="t3", max_runtime=HOUR / 2)

    got = place(snapshot(nodes, h100_and_a100_gangs(short), running)).by_job()

    assert got["a100-gang"].status == "reserved"
    assert (got["short"].status, got["short"].workers[0].node_id) == ("placed", nodes[1].id)


def test_a_job_over_two_pools_respects_each_reservation_on_its_own():
    # H100: 4 GPUs free now, the rest in 10 h; A100: 1 free now, the rest in 1 h.
    (h,) = n8_h100_nodes(1)
    h, rh = running_on(h, "rh", 4, tenant="x", expected_end=NOW + 10 * HOUR)
    (a,) = n8_a100_nodes(1)
    a, ra = running_on(a, "ra", 7, tenant="x", expected_end=NOW + HOUR)
    either = ("a100", "h100")
    two_hours = j_training("two-hours", gpus=1, gpu_types=either, tenant="t3", max_runtime=7200)
    day_long = j_training("day-long", gpus=1, gpu_types=either, tenant="t4", max_runtime=86400)
    queue = h100_and_a100_gangs(two_hours, day_long)

    got = place(snapshot((h, a), queue, (rh, ra))).by_job()

    assert got["h100-gang"].status == got["a100-gang"].status == "reserved"
    # Two hours end after the A100 reservation starts but before the H100 one does.
    assert (got["two-hours"].status, got["two-hours"].workers[0].node_id) == ("placed", h.id)
    assert got["day-long"].reason == "waiting_for_reservation"


def test_two_blocked_jobs_of_one_pool_get_one_reservation():
    nodes, running = one_busy_h100_node_and_one_a100_node_with_one_free_gpu()
    second = j_training("second-a100-gang", gpus=8, gpu_types=("a100",), tenant="t3", tier=1)

    got = place(snapshot(nodes, h100_and_a100_gangs(second), running)).by_job()

    assert got["a100-gang"].status == "reserved"
    assert (got["second-a100-gang"].status, got["second-a100-gang"].reason) == (
        "pending",
        "insufficient_gpus",
    )
    assert got["second-a100-gang"].estimated_start == NOW + HOUR


def test_max_reservation_attempts_bounds_the_tries_across_pools():
    nodes, running = one_busy_h100_node_and_one_a100_node_with_one_free_gpu()
    one_try = Policy(max_reservation_attempts=1)

    got = place(snapshot(nodes, h100_and_a100_gangs(), running, policy=one_try)).by_job()

    assert got["h100-gang"].status == "reserved"
    assert got["a100-gang"].status == "pending"


def test_a_try_that_finds_nothing_to_reserve_counts_toward_the_bound():
    nodes, running = one_busy_h100_node_and_one_a100_node_with_one_free_gpu()
    (never,) = n8_h100_nodes(1, cluster="c2")
    never, forever = running_on(never, "forever", 8, tenant="x")  # no expected end
    stuck = j_training("stuck", gpus=8, clusters=("c2",), tenant="t0", tier=20)
    queue = (stuck, *h100_and_a100_gangs())

    got = place(
        snapshot(
            (*nodes, never), queue, (*running, forever), policy=Policy(max_reservation_attempts=2)
        )
    ).by_job()

    assert got["stuck"].status == "pending"
    assert got["h100-gang"].status == "reserved"
    assert got["a100-gang"].status == "pending"


def test_a_gangs_estimate_counts_the_gpus_of_one_cluster_at_a_time():
    # East: 4 GPUs free, 2 more in 1 h, the last 2 in 3 h. West: 4 free, 4 more in 2 h.
    # Across both, 8 are free now; the gang of 8 needs them in one cluster: in 2 h, in west.
    (east,) = n8_a100_nodes(1, cluster="east")
    east, soon = running_on(east, "soon", 2, expected_end=NOW + HOUR)
    east, late = running_on(east, "late", 2, expected_end=NOW + 3 * HOUR)
    (west,) = n8_a100_nodes(1, cluster="west")
    west, mid = running_on(west, "mid", 4, expected_end=NOW + 2 * HOUR)
    gang = j_training("gang", gpus=8)
    no_backfill = Policy(backfill=False)

    got = place(snapshot((east, west), (gang,), (soon, late, mid), policy=no_backfill)).by_job()

    assert (got["gang"].status, got["gang"].reason) == ("pending", "fragmented")
    assert got["gang"].estimated_start == NOW + 2 * HOUR
