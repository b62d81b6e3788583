"""Fair share between a tenant's users: inside its tenant, a job loses
``Policy.user_share_priority_per_doubling`` points per doubling of 1 + the GPUs its owner holds
there, so one user's long queue takes turns with a teammate's few jobs as the cycle places them.

``want`` is the set of jobs placed; every other job of the case waits.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from jobs.placement import Policy, Tenant, place
from jobs.placement.ordering import QueueOrder
from tests.placement.builders import (
    NOW,
    j_training,
    n4_a100_nodes,
    n8_a100_nodes,
    running_on,
    snapshot,
    with_free,
)

HOUR = 3600.0


def two_gpu_jobs(prefix: str, count: int, submitted: float, owner: str | None = None, **kw):
    """``count`` one-hour 2-GPU jobs of ``owner`` (default: ``prefix``), a second apart."""
    kw.setdefault("tenant", "alpha")
    return tuple(
        j_training(
            f"{prefix}{i}",
            gpus=2,
            owner=prefix if owner is None else owner,
            submit_time=submitted + i,
            max_runtime=HOUR,
            **kw,
        )
        for i in range(count)
    )


def room_for_four_2_gpu_jobs():
    return n8_a100_nodes(1)


def room_for_two_2_gpu_jobs():
    return n4_a100_nodes(1)


def room_for_one_2_gpu_job():
    return (with_free(n4_a100_nodes(1)[0], (1000, 1000, 0, 0)),)


def holding(gpus: dict[str, float], tenant: str = "alpha") -> Tenant:
    """A tenant whose users hold these GPUs."""
    return Tenant(tenant, user_use=gpus)


ANN_FIRST_TEN = two_gpu_jobs("ann", 10, NOW - 600)
BOB_LATER_TWO = two_gpu_jobs("bob", 2, NOW - 60)


@dataclass
class Case:
    name: str
    nodes: tuple
    queued: tuple
    want: set[str]
    tenants: tuple = ()
    policy: Policy = field(default_factory=Policy)


CASES = [
    Case(
        "a later user gets half the room a teammate's long queue is ahead for",
        room_for_four_2_gpu_jobs(),
        ANN_FIRST_TEN + BOB_LATER_TWO,
        {"ann0", "ann1", "bob0", "bob1"},
    ),
    Case(
        "without owners the earlier jobs take all the room",
        room_for_four_2_gpu_jobs(),
        two_gpu_jobs("ann", 10, NOW - 600, owner="") + two_gpu_jobs("bob", 2, NOW - 60, owner=""),
        {"ann0", "ann1", "ann2", "ann3"},
    ),
    Case(
        "with no user share the earlier user takes all the room",
        room_for_four_2_gpu_jobs(),
        ANN_FIRST_TEN + BOB_LATER_TWO,
        {"ann0", "ann1", "ann2", "ann3"},
        policy=Policy(user_share_priority_per_doubling=0.0),
    ),
    Case(
        "a single user's order does not change with the GPUs it holds",
        room_for_four_2_gpu_jobs(),
        ANN_FIRST_TEN,
        {"ann0", "ann1", "ann2", "ann3"},
        (holding({"ann": 64.0}),),
    ),
    Case(
        "a user holding GPUs yields to a teammate holding none",
        room_for_two_2_gpu_jobs(),
        two_gpu_jobs("ann", 2, NOW - 600) + BOB_LATER_TWO,
        {"bob0", "bob1"},
        (holding({"ann": 8.0}),),
    ),
    Case(
        # 8 GPUs held cost 16 x log2(9) = 50.7 points.
        "a heavier user's job comes first when its priority exceeds the penalty",
        room_for_one_2_gpu_job(),
        two_gpu_jobs("ann", 1, NOW - 600, priority=60) + BOB_LATER_TWO,
        {"ann0"},
        (holding({"ann": 8.0}),),
    ),
    Case(
        "a heavier user's job waits when its priority is below the penalty",
        room_for_one_2_gpu_job(),
        two_gpu_jobs("ann", 1, NOW - 600, priority=40) + BOB_LATER_TWO,
        {"bob0"},
        (holding({"ann": 8.0}),),
    ),
    Case(
        "what a user holds in another tenant does not count",
        room_for_one_2_gpu_job(),
        two_gpu_jobs("ann", 1, NOW - 600) + BOB_LATER_TWO,
        {"ann0"},
        (holding({}), holding({"ann": 8.0}, tenant="beta")),
    ),
    Case(
        "aging lets a heavier user's old job pass a teammate's new one",
        room_for_one_2_gpu_job(),
        two_gpu_jobs("ann", 1, NOW - 60 * HOUR) + two_gpu_jobs("bob", 1, NOW),
        {"ann0"},
        (holding({"ann": 8.0}),),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_it_places_as_the_table_says(case: Case):
    decision = place(snapshot(case.nodes, case.queued, tenants=case.tenants, policy=case.policy))
    assert {o.job_id for o in decision.outcomes if o.status == "placed"} == case.want


def order_of(queued, tenants=(), charge_gpus: float = 0.0, before=None) -> list[str]:
    """The queue order, each job charged ``charge_gpus`` to its owner as it is yielded;
    ``before(order)`` runs first."""
    order = QueueOrder(queued, tenants, {"gpu": 64_000.0}, Policy(), NOW)
    if before is not None:
        before(order)
    out = []
    for job in order:
        out.append(job.id)
        if charge_gpus:
            order.charge(job.tenant, {"gpu": 1000 * charge_gpus}, owner=job.owner, gpus=charge_gpus)
    return out


def test_charges_within_a_cycle_make_users_take_turns():
    assert order_of(ANN_FIRST_TEN[:4] + BOB_LATER_TWO, charge_gpus=2.0) == [
        "ann0", "bob0", "ann1", "bob1", "ann2", "ann3",
    ]  # fmt: skip


def test_without_charges_the_earlier_user_goes_first():
    assert order_of(ANN_FIRST_TEN[:2] + BOB_LATER_TWO) == ["ann0", "ann1", "bob0", "bob1"]


def test_an_eviction_gives_the_users_gpus_back_to_its_share():
    tenants = (holding({"ann": 8.0}),)
    queue = ANN_FIRST_TEN[:1] + BOB_LATER_TWO[:1]
    assert order_of(queue, tenants) == ["bob0", "ann0"]

    def evict(order):
        order.charge("alpha", {"gpu": 8000.0}, -1, owner="ann", gpus=8.0)

    assert order_of(queue, tenants, before=evict) == ["ann0", "bob0"]


def test_an_eviction_in_the_middle_of_a_tenants_turns_counts_at_once():
    order = QueueOrder(
        ANN_FIRST_TEN[:1] + BOB_LATER_TWO, (holding({"ann": 8.0}),), {}, Policy(), NOW
    )
    jobs = iter(order)
    assert next(jobs).id == "bob0"
    order.charge("alpha", {}, -1, owner="ann", gpus=8.0)
    assert [job.id for job in jobs] == ["ann0", "bob1"]


def test_users_take_turns_in_a_tenant_that_is_not_the_tiers_last():
    beta = two_gpu_jobs("cy", 3, NOW - 600, tenant="beta")
    got = order_of(ANN_FIRST_TEN[:3] + BOB_LATER_TWO + beta, charge_gpus=2.0)
    alpha = [job for job in got if not job.startswith("cy")]
    assert alpha == ["ann0", "bob0", "ann1", "bob1", "ann2"]


def test_evicting_a_users_running_work_in_the_cycle_restores_its_users_turn():
    # Tenant alpha's user ann holds node a (8 GPUs, preemptible); beta's higher tier job takes
    # it. Then alpha's last 2 free GPUs (on node b) go to ann's older job, not to bob's.
    a, b = n8_a100_nodes(2)
    a, anns = running_on(a, "ann-running", 8, preemptible=True, owner="ann")
    b, other = running_on(b, "other", 6, tenant="gamma")
    taker = j_training("taker", gpus=8, tenant="beta", tier=1)
    queue = two_gpu_jobs("ann", 1, NOW - 600) + BOB_LATER_TWO[:1]
    tenants = (
        Tenant("alpha", usage={"gpu:a100": 8000}, user_use={"ann": 8.0}),
        Tenant("beta"),
        Tenant("gamma", usage={"gpu:a100": 6000}),
    )

    def placed(queued) -> set[str]:
        snap = snapshot((a, b), queued, running=(anns, other), tenants=tenants)
        return {o.job_id for o in place(snap).outcomes if o.status in ("placed", "preempts")}

    assert placed(queue) == {"bob0"}
    assert placed((taker, *queue)) == {"taker", "ann0"}
