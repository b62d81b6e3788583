"""Elastic training gangs that grow: a gang running with fewer than its whole gang restarts
larger (checkpoint, then a start with more workers) where the queue leaves room."""

from __future__ import annotations

import dataclasses

import pytest

from jobs.placement import Elastic, Policy, Tenant, place
from jobs.placement.model import RunningJob
from tests.placement.builders import (
    NOW,
    gpu_tenant,
    j_training,
    n8_a100_nodes,
    nodes,
    running_on,
    snapshot,
)

H = 3600.0


def gang(workers=8, least=2, runtime=24 * H, **kw):
    return j_training("el", workers=workers, gpus=8, min_workers=least, max_runtime=runtime, **kw)


def running_gang(nodes, size, started=NOW - 2 * H, checkpoint=NOW - 600, **kw):
    """The first ``size`` nodes wholly held by the gang's ``size`` workers; all the nodes."""
    held, allocations = [], []
    for node in nodes[:size]:
        node, one = running_on(node, "el", 8)
        held.append(node)
        allocations += one.allocations
    job = RunningJob(
        id="el",
        tenant=kw.pop("tenant", "alpha"),
        allocations=tuple(allocations),
        started_at=started,
        last_checkpoint=checkpoint,
        expected_end=started + 24 * H,
        **kw,
    )
    return [*held, *nodes[size:]], job


def decide(size=3, total=8, queued=(), job=None, tenants=(), policy=None, **kw):
    job = job or gang()
    nodes, running = running_gang(n8_a100_nodes(total), size, **kw)
    others = kw.get("others", ())
    snap = snapshot(
        nodes,
        queued,
        [running, *others],
        tenants,
        policy,
        elastic=(Elastic(job, size),),
    )
    return place(snap)


def test_a_gang_running_smaller_grows_to_its_whole_gang_into_free_room():
    decision = decide(size=3, total=8)

    assert [(g.job_id, g.workers, g.running) for g in decision.grown] == [("el", 8, 3)]
    # 48 worker-hours of work: 3 workers end it 16 h after their start; 8, restarted from the
    # checkpoint 10 minutes ago, about 5.3 h from now.
    assert decision.grown[0].sooner_s == pytest.approx(14 * H - (60 + (48 * H - 3 * 6600) / 8))


def test_it_grows_to_the_most_workers_that_fit_when_its_whole_gang_does_not():
    decision = decide(size=3, total=6)

    assert [(g.workers, g.running) for g in decision.grown] == [(6, 3)]


def test_with_no_room_beyond_its_own_it_keeps_its_size():
    assert decide(size=3, total=3).grown == ()


def test_a_queued_job_waiting_for_room_where_it_runs_keeps_it_from_growing():
    waiting = j_training("big", workers=6, gpus=8)

    decision = decide(size=3, total=8, queued=[waiting])

    assert decision.by_job()["big"].status != "placed"
    assert decision.grown == ()


def test_the_queue_is_placed_first_and_the_gang_grows_into_what_is_left():
    first = j_training("first", workers=2, gpus=8)

    decision = decide(size=3, total=8, queued=[first])

    assert decision.by_job()["first"].status == "placed"
    assert [(g.workers, g.running) for g in decision.grown] == [(6, 3)]


def test_a_queued_job_held_by_its_own_limit_does_not_keep_it_from_growing():
    limited = j_training("lim", workers=1, gpus=8, tenant="beta", owner="u")
    beta = Tenant("beta", user_gpu_limit=0)

    decision = decide(size=3, total=8, queued=[limited], tenants=[beta])

    assert decision.by_job()["lim"].reason == "user_gpu_limit"
    assert [(g.workers, g.running) for g in decision.grown] == [(8, 3)]


def test_it_grows_only_after_it_has_run_the_policys_time():
    fresh = decide(started=NOW - 300, checkpoint=None, policy=Policy(grow_after_s=600))
    never = decide(policy=Policy(grow_after_s=None))
    grown = decide(started=NOW - 700, checkpoint=None, policy=Policy(grow_after_s=600))

    assert (fresh.grown, never.grown) == ((), ())
    assert [g.workers for g in grown.grown] == [8]


def test_near_its_end_without_a_checkpoint_a_restart_would_end_it_later():
    # 3 workers end 16 h after their start, an hour from now; 8 workers from scratch take 6 h.
    lost = decide(started=NOW - 15 * H, checkpoint=None)
    kept = decide(started=NOW - 15 * H, checkpoint=NOW - 600)

    assert lost.grown == ()
    assert [g.workers for g in kept.grown] == [8]


def test_without_a_runtime_limit_it_grows_only_once_it_has_checkpointed():
    unlimited = gang(runtime=None)

    without = decide(job=unlimited, checkpoint=None)
    since_start = decide(job=unlimited, checkpoint=NOW - 600)

    assert without.grown == ()
    assert [(g.workers, g.sooner_s) for g in since_start.grown] == [(8, None)]


def test_it_grows_only_as_far_as_its_tenants_guarantee_not_into_borrowed_room():
    def cohort(guarantee):
        return [
            gpu_tenant("alpha", "a100", guarantee, borrow=None, used_gpus=24, cohort="c"),
            gpu_tenant("beta", "a100", 64, cohort="c"),
        ]

    inside = decide(tenants=cohort(64))
    partly = decide(tenants=cohort(40))
    at_it = decide(tenants=cohort(24))

    assert [g.workers for g in inside.grown] == [8]
    assert [g.workers for g in partly.grown] == [5]
    assert at_it.grown == ()


def test_it_grows_as_far_as_its_users_gpu_limit_allows():
    job = gang(owner="u")
    alpha = Tenant("alpha", user_gpu_limit=40_000, user_use={"u": 3.0})
    nodes, running = running_gang(n8_a100_nodes(8), 3, owner="u")
    snap = snapshot(nodes, (), [running], [alpha], elastic=(Elastic(job, 3),))

    assert [(g.workers, g.running) for g in place(snap).grown] == [(5, 3)]


def test_a_gang_asked_to_stop_does_not_grow():
    assert decide(stopping=True).grown == ()


def test_two_gangs_do_not_count_on_the_same_room():
    nodes = list(n8_a100_nodes(10))
    nodes[:3], high = running_gang(nodes[:3], 3)
    low_nodes, low = running_gang(nodes[3:5], 2)
    nodes[3:5] = low_nodes
    low = dataclasses.replace(low, id="low")
    top = dataclasses.replace(gang(), tier=5)
    other = dataclasses.replace(gang(workers=6), id="low")
    snap = snapshot(nodes, (), [high, low], (), elastic=(Elastic(other, 2), Elastic(top, 3)))

    grown = {g.job_id: (g.workers, g.running) for g in place(snap).grown}

    # The higher tier first: 8 of the 10 nodes (its own 3 and 5 free); the other grows into
    # none, since what is left is its own.
    assert grown == {"el": (8, 3)}


def soon_ending(nodes, *indices, ends_in=1800):
    """The nodes at ``indices`` wholly held by work that ends in ``ends_in`` seconds."""
    nodes, work = list(nodes), []
    for i in indices:
        nodes[i], job = running_on(nodes[i], f"soon{i}", 8, expected_end=NOW + ends_in)
        work.append(job)
    return nodes, work


def test_it_waits_to_grow_whole_while_its_whole_gang_is_near_rather_than_grow_twice():
    # 3 nodes its own, 3 free, 2 freed in half an hour: 6 workers now would end it later than
    # 8 from then.
    def held_until(ends_in):
        nodes, running = running_gang(n8_a100_nodes(8), 3)
        nodes, soon = soon_ending(nodes, 6, 7, ends_in=ends_in)
        return snapshot(nodes, (), [running, *soon], elastic=(Elastic(gang(), 3),))

    near, far = held_until(1800), held_until(20 * H)

    assert place(near).grown == ()
    assert [(g.workers, g.running) for g in place(far).grown] == [(6, 3)]


def test_requeued_to_grow_it_starts_with_what_fits_and_does_not_wait_for_its_whole_gang():
    nodes, soon = soon_ending(n8_a100_nodes(8), 6, 7)
    claimed = dataclasses.replace(gang(), preempting=True)
    unclaimed = gang()

    with_claim = place(snapshot(nodes, [claimed], soon)).by_job()["el"]
    without = place(snapshot(nodes, [unclaimed], soon)).by_job()["el"]

    assert (with_claim.status, len(with_claim.workers)) == ("placed", 6)
    assert (without.status, without.reason) == ("reserved", "head_of_line")


def stopping_to_grow(total=8, size=3, to=8, queued=(), others=(), inventory=None, policy=None):
    """The gang's decision a cycle after it was asked to stop (its grace period ends in two
    minutes) to restart with ``to`` workers."""
    held, running = running_gang(inventory or n8_a100_nodes(total), size)
    running = dataclasses.replace(running, stopping=True, expected_end=NOW + 120)
    snap = snapshot(held, queued, [running, *others], (), policy, regrowing=(Elastic(gang(), to),))
    return place(snap)


def test_the_room_a_gang_stopping_to_grow_restarts_into_is_held_from_other_work():
    newcomer = j_training("new", workers=2, gpus=8, tenant="beta", max_runtime=10 * H)

    held = stopping_to_grow(queued=[newcomer]).by_job()["new"]
    nodes, running = _with_gang_stopping()
    free = place(snapshot(nodes, [newcomer], running)).by_job()["new"]  # no growth asked

    assert (held.status, held.reason) == ("pending", "waiting_for_reservation")
    assert free.status == "placed"


def _with_gang_stopping():
    nodes, running = running_gang(n8_a100_nodes(8), 3)
    return nodes, [dataclasses.replace(running, stopping=True, expected_end=NOW + 120)]


def test_work_that_ends_before_the_gang_restarts_may_use_its_room_meanwhile():
    short = j_training("short", workers=2, gpus=8, tenant="beta", max_runtime=60)

    assert stopping_to_grow(queued=[short]).by_job()["short"].status == "placed"


def test_only_the_room_it_restarts_with_is_held_the_rest_is_free():
    # 10 nodes: its own 3 and 3 more for 6 workers held, 4 left for the newcomer.
    newcomer = j_training("new", workers=4, gpus=8, tenant="beta", max_runtime=10 * H)

    decision = stopping_to_grow(total=10, to=6, queued=[newcomer])

    assert decision.by_job()["new"].status == "placed"


def test_room_that_is_not_there_by_its_restart_is_not_held():
    # 2 of the 5 other nodes are busy for 20 h: 8 workers could not start then; a 6-worker
    # gang of its own would, and the newcomer takes what it likes meanwhile.
    inventory, soon = soon_ending(n8_a100_nodes(8), 6, 7, ends_in=20 * H)
    newcomer = j_training("new", workers=1, gpus=8, tenant="beta", max_runtime=10 * H)

    decision = stopping_to_grow(inventory=inventory, others=soon, queued=[newcomer])

    assert decision.by_job()["new"].status == "placed"


def test_without_backfill_nothing_is_held():
    newcomer = j_training("new", workers=2, gpus=8, tenant="beta", max_runtime=10 * H)

    decision = stopping_to_grow(queued=[newcomer], policy=Policy(backfill=False))

    assert decision.by_job()["new"].status == "placed"


def test_another_gang_does_not_grow_into_room_held_for_one_restarting():
    nodes = list(n8_a100_nodes(10))
    nodes[:3], first = running_gang(nodes[:3], 3)
    first = dataclasses.replace(first, stopping=True, expected_end=NOW + 120)
    second_nodes, second = running_gang(nodes[3:5], 2)
    nodes[3:5] = second_nodes
    second = dataclasses.replace(second, id="two")
    other = dataclasses.replace(gang(workers=7), id="two")
    snap = snapshot(
        nodes, (), [first, second], (),
        regrowing=(Elastic(gang(), 8),), elastic=(Elastic(other, 2),),
    )  # fmt: skip

    # The first restarts on its own 3 nodes and 5 of the others: the second may not grow
    # into them (it would run on when they are due), and has none else.
    assert place(snap).grown == ()


def test_a_gang_keeping_one_rack_has_a_whole_rack_held_for_its_restart():
    r1 = nodes(4, 8, "a100", prefix="r1-", topology=("rack=r1",))
    r2 = nodes(4, 8, "a100", prefix="r2-", topology=("rack=r2",))
    inventory, running = running_gang([*r1, *r2], 2)
    running = dataclasses.replace(running, stopping=True, expected_end=NOW + 120)
    wide = j_training("wide", workers=6, gpus=8, tenant="beta", max_runtime=10 * H)
    racked = dataclasses.replace(gang(workers=4), topology="rack")

    def newcomer(regrowing):
        snap = snapshot(inventory, [wide], [running], regrowing=regrowing)
        return place(snap).by_job()["wide"].status

    assert newcomer((Elastic(racked, 4),)) == "pending"
    assert newcomer(()) == "placed"


def test_its_own_end_does_not_count_as_room_its_whole_gang_will_have():
    # Its 3 nodes, 2 free, 3 busy for 30 h. Its own room already counts free for the restart:
    # its attempt's end (due in half an hour) frees nothing more, so its whole gang is 30 h
    # away, and 5 workers now end it sooner.
    inventory, running = running_gang(n8_a100_nodes(8), 3)
    running = dataclasses.replace(running, expected_end=NOW + 1800)
    inventory, busy = soon_ending(inventory, 5, 6, 7, ends_in=30 * H)
    snap = snapshot(inventory, (), [running, *busy], elastic=(Elastic(gang(), 3),))

    assert [(g.workers, g.running) for g in place(snap).grown] == [(5, 3)]
