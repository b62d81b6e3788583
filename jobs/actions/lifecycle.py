"""A job's state and queue columns: transitions (every write of `Job.state`), cancels and
what they cancel in turn, eligibility, the reasons the cycle stores, and asking attempts to
stop."""

from django.db import transaction
from django.db.models import Case, Exists, F, OuterRef, Q, Value, When
from django.db.models.functions import Coalesce, Greatest, Now
from django.utils import timezone

from jobs import bulk, dependencies, events, reasons, retrying, states
from jobs.clock import database_now
from jobs.models import Attempt, Dependency, Job, JobEvent
from jobs.states import State


def _timestamps(target: str, now) -> dict:
    if target == State.SCHEDULED:
        return {"scheduled_at": now, "preempting_until": None}
    if target == State.RUNNING:
        # Keep the first start: queue wait runs from eligibility (eligible_at) to first start.
        return {"started_at": Coalesce(F("started_at"), now)}
    if target in states.TERMINAL:
        # A job that ended waiting (canceled) holds no room its victims leave, nor a hold.
        return {"finished_at": now, "preempting_until": None, "held": ""}
    return {}


def kick() -> None:
    """Wake the scheduler: capacity or the queue changed."""
    from jobs.scheduler import kick as wake  # the scheduler imports this module

    wake()


@transaction.atomic
def transition(
    job: Job, target: str, reason: str = "", *, attempt: Attempt | None = None, now=None
) -> JobEvent:
    """Move `job` from the state it was read in to `target` and record the JobEvent.

    The update is conditional on the state the caller saw, so a job that moved underneath
    (a cancel racing a start) raises IllegalTransition instead of being overwritten.
    """
    source = job.state
    states.check(job.pk, source, target)
    now = now or timezone.now()
    fields = {"state": target, **_timestamps(target, now)}
    if target != State.QUEUED:
        fields.update(pending_reason="", pending_message="", estimated_start=None)
    elif job.held:  # requeued held (requeue): it waits in the queue to be released
        fields.update(held_fields(job.held, HELD_WHEN_REQUEUED[job.held]))
    if not Job.objects.filter(pk=job.pk, state=source).update(**fields):
        current = Job.objects.filter(pk=job.pk).values_list("state", flat=True).first()
        raise states.IllegalTransition(job.pk, current or source, target)
    job.refresh_from_db(fields=[f for f in fields if f != "state"] + ["state"])
    event = JobEvent.objects.create(
        job=job, attempt=attempt, from_state=source, to_state=target, reason=reason[:300], time=now
    )
    events.publish_on_commit([(vars(event), job.tenant_id)])
    if target in states.TERMINAL:
        cancel_dependents([job.pk], target, now)
    return event


@retrying.atomic
def cancel(job: Job, reason: str = "canceled by user") -> JobEvent | None:
    """Cancel a job; canceling a batch (its first shard, the job its submission returned)
    cancels every shard of it that has not ended. Live attempts are asked to stop; their agents
    end them within the grace period.

    One operation however many shards (cancel_live).
    Returns the first canceled shard's event; None when everything had already ended.
    """
    shards = cancel_live(job.batch(), reason)
    if not shards:
        return None
    if job.pk in shards:
        job.refresh_from_db()  # as transition() leaves it: the caller sees the job canceled
    return JobEvent.objects.filter(job_id=min(shards), to_state=State.CANCELED).latest("id")


@retrying.atomic
def cancel_jobs(jobs, reason: str | dict[int, str]) -> list[int]:
    """Cancel these jobs (a queryset), each as it is: the ids of those that had not ended. A
    batch's first shard among them is that job alone: the caller names the shards it means.
    `reason`: one for all, or each job's own ({id: reason}; "canceled" for a job not named)."""
    return sorted(cancel_live(jobs, reason))


def cancel_first(jobs, limit: int, reason: str) -> tuple[list[int], bool]:
    """Cancel the oldest `limit` of these jobs (a queryset); (the ids canceled, whether more
    are left). The queryset's own filter is asked again under the locks: a job that left the
    state it names meanwhile is left alone."""
    chosen = list(jobs.order_by("pk").values_list("pk", flat=True)[: limit + 1])
    return cancel_jobs(jobs.filter(pk__in=chosen[:limit]), reason), len(chosen) > limit


def cancel_live(jobs, reason: str | dict[int, str]) -> dict[int, tuple[int, str]]:
    """Cancel the jobs of the queryset that have not ended, {id: (tenant id, state before)}:
    a lock, a stop request, an update and a COPY of events, then one live message per tenant
    and one scheduler kick after commit. `reason`: one for all, or each job's own."""
    now = database_now()  # the scheduler reads the stop request's time on this clock
    # Job rows first, in id order, then their attempts: the lock order of end_attempt() and
    # mark_running(), so a cancel racing an attempt's end waits instead of deadlocking. A job
    # that ends while this waits for its lock drops out (PostgreSQL re-checks the filter).
    shards = {
        job_id: (tenant_id, state)
        for job_id, tenant_id, state in jobs.live()
        .select_for_update()
        .order_by("pk")
        .values_list("id", "tenant_id", "state")
    }
    if shards:
        each = reason if isinstance(reason, dict) else dict.fromkeys(shards, reason)
        reasons = {pk: each.get(pk, "canceled")[:300] for pk in shards}
        # A stop request's reason is the attempt's: the first job's stands for all (the jobs
        # canceled for their own reasons are queued ones, with no attempt live).
        attempts = stop_live(list(shards), Attempt.Outcome.CANCELED, reasons[min(shards)], now)
        move_claimed(shards, State.CANCELED, reasons, attempts, now)
        transaction.on_commit(kick)
    return shards


def transition_claimed(
    job_ids: list[int],
    source: str,
    target: str,
    *,
    reasons: dict[int, str],
    attempts: dict[int, int],
    now,
) -> list[int]:
    """Move many jobs the caller has locked from `source` to `target`, one JobEvent each.

    The bulk form of `transition` for the scheduler's commit: same edge check, same conditional
    update, same events.
    """
    states.check(0, source, target)
    still = Job.objects.filter(id__in=job_ids, state=source).values_list("id", "tenant_id")
    moved = {job_id: (tenant_id, source) for job_id, tenant_id in still}
    move_claimed(moved, target, reasons, attempts, now)
    return list(moved)


def move_claimed(
    jobs: dict[int, tuple[int, str]],
    target: str,
    reasons: dict[int, str],
    attempts: dict[int, int],
    now,
    *,
    cascade: bool = True,
) -> None:
    """Move jobs the caller has locked, {id: (tenant id, state now)}, to `target`: one UPDATE,
    one JobEvent each (COPY), one live message per tenant after commit. `attempts` names the
    attempt each job's event is about, {job id: attempt id}. Jobs that end take the jobs that
    can then never run with them (cancel_dependents), unless `cascade` is off (the cascade's
    own move)."""
    for source in {source for _, source in jobs.values()}:
        states.check(0, source, target)
    fields = {"state": target, **_timestamps(target, now)}
    fields.update(pending_reason="", pending_message="", estimated_start=None)
    Job.objects.filter(id__in=jobs).update(**fields)
    write_events(jobs, target, reasons, attempts, now)
    if target in states.TERMINAL and cascade:
        cancel_dependents(list(jobs), target, now)


def write_events(jobs: dict[int, tuple[int, str]], target: str, reasons: dict[int, str],
                 attempts: dict[int, int], now) -> None:  # fmt: skip
    """One JobEvent per job, {id: (tenant id, state before)}, from that state to `target`, in
    one COPY, and one live message per tenant after commit."""
    written = [
        {"job_id": job_id, "attempt_id": attempts.get(job_id), "from_state": source,
         "to_state": target, "reason": reasons.get(job_id, "")[:300], "time": now}
        for job_id, (_, source) in jobs.items()
    ]  # fmt: skip
    bulk.insert(JobEvent, written)
    events.publish_on_commit((event, jobs[event["job_id"]][0]) for event in written)


ENDED_VERBS = {State.FAILED: "failed", State.CANCELED: "was canceled",
               State.SUCCEEDED: "succeeded"}  # fmt: skip


def cancel_dependents(ended: list[int], how: str, now) -> None:
    """Cancel the live jobs that can never run now that `ended` have ended `how` (failed, been
    canceled, succeeded): those that waited for them to succeed (a failure, a cancel) or to
    fail (a success, once their batch has succeeded whole), and those that waited for these to
    succeed, in turn; in the caller's transaction, each with the reason "dependency <id>
    failed", "... was canceled" or "... succeeded", naming the job it waited for.

    A batch of them is canceled whole, as cancel() cancels it. Locks, after the caller's (the
    ended jobs' rows, then their attempts): the dependents' job rows in id order (above the
    ended jobs' unless a change of dependencies named a later job; that change gives way to an
    end in flight, dependencies.lock_change), then their live attempts, as cancel() locks.
    Their rows come after the ended jobs' attempts, which cannot deadlock: a job that waits
    for a dependency is queued, so no verb holding its row waits for an attempt (it has none,
    is no preemptor, and the commit claims with SKIP LOCKED).
    See dependencies.lock_dependents for the order among the dependents; a success first locks
    the links of the jobs waiting for its batch to fail, if any (dependencies.lock_success)."""
    if how == State.SUCCEEDED and not dependencies.lock_success(ended):
        return  # the common case: one query, and nothing waits for a failure
    cut, live = dependencies.lock_dependents(ended)
    if not live:
        return
    stopping = "a dependency can never be met"
    attempts = stop_live(list(live), Attempt.Outcome.CANCELED, stopping, now)
    reasons = {}
    for job_id, (_, _, root) in live.items():
        cause = cut[root]
        # A cause among the cut was canceled by this cascade; any other is one of `ended`.
        how_it_ended = State.CANCELED if cause in cut else how
        reasons[job_id] = f"dependency {cause} {ENDED_VERBS[how_it_ended]}"
    moving = {job_id: (tenant_id, state) for job_id, (tenant_id, state, _) in live.items()}
    move_claimed(moving, State.CANCELED, reasons, attempts, now, cascade=False)


def stamp_eligible(job_ids: list[int]) -> int:
    """Record that these queued jobs, which a cycle found free to run and not stamped, are
    eligible; how many it stamped. One that waited for other jobs (a dependency, a singleton's
    group), or was set aside by the last cycle (its team paused, or an exclusive job its team may
    no longer run: ``reasons.SET_ASIDE``), from now, or its `not_before` if later: the cycle after
    the last of them ended, as every end wakes the scheduler. Any other from its submission, or its
    `not_before` (its begin, its retry's backoff's end) if later: submit, release_hold and retry
    stamp such a job themselves, so this one is from before `eligible_at` was recorded.

    Asked again under the rows' locks, as the commit's claim asks: a job held, placed or
    given a dependency since the snapshot is left alone. Locked in id order, as cancel()
    locks them, so two schedulers stamping at once cannot deadlock; a thousand at a time (the
    first cycle after jobs/migrations/0023 finds the whole queue unstamped)."""
    job_ids = sorted(job_ids)
    return sum(_stamp(job_ids[start : start + 1000]) for start in range(0, len(job_ids), 1000))


@transaction.atomic
def _stamp(job_ids: list[int]) -> int:
    unstamped = (
        Job.objects.select_for_update()
        .filter(id__in=job_ids, state=State.QUEUED, held="", eligible_at=None, started_at=None)
        .order_by("id")
    )
    locked = list(unstamped.values_list("id", flat=True))
    if not locked:
        return 0
    root = Coalesce(OuterRef("parent_id"), OuterRef("pk"))
    waited = (
        Q(singleton=True)
        | Exists(Dependency.objects.filter(job_id=root))
        | Q(pending_reason__in=reasons.SET_ASIDE)
    )
    # Never before its not_before (a begin, a backoff's end): the cycle's clock, which let it
    # through, may run ahead of the database's.
    since = Case(
        When(waited, then=from_now_or_not_before()),
        default=Greatest("created", Coalesce("not_before", "created")),
    )
    free = Job.objects.filter(id__in=locked).exclude(dependencies.waits())
    return free.update(eligible_at=since)


@transaction.atomic
def unstamp(job_ids: list[int]) -> int:
    """These queued jobs are set aside by the cycle (a pause set outside the admin and the API,
    a tenant kept from taking nodes whole): not eligible while they are, as a held job is not,
    so their queue wait stops; stamp_eligible makes them eligible from the cycle that finds
    them free again. A job that has started keeps its eligibility. Locked in id order, as
    cancel() locks them; how many it changed."""
    rows = Job.objects.select_for_update().filter(
        pk__in=job_ids, state=State.QUEUED, started_at=None, eligible_at__isnull=False
    )
    locked = list(rows.order_by("id").values_list("id", flat=True))
    return Job.objects.filter(pk__in=locked).update(eligible_at=None) if locked else 0


def from_now_or_not_before() -> Greatest:
    """Eligible from now on the database's clock, or from the job's `not_before` (its begin,
    its retry's backoff's end) if that is later."""
    return Greatest(Now(), Coalesce("not_before", Now()))


def record_pending(changes: dict[int, tuple[str, str, object]]) -> None:
    """Store why queued jobs wait: {job id: (reason code, sentence, estimated start)}.

    Only still-queued jobs not held are written: a job placed, canceled or held meanwhile keeps
    its own record. Rows another transaction holds are skipped: that scheduler is explaining or
    placing them.
    """
    rows = [(job_id, *change) for job_id, change in sorted(changes.items())]
    for start in range(0, len(rows), 1000):
        chunk = rows[start : start + 1000]
        with transaction.atomic():
            # Lock in id order first: two schedulers updating the same rows in whatever order
            # the planner picks could deadlock.
            mine = set(
                Job.objects.select_for_update(skip_locked=True)
                .filter(id__in=[r[0] for r in chunk], state=State.QUEUED, held="")
                .order_by("id")
                .values_list("id", flat=True)
            )
            chunk = [r for r in chunk if r[0] in mine]
            if not chunk:
                continue
            bulk.update(Job, ["pending_reason", "pending_message", "estimated_start"], chunk)


def request_stop(job_ids: list[int], stop_reason: str, message: str, now=None) -> int:
    """Ask the live attempts of these jobs to stop (their agents give them a grace period)."""
    return stop_attempts(Attempt.objects.filter(job_id__in=job_ids), stop_reason, message, now)


def stop_attempts(attempts, stop_reason: str, message: str, now=None, cause: str = "") -> int:
    """Ask these attempts to stop, those still live and not asked yet: one conditional UPDATE,
    so an attempt that ended, or was replaced by a newer one, since the caller read it is left
    alone. `cause`: who stops them as preempted (Attempt.StopCause)."""
    now = now or timezone.now()
    return attempts.filter(outcome="", stop_requested_at__isnull=True).update(
        stop_requested_at=now, stop_reason=stop_reason, reason=message[:300], stop_cause=cause
    )


def stop_live(job_ids: list[int], stop_reason: str, message: str, now) -> dict[int, int]:
    """Lock the live attempts of these jobs, whose rows the caller holds, in id order, and ask
    them to stop as a cancel does (their agents end them within the grace period; their
    allocations are released then); {job id: its live attempt's id}."""
    attempts = dict(
        Attempt.objects.select_for_update()
        .filter(job_id__in=job_ids, outcome="")
        .order_by("id")
        .values_list("job_id", "id")
    )
    request_stop(list(attempts), stop_reason, message, now)
    return attempts


def lock_live(attempts) -> list[int]:
    """Lock the jobs of these attempts, then those of the attempts still live, each in id order:
    the lock order of cancel() and end_attempt(); the live attempts' ids. For a caller about to
    stop the attempts of many jobs, which it has not locked: an UPDATE alone would lock them in
    whatever order its scan meets them, and deadlock with a cancel locking them in id order."""
    jobs = Job.objects.select_for_update().filter(id__in=attempts.values("job_id"))
    list(jobs.order_by("id").values_list("id", flat=True))
    live = attempts.select_for_update().filter(outcome="").order_by("id")
    return list(live.values_list("id", flat=True))


# Why a job requeued held waits, by its hold's kind (who may release it).
HELD_WHEN_REQUEUED = {
    Job.Hold.USER: "Held since it was requeued: it starts once released.",
    Job.Hold.ADMIN: "Held by a platform admin since it was requeued: only a platform admin "
    "releases it.",
}


def held_fields(kind: str, message: str) -> dict:
    """A queued job's columns once held: why it waits, and not eligible while held (the
    release, or the first cycle to find the job free to run after it, makes it eligible anew,
    as Slurm's EligibleTime after a release); a held job that had evicted work for itself
    gives up its claim on the room."""
    return {
        "held": kind,
        "pending_reason": "held",
        "pending_message": message[:300],
        "estimated_start": None,
        "preempting_until": None,
        "eligible_at": before_start(None),
    }


def before_start(value):
    """`eligible_at` set to `value` on a job that has not started yet; one that has keeps its
    own (its queue wait is over)."""
    return Case(When(started_at=None, then=Value(value)), default=F("eligible_at"))
