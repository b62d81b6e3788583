"""A priority class's limits on the GPUs its work holds at once (Slurm's QOS MaxTRESPerUser
and GrpTRES): one user's work of the class, across tenants, and all the class's work
together. A job that would take either past its limit waits as ``class_gpu_limit``, whatever
capacity is free, and neither evicts nor reserves for it; work of other classes goes on.
"""

from __future__ import annotations

from jobs.placement import Policy, place
from tests.placement.builders import NOW, j_training, n8_a100_nodes, running_on, snapshot
from tests.placement.test_user_limit import limited
from tests.placement.test_user_share import two_gpu_jobs

HIGH = 5  # the limited class's tier


def at_high(prefix: str, count: int, per_user: int | None = None, whole: int | None = None,
            **kw):  # fmt: skip
    """``count`` 2-GPU jobs at the class whose users may hold ``per_user`` GPUs, and all its
    work ``whole``."""
    return two_gpu_jobs(
        prefix, count, NOW, tier=HIGH,
        class_user_gpu_limit=None if per_user is None else per_user * 1000,
        class_gpu_limit=None if whole is None else whole * 1000, **kw,
    )  # fmt: skip


def placed(decision) -> set[str]:
    return {o.job_id for o in decision.outcomes if o.status == "placed"}


def test_one_users_work_of_the_class_stops_at_its_limit_while_gpus_stay_free():
    queued = at_high("ann", 4, per_user=4) + at_high("bob", 1, per_user=4)

    decision = place(snapshot(n8_a100_nodes(2), queued))

    assert placed(decision) == {"ann0", "ann1", "bob0"}
    assert {decision.by_job()[j].reason for j in ("ann2", "ann3")} == {"class_gpu_limit"}


def test_the_users_limit_counts_their_work_of_the_class_in_every_tenant():
    queued = at_high("ann", 2, per_user=4) + at_high("ann-b", 2, per_user=4, tenant="beta",
                                                      owner="ann")  # fmt: skip

    decision = place(snapshot(n8_a100_nodes(2), queued))

    assert len(placed(decision)) == 2  # one in each tenant, as they take turns
    (waiting, *_) = [o for o in decision.outcomes if o.status != "placed"]
    assert waiting.message.endswith(
        "Its submitter holds 4 of the 4 GPUs one user may hold at its priority class; it "
        "starts once enough of their work at that class ends."
    )


def test_their_work_of_another_class_goes_on():
    queued = at_high("ann", 3, per_user=4) + two_gpu_jobs("low", 2, NOW, owner="ann")

    decision = place(snapshot(n8_a100_nodes(2), queued))

    assert placed(decision) == {"ann0", "ann1", "low0", "low1"}


def test_the_classs_whole_limit_counts_every_tenants_work_and_its_running_work():
    node, running = running_on(n8_a100_nodes(1)[0], "held", 2, tenant="gamma", tier=HIGH)
    queued = at_high("ann", 2, whole=6) + at_high("cid", 2, whole=6, tenant="beta")

    decision = place(snapshot((node, *n8_a100_nodes(3)[1:]), queued, (running,)))

    assert len(placed(decision)) == 2  # 2 running + 2 x 2 placed = its 6
    waiting = [o for o in decision.outcomes if o.status != "placed"]
    assert {o.reason for o in waiting} == {"class_gpu_limit"}
    assert waiting[0].message.endswith(
        "Its priority class's jobs hold 6 of the 6 GPUs they may hold at once; it starts once "
        "enough of them end."
    )


def test_a_job_larger_than_the_limit_says_it_cannot_start_at_that_class():
    big = j_training("big", gpus=8, owner="ann", tier=HIGH, class_gpu_limit=4000)

    decision = place(snapshot(n8_a100_nodes(1), (big,)))

    assert decision.by_job()["big"].message.endswith(
        "It asks for 8 GPUs; its priority class's jobs may hold at most 4 at once: it cannot "
        "start at that class while that limit stands."
    )


def test_the_tenants_limit_is_said_first_when_both_hold_a_job():
    queued = at_high("ann", 3, per_user=4)

    decision = place(snapshot(n8_a100_nodes(2), queued, tenants=(limited(4),)))

    assert decision.by_job()["ann2"].reason == "user_gpu_limit"


def test_a_job_at_its_classs_limit_evicts_nobody_and_holds_no_nodes():
    node, low = running_on(n8_a100_nodes(1)[0], "low", 8, tenant="beta", preemptible=True)
    node2, mine = running_on(n8_a100_nodes(2)[1], "mine", 4, owner="ann", tier=HIGH,
                             expected_end=NOW + 60)  # fmt: skip
    urgent = j_training("urgent", gpus=8, owner="ann", tier=HIGH, class_user_gpu_limit=8000,
                        submit_time=NOW - 600)  # fmt: skip
    small = j_training("small", gpus=2, owner="bob", max_runtime=7200.0)

    decision = place(snapshot((node, node2), (urgent, small), (low, mine)))

    assert (decision.by_job()["urgent"].reason, decision.preempted) == ("class_gpu_limit", ())
    assert decision.by_job()["small"].status == "placed"


def test_jobs_held_by_their_classs_limit_do_not_use_up_the_queue_depth():
    queued = at_high("ann", 10, whole=4, priority=100) + two_gpu_jobs("bob", 2, NOW + 10)

    decision = place(snapshot(n8_a100_nodes(2), queued, policy=Policy(queue_depth=2)))

    assert placed(decision) == {"ann0", "ann1", "bob0", "bob1"}


def test_an_elastic_gang_starts_with_the_workers_its_classs_limit_lets_it():
    gang = j_training("gang", workers=4, gpus=2, owner="ann", tier=HIGH, min_workers=1,
                      class_user_gpu_limit=4000)  # fmt: skip

    decision = place(snapshot(n8_a100_nodes(2), (gang,)))

    outcome = decision.by_job()["gang"]
    assert (outcome.status, len(outcome.workers)) == ("placed", 2)
