"""Maintenance windows (Slurm's maintenance reservation): before a node's window starts, work
may start there only if its runtime limit ends it by then; during the window nothing starts
there; from its end the node takes work again. A job kept off only by windows waits as
``maintenance``, told when the first such window ends."""

from __future__ import annotations

import dataclasses

from jobs.placement import Policy, place
from tests.placement.builders import (
    NOW,
    j_batch,
    j_eval,
    j_training,
    n1_t4_shared_nodes,
    n8_a100_nodes,
    running_on,
    snapshot,
)

HOUR = 3600.0


def closing(node, closes_in: float, lasts: float | None = 4 * HOUR):
    """The node with a maintenance window from ``closes_in`` seconds from now, for ``lasts``
    seconds (None: it does not end)."""
    opens = None if lasts is None else NOW + closes_in + lasts
    return dataclasses.replace(node, closes_at=NOW + closes_in, opens_at=opens)


def outcome(decision, job_id: str):
    return decision.by_job()[job_id]


def test_a_job_that_ends_before_the_window_starts_is_placed_on_the_node():
    (node,) = n8_a100_nodes(1)
    job = j_training("short", gpus=8, max_runtime=HOUR)

    decision = place(snapshot([closing(node, 2 * HOUR)], [job]))

    assert outcome(decision, "short").status == "placed"


def test_a_job_whose_runtime_limit_reaches_into_the_window_goes_to_another_node():
    (shut,) = n8_a100_nodes(1, prefix="shut-")
    (other,) = n8_a100_nodes(1, prefix="other-")
    job = j_training("long", gpus=8, max_runtime=3 * HOUR)

    decision = place(snapshot([closing(shut, 2 * HOUR), other], [job]))

    placed = outcome(decision, "long")
    assert placed.status == "placed"
    assert {w.node_id for w in placed.workers} == {other.id}


def test_a_job_that_fits_only_on_nodes_near_their_window_waits_for_the_window_to_end():
    nodes = [closing(n, 2 * HOUR) for n in n8_a100_nodes(2)]
    first = j_training("first", gpus=8, max_runtime=3 * HOUR, priority=10)
    second = j_training("second", gpus=8, max_runtime=3 * HOUR)

    decision = place(snapshot(nodes, [first, second]))

    # The first reserves the nodes from the window's end; the second waits for the window.
    reserved = outcome(decision, "first")
    assert (reserved.status, reserved.reason) == ("reserved", "maintenance")
    assert reserved.estimated_start == NOW + 6 * HOUR
    waiting = outcome(decision, "second")
    assert (waiting.status, waiting.reason) == ("pending", "maintenance")
    assert waiting.estimated_start == NOW + 6 * HOUR


def test_a_node_in_its_window_takes_no_work_however_short():
    (node,) = n8_a100_nodes(1)
    in_window = dataclasses.replace(node, closes_at=NOW - HOUR, opens_at=NOW + HOUR)
    jobs = [j_eval("eval", gpus=1, max_runtime=60.0, priority=10), j_batch("shard", gpus=1)]

    decision = place(snapshot([in_window], jobs))

    assert {o.status for o in decision.outcomes} <= {"pending", "reserved"}
    assert outcome(decision, "eval").estimated_start == NOW + HOUR
    assert outcome(decision, "shard").reason == "maintenance"


def test_a_node_whose_window_has_no_end_gives_no_estimate():
    (node,) = n8_a100_nodes(1)
    jobs = [j_training("a", gpus=8, max_runtime=HOUR, priority=5), j_training("b", gpus=8)]

    decision = place(snapshot([closing(node, -HOUR, lasts=None)], jobs))

    assert outcome(decision, "a").status == "pending"
    assert outcome(decision, "b").reason == "maintenance"
    assert outcome(decision, "b").estimated_start is None


def test_a_job_without_a_runtime_limit_never_starts_before_a_window():
    (node,) = n8_a100_nodes(1)

    decision = place(snapshot([closing(node, 30 * 24 * HOUR)], [j_training("open-ended")]))

    assert outcome(decision, "open-ended").status != "placed"


def test_a_gang_spans_only_nodes_it_can_leave_before_their_window():
    shut = [closing(n, HOUR) for n in n8_a100_nodes(2, prefix="shut-")]
    other = list(n8_a100_nodes(2, prefix="other-"))
    gang = j_training("gang", workers=2, gpus=8, max_runtime=2 * HOUR)

    decision = place(snapshot(shut + other, [gang]))

    placed = outcome(decision, "gang")
    assert placed.status == "placed"
    assert {w.node_id for w in placed.workers} == {n.id for n in other}


def test_a_share_keeps_off_a_shared_gpu_near_its_window():
    (shut,) = n1_t4_shared_nodes(1, prefix="shut-")
    (other,) = n1_t4_shared_nodes(1, prefix="other-")
    share = j_eval("share", gpu_milli=250, max_runtime=2 * HOUR)

    decision = place(snapshot([closing(shut, HOUR), other], [share]))

    assert {w.node_id for w in outcome(decision, "share").workers} == {other.id}


def test_an_equal_request_with_a_shorter_limit_is_not_given_the_longer_ones_answer():
    (node,) = n8_a100_nodes(1)
    jobs = [j_batch(f"long-{i}", gpus=1, max_runtime=3 * HOUR, priority=100) for i in range(3)] + [
        j_batch("short", gpus=1, max_runtime=HOUR)
    ]

    # No reservation: the long jobs' answers would be reused for any equal request.
    decision = place(snapshot([closing(node, 2 * HOUR)], jobs, policy=Policy(backfill=False)))

    assert outcome(decision, "short").status == "placed"
    assert {outcome(decision, f"long-{i}").reason for i in range(3)} == {"maintenance"}


def test_a_preemptor_evicts_work_only_on_nodes_it_may_use():
    (shut,) = n8_a100_nodes(1, prefix="shut-")
    (other,) = n8_a100_nodes(1, prefix="other-")
    # The cheaper victim (started later, less work lost) is on the node about to close.
    shut, on_shut = running_on(shut, "low-shut", 8, tier=0, preemptible=True, started_at=NOW - 60)
    other, on_other = running_on(other, "low-other", 8, tier=0, preemptible=True)
    urgent = j_training("urgent", gpus=8, tier=5, max_runtime=3 * HOUR)

    decision = place(snapshot([closing(shut, HOUR), other], [urgent], [on_shut, on_other]))

    assert outcome(decision, "urgent").status == "preempts"
    assert decision.preempted == ("low-other",)


def test_work_running_into_the_window_frees_its_node_for_a_reservation_after_the_window():
    (node,) = n8_a100_nodes(1)
    node, running = running_on(node, "old", 8, expected_end=NOW + 30 * 60)
    job = j_training("next", gpus=8, max_runtime=3 * HOUR)

    # The old job ends before the window, but the next one would run into it: it waits for
    # the window's end, not for the old job's.
    decision = place(snapshot([closing(node, HOUR)], [job], [running]))

    reserved = outcome(decision, "next")
    assert (reserved.status, reserved.reason) == ("reserved", "maintenance")
    assert reserved.estimated_start == NOW + 5 * HOUR


def test_without_windows_the_placement_is_unchanged():
    nodes = n8_a100_nodes(3)
    jobs = [j_training(f"t{i}", gpus=4, max_runtime=(i + 1) * HOUR) for i in range(5)]
    far = [closing(n, 365 * 24 * HOUR) for n in nodes]

    plain = place(snapshot(nodes, jobs, policy=Policy()))
    distant = place(snapshot(far, jobs, policy=Policy()))

    assert plain.outcomes == distant.outcomes
