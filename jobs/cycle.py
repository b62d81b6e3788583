"""The placement cycle: load a snapshot, let the pure core decide, commit what still holds.

    1. load      read queued jobs, nodes' free capacity, running work and tenants (snapshot.py);
                 stamp the queued jobs found free to run whose eligibility (where their queue
                 wait starts) is not recorded yet; bring the tenants' recent use, which fair
                 share counts, up to date (recent_use.py, once a minute)
    2. decide    jobs.placement.place(snapshot): pure, no database
    3. commit    per batch, one transaction: lock the batch's nodes in id order, re-check their
                 free capacity against the live rows, claim the jobs still queued, insert the
                 attempts and allocations (the database's exclusion constraint is the last
                 guard) and move the jobs queued -> scheduled
    4. preempt   ask the victims' attempts to stop, with a grace period; and the running
                 elastic gangs the core restarts larger (placement/growth.py)
    5. explain   store each waiting job's reason code, sentence and estimated start (jobs the
                 core never saw: one waiting for a dependency, waiting_for_dependency; one
                 waiting out its retry backoff, retry_backoff, until its backoff ends; one
                 deferred, deferred, until its begin; one of a team whose placements a
                 platform admin paused, team_paused); and record the line the jobs left
                 waiting stand in (standing.py)
    6. notify    after commit: agents and live views hear of the changes

Correctness never rests on this being the only scheduler: the node locks serialise commits that
touch the same nodes, the job claim skips rows another scheduler holds, and a job that no longer
fits is left queued for the next cycle.
"""

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.conf import settings
from django.db.models import F
from django.db.models.functions import Now

from jobs import actions, dependencies, reasons, recent_use, snapshot, standing, tenant_limits
from jobs.commit import commit_batch
from jobs.models import SchedulerShard
from jobs.placement import (
    PENDING,
    PLACED,
    PREEMPTS,
    RESERVED,
    Decision,
    Outcome,
    Snapshot,
    place,
)
from quotas.models import Tenant


@dataclass
class CycleResult:
    considered: int = 0
    waiting: int = 0  # queued jobs waiting for a dependency: not offered to the core
    placed: list[int] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)
    preempted: list[int] = field(default_factory=list)
    grown: list[int] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)


def run_cycle(now: float | None = None, seed: int = 0) -> CycleResult:
    """Run one placement cycle and return what it did."""
    now = time.time() if now is None else now
    result, clock = CycleResult(), Stopwatch()
    loaded = snapshot.load(now, seed)  # 1
    actions.stamp_eligible(loaded.unstamped)
    actions.unstamp(loaded.stamped_aside)
    # The tenants' patterns are read again and matched against their queued jobs as held:
    # an admin may have widened them since the snapshot's read.
    for tenant in Tenant.objects.filter(pk__in=loaded.disallowed).order_by("id"):
        actions.hold_disallowed_images(tenant, "the scheduler", admin=False)
    recent_use.update(loaded.snapshot.tenants, loaded.recent, now)
    result.considered, result.waiting = len(loaded.snapshot.queued), len(loaded.waiting)
    clock.lap(result, "load")
    decision = place(loaded.snapshot)  # 2
    clock.lap(result, "decide")
    commit(decision, now, result, loaded.snapshot)  # 3
    clock.lap(result, "commit")
    result.preempted = preempt(decision, now, loaded)  # 4
    result.grown = grow(decision, now, loaded)
    explain(decision, loaded, result)  # 5
    standing.record(decision, loaded.snapshot, set(result.placed))
    clock.lap(result, "explain")
    beat(seconds=sum(result.seconds.values()), jobs=result.considered)
    return result  # 6 runs from transaction.on_commit hooks inside the steps


def commit(
    decision: Decision, now: float, result: CycleResult, snapshot: Snapshot | None = None
) -> None:
    """Commit the placements in batches; with the `snapshot` they were decided on, its
    tenants' GPU-hour budgets are checked again as they commit (tenant_limits.BudgetCheck),
    and so is each job's runtime limit (one raised since may outlast what the core fitted it
    before: another job's reservation)."""
    placed = [o for o in decision.outcomes if o.status == PLACED]
    decided = (
        {int(job.id): job.max_runtime for job in snapshot.queued}
        if snapshot is not None and placed
        else None
    )
    moment = datetime.fromtimestamp(now, tz=UTC)
    size = settings.MLSCHED_COMMIT_BATCH
    budgeted = snapshot is not None and any(t.gpu_budget is not None for t in snapshot.tenants)
    budget = tenant_limits.BudgetCheck(snapshot) if snapshot and budgeted and placed else None
    for start in range(0, len(placed), size):
        batch = placed[start : start + size]
        committed = commit_batch(batch, moment, budget=budget, decided=decided)
        result.placed.extend(committed)
        result.skipped.extend(int(o.job_id) for o in batch if int(o.job_id) not in committed)


def preempt(decision: Decision, now: float, loaded: snapshot.Loaded) -> list[int]:
    """Ask this cycle's victims to stop; the preemptor is placed once they are gone (the room is
    its own until then). Victims of a preemptor canceled since the decision, or for which
    another scheduler has evicted since the snapshot (its claim changed), keep running; so does
    a victim's attempt that replaced the one the snapshot saw."""
    victims_of = {
        int(o.job_id): [int(victim) for victim in o.victims]
        for o in decision.outcomes
        if o.status == PREEMPTS
    }
    if not victims_of:
        return []
    causes = {
        int(victim): cause
        for o in decision.outcomes
        for victim, cause in zip(o.victims, o.victim_causes, strict=False)
    }
    moment = datetime.fromtimestamp(now, tz=UTC)
    asked = set(actions.preempt(victims_of, moment, loaded.claims, loaded.attempts, causes))
    return [int(job_id) for job_id in decision.preempted if int(job_id) in asked]


def grow(decision: Decision, now: float, loaded: snapshot.Loaded) -> list[int]:
    """Ask the elastic gangs the core restarts larger to stop for it; one whose attempt the
    snapshot read has ended or been replaced since runs on as it is."""
    sizes = {
        int(g.job_id): (loaded.attempts[int(g.job_id)], g.workers)
        for g in decision.grown
        if int(g.job_id) in loaded.attempts
    }
    if not sizes:
        return []
    return actions.grow(sizes, datetime.fromtimestamp(now, tz=UTC))


def explain(decision: Decision, loaded: snapshot.Loaded, result: CycleResult) -> None:
    """Store why each job still waits, writing only the rows whose explanation changed."""
    skipped = set(result.skipped)
    changes = {}
    for outcome in decision.outcomes:
        job_id = int(outcome.job_id)
        if outcome.status == PLACED and job_id not in skipped:
            continue
        reason, message, estimate = explanation(outcome, job_id in skipped)
        if loaded.pending.get(job_id) != (reason, message, estimate):
            changes[job_id] = (reason, message, estimate)
    for job_id, (until, begin) in loaded.backoff.items():
        why = not_yet(until, begin)
        if loaded.pending.get(job_id) != why:
            changes[job_id] = why
    for job_id, waits_for in loaded.waiting.items():
        why = ("waiting_for_dependency", dependencies.sentence(waits_for), None)
        if loaded.pending.get(job_id) != why:
            changes[job_id] = why
    for job_id, (reason, message) in loaded.aside.items():
        why = (reason, message, None)
        if loaded.pending.get(job_id) != why:
            changes[job_id] = why
    actions.record_pending(changes)


def not_yet(until: datetime, begin: datetime | None) -> tuple[str, str, datetime]:
    """Why a job the core never saw may not be placed before `until`: its begin (a deferred
    start), or its retry's backoff. A retry moves `not_before` past the begin: a job retries
    only once placed, after its begin."""
    if until == begin:
        return "deferred", f"Deferred until {utc_time(begin)} (begin).", until
    return "retry_backoff", "Waiting out the backoff before its retry.", until


def utc_time(moment: datetime) -> str:
    """A time in UTC to the minute, as the job page writes one; to the second if it has any."""
    shown = moment.astimezone(UTC)
    return shown.strftime("%Y-%m-%d %H:%M" if shown.second == 0 else "%Y-%m-%d %H:%M:%S") + " UTC"


def explanation(outcome: Outcome, skipped: bool) -> tuple[str, str, datetime | None]:
    if skipped:
        return reasons.CHANGED_UNDERNEATH, "Capacity changed before the placement committed.", None
    estimate = (
        datetime.fromtimestamp(outcome.estimated_start, tz=UTC)
        if outcome.estimated_start is not None
        else None
    )
    if outcome.status == PREEMPTS:
        return "waiting_for_preemption", "Lower-priority work is being stopped to make room.", None
    if outcome.status in (RESERVED, PENDING):
        return outcome.reason, outcome.message[:300], estimate
    return "", "", None


def beat(shard: str = "default", seconds: float = 0.0, jobs: int = 0) -> None:
    """Record that the shard ran a cycle (health checks look for missing ticks), on the
    database's clock, as heartbeats are."""
    SchedulerShard.bump(
        shard, last_cycle_at=Now(), cycles=F("cycles") + 1,
        last_cycle_seconds=seconds, last_cycle_jobs=jobs,
    )  # fmt: skip


class Stopwatch:
    def __init__(self):
        self.last = time.perf_counter()

    def lap(self, result: CycleResult, name: str) -> None:
        now = time.perf_counter()
        result.seconds[name] = now - self.last
        self.last = now
