"""A job retried after an infrastructure failure keeps off the nodes it failed on (a bad GPU, a
node that cannot start it), as Armada's retries avoid the nodes a run was attempted on; unless
no other node could ever hold it, when it runs again where it failed rather than never."""

from __future__ import annotations

import dataclasses

import pytest

from jobs.placement import Policy, place
from tests.placement.builders import (
    NOW,
    j_batch,
    j_training,
    n8_a100_nodes,
    running_on,
    snapshot,
)


def nodes_of(outcome) -> set[str]:
    return {w.node_id for w in outcome.workers}


def test_a_retried_job_is_placed_off_the_node_it_failed_on():
    bad, good = n8_a100_nodes(2)
    job = j_training("retry", gpus=4, avoid_nodes=(bad.id,))

    outcome = place(snapshot([bad, good], [job])).by_job()["retry"]

    assert outcome.status == "placed"
    assert nodes_of(outcome) == {good.id}


def test_it_waits_for_other_nodes_rather_than_go_back_where_it_failed():
    bad, other = n8_a100_nodes(2)
    other, busy = running_on(other, "busy", 8, expected_end=NOW + 600)
    job = j_training("retry", gpus=4, avoid_nodes=(bad.id,))

    outcome = place(snapshot([bad, other], [job], [busy])).by_job()["retry"]

    assert outcome.status in {"pending", "reserved"}
    assert outcome.reason in {"avoiding_failed_nodes", "head_of_line"}
    assert outcome.estimated_start == NOW + 600
    assert bad.id not in outcome.reserved_nodes


def test_a_second_job_is_told_why_it_waits():
    bad, other = n8_a100_nodes(2)
    other, busy = running_on(other, "busy", 8, expected_end=NOW + 600)
    jobs = [
        j_training("first", gpus=4, avoid_nodes=(bad.id,), priority=10),
        j_training("second", gpus=8, avoid_nodes=(bad.id,)),
    ]

    outcome = place(snapshot([bad, other], jobs, [busy])).by_job()["second"]

    assert (outcome.status, outcome.reason) == ("pending", "avoiding_failed_nodes")


def test_a_job_no_other_node_could_ever_hold_runs_again_where_it_failed():
    (only,) = n8_a100_nodes(1)
    job = j_training("retry", gpus=8, avoid_nodes=(only.id,))

    outcome = place(snapshot([only], [job])).by_job()["retry"]

    assert outcome.status == "placed"
    assert nodes_of(outcome) == {only.id}


def test_a_gang_keeps_off_the_node_it_failed_on_when_the_others_can_hold_it():
    bad, a, b = n8_a100_nodes(3)
    gang = j_training("gang", workers=2, gpus=8, avoid_nodes=(bad.id,))

    outcome = place(snapshot([bad, a, b], [gang])).by_job()["gang"]

    assert nodes_of(outcome) == {a.id, b.id}


def test_a_gang_that_needs_every_node_runs_again_on_the_one_it_failed_on():
    bad, other = n8_a100_nodes(2)
    gang = j_training("gang", workers=2, gpus=8, avoid_nodes=(bad.id,))

    outcome = place(snapshot([bad, other], [gang])).by_job()["gang"]

    assert outcome.status == "placed"
    assert nodes_of(outcome) == {bad.id, other.id}


# The nodes it failed on, and those it excludes (test_excluded_nodes.py), keep a job off alike.
KEPT_OFF = pytest.mark.parametrize(
    ("field", "reason"),
    [("avoid_nodes", "avoiding_failed_nodes"), ("exclude_nodes", "excluded_nodes")],
)


@KEPT_OFF
def test_an_equal_request_that_did_not_fail_there_is_not_given_its_answer(field, reason):
    bad, other = n8_a100_nodes(2)
    other, busy = running_on(other, "busy", 8, expected_end=NOW + 600)
    kept_off = [j_batch(f"off-{i}", gpus=4, priority=100, **{field: (bad.id,)}) for i in range(3)]
    fresh = j_batch("fresh", gpus=4)

    decision = place(
        snapshot([bad, other], [*kept_off, fresh], [busy], policy=Policy(backfill=False))
    )

    outcomes = decision.by_job()
    assert {outcomes[j.id].reason for j in kept_off} == {reason}
    assert nodes_of(outcomes["fresh"]) == {bad.id}


@KEPT_OFF
def test_a_victim_search_evicts_only_where_the_job_may_go(field, reason):
    bad, other = n8_a100_nodes(2)
    # The cheaper victim (started later) is on the node the job failed on, or excludes.
    bad, on_bad = running_on(bad, "low-bad", 8, preemptible=True, started_at=NOW - 60)
    other, on_other = running_on(other, "low-other", 8, preemptible=True)
    urgent = j_training("urgent", gpus=8, tier=5, **{field: (bad.id,)})

    decision = place(snapshot([bad, other], [urgent], [on_bad, on_other]))

    assert decision.by_job()["urgent"].status == "preempts"
    assert decision.preempted == ("low-other",)


def test_without_failures_the_placement_is_unchanged():
    nodes = n8_a100_nodes(3)
    jobs = [j_training(f"t{i}", gpus=4, max_runtime=3600.0 * (i + 1)) for i in range(5)]
    unknown = [dataclasses.replace(j, avoid_nodes=("no-such-node",)) for j in jobs]

    plain = place(snapshot(nodes, jobs))
    avoiding = place(snapshot(nodes, unknown))

    assert [(o.status, o.workers) for o in plain.outcomes] == [
        (o.status, o.workers) for o in avoiding.outcomes
    ]
