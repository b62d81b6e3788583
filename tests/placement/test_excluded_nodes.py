"""A job never runs on the nodes it excludes (Slurm's --exclude: a node a team knows is bad for
it), whatever else is free: unlike the nodes it failed on, never given up, even when no other
node could ever hold it. What both keep alike (a request's kind, the victim search):
test_failed_nodes.py."""

from __future__ import annotations

from jobs.placement import place
from tests.placement.builders import (
    NOW,
    j_training,
    n8_a100_nodes,
    running_on,
    snapshot,
)
from tests.placement.test_failed_nodes import nodes_of


def test_a_job_is_placed_off_the_node_it_excludes():
    bad, good = n8_a100_nodes(2)
    job = j_training("train", gpus=4, exclude_nodes=(bad.id,))

    outcome = place(snapshot([bad, good], [job])).by_job()["train"]

    assert outcome.status == "placed"
    assert nodes_of(outcome) == {good.id}


def test_it_waits_rather_than_run_on_a_node_it_excludes_even_its_only_one():
    (only,) = n8_a100_nodes(1)
    job = j_training("train", gpus=8, exclude_nodes=(only.id,))

    outcome = place(snapshot([only], [job])).by_job()["train"]

    assert outcome.status in {"pending", "reserved"}
    assert outcome.reason == "excluded_nodes"
    assert only.id not in outcome.reserved_nodes


def test_excluded_and_failed_nodes_together_keep_it_off_both():
    failed, excluded, busy_node = n8_a100_nodes(3)
    busy_node, busy = running_on(busy_node, "busy", 8, expected_end=NOW + 600)
    job = j_training("train", gpus=8, avoid_nodes=(failed.id,), exclude_nodes=(excluded.id,))

    outcome = place(snapshot([failed, excluded, busy_node], [job], [busy])).by_job()["train"]

    assert outcome.status in {"pending", "reserved"}
    assert outcome.estimated_start == NOW + 600  # the one node it may use, once it frees up
    assert not {failed.id, excluded.id} & set(outcome.reserved_nodes)


def test_a_gang_spreads_over_the_nodes_it_does_not_exclude():
    a, bad, b = n8_a100_nodes(3)
    gang = j_training("gang", workers=2, gpus=8, exclude_nodes=(bad.id,))

    outcome = place(snapshot([a, bad, b], [gang])).by_job()["gang"]

    assert nodes_of(outcome) == {a.id, b.id}


def test_no_victim_is_evicted_for_a_job_that_could_only_use_a_node_it_excludes():
    (bad,) = n8_a100_nodes(1)
    bad, on_bad = running_on(bad, "low", 8, preemptible=True)
    urgent = j_training("urgent", gpus=8, tier=5, exclude_nodes=(bad.id,))

    decision = place(snapshot([bad], [urgent], [on_bad]))

    assert decision.by_job()["urgent"].status == "pending"
    assert decision.preempted == ()
