"""What a preemption's victims free beyond their preemptor's slots is nobody's in that cycle:
they still run on it through their grace period, so the commit would refuse a job placed there.
A later job that fits once they have gone waits for them, and evicts nobody for it."""

import dataclasses
import random
from collections import defaultdict

from jobs.placement import Policy, place
from tests.placement.builders import (
    NOW,
    j_training,
    n8_a100_nodes,
    running_on,
    snapshot,
)
from tests.placement.test_own_quota_books import random_snapshot


def _victim_on_one_node(extra_free: int = 0):
    (node,) = n8_a100_nodes(1)
    node, victim = running_on(node, "victim", 8 - extra_free, preemptible=True,
                              last_checkpoint=NOW - 60)  # fmt: skip
    preemptor = j_training("preemptor", gpus=4, tier=5, max_runtime=3600.0)
    later = j_training("later", gpus=4, tier=0, max_runtime=3600.0)
    return node, victim, (preemptor, later)


def test_a_later_job_does_not_take_what_the_victim_frees_beyond_the_preemptor():
    node, victim, queue = _victim_on_one_node()

    decision = place(snapshot((node,), queue, running=(victim,)))

    outcomes = decision.by_job()
    assert decision.preempted == ("victim",)
    assert outcomes["preemptor"].status == "preempts"
    # It holds the room from when the victim is due back, as the next cycle would see it.
    assert outcomes["later"].status == "reserved"
    assert outcomes["later"].estimated_start == NOW + Policy().eviction_grace_s


def test_without_a_reservation_it_waits_for_the_victim_to_go():
    node, victim, queue = _victim_on_one_node()

    decision = place(snapshot((node,), queue, running=(victim,), policy=Policy(backfill=False)))

    assert decision.by_job()["later"].reason == "waiting_for_preemption"


def test_the_later_job_evicts_nobody_more_for_that_room():
    (node,) = n8_a100_nodes(1)
    node, victim = running_on(node, "victim", 4, preemptible=True)
    node, other = running_on(node, "other", 4, preemptible=True)
    preemptor = j_training("preemptor", gpus=2, tier=5, max_runtime=3600.0)
    later = j_training("later", gpus=2, tier=3, max_runtime=3600.0)

    decision = place(snapshot((node,), (preemptor, later), running=(victim, other)))

    assert len(decision.preempted) == 1
    assert decision.by_job()["later"].status == "reserved"


def test_room_that_was_free_before_the_eviction_stays_free():
    # Two GPUs free besides the victim's six: the preemptor takes four of the victim's, and
    # the two that were free are still there for a later job.
    node, victim, (preemptor, _) = _victim_on_one_node(extra_free=2)
    later = j_training("later", gpus=2, tier=0, max_runtime=3600.0)

    decision = place(snapshot((node,), (preemptor, later), running=(victim,)))

    outcomes = decision.by_job()
    assert outcomes["preemptor"].status == "preempts"
    assert outcomes["later"].status == "placed"
    held = set(victim.allocations[0].gpus and (i for i, _ in victim.allocations[0].gpus))
    assert not held & set(outcomes["later"].workers[0].gpu_indices)


def test_a_victim_due_to_end_before_its_grace_is_over_frees_its_room_at_its_end():
    node, victim, (preemptor, later) = _victim_on_one_node()
    victim = dataclasses.replace(victim, expected_end=NOW + 10)

    decision = place(snapshot((node,), (preemptor, later), running=(victim,)))

    assert decision.by_job()["later"].estimated_start == NOW + 10


def test_on_random_clusters_placed_jobs_only_use_what_was_free_at_the_start():
    # What the commit checks: a job placed now (not a preemptor, which waits for its
    # victims) takes only capacity nobody holds in the snapshot.
    evicting = 0
    for seed in range(1500):
        snap = random_snapshot(random.Random(seed))
        decision = place(snap)
        evicting += bool(decision.preempted)
        gpus, cpu, mem = defaultdict(int), defaultdict(int), defaultdict(int)
        for outcome in decision.outcomes:
            if outcome.status != "placed":
                continue
            for w in outcome.workers:
                for index in w.gpu_indices:
                    gpus[w.node_id, index] += w.gpu_milli
                cpu[w.node_id] += w.cpu_milli
                mem[w.node_id] += w.memory_mb
        free = {n.id: n for n in snap.nodes}
        for (node_id, index), milli in gpus.items():
            assert milli <= free[node_id].gpu_free_milli[index], (seed, node_id, index)
        for node_id, used in cpu.items():
            assert used <= free[node_id].cpu_free_milli, (seed, node_id)
        for node_id, used in mem.items():
            assert used <= free[node_id].memory_free_mb, (seed, node_id)
    assert evicting > 100  # the random clusters do evict
