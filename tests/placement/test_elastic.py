"""Elastic training gangs (torchrun's --nnodes=MIN:MAX, Kueue's partial admission): a gang
whose whole does not fit now starts with the most workers that do, at least its
``min_workers``; below that it waits, evicts or reserves as a gang of its fewest would."""

from __future__ import annotations

import itertools

import pytest

from jobs.placement import PENDING, PLACED, PREEMPTS, RESERVED, Policy, Tenant, place
from tests.placement.builders import (
    NOW,
    gpu_tenant,
    j_batch,
    j_training,
    n8_a100_nodes,
    running_on,
    snapshot,
)

H = 3600.0


def decided(queued, nodes, running=(), tenants=(), policy=None):
    out = place(snapshot(nodes, queued, running, tenants, policy)).outcomes
    return {o.job_id: o for o in out}


def elastic(id: str = "el", workers: int = 4, least: int = 2, **kw):
    """A gang of ``workers`` 8-GPU workers that may start with ``least``."""
    return j_training(id, workers=workers, gpus=8, min_workers=least, **kw)


def busy(count: int, tier: int = 0, preemptible: bool = True):
    """``count`` 8-GPU nodes, each wholly held by a running job."""
    pairs = [
        running_on(node, f"run{n}", 8, tier=tier, preemptible=preemptible, tenant="beta")
        for n, node in enumerate(n8_a100_nodes(count))
    ]
    return [node for node, _ in pairs], [job for _, job in pairs]


def test_an_elastic_gang_that_fits_whole_starts_whole():
    out = decided([elastic()], n8_a100_nodes(4))["el"]

    assert (out.status, len(out.workers)) == (PLACED, 4)


def test_an_elastic_gang_starts_with_the_most_workers_that_fit_now():
    out = decided([elastic(workers=8, least=2)], n8_a100_nodes(5))["el"]

    assert (out.status, len(out.workers)) == (PLACED, 5)
    assert [w.rank for w in out.workers] == [0, 1, 2, 3, 4]
    assert len({w.node_id for w in out.workers}) == 5


def test_a_rigid_gang_of_the_same_size_waits_where_the_elastic_one_starts():
    out = decided([j_training("rigid", workers=4, gpus=8)], n8_a100_nodes(3))["rigid"]

    assert (out.status, out.workers) == (PENDING, ())


def test_below_its_fewest_an_elastic_gang_waits_and_says_for_how_many():
    nodes, running = busy(2, preemptible=False)
    out = decided([elastic(workers=4, least=2)], [*nodes, *n8_a100_nodes(1)], running)["el"]
    never = decided([elastic(workers=4, least=2)], n8_a100_nodes(1))["el"]

    assert (out.status, out.reason) == (PENDING, "insufficient_gpus")
    assert out.message.startswith("at least 2 workers x 8 GPUs")
    assert (never.status, never.reason) == (PENDING, "worker_too_large")
    assert never.message.startswith("at least 2 workers")


SIZES = [(f, w, m) for f, w, m in itertools.product(range(7), range(1, 6), range(1, 6)) if m <= w]


@pytest.mark.parametrize("free, whole, least", SIZES)
def test_the_size_started_is_the_whole_or_the_free_room_never_below_the_fewest(free, whole, least):
    out = decided([elastic(workers=whole, least=least)], n8_a100_nodes(free) if free else ())

    want = min(whole, free) if free >= least else 0
    assert len(out["el"].workers) == want
    assert out["el"].status == (PLACED if want else PENDING)


def test_the_gang_started_smaller_leaves_the_rest_to_the_jobs_behind_it():
    nodes = n8_a100_nodes(3)
    out = decided([elastic(workers=4, least=2), j_training("next", workers=1, gpus=8)], nodes)

    # The elastic gang takes all three nodes (it asks for four); nothing is left.
    assert len(out["el"].workers) == 3
    assert out["next"].status == PENDING


def test_its_quota_cuts_an_elastic_gang_to_what_it_allows():
    tenants = [gpu_tenant("alpha", "a100", guaranteed=16), gpu_tenant("beta", "a100", 16)]

    out = decided([elastic(workers=4, least=1)], n8_a100_nodes(4), tenants=tenants)["el"]

    assert (out.status, len(out.workers)) == (PLACED, 2)


def test_a_user_limit_cuts_an_elastic_gang_and_one_below_its_fewest_waits_for_the_limit():
    tenants = [Tenant("alpha", user_gpu_limit=24_000)]
    cut = decided([elastic(workers=4, least=2)], n8_a100_nodes(4), tenants=tenants)["el"]
    over = decided([elastic(workers=8, least=4)], n8_a100_nodes(8), tenants=tenants)["el"]

    assert (cut.status, len(cut.workers)) == (PLACED, 3)
    assert (over.status, over.reason) == (PENDING, "user_gpu_limit")


def test_a_gpu_hour_budget_cuts_an_elastic_gang_to_what_is_left():
    # 8 GPUs for 2 h is 16 GPU-hours a worker: 40 left hold two workers.
    tenants = [Tenant("alpha", gpu_budget=40 * H * 1000, gpu_budget_renews=NOW + 24 * H)]

    out = decided([elastic(max_runtime=2 * H)], n8_a100_nodes(4), tenants=tenants)["el"]

    assert (out.status, len(out.workers)) == (PLACED, 2)


def test_below_its_fewest_it_evicts_for_its_fewest_only():
    nodes, running = busy(4)
    job = elastic(workers=4, least=2, tier=10)

    out = decided([job], nodes, running)["el"]

    assert out.status == PREEMPTS
    assert (len(out.workers), len(out.victims)) == (2, 2)


def test_free_room_for_its_fewest_is_taken_before_anybody_is_evicted():
    nodes, running = busy(2)
    out = decided([elastic(workers=4, least=2, tier=10)], [*nodes, *n8_a100_nodes(2)], running)

    assert (out["el"].status, len(out["el"].workers), out["el"].victims) == (PLACED, 2, ())


def test_below_its_fewest_it_reserves_nodes_for_its_fewest():
    nodes, running = busy(4, preemptible=False)
    running = [
        type(job)(**{**job.__dict__, "expected_end": NOW + (n + 1) * H})
        for n, job in enumerate(running)
    ]

    out = decided([elastic(workers=4, least=2)], nodes, running, policy=Policy())["el"]

    assert out.status == RESERVED
    assert len(out.reserved_nodes) == 2
    assert out.estimated_start == NOW + 2 * H


def test_only_a_training_gang_is_elastic():
    batch = j_batch("b", shards=4, gpus=8, min_workers=1)
    gang = elastic(workers=4, least=1)

    assert (batch.fewest, gang.fewest) == (4, 1)
    out = decided([batch], n8_a100_nodes(2))["b"]
    assert (out.status, out.workers) == (PENDING, ())


def test_a_fewest_above_the_gang_is_an_invalid_request():
    out = decided([elastic(workers=2, least=3)], n8_a100_nodes(4))["el"]

    assert (out.status, out.reason) == (PENDING, "invalid_request")


def half_busy_until(hours: float):
    """Four 8-GPU nodes, two of them held by work expected to end in ``hours``."""
    nodes, running = busy(2, preemptible=False)
    running = [type(job)(**{**job.__dict__, "expected_end": NOW + hours * H}) for job in running]
    return [*nodes, *n8_a100_nodes(2)], running


def test_an_elastic_gang_waits_for_its_whole_gang_when_that_ends_it_sooner():
    # Its limit, 10 h, is for its fewest (2): with 2 it ends in 10 h; whole (4), in 5 h once
    # the two nodes free in 1 h, at 6 h.
    nodes, running = half_busy_until(1)

    out = decided([elastic(workers=4, least=2, max_runtime=10 * H)], nodes, running)["el"]

    assert out.status == RESERVED
    assert len(out.reserved_nodes) == 4
    assert out.estimated_start == NOW + H


def test_an_elastic_gang_starts_smaller_when_that_ends_it_sooner():
    # The two nodes free in 6 h: whole it would end at 11 h, with 2 at 10 h.
    nodes, running = half_busy_until(6)

    out = decided([elastic(workers=4, least=2, max_runtime=10 * H)], nodes, running)["el"]

    assert (out.status, len(out.workers)) == (PLACED, 2)


def test_an_elastic_gang_starts_smaller_when_the_nodes_would_not_hold_its_whole_gang_sooner():
    # Two nodes free; four others half held until 1 h, half until 20 h. At 1 h as many GPUs
    # are free as its whole gang has (32), but in halves of nodes: no 8-GPU worker fits on
    # those until 20 h, where whole it would end at 25 h, with 2 at 10 h.
    nodes, running = list(n8_a100_nodes(2)), []
    for n, node in enumerate(n8_a100_nodes(4)):
        node, soon = running_on(node, f"soon{n}", 4, tenant="beta", expected_end=NOW + H)
        node, late = running_on(node, f"late{n}", 4, tenant="beta", expected_end=NOW + 20 * H)
        nodes.append(node)
        running += [soon, late]

    out = decided([elastic(workers=4, least=2, max_runtime=10 * H)], nodes, running)["el"]

    assert (out.status, len(out.workers)) == (PLACED, 2)


def test_without_a_runtime_limit_an_elastic_gang_starts_with_what_fits():
    nodes, running = half_busy_until(1)

    out = decided([elastic(workers=4, least=2)], nodes, running)["el"]

    assert (out.status, len(out.workers)) == (PLACED, 2)
