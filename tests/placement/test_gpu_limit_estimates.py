"""When a job held by a limit on the GPUs its scope holds (its tenant's per user, its
priority class's per user or in all) should start: once enough of that scope's work should
have ended, as its runtime limits and the cycle's own placements say; unknown when an end
that matters is not known, or no end would do."""

from __future__ import annotations

import dataclasses

from jobs.placement import place
from jobs.placement.gpu_limits import GpuLimits, held_until
from tests.placement.builders import NOW, j_training, n8_a100_nodes, running_on, snapshot
from tests.placement.test_class_gpu_limit import HIGH
from tests.placement.test_user_limit import limited

HOUR = 3600.0


def anns(gpus: tuple[int, ...], ends: tuple[float | None, ...], **kw):
    """A node per running job of Ann's, each holding its GPUs until its end."""
    found = [
        running_on(node, f"ann-running{i}", g, owner="ann", expected_end=end, **kw)
        for i, (node, g, end) in enumerate(zip(n8_a100_nodes(len(gpus)), gpus, ends, strict=True))
    ]
    return tuple(n for n, _ in found), tuple(r for _, r in found)


def test_a_job_past_its_users_limit_starts_when_their_work_ends():
    nodes, running = anns((4,), (NOW + 600,))
    job = j_training("next", gpus=2, owner="ann", max_runtime=HOUR)

    decision = place(snapshot(nodes, (job,), running, tenants=(limited(4),)))

    waiting = decision.by_job()["next"]
    assert (waiting.reason, waiting.estimated_start) == ("user_gpu_limit", NOW + 600)


def test_it_waits_for_as_much_of_their_work_to_end_as_it_needs():
    nodes, running = anns((2, 2, 2), (NOW + 600, NOW + 1800, NOW + 1200))
    job = j_training("next", gpus=4, owner="ann", max_runtime=HOUR)

    decision = place(snapshot(nodes, (job,), running, tenants=(limited(6),)))

    # 6 held, 4 asked, 6 allowed: 4 must go, the two that end first.
    assert decision.by_job()["next"].estimated_start == NOW + 1200


def test_an_end_not_known_that_it_needs_leaves_it_unknown():
    nodes, running = anns((2, 2), (NOW + 600, None))
    first = j_training("first", gpus=2, owner="ann", max_runtime=HOUR)
    second = j_training("second", gpus=4, owner="ann", max_runtime=HOUR, submit_time=NOW + 1)

    decision = place(snapshot(nodes, (first, second), running, tenants=(limited(4),)))

    assert decision.by_job()["first"].estimated_start == NOW + 600  # the known end does
    assert decision.by_job()["second"].estimated_start is None  # it needs both to end


def test_a_job_larger_than_the_limit_has_no_estimate():
    job = j_training("big", gpus=8, owner="ann", max_runtime=HOUR)

    decision = place(snapshot(n8_a100_nodes(1), (job,), tenants=(limited(4),)))

    assert decision.by_job()["big"].estimated_start is None


def test_what_the_cycle_places_ends_by_its_runtime_limit():
    placed = j_training("placed", gpus=4, owner="ann", max_runtime=2 * HOUR, priority=100)
    later = j_training("later", gpus=2, owner="ann", max_runtime=HOUR, submit_time=NOW + 1)

    decision = place(snapshot(n8_a100_nodes(1), (placed, later), tenants=(limited(4),)))

    assert decision.by_job()["placed"].status == "placed"
    assert decision.by_job()["later"].estimated_start == NOW + 2 * HOUR


def test_the_latest_of_its_limits_decides():
    # Ann's own work at the class frees her share at +10 min; the class needs Bob's to end
    # too, at +30.
    nodes, running = anns((2, 4), (NOW + 600, NOW + 1800), tier=HIGH)
    running = (running[0], dataclasses.replace(running[1], owner="bob"))
    job = j_training("next", gpus=2, owner="ann", tier=HIGH, max_runtime=HOUR,
                     class_user_gpu_limit=2000, class_gpu_limit=4000)  # fmt: skip

    decision = place(snapshot(nodes, (job,), running))

    waiting = decision.by_job()["next"]
    assert (waiting.reason, waiting.estimated_start) == ("class_gpu_limit", NOW + 1800)


def test_work_taken_off_and_put_back_is_counted_once():
    # As the cycle does while it tries to grow a running elastic gang (growth._count).
    _, (mine,) = anns((4,), (NOW + 600,))
    _, (other,) = anns((2,), (NOW + 1800,))
    limits = GpuLimits((limited(6),), (mine, other), NOW)
    job = j_training("next", gpus=2, owner="ann", max_runtime=HOUR)
    before = limits.estimate(job)

    limits.charge(mine, -mine.gpu_milli, held_until(mine))
    gone = limits.estimate(job)
    limits.charge(mine, mine.gpu_milli, held_until(mine))

    assert (before, gone, limits.estimate(job)) == (NOW + 600, NOW, NOW + 600)
