"""A job that requires node features (Slurm's --constraint=ib&nvme: InfiniBand, local NVMe)
runs only on nodes that offer every one of them, whatever else is free; a job that requires
none runs on any node, featured or not."""

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
    share_running_on,
    snapshot,
    with_ranges,
)
from tests.placement.test_failed_nodes import nodes_of

IB = frozenset({"ib"})


def offering(node, *features: str):
    return dataclasses.replace(node, features=frozenset(features))


def test_a_job_runs_only_on_a_node_that_offers_its_features():
    plain, ib = n8_a100_nodes(2)
    ib = offering(ib, "ib")
    job = j_training("train", gpus=4, features=IB)

    outcome = place(snapshot([plain, ib], [job])).by_job()["train"]

    assert outcome.status == "placed" and nodes_of(outcome) == {ib.id}


def test_it_needs_every_feature_it_requires():
    ib_only, both = offering(n8_a100_nodes(1)[0], "ib"), offering(n8_a100_nodes(1)[0], "ib", "nvme")
    job = j_training("train", gpus=8, features=frozenset({"ib", "nvme"}))

    outcome = place(snapshot([ib_only, both], [job])).by_job()["train"]

    assert nodes_of(outcome) == {both.id}


def test_a_job_that_requires_none_runs_on_a_featured_node():
    (ib,) = n8_a100_nodes(1)
    job = j_training("train", gpus=8)

    outcome = place(snapshot([offering(ib, "ib")], [job])).by_job()["train"]

    assert outcome.status == "placed"


def test_it_holds_its_featured_node_while_others_are_free():
    plain, ib = n8_a100_nodes(2)
    ib, busy = running_on(offering(ib, "ib"), "busy", 8, expected_end=NOW + 600)
    job = j_training("train", gpus=8, features=IB)

    outcome = place(snapshot([plain, ib], [job], [busy])).by_job()["train"]

    assert (outcome.status, outcome.reserved_nodes) == ("reserved", (ib.id,))
    assert outcome.estimated_start == NOW + 600  # its one node, once it frees up


def test_a_job_that_holds_nothing_waits_for_its_features_saying_so():
    plain, ib = n8_a100_nodes(2)
    ib, busy = running_on(offering(ib, "ib"), "busy", 8, expected_end=NOW + 600)
    job = j_training("train", gpus=8, features=IB)

    decision = place(snapshot([plain, ib], [job], [busy], policy=Policy(backfill=False)))

    outcome = decision.by_job()["train"]
    assert (outcome.status, outcome.reason) == ("pending", "lacking_features")
    assert outcome.message.endswith(
        "It would fit, but only on nodes without a feature it requires: it waits for nodes "
        "that have them all."
    )


def test_no_node_offering_them_is_said_as_such():
    job = j_training("train", gpus=8, features=frozenset({"nvme"}))

    outcome = place(snapshot([offering(n8_a100_nodes(1)[0], "ib")], [job])).by_job()["train"]

    assert (outcome.status, outcome.reason) == ("pending", "no_node_with_features")


def test_a_gang_larger_than_its_featured_nodes_can_never_fit():
    first, second, plain = n8_a100_nodes(3)
    gang = j_training("gang", workers=3, gpus=8, features=IB)

    outcome = place(
        snapshot([offering(first, "ib"), offering(second, "ib"), plain], [gang])
    ).by_job()["gang"]

    assert outcome.reason == "worker_too_large"


def test_a_gang_spreads_over_its_featured_nodes_alone():
    a, plain, b = n8_a100_nodes(3)
    a, b = offering(a, "ib"), offering(b, "ib")
    gang = j_training("gang", workers=2, gpus=8, features=IB)

    outcome = place(snapshot([a, plain, b], [gang])).by_job()["gang"]

    assert nodes_of(outcome) == {a.id, b.id}


def test_jobs_alike_but_for_their_features_are_each_decided():
    # The cycle reuses an answer for jobs of one request: features are part of it.
    plain, ib = n8_a100_nodes(2)
    ib, busy = running_on(offering(ib, "ib"), "busy", 8, expected_end=NOW + 600)
    shards = [j_batch(f"s{i}", gpus=4, features=IB if i < 2 else frozenset(),
                      submit_time=NOW - 100 + i) for i in range(4)]  # fmt: skip

    outcomes = place(snapshot([plain, ib], shards, [busy])).by_job()

    assert [outcomes[f"s{i}"].status == "placed" for i in range(4)] == [False, False, True, True]


def test_no_victim_on_a_node_without_its_features_is_evicted_for_it():
    plain, ib = n8_a100_nodes(2)
    plain, low = running_on(plain, "low", 8, preemptible=True)
    ib, on_ib = running_on(offering(ib, "ib"), "on-ib", 8, preemptible=True)
    urgent = j_training("urgent", gpus=8, tier=5, features=IB)

    decision = place(snapshot([plain, ib], [urgent], [low, on_ib]))

    assert decision.preempted == ("on-ib",)


# -- start estimates ---------------------------------------------------------------------------
# A job that holds nothing (backfill off) is estimated to start when enough GPUs should have
# freed up on the nodes offering its features, however soon others free up.

NO_HOLD = Policy(backfill=False)


def waiting(nodes, job, running) -> tuple[str, float | None]:
    outcome = place(snapshot(nodes, [job], running, policy=NO_HOLD)).by_job()[job.id]
    assert outcome.status == "pending"
    return outcome.reason, outcome.estimated_start


def busy_pair() -> tuple[list, list]:
    """A plain node freed soon, and an InfiniBand one freed later."""
    plain, ib = n8_a100_nodes(2)
    plain, soon = running_on(plain, "soon", 8, expected_end=NOW + 300)
    ib, late = running_on(offering(ib, "ib"), "late", 8, expected_end=NOW + 900)
    return [plain, ib], [soon, late]


def test_a_gang_is_estimated_from_when_its_featured_nodes_free_up():
    nodes, running = busy_pair()

    assert waiting(nodes, j_training("train", gpus=8, features=IB), running)[1] == NOW + 900


def test_independent_workers_are_estimated_from_when_their_featured_nodes_free_up():
    nodes, running = busy_pair()

    assert waiting(nodes, j_batch("shards", 2, gpus=4, features=IB), running)[1] == NOW + 900


def test_a_job_requiring_no_feature_is_estimated_from_the_first_node_to_free_up():
    nodes, running = busy_pair()

    assert waiting(nodes, j_training("train", gpus=8), running)[1] == NOW + 300


def test_a_gang_in_one_domain_is_estimated_from_its_featured_nodes_alone():
    # Two racks of two nodes; rack a frees up first but only one of its nodes offers ib.
    a1, a2, b1, b2 = (
        dataclasses.replace(node, topology=(f"rack={rack}",))
        for node, rack in zip(n8_a100_nodes(4), "aabb", strict=True)
    )
    a1, a2, b1, b2 = offering(a1, "ib"), a2, offering(b1, "ib"), offering(b2, "ib")
    running = []
    for i, (node, end) in enumerate([(a1, 300), (a2, 300), (b1, 900), (b2, 900)]):
        node, job = running_on(node, f"r{i}", 8, expected_end=NOW + end)
        running.append((node, job))
    gang = j_training("gang", workers=2, gpus=8, features=IB, topology="rack")

    _, start = waiting([n for n, _ in running], gang, [j for _, j in running])

    assert start == NOW + 900


def test_shares_are_estimated_from_the_featured_gpus_alone():
    plain, ib = (with_ranges(node) for node in n1_t4_shared_nodes(2))
    plain, soon = share_running_on(plain, "soon", 0, 800, expected_end=NOW + 300)
    ib, late = share_running_on(offering(ib, "ib"), "late", 0, 800, expected_end=NOW + 900)
    job = j_eval("eval", gpu_milli=500, features=IB)

    assert waiting([plain, ib], job, [soon, late])[1] == NOW + 900
