"""A batch's limit on how many of its shards run at once (Slurm's array throttle,
``--array=0-999%10``): a shard that would take its batch past it waits as
``batch_shard_limit``, whatever capacity is free, and neither evicts nor reserves for it.

``want`` is the set of jobs placed; every other job of the case waits.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest

from jobs.placement import Policy, QueuedJob, RunningJob, place
from tests.placement.builders import (
    NOW,
    j_batch,
    j_training,
    n8_a100_nodes,
    running_on,
    snapshot,
)


def shards(batch: str, count: int, limit: int | None = 3, first: int = 0, **kw) -> tuple:
    """``count`` queued one-GPU shards of batch ``batch`` (ids ``<batch>-00``...), at most
    ``limit`` of which may run at once."""
    return tuple(
        j_batch(f"{batch}-{i:02d}", batch=batch, max_running_shards=limit, **kw)
        for i in range(first, first + count)
    )


def running_shards(batch: str, count: int, stopping: bool = False, tenant: str = "alpha"):
    """An 8-GPU node with ``count`` running one-GPU shards of ``batch``, and those shards."""
    (node,) = n8_a100_nodes(1)
    running: list[RunningJob] = []
    for i in range(count):
        node, job = running_on(
            node, f"{batch}-run{i}", 1, tenant=tenant, batch=batch, stopping=stopping,
            expected_end=NOW + 600,
        )  # fmt: skip
        running.append(job)
    return node, tuple(running)


@dataclass
class Case:
    name: str
    queued: tuple
    want: set[str]
    running: int = 0  # shards of batch "b" running on an extra node...
    stopping: bool = False  # ...in their grace period
    nodes: int = 2  # free 8-GPU nodes
    by_limit: bool = True  # whether the jobs left waiting wait for the limit (else for room)


CASES = [
    Case(
        "a batch of 10 one-GPU shards with a limit of 3 on 16 GPUs places 3",
        shards("b", 10),
        {"b-00", "b-01", "b-02"},
    ),
    Case(
        "running shards count against the limit",
        shards("b", 10),
        {"b-00"},
        running=2,
    ),
    Case(
        "a batch at its limit places none",
        shards("b", 10),
        set(),
        running=3,
    ),
    Case(
        "shards in their grace period count as running",
        shards("b", 10),
        {"b-00"},
        running=2,
        stopping=True,
    ),
    Case(
        "another batch of the tenant is not held",
        shards("b", 4) + shards("c", 2, limit=None),
        {"c-00", "c-01"},
        running=3,
    ),
    Case(
        "another batch's limit is its own",
        shards("b", 4) + shards("c", 4, limit=2),
        {"c-00", "c-01"},
        running=3,
    ),
    Case(
        "another tenant's jobs are not held",
        shards("b", 4) + (j_batch("beta-job", tenant="beta"),),
        {"beta-job"},
        running=3,
    ),
    Case(
        "a single job of the tenant is not held",
        shards("b", 4) + (j_training("train", gpus=4),),
        {"train"},
        running=3,
    ),
    Case(
        "a batch without a limit is not held",
        shards("b", 10, limit=None),
        {f"b-{i:02d}" for i in range(10)},
        by_limit=False,
    ),
    Case(
        "a limit above what fits leaves the rest waiting for room",
        shards("b", 20, limit=18),
        {f"b-{i:02d}" for i in range(16)},
        by_limit=False,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_it_places_as_the_table_says(case: Case):
    nodes, running = list(n8_a100_nodes(case.nodes)), ()
    if case.running:
        node, running = running_shards("b", case.running, case.stopping)
        nodes.append(node)
    decision = place(snapshot(nodes, case.queued, running))

    placed = {o.job_id for o in decision.outcomes if o.status == "placed"}
    reasons = {o.reason for o in decision.outcomes if o.status != "placed"}
    assert placed == case.want
    held = "batch_shard_limit"
    assert reasons <= {held} if case.by_limit else held not in reasons


def test_the_reason_says_how_many_run_and_how_many_may():
    node, running = running_shards("b", 3)

    waiting = place(snapshot((node,), shards("b", 1), running)).by_job()["b-00"]

    assert (waiting.status, waiting.reason) == ("pending", "batch_shard_limit")
    assert waiting.message.endswith(
        "3 of its batch's shards run, at most 3 may run at once: it starts when one of them ends."
    )


def test_a_limit_lowered_below_what_runs_says_how_many_must_end():
    node, running = running_shards("b", 5)

    waiting = place(snapshot((node,), shards("b", 1), running)).by_job()["b-00"]

    assert waiting.message.endswith(
        "5 of its batch's shards run, at most 3 may run at once: it starts when 3 of them end."
    )


def test_a_shard_ending_lets_one_more_start():
    node, running = running_shards("b", 3)
    queued = shards("b", 5)

    before = place(snapshot((node,), queued, running))
    after = place(snapshot((node,), queued, running[1:]))  # b-run0 has ended

    assert not [o for o in before.outcomes if o.status == "placed"]
    assert [o.job_id for o in after.outcomes if o.status == "placed"] == ["b-00"]


def test_a_held_shard_evicts_nobody():
    (node,) = n8_a100_nodes(1)
    node, low = running_on(node, "low", 8, tenant="beta", preemptible=True)
    node2, running = running_shards("b", 3)
    urgent = shards("b", 1, tier=5, gpus=8, cpu_milli=1000, memory_mb=1000)

    decision = place(snapshot((node, node2), urgent, (low, *running)))

    assert (decision.by_job()["b-00"].reason, decision.preempted) == ("batch_shard_limit", ())


def test_a_held_shard_holds_no_nodes_back_from_later_jobs():
    (node,) = n8_a100_nodes(1)
    node, busy = running_on(node, "busy", 6, tenant="beta", expected_end=NOW + 60)
    node2, running = running_shards("b", 3)
    node2, full = running_on(node2, "full", 5, tenant="beta")  # room left: 2 GPUs of "node"
    held = shards("b", 1, gpus=8, priority=1000)  # first in the queue, and blocked
    later = j_training("later", gpus=2, max_runtime=7200.0, submit_time=NOW)

    decision = place(snapshot((node, node2), held + (later,), (busy, full, *running)))

    outcomes = decision.by_job()
    assert outcomes["b-00"].reason == "batch_shard_limit"
    assert not [o for o in decision.outcomes if o.status == "reserved"]
    assert outcomes["later"].status == "placed"  # on the GPUs a reservation would have held


def half_busy_node():
    """An 8-GPU node with 4 GPUs held by another tenant's work nobody may evict."""
    (node,) = n8_a100_nodes(1)
    return running_on(node, "theirs", 4, tenant="beta")


def test_a_preempting_shard_counts_from_its_decision():
    (node,) = n8_a100_nodes(1)
    node, victim = running_on(
        node, "victim", 8, tenant="beta", preemptible=True, stopping=True, expected_end=NOW + 60
    )
    half, theirs = half_busy_node()
    # Its victim is leaving: it waits for the room, and keeps its batch's one turn meanwhile.
    preemptor = dataclasses.replace(shards("b", 1, limit=1, gpus=8, tier=5)[0], preempting=True)
    later = shards("b", 1, limit=1, first=1)  # would fit beside "theirs"

    decision = place(snapshot((node, half), (preemptor, *later), (victim, theirs)))

    outcomes = decision.by_job()
    assert outcomes["b-00"].status in ("pending", "reserved")  # waiting for its room
    assert (outcomes["b-01"].status, outcomes["b-01"].reason) == ("pending", "batch_shard_limit")


def test_a_shard_that_evicts_in_the_cycle_counts_as_running():
    (node,) = n8_a100_nodes(1)
    node, victim = running_on(node, "victim", 8, tenant="beta", preemptible=True)
    half, theirs = half_busy_node()
    urgent = shards("b", 1, limit=2, gpus=8, tier=5)
    rest = shards("b", 3, limit=2, first=1, submit_time=NOW + 1)

    decision = place(snapshot((node, half), urgent + rest, (victim, theirs)))

    outcomes = decision.by_job()
    assert outcomes["b-00"].status == "preempts"
    assert [o.job_id for o in decision.outcomes if o.status == "placed"] == ["b-01"]
    assert {outcomes["b-02"].reason, outcomes["b-03"].reason} == {"batch_shard_limit"}


def test_a_preempting_shard_placed_once_its_victims_have_gone_counts_once():
    # Its victims gone, it is placed: counted from its decision, not again by its placement.
    preemptor = dataclasses.replace(shards("b", 1, limit=2, tier=5)[0], preempting=True)
    later = shards("b", 2, limit=2, first=1)

    decision = place(snapshot(n8_a100_nodes(1), (preemptor, *later)))

    placed = [o.job_id for o in decision.outcomes if o.status == "placed"]
    assert placed == ["b-00", "b-01"]
    assert decision.by_job()["b-02"].reason == "batch_shard_limit"


def test_shards_held_by_their_batch_do_not_use_up_the_queue_depth():
    queued: tuple[QueuedJob, ...] = shards("b", 10, limit=1, priority=100)
    queued += (j_training("behind", gpus=1),)

    decision = place(snapshot(n8_a100_nodes(1), queued, policy=Policy(queue_depth=2)))

    placed = {o.job_id for o in decision.outcomes if o.status == "placed"}
    assert placed == {"b-00", "behind"}


def test_a_held_shard_is_told_when_enough_of_its_batch_will_have_ended():
    # Five run, ending in 1 to 5 minutes; at most three may: three must end for one more to
    # start, the third-earliest end is its estimate.
    (node,) = n8_a100_nodes(1)
    running = []
    for i, minutes in enumerate((5, 1, 4, 2, 3)):
        node, job = running_on(node, f"b-run{i}", 1, batch="b", expected_end=NOW + 60 * minutes)
        running.append(job)

    waiting = place(snapshot((node,), shards("b", 1), running)).by_job()["b-00"]

    assert (waiting.reason, waiting.estimated_start) == ("batch_shard_limit", NOW + 180)


def test_a_shard_held_behind_one_placed_in_the_cycle_counts_its_runtime_limit():
    queued = shards("b", 2, limit=1, max_runtime=900)

    decision = place(snapshot(n8_a100_nodes(1), queued)).by_job()

    assert decision["b-00"].status == "placed"
    assert decision["b-01"].estimated_start == NOW + 900


def test_a_shard_whose_batch_runs_work_of_unknown_end_has_no_estimate():
    node, running = running_shards("b", 3)
    running = (dataclasses.replace(running[0], expected_end=None), *running[1:])

    waiting = place(snapshot((node,), shards("b", 1), running)).by_job()["b-00"]

    assert (waiting.reason, waiting.estimated_start) == ("batch_shard_limit", None)
