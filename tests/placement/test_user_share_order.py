"""The queue order with users, against a plain reference on random queues: with one owner per
tenant it is the order from before users counted (a copy of that key); with several, each
tenant's next job is the best of its owners' next jobs, keyed with their use at that moment."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs.placement import Policy, QueuedJob, Tenant
from jobs.placement.ordering import HOUR, QueueOrder, points, size_doublings, team_share

NOW = 1_000_000.0
TENANTS = ("alpha", "beta", "gamma")
USERS = ("ann", "bob", "cy", "")
TOTALS = {"gpu": 32_000.0, "cpu": 256_000.0, "memory": 1_024_000.0}
POLICY = Policy()
EXAMPLES = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def old_job_key(job: QueuedJob) -> tuple:
    """The order inside a tenant before users counted."""
    wait = max(NOW - job.submit_time, 0.0) / HOUR
    return (
        -(
            job.priority
            + POLICY.aging_priority_per_hour * wait
            - POLICY.size_priority_per_doubling * size_doublings(job)
        ),
        job.submit_time,
        job.id,
    )


def user_job_key(job: QueuedJob, user_use: dict[str, dict[str, float]]) -> tuple:
    use = max(user_use.get(job.tenant, {}).get(job.owner, 0.0), 0.0)
    priority, submit, job_id = old_job_key(job)
    penalty = POLICY.user_share_priority_per_doubling * math.log2(1.0 + use)
    return (priority + penalty, submit, job_id)


def reference_order(queued, tenants, job_key, charged, teammate_sign=lambda job: 0) -> list[str]:
    """Tier by tier, the tenant of least aged share next, and its best job by ``job_key``."""
    used = {t.id: {"gpu": 0.0, "cpu": 0.0, "memory": 0.0} for t in tenants}
    for t in tenants:
        for flavor, amount in t.usage.items():
            used[t.id]["gpu" if flavor.startswith("gpu:") else flavor] += amount
    weights = {t.id: t.weight for t in tenants}
    user_use = {t.id: dict(t.user_use) for t in tenants}
    top = max(job.tier for job in queued)
    starved = POLICY.tier_wait_limit_hours * HOUR
    tiers: dict[int, list[QueuedJob]] = {}
    for job in queued:
        tiers.setdefault(job.tier, []).append(job)
        if job.tier < top and NOW - job.submit_time >= starved:
            tiers.setdefault(top, []).append(job)

    def share(tenant: str) -> float:
        weighted = [
            POLICY.resource_weights[r] * used[tenant][r] / total for r, total in TOTALS.items()
        ]
        return max(0.0, *weighted) / weights[tenant]

    out = []
    for tier in sorted(tiers, reverse=True):
        left = tiers[tier]
        while left:
            heads = {}
            for job in left:
                best = heads.get(job.tenant)
                if best is None or job_key(job, user_use) < job_key(best, user_use):
                    heads[job.tenant] = job
            aged = {
                t: share(t) - POLICY.aging_share_per_hour * (NOW - h.submit_time) / HOUR
                for t, h in heads.items()
            }
            job = heads[min(aged, key=lambda t: (aged[t], t))]
            left.remove(job)
            out.append(job.id)
            users = user_use.setdefault(job.tenant, {})
            if charged(job):
                gpus = job.workers * (job.gpus or 0.125)
                used[job.tenant]["gpu"] += 1000 * gpus
                users[job.owner] = users.get(job.owner, 0.0) + gpus
            if teammate_sign(job):
                teammate = _teammate(job.owner)
                users[teammate] = users.get(teammate, 0.0) + teammate_sign(job) * TEAMMATE_GPUS
    return out


# After a job, a teammate's GPUs may change too (sign -1: the job evicted its tenant's work,
# as when its quota does not cover it; +1: any other charge the order is told of).
TEAMMATE_GPUS = 8.0


def _teammate(owner: str) -> str:
    return USERS[(USERS.index(owner) + 1) % len(USERS)] if owner in USERS else owner


def queue_order(
    queued, tenants, charged, teammate_sign=lambda job: 0, policy: Policy = POLICY
) -> list[str]:
    order = QueueOrder(queued, tenants, TOTALS, policy, NOW)
    out = []
    for job in order:
        out.append(job.id)
        if charged(job):
            gpus = job.workers * (job.gpus or 0.125)
            order.charge(job.tenant, {"gpu": 1000 * gpus}, owner=job.owner, gpus=gpus)
        if teammate_sign(job):
            teammate = _teammate(job.owner)
            order.charge(job.tenant, {}, teammate_sign(job), owner=teammate, gpus=TEAMMATE_GPUS)
    return out


@st.composite
def queues(draw, one_owner_per_tenant: bool):
    jobs = []
    for i in range(draw(st.integers(1, 30))):
        tenant = draw(st.sampled_from(TENANTS))
        owner = f"{tenant}-user" if one_owner_per_tenant else draw(st.sampled_from(USERS))
        jobs.append(
            QueuedJob(
                f"q{i}",
                tenant,
                tier=draw(st.integers(0, 2)),
                priority=draw(st.sampled_from((0, 0, 10, 50, 200))),
                submit_time=NOW - draw(st.integers(0, 40)) * HOUR - draw(st.integers(0, 3599)),
                workers=draw(st.integers(1, 3)),
                gpus=draw(st.sampled_from((0, 1, 2, 8))),
                max_runtime=draw(st.sampled_from((None, 600.0, 4 * HOUR))),
                owner=owner,
            )
        )
    tenants = []
    for tenant in TENANTS:
        users = (f"{tenant}-user",) if one_owner_per_tenant else USERS
        use = {u: float(draw(st.sampled_from((0, 0, 1, 8, 64)))) for u in users}
        gpus = draw(st.integers(0, 16)) * 1000
        weight = draw(st.sampled_from((1.0, 2.0)))
        tenants.append(Tenant(tenant, weight, usage={"gpu:a100": gpus}, user_use=use))
    ids = [job.id for job in jobs]
    placed = draw(st.sets(st.sampled_from(ids)))
    signs = (
        {}
        if one_owner_per_tenant
        else draw(st.dictionaries(st.sampled_from(ids), st.sampled_from((-1, 1))))
    )
    return jobs, tenants, lambda job: job.id in placed, lambda job: signs.get(job.id, 0)


@EXAMPLES
@given(queues(one_owner_per_tenant=True))
def test_with_one_owner_per_tenant_the_order_is_the_order_before_users_counted(queue):
    jobs, tenants, charged, _ = queue
    old = reference_order(jobs, tenants, lambda job, _: old_job_key(job), charged)
    assert queue_order(jobs, tenants, charged) == old


@EXAMPLES
@given(queues(one_owner_per_tenant=False))
def test_with_several_owners_a_tenants_next_job_is_its_best_keyed_with_its_owners_use(queue):
    jobs, tenants, charged, teammate_sign = queue
    assert queue_order(jobs, tenants, charged, teammate_sign) == reference_order(
        jobs, tenants, user_job_key, charged, teammate_sign
    )


@EXAMPLES
@given(queues(one_owner_per_tenant=False))
def test_each_owners_jobs_keep_their_order(queue):
    jobs, tenants, charged, teammate_sign = queue
    strict_tiers = Policy(tier_wait_limit_hours=None)  # each job comes once
    got = queue_order(jobs, tenants, charged, teammate_sign, strict_tiers)
    place = {job_id: i for i, job_id in enumerate(got)}
    assert len(got) == len(place) == len(jobs)
    for owner in {(job.tenant, job.owner, job.tier) for job in jobs}:
        mine = [job for job in jobs if (job.tenant, job.owner, job.tier) == owner]
        assert sorted(mine, key=lambda job: place[job.id]) == sorted(mine, key=old_job_key)


@EXAMPLES
@given(queues(one_owner_per_tenant=False))
def test_a_jobs_points_are_the_key_its_tenant_orders_it_by(queue):
    jobs, tenants, _, _ = queue
    user_use = {t.id: dict(t.user_use) for t in tenants}
    for job in jobs:
        use = user_use[job.tenant].get(job.owner, 0.0)
        total = points(job, POLICY, NOW, use).total
        assert -total == pytest.approx(user_job_key(job, user_use)[0], abs=1e-9)
        assert points(job, POLICY, NOW, None).total == pytest.approx(-old_job_key(job)[0])


@EXAMPLES
@given(queues(one_owner_per_tenant=False), st.data())
def test_a_tenants_turn_is_its_team_share_less_its_next_jobs_aging(queue, data):
    jobs, tenants, _, _ = queue
    recent = st.sampled_from((0.0, 0.0, 500.0, 4000.0, 64_000.0))
    tenants = [
        dataclasses.replace(t, recent_use={"gpu": data.draw(recent), "cpu": data.draw(recent)})
        for t in tenants
    ]
    strict_tiers = Policy(tier_wait_limit_hours=None)  # the top tier's jobs come first
    order = QueueOrder(jobs, tenants, TOTALS, strict_tiers, NOW)
    shares = {t.id: team_share(t, TOTALS, strict_tiers) for t in tenants}
    for t in tenants:
        share = shares[t.id]
        assert share.share == pytest.approx(order.share(t.id), abs=1e-12)
        assert share.share == pytest.approx(
            share.resource_weight * (share.held + share.recent) / share.weight, abs=1e-12
        )
    # The top tier's tenants first come in the order of their turns' keys: the share less the
    # aging of the first job each yields.
    top = max(job.tier for job in jobs)
    heads: dict[str, QueuedJob] = {}
    for job in order:
        if job.tier == top:
            heads.setdefault(job.tenant, job)
    keys = {
        t: shares[t].share - POLICY.aging_share_per_hour * (NOW - head.submit_time) / HOUR
        for t, head in heads.items()
    }
    assert list(heads) == sorted(keys, key=lambda t: (keys[t], t))
