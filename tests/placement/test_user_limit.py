"""A tenant's limit on the GPUs one of its users may hold there at once (Slurm's
MaxTRESPerUser): a job that would take its submitter past it waits as ``user_gpu_limit``,
whatever capacity is free, and neither evicts nor reserves for it.

``want`` is the set of jobs placed; every other job of the case waits.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from jobs.placement import Policy, Tenant, place
from tests.placement.builders import (
    NOW,
    j_batch,
    j_training,
    n8_a100_nodes,
    running_on,
    snapshot,
)
from tests.placement.test_user_share import ANN_FIRST_TEN, BOB_LATER_TWO, HOUR, two_gpu_jobs


def limited(gpus: int | None, tenant: str = "alpha") -> Tenant:
    """A tenant whose users may each hold ``gpus`` GPUs (None: no limit)."""
    return Tenant(tenant, user_gpu_limit=None if gpus is None else gpus * 1000)


def ann_running(gpus: int, tenant: str = "alpha"):
    """One 8-GPU node, ``gpus`` of it held by Ann's running job in ``tenant``."""
    (node,) = n8_a100_nodes(1)
    return running_on(node, "ann-running", gpus, tenant=tenant, owner="ann")


@dataclass
class Case:
    name: str
    queued: tuple
    want: set[str]
    tenants: tuple = ()
    holds: int = 0  # GPUs of the first node Ann's running job holds...
    held_in: str = "alpha"  # ...in this tenant
    nodes: int = 2  # 8-GPU nodes
    by_limit: bool = True  # whether the jobs left waiting wait for the limit (else for room)


CASES = [
    Case(
        "a user's jobs stop at the limit while GPUs stay free",
        ANN_FIRST_TEN,
        {"ann0", "ann1"},
        (limited(4),),
    ),
    Case(
        "a teammate's jobs go on beside a user at the limit",
        ANN_FIRST_TEN + BOB_LATER_TWO,
        {"ann0", "ann1", "bob0", "bob1"},
        (limited(4),),
    ),
    Case(
        "running work counts against the limit",
        ANN_FIRST_TEN,
        {"ann0"},
        (limited(4),),
        holds=2,
    ),
    Case(
        "running work in another tenant does not count",
        ANN_FIRST_TEN,
        {"ann0", "ann1"},
        (limited(4), limited(None, "beta")),
        holds=2,
        held_in="beta",
    ),
    Case(
        "a tenant without a limit is not limited",
        ANN_FIRST_TEN,
        {f"ann{i}" for i in range(8)},
        (limited(None),),
        by_limit=False,
    ),
    Case(
        "another tenant's limit does not apply",
        ANN_FIRST_TEN,
        {f"ann{i}" for i in range(8)},
        (limited(None), limited(2, "beta")),
        by_limit=False,
    ),
    Case(
        "a gang is counted whole",
        (j_training("gang", workers=2, gpus=4, owner="ann"), *two_gpu_jobs("ann", 1, NOW)),
        {"ann0"},
        (limited(6),),
    ),
    Case(
        "a batch's shards are counted together",
        (
            j_batch("shards", shards=3, gpus=1, owner="ann", priority=100),
            j_batch("one", gpus=1, owner="ann"),
        ),
        {"shards"},
        (limited(3),),
    ),
    Case(
        "a CPU-only job is not limited",
        (j_training("cpu", gpus=0, owner="ann", cpu_milli=1000, memory_mb=1000),),
        {"cpu"},
        (limited(1),),
        holds=1,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_it_places_as_the_table_says(case: Case):
    first, *rest = n8_a100_nodes(case.nodes)
    running = ()
    if case.holds:
        first, job = ann_running(case.holds, case.held_in)
        running = (job,)
    decision = place(snapshot((first, *rest), case.queued, running, tenants=case.tenants))

    placed = {o.job_id for o in decision.outcomes if o.status == "placed"}
    reasons = {o.reason for o in decision.outcomes if o.status != "placed"}
    assert placed == case.want
    assert reasons <= {"user_gpu_limit"} if case.by_limit else "user_gpu_limit" not in reasons


def test_the_reason_says_what_the_user_holds_and_may_hold():
    queued = two_gpu_jobs("ann", 3, NOW)
    decision = place(snapshot(n8_a100_nodes(1), queued, tenants=(limited(5),)))

    waiting = decision.by_job()["ann2"]
    # ann0 and ann1 were placed for an hour: the first of them to end makes room.
    assert (waiting.reason, waiting.estimated_start) == ("user_gpu_limit", NOW + HOUR)
    assert "2000m CPU, 2000 MiB: Its submitter holds" in waiting.message  # as pages count memory
    assert waiting.message.endswith(
        "Its submitter holds 4 of the 5 GPUs one user may hold in the tenant; it starts once "
        "enough of their work ends."
    )


def test_a_job_larger_than_the_limit_says_it_cannot_start():
    decision = place(
        snapshot(n8_a100_nodes(1), (j_training("big", gpus=8, owner="ann"),),
                 tenants=(limited(4),))
    )  # fmt: skip

    assert decision.by_job()["big"].message.endswith(
        "It asks for 8 GPUs; one user may hold at most 4 in the tenant: it cannot start while "
        "that limit stands."
    )


def test_a_job_at_its_users_limit_evicts_nobody():
    node, low = running_on(n8_a100_nodes(1)[0], "low", 8, tenant="beta", preemptible=True)
    node2, mine = running_on(n8_a100_nodes(2)[1], "mine", 4, owner="ann")
    urgent = j_training("urgent", gpus=8, tier=5, owner="ann")

    decision = place(
        snapshot((node, node2), (urgent,), (low, mine), tenants=(limited(8), limited(None, "beta")))
    )

    assert (decision.by_job()["urgent"].reason, decision.preempted) == ("user_gpu_limit", ())


def test_a_job_at_its_users_limit_holds_no_nodes_back_from_later_jobs():
    node, mine = running_on(n8_a100_nodes(1)[0], "mine", 4, owner="ann", expected_end=NOW + 60)
    big = j_training("big", gpus=8, owner="ann", submit_time=NOW - 600)
    small = j_training("small", gpus=2, owner="bob", max_runtime=7200.0)

    decision = place(snapshot((node,), (big, small), (mine,), tenants=(limited(8),)))

    assert decision.by_job()["big"].status == "pending"
    assert decision.by_job()["small"].status == "placed"


def test_jobs_held_by_their_users_limit_do_not_use_up_the_queue_depth():
    # Ann's ten jobs come first (a higher priority); past her limit of 4 GPUs, eight of them
    # wait for it, decided at no cost: Bob's, behind them, are still decided and placed.
    queued = two_gpu_jobs("ann", 10, NOW - 600, priority=100) + BOB_LATER_TWO

    decision = place(
        snapshot(n8_a100_nodes(2), queued, tenants=(limited(4),), policy=Policy(queue_depth=2))
    )

    placed = {o.job_id for o in decision.outcomes if o.status == "placed"}
    assert placed == {"ann0", "ann1", "bob0", "bob1"}
