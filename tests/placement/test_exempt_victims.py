"""Work in its class's preemption exempt time cannot be evicted yet, but it can be soon: a job
that may evict it by tier reserves its nodes from the end of that time plus the eviction
grace, not from the end of its runtime limit, and says so."""

import pytest

from jobs.placement import REASONS, Policy, place
from tests.placement.builders import NOW, j_training, n8_a100_nodes, running_on, snapshot

HOUR = 3600.0
GRACE = Policy().eviction_grace_s
EXEMPT_ENDS = NOW + 600
ENDS_FIRST = EXEMPT_ENDS + GRACE - 1  # before it could be evicted and gone


def blocked_behind_exempt_work(job, **victim):
    """The job's outcome on one 8-GPU node that a day-long job of tier 0, preemptible but in
    its exempt time for ten more minutes, fills."""
    (node,) = n8_a100_nodes(1)
    victim = {"tier": 0, "exempt_until": EXEMPT_ENDS, "expected_end": NOW + 24 * HOUR, **victim}
    node, low = running_on(node, "low", 8, **victim)
    return place(snapshot((node,), (job,), running=(low,))).by_job()[job.id]


def test_it_reserves_from_the_end_of_the_exempt_time_plus_the_grace():
    got = blocked_behind_exempt_work(j_training("high", gpus=8, tier=5, may_preempt=True))

    assert (got.status, got.reason) == ("reserved", "waiting_for_exempt_work")
    assert got.estimated_start == EXEMPT_ENDS + GRACE
    assert REASONS["waiting_for_exempt_work"] in got.message


@pytest.mark.parametrize(
    ("job", "victim"),
    [
        (j_training("may-not", gpus=8, tier=5, may_preempt=False), {}),
        (j_training("same-tier", gpus=8, tier=0, may_preempt=True), {}),
        (j_training("high", gpus=8, tier=5, may_preempt=True), {"exempt_until": None}),
        (
            j_training("high", gpus=8, tier=5, may_preempt=True),
            {"expected_end": EXEMPT_ENDS + GRACE - 1},
        ),
    ],
    ids=["it-may-not-preempt", "same-tier", "not-exempt-nor-preemptible", "ends-first"],
)
def test_otherwise_it_reserves_from_the_works_runtime_end(job, victim):
    got = blocked_behind_exempt_work(job, **victim)

    assert (got.status, got.reason) == ("reserved", "head_of_line")
    assert got.estimated_start == victim.get("expected_end", NOW + 24 * HOUR)


def test_work_that_ends_before_the_exempt_time_does_backfill_the_held_node():
    (a,) = n8_a100_nodes(1)
    a, low = running_on(a, "low", 4, tier=0, exempt_until=EXEMPT_ENDS, expected_end=NOW + HOUR)
    high = j_training("high", gpus=8, tier=5, may_preempt=True)
    short = j_training("short", gpus=2, tier=0, max_runtime=300)
    long = j_training("long", gpus=2, tier=0, max_runtime=HOUR)

    got = place(snapshot((a,), (high, short, long), running=(low,))).by_job()

    assert got["high"].estimated_start == EXEMPT_ENDS + GRACE
    assert got["short"].status == "placed"
    assert (got["long"].status, got["long"].reason) == ("pending", "waiting_for_reservation")
