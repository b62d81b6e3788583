"""Properties that hold on any snapshot: checked on random small clusters and queues."""

from __future__ import annotations

import dataclasses
from collections import defaultdict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs.placement import (
    FAMILIES,
    PENDING,
    REASONS,
    TRAINING,
    Allocation,
    Decision,
    Node,
    Policy,
    QueuedJob,
    Quota,
    RunningJob,
    ShapeCount,
    Snapshot,
    Tenant,
    gpu_flavor,
    kinds,
    place,
)

NOW = 1_000_000.0
TENANTS = ("alpha", "beta", "gamma")
TYPES = ("a100", "t4")
EXAMPLES = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def clusters(draw):
    """Nodes with running jobs on them; free capacity is what the running jobs leave."""
    nodes, running = [], []
    for i in range(draw(st.integers(1, 7))):
        gpus = draw(st.sampled_from((0, 1, 2, 4, 8)))
        gpu_type = draw(st.sampled_from(TYPES)) if gpus else ""
        free = [draw(st.sampled_from((1000, 1000, 500, 250, 0))) for _ in range(gpus)]
        cpu, mem = draw(st.integers(0, 16)) * 4000, draw(st.integers(0, 16)) * 8000
        node = Node(
            f"n{i}",
            draw(st.sampled_from(("c1", "c2"))),
            gpu_type,
            tuple(free),
            cpu,
            mem,
            gpu_type == "t4",
            (f"rack={draw(st.sampled_from('ab'))}",),
            healthy=draw(st.booleans()) or draw(st.booleans()),
        )
        nodes.append(node)
        used = tuple((g, 1000 - m) for g, m in enumerate(free) if m < 1000)
        if used and draw(st.booleans()):
            running.append(draw(running_jobs(f"r{i}", Allocation(node.id, used, 1000, 1000))))
    return nodes, running


@st.composite
def running_jobs(draw, job_id: str, allocation: Allocation):
    end = draw(st.one_of(st.none(), st.floats(NOW - 100, NOW + 5000)))
    return RunningJob(
        job_id,
        draw(st.sampled_from(TENANTS)),
        draw(st.integers(0, 3)),
        draw(st.booleans()),
        draw(st.booleans()),
        (allocation,),
        end,
        NOW - draw(st.integers(0, 5000)),
        NOW - 6000,
        stopping=draw(st.booleans()) and draw(st.booleans()),
        exclusive=draw(st.booleans()) and draw(st.booleans()),
    )


@st.composite
def queued_jobs(draw, job_id: str):
    family = draw(st.sampled_from(FAMILIES))
    gpus = draw(st.sampled_from((0, 1, 1, 2, 4, 8)))
    milli = 0 if gpus else draw(st.sampled_from((0, 100, 300, 500, 500)))
    return QueuedJob(
        job_id,
        draw(st.sampled_from(TENANTS)),
        family,
        draw(st.integers(0, 3)),
        draw(st.integers(0, 3)),
        NOW - draw(st.integers(0, 20_000)),
        draw(st.integers(1, 3)),
        draw(st.integers(0, 4)) * 1000,
        draw(st.integers(0, 4)) * 2000,
        gpus,
        milli,
        draw(st.sampled_from(((), ("a100",), ("t4",), TYPES))),
        draw(st.booleans()),
        draw(st.sampled_from((None, 300.0, 3000.0, 30_000.0))),
        draw(st.sampled_from(((), ("c1",), ("c2",)))),
        exclusive=draw(st.booleans()) and draw(st.booleans()),
    )


@st.composite
def snapshots(draw) -> Snapshot:
    nodes, running = draw(clusters())
    queue = [draw(queued_jobs(f"q{i}")) for i in range(draw(st.integers(0, 10)))]
    usage: dict[str, dict[str, int]] = {t: defaultdict(int) for t in TENANTS}
    for job in running:
        for flavor, amount in _held(job, {n.id: n for n in nodes}).items():
            usage[job.tenant][flavor] += amount
    tenants = []
    for t in TENANTS:
        quotas = tuple(
            Quota(
                gpu_flavor(g),
                draw(st.integers(0, 16)) * 1000,
                draw(st.sampled_from((0, 2000, 8000, None))),
            )
            for g in TYPES
            if draw(st.booleans())
        )
        tenants.append(Tenant(t, draw(st.sampled_from((1.0, 2.0))), quotas, dict(usage[t])))
    return Snapshot(
        tuple(nodes), tuple(running), tuple(queue), tuple(tenants), NOW, draw(st.integers(0, 3))
    )


def _held(job: RunningJob, nodes: dict[str, Node]) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for a in job.allocations:
        out["cpu"] += a.cpu_milli
        out["memory"] += a.memory_mb
        gpu_type = nodes[a.node_id].gpu_type
        if gpu_type:
            out[gpu_flavor(gpu_type)] += sum(m for _, m in a.gpus)
    return out


def _granted(decision: Decision) -> list:
    return [o for o in decision.outcomes if o.workers]


@EXAMPLES
@given(snapshots())
def test_no_node_resource_or_gpu_share_is_ever_over_committed(snap: Snapshot):
    decision = place(snap)
    free = {n.id: [list(n.gpu_free_milli), n.cpu_free_milli, n.memory_free_mb] for n in snap.nodes}
    running = {j.id: j for j in snap.running}
    for victim in decision.preempted:
        for a in running[victim].allocations:
            for index, milli in a.gpus:
                free[a.node_id][0][index] += milli
            free[a.node_id][1] += a.cpu_milli
            free[a.node_id][2] += a.memory_mb
    for outcome in _granted(decision):
        for w in outcome.workers:
            for index in w.gpu_indices:
                free[w.node_id][0][index] -= w.gpu_milli
            free[w.node_id][1] -= w.cpu_milli
            free[w.node_id][2] -= w.memory_mb
    for gpus, cpu, mem in free.values():
        assert min(gpus, default=0) >= 0 and cpu >= 0 and mem >= 0


@EXAMPLES
@given(snapshots())
def test_an_exclusive_job_shares_its_nodes_with_nobody(snap: Snapshot):
    decision = place(snap)
    queued = {j.id: j for j in snap.queued}
    staying = [j for j in snap.running if j.id not in decision.preempted]
    users: dict[str, list[str]] = defaultdict(list)  # node -> the jobs on it after the cycle
    for job in staying:
        for node in {a.node_id for a in job.allocations}:
            users[node].append(job.id)
    for outcome in _granted(decision):
        asked = queued[outcome.job_id]
        if not (asked.cpu_milli or asked.memory_mb or asked.worker_gpu_milli):
            continue  # takes nothing (every submission asks for some CPU and memory)
        for node in {w.node_id for w in outcome.workers}:
            users[node].append(outcome.job_id)
    sole = {j.id for j in staying if j.exclusive}
    sole |= {o.job_id for o in _granted(decision) if queued[o.job_id].exclusive}
    for outcome in _granted(decision):
        if queued[outcome.job_id].exclusive:
            assert len({w.node_id for w in outcome.workers}) == len(outcome.workers)
    for on_node in users.values():
        assert len(on_node) == 1 or not sole & set(on_node)


@EXAMPLES
@given(snapshots())
def test_a_gang_is_placed_whole_or_not_at_all(snap: Snapshot):
    decision = place(snap)
    jobs = {j.id: j for j in snap.queued}
    nodes = {n.id: n for n in snap.nodes}
    for outcome in decision.outcomes:
        job = jobs[outcome.job_id]
        if not outcome.workers:
            continue
        assert len(outcome.workers) == job.workers
        assert all(
            nodes[w.node_id].healthy and nodes[w.node_id].schedulable for w in outcome.workers
        )
        for w in outcome.workers:
            assert len(w.gpu_indices) == (job.gpus or (1 if job.gpu_milli else 0))
            assert w.gpu_milli == (1000 if job.gpus else job.gpu_milli) or not w.gpu_indices
            if w.gpu_milli and w.gpu_milli < 1000:
                assert nodes[w.node_id].gpu_shareable and job.family != TRAINING
        if job.family == TRAINING:
            assert len({(w.cluster, w.gpu_type) for w in outcome.workers}) == 1


@EXAMPLES
@given(snapshots())
def test_quota_is_never_exceeded_except_by_recorded_borrowing(snap: Snapshot):
    decision = place(snap)
    nodes = {n.id: n for n in snap.nodes}
    running = {j.id: j for j in snap.running}
    jobs = {j.id: j for j in snap.queued}
    usage = {t.id: defaultdict(int, t.usage) for t in snap.tenants}
    for victim in decision.preempted:
        for flavor, amount in _held(running[victim], nodes).items():
            usage[running[victim].tenant][flavor] -= amount
    borrowed: set[tuple[str, str]] = set()
    added: set[tuple[str, str]] = set()
    for outcome in _granted(decision):
        tenant = jobs[outcome.job_id].tenant
        for w in outcome.workers:
            flavor = gpu_flavor(w.gpu_type)
            usage[tenant][flavor] += w.gpu_milli * len(w.gpu_indices)
            added.add((tenant, flavor))
            if outcome.borrowed:
                borrowed.add((tenant, flavor))
    for tenant in snap.tenants:
        for q in tenant.quotas:
            if (tenant.id, q.flavor) not in added:
                continue
            used = usage[tenant.id][q.flavor]
            if q.borrow_limit is not None:
                assert used <= q.guaranteed + q.borrow_limit
            if used > q.guaranteed:
                assert (tenant.id, q.flavor) in borrowed


@EXAMPLES
@given(snapshots(), st.integers(1, 3))
def test_lower_tiers_never_change_what_higher_tiers_get(snap: Snapshot, cut: int):
    high = tuple(j for j in snap.queued if j.tier >= cut)
    low = [j for j in snap.queued if j.tier < cut]
    # The removed jobs still count in the typical workload, as recent history.
    history = tuple(
        ShapeCount(j.cpu_milli, j.worker_gpu_milli, j.workers, j.gpu_types) for j in low
    )
    alone = dataclasses.replace(snap, queued=high, recent_shapes=history)
    with_low = place(snap).by_job()
    without_low = place(alone).by_job()
    assert {j.id: with_low[j.id] for j in high} == without_low


@EXAMPLES
@given(snapshots())
def test_backfill_on_reserved_nodes_ends_before_the_reservation(snap: Snapshot):
    decision = place(snap)
    jobs = {j.id: j for j in snap.queued}
    order = [o.job_id for o in decision.outcomes]
    reserved = [o for o in decision.outcomes if o.status == "reserved"]
    for held in reserved:
        # Jobs considered after the reserved one are the backfill.
        for outcome in decision.outcomes[order.index(held.job_id) + 1 :]:
            if set(held.reserved_nodes) & {w.node_id for w in outcome.workers}:
                runtime = jobs[outcome.job_id].max_runtime
                assert runtime is not None and NOW + runtime <= held.estimated_start


@EXAMPLES
@given(snapshots())
def test_reservations_hold_disjoint_node_pools(snap: Snapshot):
    pool = {n.id: (n.gpu_type, n.cluster, n.gpu_shareable) for n in snap.nodes}
    reserved = [o for o in place(snap).outcomes if o.status == "reserved"]
    pools = [{pool[n] for n in o.reserved_nodes} for o in reserved]
    assert sum(len(p) for p in pools) == len(set().union(*pools))


@EXAMPLES
@given(snapshots(), st.booleans())
def test_victims_are_lower_tier_preemptible_borrowed_or_over_fair_share_and_not_stopping(
    snap: Snapshot, fair: bool
):
    if fair:
        snap = dataclasses.replace(snap, policy=Policy(fair_share_preemption=True))
    decision = place(snap)
    running = {j.id: j for j in snap.running}
    jobs = {j.id: j for j in snap.queued}
    nodes = {n.id: n for n in snap.nodes}
    # Borrowing is read from the quota ledger, not the stored flag: reclaimed work holds a
    # flavor the preemptor's tenant has a real guarantee of (every tenant here is in one cohort).
    guaranteed = {t.id: {q.flavor for q in t.quotas if q.guaranteed > 0} for t in snap.tenants}
    for outcome in decision.outcomes:
        for victim_id in outcome.victims:
            victim, job = running[victim_id], jobs[outcome.job_id]
            assert not victim.stopping
            # By fair share: preemptible work of no higher tier, for a GPU job.
            shared = fair and victim.preemptible and victim.tier <= job.tier
            shared = shared and job.worker_gpu_milli > 0
            reclaimed = guaranteed[job.tenant] & set(_held(victim, nodes))
            assert (victim.preemptible and victim.tier < job.tier) or (
                victim.tenant != job.tenant and (reclaimed or shared)
            )
            assert outcome.workers  # it fits once the victims are gone
    assert sorted(decision.preempted) == sorted(v for o in decision.outcomes for v in o.victims)


@EXAMPLES
@given(snapshots())
def test_every_job_gets_one_outcome_and_every_wait_a_reason(snap: Snapshot):
    decision = place(snap)
    assert sorted(o.job_id for o in decision.outcomes) == sorted(j.id for j in snap.queued)
    for outcome in decision.outcomes:
        if outcome.status == PENDING:
            assert outcome.reason in REASONS and outcome.message
        assert bool(outcome.workers) == (outcome.status in ("placed", "preempts"))


@EXAMPLES
@given(snapshots())
def test_the_same_snapshot_gives_the_same_decision(snap: Snapshot):
    assert place(snap) == place(snap)


@EXAMPLES
@given(snapshots())
def test_reserved_nodes_will_hold_the_job_when_the_reservation_starts(snap: Snapshot):
    decision = place(snap)
    jobs = {j.id: j for j in snap.queued}
    for held in (o for o in decision.outcomes if o.status == "reserved"):
        job = jobs[held.job_id]
        free = {n.id: list(n.gpu_free_milli) for n in snap.nodes}
        # At the start: victims are gone, running work due by then has ended, and work placed
        # now is still there unless its runtime limit ends it first.
        for j in snap.running:
            due = j.expected_end is not None and max(j.expected_end, NOW) <= held.estimated_start
            if j.id in decision.preempted or due:
                for a in j.allocations:
                    for index, milli in a.gpus:
                        free[a.node_id][index] += milli
        for outcome in _granted(decision):
            runtime = jobs[outcome.job_id].max_runtime
            if runtime is None or NOW + runtime > held.estimated_start:
                for w in outcome.workers:
                    for index in w.gpu_indices:
                        free[w.node_id][index] -= w.gpu_milli
        whole = sum(1 for n in held.reserved_nodes for m in free[n] if m >= 1000)
        assert whole >= job.workers * job.gpus or not job.gpus


@st.composite
def snapshots_with_repeats(draw) -> Snapshot:
    """Snapshots whose queue holds several jobs of each request, as long queues do."""
    snap = draw(snapshots())
    queue = []
    for job in snap.queued:
        for copy in range(draw(st.integers(1, 4))):
            queue.append(
                dataclasses.replace(
                    job,
                    id=f"{job.id}-{copy}",
                    submit_time=NOW - draw(st.integers(0, 20_000)),
                    max_runtime=draw(st.sampled_from((None, 300.0, 3000.0, 30_000.0))),
                )
            )
    return dataclasses.replace(snap, queued=tuple(queue))


@EXAMPLES
@given(snapshots_with_repeats())
def test_reusing_the_answer_for_an_equal_waiting_request_changes_no_decision(snap: Snapshot):
    reused = place(snap)
    with pytest.MonkeyPatch.context() as patch:
        # Every request unlike any other: no answer is ever reused.
        patch.setattr(kinds, "request_of", lambda job: object())
        decided = place(snap)
    assert reused == decided
