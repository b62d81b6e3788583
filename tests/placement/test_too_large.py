"""Jobs that can never fit: a worker larger than any node, or a gang larger than any group.

A gang is placed inside one group (GPU type x cluster x shared or not): if no group's nodes,
all idle, could hold it, it waits as ``worker_too_large``, with no estimated start.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from jobs.placement import Policy, place
from tests.placement.builders import (
    NOW,
    cpu_nodes,
    j_training,
    n8_a100_nodes,
    n8_h100_nodes,
    running_on,
    snapshot,
)

HOUR = 3600.0


def busy(nodes: tuple, prefix: str) -> tuple[list, list]:
    """The nodes with every GPU held by a running job that ends in an hour, and those jobs."""
    out, running = [], []
    for i, node in enumerate(nodes):
        node, job = running_on(node, f"{prefix}{i}", 8, expected_end=NOW + HOUR)
        out.append(node)
        running.append(job)
    return out, running


def two_clusters_of_two_n8_a100_nodes_half_busy():
    east, east_running = busy(n8_a100_nodes(1, cluster="east"), "e")
    west, west_running = busy(n8_a100_nodes(1, cluster="west"), "w")
    nodes = east + list(n8_a100_nodes(1, cluster="east")) + west
    return nodes + list(n8_a100_nodes(1, cluster="west")), east_running + west_running


@dataclass
class Case:
    name: str
    nodes: tuple
    gang: object
    want_reason: str
    want_estimate: float | None


def cases() -> list[Case]:
    two_by_two, _ = two_clusters_of_two_n8_a100_nodes_half_busy()
    return [
        Case(
            "3x8 GPUs with 16 GPUs per cluster",
            two_by_two,
            j_training("g", workers=3, gpus=8),
            "worker_too_large",
            None,
        ),
        Case(
            "2x8 GPUs over a shared and an exclusive node of one cluster",
            n8_a100_nodes(1) + n8_a100_nodes(1, shareable=True),
            j_training("g", workers=2, gpus=8),
            "worker_too_large",
            None,
        ),
        Case(
            "2x8 GPUs over two GPU types of one cluster",
            n8_a100_nodes(1) + n8_h100_nodes(1),
            j_training("g", workers=2, gpus=8),
            "worker_too_large",
            None,
        ),
        Case(
            "2x4 GPUs on one 8-GPU node with CPU for one worker",
            n8_a100_nodes(1),
            j_training("g", workers=2, gpus=4, cpu_milli=40_000),
            "worker_too_large",
            None,
        ),
        Case(
            "3x8 GPUs where a cordoned node would have made room",
            n8_a100_nodes(2) + n8_a100_nodes(1, healthy=False),
            j_training("g", workers=3, gpus=8),
            "worker_too_large",
            None,
        ),
        Case(
            "a CPU-only gang larger than the CPU nodes together",
            cpu_nodes(2),
            j_training("g", workers=3, gpus=0, cpu_milli=6000, memory_mb=100),
            "worker_too_large",
            None,
        ),
    ]


@pytest.mark.parametrize("case", cases(), ids=lambda c: c.name)
def test_a_gang_no_group_can_hold_waits_as_never_fitting(case: Case):
    outcome = place(snapshot(case.nodes, (case.gang,))).by_job()["g"]

    assert (outcome.status, outcome.reason, outcome.estimated_start) == (
        "pending",
        case.want_reason,
        case.want_estimate,
    )
    assert "can never fit" in outcome.message


def test_a_gang_larger_than_any_cluster_gets_no_estimated_start_from_work_ending():
    nodes, running = two_clusters_of_two_n8_a100_nodes_half_busy()
    gang = j_training("g", workers=3, gpus=8)  # 24 GPUs: each cluster has 16

    outcome = place(snapshot(nodes, (gang,), running)).by_job()["g"]

    assert (outcome.reason, outcome.estimated_start) == ("worker_too_large", None)
    assert outcome.message.endswith(
        "No cluster's healthy nodes of one GPU type can hold the whole gang, even idle; "
        "the job can never fit."
    )


def test_a_gang_that_fits_one_cluster_once_its_work_ends_still_gets_a_start():
    nodes, running = two_clusters_of_two_n8_a100_nodes_half_busy()
    gang = j_training("g", workers=2, gpus=8)  # fits east (or west) once its job ends

    outcome = place(snapshot(nodes, (gang,), running)).by_job()["g"]

    assert outcome.reason != "worker_too_large"
    assert outcome.estimated_start == NOW + HOUR


def test_a_gang_that_fits_a_group_of_idle_nodes_is_placed():
    gang = j_training("g", workers=3, gpus=8)

    outcome = place(snapshot(n8_a100_nodes(3), (gang,))).by_job()["g"]

    assert outcome.status == "placed"


def test_a_single_worker_larger_than_any_node_keeps_the_worker_sentence():
    outcome = place(snapshot(n8_a100_nodes(2), (j_training("g", gpus=16),))).by_job()["g"]

    assert outcome.reason == "worker_too_large"
    assert outcome.message.endswith(
        "One worker is larger than any node that could take it; the job can never fit."
    )


def test_a_never_fitting_gang_leaves_the_reservation_to_the_next_blocked_job():
    nodes, running = two_clusters_of_two_n8_a100_nodes_half_busy()
    never = j_training("never", workers=3, gpus=8, tier=1)
    later = j_training("later", workers=2, gpus=8)

    one_try = Policy(max_reservation_attempts=1)

    got = place(snapshot(nodes, (never, later), running, policy=one_try)).by_job()

    assert got["never"].reason == "worker_too_large"
    assert (got["later"].status, got["later"].estimated_start) == ("reserved", NOW + HOUR)
