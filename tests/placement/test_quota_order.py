"""Quota and order: a job its tenant's quota cannot cover yet holds the tenant's room against
the tenant's later jobs; inside a tier, owners within their guarantee go before borrowers."""

from __future__ import annotations

import dataclasses

import pytest

from jobs.placement import (
    Allocation,
    Decision,
    Node,
    Policy,
    QueuedJob,
    RunningJob,
    Tenant,
    gpu_flavor,
    place,
)
from tests.placement.builders import (
    NOW,
    gpu_tenant,
    j_training,
    n8_a100_nodes,
    n8_h100_nodes,
    running_on,
    snapshot,
)

HOUR = 3600.0
A100 = gpu_flavor("a100")


def _tenant_t_with_seven_of_eight_gpus_busy():
    """Tenant T (8 A100s, no borrowing) runs seven 1-GPU jobs ending every 10 minutes, the last
    at NOW + 70 min, on one of two A100 nodes; an H100 node is idle (T has 8 H100s too). U only
    borrows, so T (whose head job has waited long) goes first."""
    a, b = n8_a100_nodes(2)
    (h,) = n8_h100_nodes(1)
    running = []
    for i in range(7):
        a, job = running_on(a, f"r{i}", 1, tenant="T", expected_end=NOW + 600 * (i + 1))
        running.append(job)
    t = gpu_tenant("T", "a100", 8, used_gpus=7)
    t = dataclasses.replace(t, quotas=t.quotas + gpu_tenant("T", "h100", 8).quotas)
    return (a, b, h), running, [t, gpu_tenant("U", "a100", 0, borrow=8)]


def _big(**kw) -> QueuedJob:
    """T's 8-GPU gang, queued 200 h: first in T's order, blocked by T's quota."""
    kw.setdefault("submit_time", NOW - 200 * HOUR)
    kw.setdefault("max_runtime", 4 * HOUR)
    return j_training("big", gpus=8, tenant="T", gpu_types=("a100",), **kw)


def _one(id: str, tenant: str = "T", runtime: float | None = HOUR, **kw) -> QueuedJob:
    kw.setdefault("gpu_types", ("a100",))
    return j_training(id, gpus=1, tenant=tenant, max_runtime=runtime, **kw)


@pytest.mark.parametrize(
    "later, want",
    [
        # Ends (NOW + 1 h) before T's last running job frees the room big needs (NOW + 70 min).
        (_one("short"), "placed"),
        (_one("long", runtime=2 * HOUR), "quota_exceeded"),
        (_one("unlimited", runtime=None), "quota_exceeded"),
        # Other tenants and other flavors are not held.
        (_one("other_tenant", tenant="U", runtime=None), "placed"),
        (_one("other_flavor", runtime=None, gpu_types=("h100",)), "placed"),
        (j_training("cpu_only", gpus=0, tenant="T", cpu_milli=1000, memory_mb=1000), "placed"),
    ],
    ids=lambda case: getattr(case, "id", None),
)
def test_a_job_blocked_by_its_tenants_quota_holds_that_room_against_the_tenants_later_jobs(
    later, want
):
    nodes, running, tenants = _tenant_t_with_seven_of_eight_gpus_busy()

    decision = place(snapshot(nodes, (_big(), later), running, tenants))

    assert [o.job_id for o in decision.outcomes] == ["big", later.id]
    assert decision.by_job()["big"].reason == "quota_exceeded"
    got = decision.by_job()[later.id]
    assert (got.reason or got.status) == want


def test_a_job_its_quota_can_never_cover_holds_nothing():
    nodes, running, tenants = _tenant_t_with_seven_of_eight_gpus_busy()
    too_big = _big(workers=2)  # 16 GPUs against a quota of 8

    got = place(snapshot(nodes, (too_big, _one("later", runtime=None)), running, tenants)).by_job()

    assert got["big"].reason == "quota_exceeded"
    assert got["later"].status == "placed"


def test_a_job_ahead_of_its_tier_for_waiting_long_holds_nothing():
    nodes, running, tenants = _tenant_t_with_seven_of_eight_gpus_busy()
    starved = _big(submit_time=NOW - 48 * HOUR, max_runtime=HOUR / 2)
    top = _one("top", runtime=None, tier=5)

    decision = place(snapshot(nodes, (starved, top), running, tenants))

    assert [o.job_id for o in decision.outcomes] == ["big", "top"]  # big came ahead of tier
    assert decision.by_job()["big"].reason == "quota_exceeded"
    assert decision.by_job()["top"].status == "placed"


def test_an_equal_request_that_ends_sooner_is_not_given_the_held_answer_of_one_that_does_not():
    nodes, running, tenants = _tenant_t_with_seven_of_eight_gpus_busy()
    # The same request twice, after big; the first (by priority) runs past the hold, the
    # second does not.
    queue = (_big(), _one("long", runtime=2 * HOUR, priority=20), _one("short"))
    # Waiting answers are reused only once no reservation can be made any more.
    no_backfill = Policy(backfill=False)

    got = place(snapshot(nodes, queue, running, tenants, policy=no_backfill)).by_job()

    assert got["long"].reason == "quota_exceeded"
    assert got["short"].status == "placed"


# -- owners before borrowers ------------------------------------------------------------------


def _owner_and_borrower(owner_used_gpus: int):
    """One idle 8-A100 node; A is guaranteed 8 GPUs, B only borrows (cohort "ml")."""
    a = gpu_tenant("A", "a100", 8, cohort="ml", used_gpus=owner_used_gpus)
    b = Tenant("B", cohort="ml", usage={A100: 0})
    p = j_training("p", gpus=8, tenant="A", max_runtime=HOUR)
    v = j_training("v", gpus=8, tenant="B", submit_time=NOW - 10 * HOUR, max_runtime=24 * HOUR)
    return n8_a100_nodes(1), (v, p), (a, b)


@pytest.mark.parametrize(
    "owner_used_gpus, want_order",
    [
        (0, ["p", "v"]),  # p fits A's idle guarantee: A goes first whatever the shares
        (8, ["v", "p"]),  # p would borrow too: fair share and aging decide (v waited 10 h)
    ],
    ids=["owner_within_guarantee", "owner_would_borrow"],
)
def test_a_tenant_whose_next_job_fits_its_guarantee_goes_before_one_that_would_borrow(
    owner_used_gpus, want_order
):
    nodes, queue, tenants = _owner_and_borrower(owner_used_gpus)

    decision = place(snapshot(nodes, queue, tenants=tenants))

    assert [o.job_id for o in decision.outcomes] == want_order


# -- over many cycles -------------------------------------------------------------------------


@dataclasses.dataclass
class World:
    """Cycles as the live scheduler runs them: placed work runs to its runtime limit, a victim
    stops within a minute and is then requeued as it was (same submit time), and the job it
    stopped for holds that room until it starts (``preempting``)."""

    nodes: tuple[Node, ...]
    tenants: tuple[Tenant, ...]
    queue: dict[str, QueuedJob]
    running: dict[str, RunningJob] = dataclasses.field(default_factory=dict)
    started: list[tuple[float, str]] = dataclasses.field(default_factory=list)
    evicted: list[str] = dataclasses.field(default_factory=list)

    def cycle(self, now: float) -> Decision:
        for job in [j for j in self.running.values() if (j.expected_end or now + 1) <= now]:
            del self.running[job.id]
            if job.stopping:
                self.queue[job.id] = self.jobs[job.id]
        decision = place(snapshot(self._free(), self.queue.values(), self.running.values(),
                                  self._tenants(), now=now))  # fmt: skip
        for victim in decision.preempted:
            self.evicted.append(victim)
            self.running[victim] = dataclasses.replace(
                self.running[victim], stopping=True, expected_end=now + 60
            )
        for o in decision.outcomes:
            if o.status == "preempts":
                self.queue[o.job_id] = dataclasses.replace(self.queue[o.job_id], preempting=True)
            if o.status == "placed":
                job = dataclasses.replace(self.queue.pop(o.job_id), preempting=False)
                self.jobs[job.id] = job
                self.started.append((now, job.id))
                allocations = tuple(
                    Allocation(w.node_id, tuple((g, w.gpu_milli) for g in w.gpu_indices),
                               w.cpu_milli, w.memory_mb)
                    for w in o.workers
                )  # fmt: skip
                self.running[job.id] = RunningJob(
                    job.id, job.tenant, job.tier, job.preemptible, o.borrowed, allocations,
                    now + job.max_runtime if job.max_runtime else None, started_at=now,
                )  # fmt: skip
        return decision

    def __post_init__(self):
        self.jobs = dict(self.queue)  # to requeue a victim as it was

    def _free(self) -> list[Node]:
        out = []
        for node in self.nodes:
            gpus, cpu, mem = list(node.gpu_free_milli), node.cpu_free_milli, node.memory_free_mb
            for a in (a for j in self.running.values() for a in j.allocations):
                if a.node_id == node.id:
                    for i, m in a.gpus:
                        gpus[i] -= m
                    cpu, mem = cpu - a.cpu_milli, mem - a.memory_mb
            out.append(dataclasses.replace(node, gpu_free_milli=tuple(gpus),
                                           cpu_free_milli=cpu, memory_free_mb=mem))  # fmt: skip
        return out

    def _tenants(self) -> list[Tenant]:
        kinds = {n.id: n.gpu_type for n in self.nodes}
        out = []
        for t in self.tenants:
            used: dict[str, int] = {}
            for job in (j for j in self.running.values() if j.tenant == t.id):
                for a in job.allocations:
                    flavor = gpu_flavor(kinds[a.node_id])
                    used[flavor] = used.get(flavor, 0) + sum(m for _, m in a.gpus)
            out.append(dataclasses.replace(t, usage=used))
        return out


def test_an_owner_reclaiming_its_guarantee_runs_and_the_borrower_is_evicted_once():
    nodes, (v, p), tenants = _owner_and_borrower(0)
    world = World(nodes, tenants, {"v": dataclasses.replace(v, preemptible=True)})
    for step in range(12):
        if step == 1:
            world.queue["p"] = p
        world.cycle(NOW + 120 * step)

    assert [job for _, job in world.started] == ["v", "p"]
    assert world.evicted == ["v"]
    assert "p" in world.running and "v" in world.queue


def test_an_owner_whose_head_job_would_borrow_still_reclaims_its_guarantee_only_once():
    # A's head job (16 GPUs) would borrow and cannot run, so A orders as a borrower; B's
    # evicted job, requeued with its old submit time, would come first again by aging.
    nodes, (v, p), tenants = _owner_and_borrower(0)
    head = j_training("head", workers=2, gpus=8, tenant="A", priority=50, max_runtime=HOUR)
    world = World(nodes, tenants, {"v": dataclasses.replace(v, preemptible=True)})
    for step in range(12):
        if step == 1:
            world.queue.update(head=head, p=p)
        world.cycle(NOW + 120 * step)

    assert [job for _, job in world.started] == ["v", "p"]
    assert world.evicted == ["v"]


def test_a_gang_blocked_by_its_tenants_quota_starts_once_its_tenants_running_work_ends():
    nodes = n8_a100_nodes(4)  # 32 GPUs, mostly idle; T may use 8
    node, running = nodes[0], {}
    for i in range(8):
        node, job = running_on(node, f"r{i}", 1, tenant="T", expected_end=NOW + 600 * (i + 1))
        running[job.id] = job
    queue = {"big": _big(), **{f"s{i}": _one(f"s{i}") for i in range(3)}}
    world = World(nodes, (gpu_tenant("T", "a100", 8),), queue, running)
    for step in range(1, 61):  # ten hours; T's users submit a 1-hour job every 10 minutes
        world.cycle(NOW + 600 * step)
        world.queue[f"n{step}"] = _one(f"n{step}", submit_time=NOW + 600 * step)

    started = {job: when for when, job in world.started}
    # The last of T's first eight jobs ends at NOW + 80 min. Meanwhile its 1-hour jobs that
    # end by then still start.
    assert started["big"] == NOW + 80 * 60
    assert started["s0"] < started["big"] and started["s1"] < started["big"]
