"""An exclusive job (Slurm's --exclusive) takes nodes to itself: each worker a node with exactly
the GPUs it asks for (none for CPU-only work) and nothing else running, and nothing else goes
there while it runs, though its workers are given what they asked for alone."""

from __future__ import annotations

import dataclasses

from jobs.placement import place
from jobs.placement.model import Allocation, Policy, Quota, RunningJob, Tenant
from tests.placement.builders import (
    NOW,
    cpu_nodes,
    j_batch,
    j_training,
    n4_a100_nodes,
    n8_a100_nodes,
    running_on,
    snapshot,
)
from tests.placement.test_failed_nodes import nodes_of


def cpu_work_on(node, id: str, cpu: int = 4000, **kw):
    """CPU-only work running on the node, and the node without its CPU and memory."""
    node = dataclasses.replace(
        node, cpu_free_milli=node.cpu_free_milli - cpu, memory_free_mb=node.memory_free_mb - cpu
    )
    kw.setdefault("started_at", NOW - 3600)
    return node, RunningJob(id, "beta", allocations=(Allocation(node.id, (), cpu, cpu),), **kw)


def cpu_job(id: str, cpu: int = 4000, **kw):
    return j_batch(id, gpus=0, cpu_milli=cpu, memory_mb=cpu, **kw)


def test_it_takes_an_idle_node_of_exactly_its_gpus_and_is_given_what_it_asked_for():
    (large,) = n8_a100_nodes(1)
    (small,) = n4_a100_nodes(1)
    job = j_training("solo", gpus=4, exclusive=True)

    outcome = place(snapshot([large, small], [job])).by_job()["solo"]

    assert outcome.status == "placed"
    assert nodes_of(outcome) == {small.id}
    (worker,) = outcome.workers
    assert worker.gpu_indices == (0, 1, 2, 3)
    assert (worker.cpu_milli, worker.memory_mb) == (job.cpu_milli, job.memory_mb)


def test_nothing_else_goes_on_its_node_in_the_same_cycle():
    (node,) = n8_a100_nodes(1)
    solo = j_training("solo", gpus=8, exclusive=True)
    small = cpu_job("small", submit_time=NOW + 1)

    decision = place(snapshot([node], [solo, small])).by_job()

    assert decision["solo"].status == "placed"
    assert decision["small"].status != "placed"


def test_a_running_exclusive_job_keeps_other_work_off_its_node():
    (node,) = n8_a100_nodes(1)
    node, running = running_on(node, "solo", 8, exclusive=True)
    small = cpu_job("small")

    kept_off = place(snapshot([node], [small], [running])).by_job()["small"]
    beside = place(snapshot([node], [small], [dataclasses.replace(running, exclusive=False)]))

    assert kept_off.status != "placed"
    assert beside.by_job()["small"].status == "placed"


def test_its_end_gives_back_the_whole_node_to_a_reservation():
    (node,) = n8_a100_nodes(1)
    node, running = running_on(node, "solo", 8, exclusive=True, expected_end=NOW + 600)
    large = j_training("large", gpus=8, cpu_milli=32_000)

    outcome = place(snapshot([node], [large], [running])).by_job()["large"]

    assert outcome.status == "reserved"
    assert outcome.estimated_start == NOW + 600


def test_it_waits_for_other_work_to_leave_a_node_whose_gpus_are_free():
    (node,) = n8_a100_nodes(1)
    node, busy = cpu_work_on(node, "cpu")
    solo = j_training("solo", gpus=8, exclusive=True)

    outcome = place(snapshot([node], [solo], [busy])).by_job()["solo"]
    beside = place(snapshot([node], [dataclasses.replace(solo, exclusive=False)], [busy]))

    assert outcome.status == "pending"
    assert outcome.reason == "nodes_in_use"
    assert beside.by_job()["solo"].status == "placed"


def test_it_reserves_the_node_from_when_the_work_there_ends():
    (node,) = n8_a100_nodes(1)
    node, busy = cpu_work_on(node, "cpu", expected_end=NOW + 900)
    solo = j_training("solo", gpus=8, exclusive=True)

    outcome = place(snapshot([node], [solo], [busy])).by_job()["solo"]

    assert outcome.status == "reserved"
    assert outcome.reserved_nodes == (node.id,)
    assert outcome.estimated_start == NOW + 900


def test_a_gang_takes_a_node_per_worker():
    (large,) = n8_a100_nodes(1)
    smalls = n4_a100_nodes(2)
    gang = j_training("gang", workers=2, gpus=4, exclusive=True)
    packed = place(snapshot([large, *smalls], [dataclasses.replace(gang, exclusive=False)]))

    outcome = place(snapshot([large, *smalls], [gang])).by_job()["gang"]

    assert nodes_of(packed.by_job()["gang"]) == {large.id}
    assert outcome.status == "placed"
    assert nodes_of(outcome) == {n.id for n in smalls}


def test_shards_each_take_a_node_all_or_none():
    two = cpu_nodes(2)
    batch = cpu_job("batch", cpu=1000, shards=3, exclusive=True)
    fewer = dataclasses.replace(batch, workers=2)
    shared = dataclasses.replace(batch, exclusive=False)

    assert place(snapshot(two, [shared])).by_job()["batch"].status == "placed"
    assert place(snapshot(two, [batch])).by_job()["batch"].status != "placed"
    outcome = place(snapshot(two, [fewer])).by_job()["batch"]
    assert outcome.status == "placed"
    assert nodes_of(outcome) == {n.id for n in two}


def test_cpu_only_work_takes_a_node_without_gpus():
    gpu_nodes = n8_a100_nodes(2)
    (plain,) = cpu_nodes(1)
    job = cpu_job("cpu", exclusive=True)

    outcome = place(snapshot([*gpu_nodes, plain], [job])).by_job()["cpu"]

    assert outcome.status == "placed"
    assert nodes_of(outcome) == {plain.id}


def test_no_node_of_exactly_its_gpus_means_it_can_never_fit():
    large = n8_a100_nodes(2)
    job = j_training("solo", gpus=4, exclusive=True)
    cpu = cpu_job("cpu", exclusive=True)

    decision = place(snapshot(large, [job, cpu])).by_job()

    assert decision["solo"].reason == "no_node_to_itself"
    assert decision["solo"].estimated_start is None
    assert decision["cpu"].reason == "no_node_to_itself"


def test_a_failed_larger_request_does_not_stop_a_smaller_one_of_other_nodes():
    (large,) = n8_a100_nodes(1)
    (small,) = n4_a100_nodes(1)
    large, busy = cpu_work_on(large, "cpu")
    first = j_training("eight", gpus=8, exclusive=True)
    second = j_training("four", gpus=4, exclusive=True, submit_time=NOW + 1)
    policy = Policy(backfill=False)

    decision = place(snapshot([large, small], [first, second], [busy], policy=policy)).by_job()

    assert decision["eight"].status == "pending"
    assert decision["four"].status == "placed"
    assert nodes_of(decision["four"]) == {small.id}


def test_a_higher_tier_evicts_everything_on_the_node():
    (node,) = n8_a100_nodes(1)
    node, gpu_work = running_on(node, "gpu", 2, preemptible=True, tenant="beta")
    node, cpu_work = cpu_work_on(node, "cpu", preemptible=True)
    urgent = j_training("urgent", gpus=8, tier=5, exclusive=True)

    decision = place(snapshot([node], [urgent], [gpu_work, cpu_work]))

    assert decision.by_job()["urgent"].status == "preempts"
    assert set(decision.preempted) == {"gpu", "cpu"}


def test_nobody_is_evicted_where_work_that_may_not_be_would_stay():
    (node,) = n8_a100_nodes(1)
    node, gpu_work = running_on(node, "gpu", 2, preemptible=True, tenant="beta")
    node, cpu_work = cpu_work_on(node, "cpu", preemptible=False)
    urgent = j_training("urgent", gpus=8, tier=5, exclusive=True)

    decision = place(snapshot([node], [urgent], [gpu_work, cpu_work]))

    assert decision.by_job()["urgent"].status != "preempts"
    assert decision.preempted == ()


def test_its_estimate_is_when_a_node_of_its_size_is_left_empty():
    first, second = n8_a100_nodes(2)
    first, early = cpu_work_on(first, "early", cpu=2000, expected_end=NOW + 300)
    first, late = cpu_work_on(first, "late", cpu=2000, expected_end=NOW + 900)
    second, middle = cpu_work_on(second, "middle", expected_end=NOW + 600)
    solo = j_training("solo", gpus=8, exclusive=True)
    pair = j_training("pair", workers=2, gpus=8, exclusive=True, submit_time=NOW + 1)
    running = [early, late, middle]
    policy = Policy(backfill=False)

    decision = place(snapshot([first, second], [solo, pair], running, policy=policy)).by_job()

    assert decision["solo"].reason == "nodes_in_use"
    assert decision["solo"].estimated_start == NOW + 600  # the second node, empty first
    assert decision["pair"].estimated_start == NOW + 900  # both: the first's last work


def test_work_of_no_known_end_on_its_nodes_gives_no_estimate_and_cpu_work_one():
    (node,) = n8_a100_nodes(1)
    node, endless = cpu_work_on(node, "endless")
    (plain,) = cpu_nodes(1)
    plain, ending = cpu_work_on(plain, "ending", expected_end=NOW + 120)
    solo = j_training("solo", gpus=8, exclusive=True)
    cpu = cpu_job("cpu", exclusive=True)
    policy = Policy(backfill=False)

    decision = place(snapshot([node, plain], [solo, cpu], [endless, ending], policy=policy))

    assert decision.by_job()["solo"].estimated_start is None
    assert decision.by_job()["cpu"].estimated_start == NOW + 120


def test_evicting_its_own_teams_work_charges_its_quota_what_it_asks_not_its_whole_node():
    (node,) = n8_a100_nodes(1)
    node, low = running_on(node, "low", 8, preemptible=True)
    (plain,) = cpu_nodes(1)
    plain = dataclasses.replace(plain, cpu_free_milli=32_000, memory_free_mb=32_000)
    quotas = (Quota("gpu:a100", 8000, 0), Quota("cpu", 20_000, 0))
    alpha = Tenant("alpha", quotas=quotas, usage={"gpu:a100": 8000, "cpu": 8000})
    urgent = j_training("urgent", gpus=8, tier=5, exclusive=True)
    later = cpu_job("later", cpu=20_000)  # past the CPU quota beside the work still leaving

    decision = place(snapshot([node, plain], [urgent, later], [low], [alpha])).by_job()

    assert decision["urgent"].status == "preempts"
    assert decision["later"].reason == "quota_exceeded"
