"""Evicting for a tenant's own quota, checked on 1,500 random small clusters: a job that evicts
nobody leaves capacity and quota exactly as they were, one that does evicts only its tenant's
own preemptible work of lower tiers, and the quota books end as before (the victims still
charged until they have gone, the job not yet)."""

import random

from jobs.placement import (
    Allocation,
    Node,
    Policy,
    QueuedJob,
    Quota,
    RunningJob,
    Tenant,
    gpu_flavor,
    own_quota,
    place,
)
from jobs.placement.decision import PENDING
from tests.placement.builders import NOW, snapshot

TYPES = ("a100", "h100", "t4")
TENANTS = ("alpha", "beta")


def _running_on(rng, i, gpu_type, free, cpu, usage):
    for k in range(rng.randint(0, 3)):
        share = gpu_type == "t4" and rng.random() < 0.4
        want = rng.choice((1, 2, 4)) if free else 0
        if share:
            gpus = [x for x, m in enumerate(free) if m >= 500][:1]
        else:
            gpus = [x for x, m in enumerate(free) if m == 1000][:want]
        if (want and not gpus) or cpu[0] < 1000 * max(len(gpus), 1):
            continue
        milli = 500 if share else 1000
        for x in gpus:
            free[x] -= milli
        cpu[0] -= 1000 * max(len(gpus), 1)
        tenant = rng.choice(TENANTS)
        held = {"cpu": 1000 * max(len(gpus), 1), "memory": 1000}
        if gpus:
            held[gpu_flavor(gpu_type)] = milli * len(gpus)
        for flavor, amount in held.items():
            usage[tenant][flavor] = usage[tenant].get(flavor, 0) + amount
        yield RunningJob(
            f"r{i}-{k}", tenant, rng.randint(0, 4), rng.random() < 0.7, False,
            (Allocation(f"n{i}", tuple((x, milli) for x in gpus), held["cpu"], 1000),),
            expected_end=rng.choice((None, NOW + rng.randint(10, 5000))),
            last_checkpoint=NOW - rng.randint(0, 5000), started_at=NOW - 6000,
            stopping=rng.random() < 0.15,
        )  # fmt: skip


def random_snapshot(rng):
    nodes, running = [], []
    usage = {t: {} for t in TENANTS}
    for i in range(rng.randint(1, 6)):
        gpu_type = rng.choice((*TYPES, ""))
        free = [1000] * (rng.choice((1, 4, 8)) if gpu_type else 0)
        cpu = [max(len(free), 1) * 8000]
        running += _running_on(rng, i, gpu_type, free, cpu, usage)
        nodes.append(Node(f"n{i}", rng.choice(("c1", "c2")), gpu_type, tuple(free), cpu[0],
                          64000 * max(len(free), 1), gpu_type == "t4", ()))  # fmt: skip
    tenants = []
    for tenant in TENANTS:
        quotas = [
            Quota(gpu_flavor(t), max(0, usage[tenant].get(gpu_flavor(t), 0)
                                     + rng.choice((-2000, -1000, 0, 0, 1000))),
                  rng.choice((0, 0, 1000, None)))
            for t in TYPES if rng.random() < 0.7
        ]  # fmt: skip
        if rng.random() < 0.3:
            quotas.append(Quota("cpu", usage[tenant].get("cpu", 0) + rng.choice((0, 2000)), 0))
        cohort = rng.choice(("x", "x", tenant))
        tenants.append(Tenant(tenant, quotas=tuple(quotas), usage=usage[tenant], cohort=cohort))
    queued = []
    for q in range(rng.randint(1, 6)):
        family = rng.choice(("training", "batch_inference", "evaluation"))
        share = family != "training" and rng.random() < 0.3
        queued.append(QueuedJob(
            id=f"q{q}", tenant=rng.choice(TENANTS), family=family, tier=rng.randint(0, 5),
            submit_time=NOW - rng.randint(0, 1000),
            workers=1 if family == "evaluation" else rng.randint(1, 3),
            cpu_milli=1000, memory_mb=1000, gpus=0 if share else rng.choice((0, 1, 2, 4)),
            gpu_milli=500 if share else 0,
            gpu_types=rng.choice(((), ("a100",), ("h100", "a100"), ("t4",))),
            preemptible=rng.random() < 0.5, max_runtime=rng.choice((None, 600.0, 36000.0)),
            may_preempt=rng.random() < 0.8, preempting=rng.random() < 0.1,
        ))  # fmt: skip
    policy = Policy(
        max_victims_per_job=rng.choice((1, 2, 64)),
        max_preemptions_per_tenant=rng.choice((1, 8)),
        max_preemption_attempts=rng.choice((1, 32)),
    )
    return snapshot(nodes, queued, running=running, tenants=tenants, policy=policy,
                    seed=rng.randint(0, 9))  # fmt: skip


def _books(cycle):
    capacity = {n.id: (n.gpus, n.cpu, n.mem) for n in cycle.capacity.nodes}
    ledger = cycle.ledger
    usage = {k: v for k, v in ledger.usage.items() if v}
    return capacity, usage, {k: v for k, v in ledger.cohort_used.items() if v}


def test_evicting_for_its_own_quota_keeps_the_books(monkeypatch):
    real = own_quota.preempt_own
    evictions = []

    def checked(cycle, job, groups, avoided):
        before, gone = _books(cycle), set(cycle.evicted)
        outcome = real(cycle, job, groups, avoided)
        after = _books(cycle)
        if outcome is None or outcome.status == PENDING:
            assert after == before, job
            return outcome
        evictions.append(job.id)
        assert after[1:] == before[1:], job  # quota: victims charged, the job not yet
        assert len(outcome.victims) <= cycle.policy.max_victims_per_job
        for victim in map(cycle.running.get, outcome.victims):
            assert victim.tenant == job.tenant and victim.preemptible
            assert victim.tier < job.tier and not victim.stopping and victim.id not in gone
        assert all(min(n.gpus, default=0) >= 0 <= min(n.cpu, n.mem) for n in cycle.capacity.nodes)
        return outcome

    monkeypatch.setattr(own_quota, "preempt_own", checked)
    for seed in range(1500):
        place(random_snapshot(random.Random(seed)))

    assert len(evictions) > 50  # the random clusters do reach the path
