"""Bookings (Slurm's reservation for an account): nodes set apart for one tenant from a start
to an end. In the window only that tenant's work starts there; before it, other work only if
its runtime limit ends it by then; the tenant's own work ignores the booking. Other work kept
off only by bookings waits as ``booked``, told when the first such booking ends."""

from __future__ import annotations

import dataclasses

from jobs.placement import Policy, place
from tests.placement.builders import NOW, j_batch, j_training, n8_a100_nodes, snapshot

HOUR = 3600.0


def booked(node, tenant: str, starts_in: float = -HOUR, lasts: float = 4 * HOUR):
    """The node booked for ``tenant`` from ``starts_in`` seconds from now, for ``lasts``."""
    start = NOW + starts_in
    return dataclasses.replace(node, closes_at=start, opens_at=start + lasts, reserved_for=tenant)


def nodes_of(outcome) -> set[str]:
    return {w.node_id for w in outcome.workers}


def test_in_its_window_a_booking_takes_its_tenants_work():
    (node,) = n8_a100_nodes(1)
    job = j_training("ours", gpus=8, tenant="alpha", max_runtime=10 * HOUR)

    outcome = place(snapshot([booked(node, "alpha")], [job])).by_job()["ours"]

    assert outcome.status == "placed"


def test_in_its_window_another_tenants_work_waits_for_its_end():
    (node,) = n8_a100_nodes(1)
    jobs = [
        j_training("first", gpus=8, tenant="beta", max_runtime=HOUR, priority=10),
        j_training("second", gpus=8, tenant="beta", max_runtime=HOUR),
    ]

    outcomes = place(snapshot([booked(node, "alpha")], jobs)).by_job()

    assert (outcomes["first"].status, outcomes["first"].reason) == ("reserved", "booked")
    assert outcomes["first"].estimated_start == NOW + 3 * HOUR
    assert (outcomes["second"].status, outcomes["second"].reason) == ("pending", "booked")
    assert "booked for another team" in outcomes["second"].message
    assert outcomes["second"].estimated_start == NOW + 3 * HOUR


def test_before_the_window_other_work_starts_there_only_if_it_ends_by_then():
    (node,) = n8_a100_nodes(1)
    short = j_batch("short", gpus=4, tenant="beta", max_runtime=HOUR)
    long = j_batch("long", gpus=4, tenant="beta", max_runtime=3 * HOUR)

    outcomes = place(snapshot([booked(node, "alpha", starts_in=2 * HOUR)], [short, long]))

    assert outcomes.by_job()["short"].status == "placed"
    assert outcomes.by_job()["long"].status != "placed"


def test_the_tenants_own_work_may_run_into_its_booking():
    (node,) = n8_a100_nodes(1)
    job = j_batch("ours", gpus=4, tenant="alpha", max_runtime=3 * HOUR)

    outcome = place(snapshot([booked(node, "alpha", starts_in=2 * HOUR)], [job])).by_job()["ours"]

    assert outcome.status == "placed"


def test_other_work_goes_to_nodes_nobody_booked():
    (free,) = n8_a100_nodes(1, prefix="free-")
    (kept,) = n8_a100_nodes(1, prefix="kept-")
    job = j_training("theirs", gpus=4, tenant="beta", max_runtime=HOUR)

    outcome = place(snapshot([booked(kept, "alpha"), free], [job])).by_job()["theirs"]

    assert nodes_of(outcome) == {free.id}


def test_equal_requests_of_two_tenants_get_their_own_answers():
    (node,) = n8_a100_nodes(1)
    # Between tenants of equal shares, beta's jobs are decided before zeta's.
    jobs = [j_batch(f"beta-{i}", gpus=1, tenant="beta") for i in range(3)] + [
        j_batch("zeta-0", gpus=1, tenant="zeta")
    ]

    decision = place(snapshot([booked(node, "zeta")], jobs, policy=Policy(backfill=False)))

    outcomes = decision.by_job()
    assert [o.job_id for o in decision.outcomes][-1] == "zeta-0"
    assert {outcomes[f"beta-{i}"].reason for i in range(3)} == {"booked"}
    assert outcomes["zeta-0"].status == "placed"


def test_a_job_kept_off_by_maintenance_is_told_maintenance_not_booked():
    (node,) = n8_a100_nodes(1)
    shut = dataclasses.replace(node, closes_at=NOW - HOUR, opens_at=NOW + HOUR)
    jobs = [
        j_training("first", gpus=8, tenant="alpha", priority=10),
        j_training("second", gpus=8, tenant="alpha"),
    ]

    outcomes = place(snapshot([shut], jobs)).by_job()

    assert outcomes["first"].reason == "maintenance"
    assert outcomes["second"].reason == "maintenance"


def then_maintenance(node, starts_in: float, lasts: float = HOUR):
    """The booked node with a maintenance window after its booking."""
    start = NOW + starts_in
    return dataclasses.replace(node, after=(start, start + lasts, ""))


def test_the_tenants_work_keeps_off_the_maintenance_that_follows_its_booking():
    (node,) = n8_a100_nodes(1)
    node = then_maintenance(booked(node, "alpha", lasts=3 * HOUR), starts_in=3 * HOUR)
    long = j_training("long", gpus=8, tenant="alpha", max_runtime=4 * HOUR, priority=10)
    short = j_training("short", gpus=8, tenant="alpha", max_runtime=2 * HOUR)

    outcomes = place(snapshot([node], [long, short])).by_job()

    assert (outcomes["long"].status, outcomes["long"].reason) == ("reserved", "maintenance")
    assert outcomes["long"].estimated_start == NOW + 4 * HOUR  # when the maintenance ends
    assert outcomes["short"].status == "placed"  # it ends before the maintenance starts


def test_a_job_kept_off_only_by_the_window_after_a_booking_is_told_when_that_one_ends():
    (node,) = n8_a100_nodes(1)
    node = then_maintenance(booked(node, "alpha", lasts=3 * HOUR), starts_in=3 * HOUR)
    first = j_training("first", gpus=8, tenant="alpha", max_runtime=4 * HOUR, priority=10)
    second = j_training("second", gpus=8, tenant="alpha", max_runtime=4 * HOUR)

    outcome = place(snapshot([node], [first, second])).by_job()["second"]

    assert (outcome.status, outcome.reason) == ("pending", "maintenance")
    assert outcome.estimated_start == NOW + 4 * HOUR  # not the booking's end, 2 h earlier
