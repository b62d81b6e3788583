"""The verbs of the job lifecycle. Views, admin actions, tasks and agents call these."""

from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Case, DateTimeField, Exists, F, OuterRef, Q, Sum, Value, When
from django.db.models.functions import Coalesce, Greatest, Now
from django.utils import timezone
from rest_framework.exceptions import ValidationError

from clusters.models import Allocation, Node
from jobs import access, bulk, dependencies, events, quarantine, retrying, rollup, states
from jobs.clock import database_now
from jobs.models import Attempt, Dependency, Job, JobEvent
from jobs.serializers import UNSUCCEEDED, SubmitSerializer, submission_of
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
    group) from now, or its `not_before` if later: the cycle after the last of them ended, as
    every end wakes the scheduler. Any other from its submission, or its `not_before` (its
    begin, its retry's backoff's end) if later: submit, release_hold and retry stamp such a
    job themselves, so this one is from before `eligible_at` was recorded.

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
    waited = Q(singleton=True) | Exists(Dependency.objects.filter(job_id=root))
    # Never before its not_before (a begin, a backoff's end): the cycle's clock, which let it
    # through, may run ahead of the database's.
    since = Case(
        When(waited, then=from_now_or_not_before()),
        default=Greatest("created", Coalesce("not_before", "created")),
    )
    free = Job.objects.filter(id__in=locked).exclude(dependencies.waits())
    return free.update(eligible_at=since)


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
            if connection.vendor == "postgresql":
                _update_pending_from_values(chunk)
            else:
                Job.objects.bulk_update(
                    [Job(id=i, pending_reason=r, pending_message=m, estimated_start=e)
                     for i, r, m, e in chunk],
                    ["pending_reason", "pending_message", "estimated_start"],
                )  # fmt: skip


def _update_pending_from_values(rows: list[tuple]) -> None:
    # One UPDATE ... FROM (VALUES ...) per chunk: Django's bulk_update builds a CASE per column
    # and row, which is an order of magnitude slower for the thousands of jobs a cycle explains.
    values = ", ".join(["(%s::bigint, %s, %s, %s::timestamptz)"] * len(rows))
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {Job._meta.db_table} AS j SET pending_reason = v.reason, "
            "pending_message = v.message, estimated_start = v.estimate "
            f"FROM (VALUES {values}) AS v(id, reason, message, estimate) "
            "WHERE j.id = v.id",
            [field for row in rows for field in row],
        )


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


@retrying.atomic
def preempt(
    victims_of: dict[int, list[int]], now=None, claims_seen=None, attempts_seen=None
) -> list[int]:
    """Ask the victims to stop and give the room they leave to the jobs they stop for,
    {preemptor id: victim ids}; return the victims asked.

    Only for preemptors still queued, not held and not waiting (dependencies.waits): one
    canceled, placed or held since the cycle decided, or given a dependency or made a
    singleton it must wait for, cannot use the room, and its victims keep running. With
    `claims_seen` ({preemptor id: its preempting_until as the deciding snapshot read it}),
    only for preemptors whose claim is still that one: another scheduler that evicted for the
    job since (MLSCHED_SINGLE_FLIGHT=0) has made the room already, perhaps from other victims,
    and this decision's would stop for nothing. With `attempts_seen` ({victim id: its live
    attempt as the snapshot read it}), only those attempts are stopped: a victim requeued and
    placed again since (a drain, another scheduler) runs on in its new place. The
    preemptors are locked first, in id order (job rows before attempts, as cancel() locks), so
    a cancel in flight is waited for, not overtaken, and a change of dependencies in flight
    too (asked once the locks are held, as the commit's claim asks); then the victims as
    cancel() locks them (lock_live), so a cancel of their batch racing this waits too instead
    of deadlocking.
    The claim lasts until the preemptor starts, or for as long as the victims are expected to
    take to go (their grace period, twice) and a minute more.
    """
    now = now or timezone.now()
    claims = dict(
        Job.objects.select_for_update()
        .filter(id__in=victims_of, state=State.QUEUED, held="")
        .order_by("id")
        .values_list("id", "preempting_until")
    )
    if claims_seen is not None:
        claims = {pk: claim for pk, claim in claims.items() if claims_seen.get(pk) == claim}
    ready = Job.objects.filter(id__in=claims).exclude(dependencies.waits())
    waiting = list(ready.values_list("id", flat=True))
    victims = sorted({victim for job_id in waiting for victim in victims_of[job_id]})
    live = Attempt.objects.filter(job_id__in=victims)
    if attempts_seen is not None:
        live = live.filter(pk__in=[attempts_seen[v] for v in victims if v in attempts_seen])
        victims = sorted(set(live.filter(outcome="").values_list("job_id", flat=True)))
    lock_live(live)
    stop_attempts(live, Attempt.Outcome.PREEMPTED, "preempted for a higher-priority job", now,
                  cause=Attempt.StopCause.PREEMPTION)  # fmt: skip
    until = now + timedelta(seconds=2 * settings.MLSCHED_STOP_GRACE_S + 60)
    Job.objects.filter(id__in=waiting).update(preempting_until=until)
    return victims


@retrying.atomic
def set_schedulable(node_ids: list[int], schedulable: bool) -> list[int]:
    """Cordon these nodes (nothing new is placed there; what runs goes on) or uncordon them;
    the ids of those it changed. The nodes are locked in id order, as the commit locks them:
    one changed by someone else meanwhile is not counted twice."""
    changing = Node.objects.select_for_update().filter(pk__in=node_ids).order_by("id")
    ids = list(changing.exclude(schedulable=schedulable).values_list("id", flat=True))
    if schedulable:  # back in service: its quarantine, if any, is over, its faults forgiven
        Node.objects.filter(pk__in=ids).update(
            schedulable=True, quarantined_at=None, quarantine_reason="", faults_cleared_at=Now()
        )
    else:
        Node.objects.filter(pk__in=ids).update(schedulable=False)
    return ids


@retrying.atomic
def drain(node_ids: list[int], by: str, now=None) -> int:
    """Take nodes out of service (Slurm's drain, `kubectl drain`): cordon them, so nothing new
    is placed there, and ask the work on them to stop as a preemption does, with the grace
    period for a checkpoint, to be requeued without using a retry and placed elsewhere. A gang
    with one worker there stops whole. How many attempts were asked to stop.

    The nodes are locked first, in id order, as the commit locks them: a placement on them
    committed meanwhile is waited for and stopped with the rest, and any later one sees them
    cordoned. Then the jobs and their attempts, as cancel() locks them (lock_live)."""
    now = now or database_now()  # the scheduler reads the stop request's time on this clock
    nodes = Node.objects.select_for_update().filter(pk__in=node_ids).order_by("id")
    list(nodes.values_list("id", flat=True))
    Node.objects.filter(pk__in=node_ids, schedulable=True).update(schedulable=False)
    on_nodes = Allocation.objects.active().filter(node_id__in=node_ids).values("attempt_id")
    live = Attempt.objects.filter(pk__in=on_nodes)
    lock_live(live)
    message = f"node drained by {by}; requeued to run elsewhere"
    return stop_attempts(live, Attempt.Outcome.PREEMPTED, message, now,
                         cause=Attempt.StopCause.DRAIN)  # fmt: skip


@retrying.atomic
def mark_running(attempt_id: int, now=None) -> None:
    """Every worker of the attempt runs: record the start and move its job to running."""
    now = now or timezone.now()
    job_id = Attempt.objects.values_list("job_id", flat=True).get(pk=attempt_id)
    # Job first, then attempt: the lock order of cancel() and end_attempt(), so no deadlock.
    job = Job.objects.select_for_update().get(pk=job_id)
    # Only a live attempt starts: a report read before the attempt's end may land after it.
    Attempt.objects.filter(pk=attempt_id, started_at__isnull=True, outcome="").update(
        started_at=now
    )
    attempt = Attempt.objects.get(pk=attempt_id)
    if job.state == State.SCHEDULED and attempt.is_live:
        transition(job, State.RUNNING, f"attempt {attempt.number} running", attempt=attempt,
                   now=now)  # fmt: skip


Outcome = Attempt.Outcome


def release(attempt_ids, now=None) -> int:
    """Release the live allocations of these attempts. Idempotent: released rows stay released."""
    now = now or timezone.now()
    return (
        Allocation.objects.active()
        .filter(attempt_id__in=attempt_ids)
        .update(active=False, released=now)
    )


@events.coalesced()  # its job may move twice (scheduled -> running -> succeeded): one message
@retrying.atomic
def end_attempt(
    attempt_id: int, outcome: str, *, exit_code: int | None = None, reason: str = "", now=None
) -> Attempt:
    """End an attempt: record its outcome, release its resources, move its job on.

    Ending an attempt that has already ended changes nothing. The job follows the failure
    rules: user errors and timeouts fail it visibly; infrastructure failures and lost attempts
    requeue it with exponential backoff until max_retries is used; preemption requeues it
    without using a retry.
    """
    now = now or timezone.now()
    job_id = Attempt.objects.values_list("job_id", flat=True).get(pk=attempt_id)
    # Job first, then attempt: the same lock order as cancel(), so the two cannot deadlock.
    job = Job.objects.select_for_update().get(pk=job_id)
    attempt = Attempt.objects.select_for_update().get(pk=attempt_id)
    if attempt.outcome:
        return attempt
    attempt.outcome, attempt.exit_code, attempt.ended_at = outcome, exit_code, now
    attempt.reason = (reason or attempt.reason)[:300]
    # A job that succeeded before this attempt ended did so by another attempt (a lost one's
    # late success): this one ran for nothing.
    superseded = job.state == State.SUCCEEDED
    attempt.wasted_gpu_seconds = wasted_gpu_seconds(attempt, now, superseded=superseded)
    attempt.save(update_fields=["outcome", "exit_code", "ended_at", "reason", "wasted_gpu_seconds"])
    if attempt.node_faulted:  # read before the release
        nodes = list(attempt.allocations.values_list("node_id", flat=True).distinct())
        transaction.on_commit(lambda: quarantine.check(nodes), robust=True)
    release([attempt.pk], now)
    transaction.on_commit(kick)
    if not job.is_terminal:
        follow_outcome(job, attempt, now)
    return attempt


def follow_outcome(job: Job, attempt: Attempt, now) -> None:
    outcome, reason = attempt.outcome, attempt.reason
    if outcome == Outcome.SUCCEEDED:
        if job.state == State.SCHEDULED:
            transition(job, State.RUNNING, "started", attempt=attempt, now=now)
        transition(job, State.SUCCEEDED, reason or "exit code 0", attempt=attempt, now=now)
    elif (
        outcome == Outcome.USER_ERROR
        and job.retry_user_errors
        and job.retries_used < job.max_retries
    ):
        retry(job, attempt, now)
    elif outcome in (Outcome.USER_ERROR, Outcome.TIMEOUT):
        transition(job, State.FAILED, reason or f"exit code {attempt.exit_code}",
                   attempt=attempt, now=now)  # fmt: skip
    elif outcome == Outcome.CANCELED:
        transition(job, State.CANCELED, reason or "canceled", attempt=attempt, now=now)
    elif outcome == Outcome.PREEMPTED:
        transition(job, State.QUEUED, reason or "preempted", attempt=attempt, now=now)
    elif job.retries_used < job.max_retries:
        retry(job, attempt, now)
    else:
        transition(job, State.FAILED, f"{outcome}: {reason} (retries exhausted)",
                   attempt=attempt, now=now)  # fmt: skip


def retry(job: Job, attempt: Attempt, now) -> None:
    """Requeue after an infrastructure failure (or a user error the job asked to retry), not
    before the exponential backoff has passed."""
    delay = min(settings.MLSCHED_RETRY_BACKOFF_S * 2**job.retries_used, 600)
    until = now + timedelta(seconds=delay)
    # A job that never started is eligible again once its backoff ends: its wait is not the
    # backoff's, nor that of the placement that failed.
    Job.objects.filter(pk=job.pk).update(
        retries_used=F("retries_used") + 1, not_before=until, eligible_at=before_start(until)
    )
    transition(job, State.QUEUED, f"{attempt.outcome}: {attempt.reason}; retry in {delay}s",
               attempt=attempt, now=now)  # fmt: skip


@retrying.atomic
def late_success(attempt_id: int, now=None) -> None:
    """Every worker of an attempt declared lost has exited 0 after all: its agent was away,
    not its workers (the janitor gives up the attempts of a silent cluster).

    A job that has not ended takes the success: it ends succeeded by that attempt, and the
    retry its loss asked for is dropped if it is still queued, or asked to stop, as a cancel
    stops it, if it was placed (take_late_success). A job that has ended keeps its end (its
    dependents were released or canceled by it): one event on the lost attempt records the
    report. Once per attempt: the exit code written marks the report as seen, so a report
    sent again changes nothing.
    """
    now = now or timezone.now()
    job_id = Attempt.objects.values_list("job_id", flat=True).get(pk=attempt_id)
    # Job first, then attempt: the lock order of end_attempt() and cancel(). The commit claims
    # the job's row too, so placing the retry and this wait for each other: a retry placed
    # first is stopped, and one not placed yet never will be.
    job = Job.objects.select_for_update().get(pk=job_id)
    attempt = Attempt.objects.select_for_update().get(pk=attempt_id)
    if attempt.outcome != Outcome.LOST or attempt.exit_code is not None:
        return
    lost_reason = attempt.reason
    attempt.exit_code = 0
    attempt.reason = f"exit code 0, reported after it was declared lost: {lost_reason}"[:300]
    if job.is_terminal:
        note_late_success(job, attempt, now)
    else:
        take_late_success(job, attempt, now)


def take_late_success(job: Job, attempt: Attempt, now) -> None:
    """The job, not ended, ends succeeded by its lost attempt; a live retry is asked to stop.

    The live attempt is newer than the lost one, so it is locked after it, in id order, as a
    cancel locks attempts after the job's row; and before the transition locks the rows of the
    jobs that wait for this one."""
    why = f"superseded by attempt {attempt.number}, which succeeded after it was declared lost"
    stopped = stop_live([job.pk], Outcome.CANCELED, why, now)
    attempt.outcome = Outcome.SUCCEEDED
    # Its run was not wasted; its allocations were released when it was declared lost.
    was_wasted = attempt.wasted_gpu_seconds
    attempt.wasted_gpu_seconds = wasted_gpu_seconds(attempt, attempt.ended_at)
    attempt.save(update_fields=["outcome", "exit_code", "reason", "wasted_gpu_seconds"])
    # Its end may be days back: a day the usage roll-up has written already is amended.
    change = attempt.wasted_gpu_seconds - was_wasted
    rollup.amend_waste(job.tenant_id, attempt.gpu_type, attempt.ended_at, change)
    # The retry its loss used is given back (a live job after a lost attempt was requeued
    # through retry(), which used one); a later attempt's loss keeps its own.
    fields = {"retries_used": Greatest(F("retries_used") - 1, 0), "not_before": None}
    if job.started_at is None:
        fields.update(late_start(job, attempt))
        rollup.amend_start(job.tenant_id, fields["started_at"], fields["eligible_at"])
    Job.objects.filter(pk=job.pk).update(**fields)
    retry = "its retry is stopped" if stopped else "its retry is dropped"
    transition(job, State.SUCCEEDED,
               f"attempt {attempt.number} succeeded: exit code 0 reported after it was declared "
               f"lost; {retry}", attempt=attempt, now=now)  # fmt: skip
    transaction.on_commit(kick)  # the queue changed


def late_start(job: Job, attempt: Attempt) -> dict:
    """The first start of a job found late, by its lost attempt's success, and the eligibility
    its wait runs from. A start nobody saw counts from the attempt's end, as for any success
    reported before its start. The retry had moved the eligibility past the attempt (to its
    backoff's end): the job was eligible when the attempt was placed, if not before."""
    # None only when a hold or a dependency change since the loss cleared it: the placement
    # bounds it then too (its submission may lie before a hold).
    eligible = min(job.eligible_at or attempt.scheduled_at, attempt.scheduled_at)
    return {"started_at": attempt.started_at or attempt.ended_at, "eligible_at": eligible}


def note_late_success(job: Job, attempt: Attempt, now) -> None:
    """The job has ended: it keeps its end, and one event on the lost attempt says that its
    work was done (no transition: from and to are the job's state)."""
    attempt.save(update_fields=["exit_code", "reason"])
    reason = (
        f"attempt {attempt.number} exited 0 after it was declared lost; not taken: the job "
        f"{ENDED_VERBS[job.state]}"
    )
    event = JobEvent.objects.create(
        job=job, attempt=attempt, from_state=job.state, to_state=job.state, reason=reason[:300],
        time=now,
    )  # fmt: skip
    events.publish_on_commit([(vars(event), job.tenant_id)])


def wasted_gpu_seconds(attempt: Attempt, now, *, superseded: bool = False) -> float:
    """GPU-seconds the attempt held without useful work to show for it.

    A lost attempt, and one `superseded` (its job succeeded by another attempt), lose their
    whole run. A preempted attempt loses its work since its last checkpoint, or since its
    start: a checkpoint from before its start is a former attempt's, never a saving of this
    one."""
    gpus = (
        Allocation.objects.filter(attempt=attempt).aggregate(m=Sum("gpu_milli"))["m"] or 0
    ) / 1000
    started = attempt.started_at or now
    waste = (started - attempt.scheduled_at).total_seconds()
    if attempt.outcome == Outcome.LOST or superseded:
        waste += (now - started).total_seconds()
    elif attempt.outcome == Outcome.PREEMPTED:
        saved = max(attempt.last_checkpoint_at or started, started)
        waste += (now - saved).total_seconds()
    return max(waste, 0.0) * gpus


def keyed_job(tenant, key: str | None) -> Job | None:
    """The tenant's job submitted with this idempotency key, if there is one."""
    return Job.objects.filter(tenant=tenant, idempotency_key=key).first() if key else None


@retrying.atomic
def submit(owner, tenant, spec: dict) -> tuple[Job, bool]:
    """Queue a job for `tenant`; return (job, created).

    A batch inference job of M shards becomes M jobs, one per shard, so each is placed, retried
    and preempted on its own; shard 0 is returned and the others point to it as their parent.
    With `shard_indexes` (a rerun of some of a batch's shards: resubmit), one job per index
    instead, each keeping its index among the M, the first of them returned.
    With an idempotency key already used in the tenant, the existing job comes back and nothing
    is written: a client that retries a submission gets one job.

    `depends_on` (dependencies.Wait: job ids the caller has checked, jobs of the tenant, no
    shard but a batch's first, each with its kind) is held by the first job;
    dependencies.hold says what is refused, and when.

    A job with nothing to wait for is eligible from its submission (`eligible_at`, written
    by the same INSERT as `created`, so the two are equal), or from its `begin` if that is
    later; one with dependencies or a singleton from the first cycle that finds it free to run
    (stamp_eligible), which is never before its begin.

    A `begin` (Slurm's --begin; every shard of a batch has it) is kept as asked and copied to
    `not_before`, which the snapshot and the commit's claim read as they read a retry's
    backoff: the job is queued but not placed before it. A retry moves `not_before` on, and
    only comes after a placement, so past the begin. A `deadline` (Slurm's --deadline) is kept
    on every shard as well: the janitor cancels a queued job that could no longer end by it. So
    is a batch's `max_running_shards` (Slurm's --array=...%N), which the placement core reads
    off each queued shard.
    """
    spec = dict(spec)
    depends_on = spec.pop("depends_on", [])
    indexes = spec.pop("shard_indexes", None) or range(spec.get("shards", 1))
    key = spec.get("idempotency_key")
    if existing := keyed_job(tenant, key):
        return existing, False
    dependencies.take_turn(tenant.pk, owner.pk, spec["name"])  # ids follow commits: singleton
    try:
        check_queue_room(tenant, len(indexes))
    except ValidationError:
        if existing := keyed_job(tenant, key):  # a twin of this submission took the room first
            return existing, False
        raise
    dependencies.hold(depends_on)
    free = not (depends_on or spec.get("singleton"))
    if (begin := spec.get("begin")) is not None:
        spec["not_before"] = begin
    spec["eligible_at"] = eligible_from(begin) if free else None
    try:
        # In a savepoint: a concurrent submission with the same key may have inserted since the
        # check above. The unique constraint then refuses this row, and that job is the answer,
        # as it would be for a retry that came second.
        with transaction.atomic():
            first = Job.objects.create(
                tenant=tenant, owner=owner, **{**spec, "shard_index": indexes[0]}
            )
    except IntegrityError:
        if existing := keyed_job(tenant, key):
            return existing, False
        raise
    jobs = [first]
    if len(indexes) > 1:
        rest = {**spec, "idempotency_key": None, "parent": first}
        jobs += Job.objects.bulk_create(
            Job(tenant=tenant, owner=owner, **{**rest, "shard_index": i}) for i in indexes[1:]
        )
    for job in jobs:  # what the database wrote for Now(): the statement's time, as `created`
        job.eligible_at = max(job.created, begin or job.created) if free else None
    Dependency.objects.bulk_create(
        Dependency(job=first, on_id=on, kind=kind) for on, kind in depends_on
    )
    written = JobEvent.objects.bulk_create(
        JobEvent(job=job, to_state=State.QUEUED, reason=f"submitted by {owner}") for job in jobs
    )
    events.publish_on_commit((vars(event), tenant.pk) for event in written)
    transaction.on_commit(kick)
    return first, True


def eligible_from(begin):
    """When a job with nothing to wait for becomes eligible: at its submission (the database's
    time, as `created`), or at its begin if that is later."""
    if begin is None:
        return Now()
    return Greatest(Now(), Value(begin, output_field=DateTimeField()))


QUEUE_LOCK = 0x6D6C_7171  # advisory lock space: one key per tenant with a queue limit


def check_queue_room(tenant, shards: int) -> None:
    """Refuse, on `tenant`, a submission of `shards` jobs that would take the tenant past its
    `max_queued_jobs` (Slurm's MaxSubmitJobs): one team's flood of submissions cannot make
    every cycle of the platform decide its hundreds of thousands of jobs. The submissions of
    a tenant with a limit take turns (an advisory lock, to its commit), so two cannot both take
    the last room. Held jobs are queued; a job requeued for a retry is never refused."""
    limit = type(tenant).objects.values_list("max_queued_jobs", flat=True).get(pk=tenant.pk)
    if limit is None:
        return
    if connection.vendor == "postgresql":  # SQLite has one writer at a time
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [QUEUE_LOCK, tenant.pk])
    queued = Job.objects.filter(tenant=tenant, state=State.QUEUED).count()
    if queued + shards > limit:
        these = f"these {shards} jobs" if shards > 1 else "one more"
        raise ValidationError({"tenant": [
            f"{tenant.slug} has {queued} jobs queued and may have at most {limit} "
            f"(max_queued_jobs), not {these}: wait for some to start, or cancel some."
        ]})  # fmt: skip


class NotResubmittable(Exception):
    """A job that cannot run again as it stands: it has not ended, or it is one shard of a
    batch. The message says which, for people."""


def check_resubmittable(
    job: Job, shards: str | list[int] | None = None, idempotency_key: str | None = None
) -> list[int] | None:
    """Raise NotResubmittable unless the job may run again as it stands (a cheap check the
    views make before counting a submission against the rates); return the shard indexes the
    new job runs, None for a job or batch run whole.

    A batch (its first shard) comes back with the shards it has: every one of its `shards`,
    or, for a rerun of some of them, those. With `shards` (a ResubmitSerializer's: UNSUCCEEDED,
    or indexes below the batch's `shards`), only those: the ones that failed or were canceled,
    or the ones named, which must be shards it has. Those refused raise the serializer's
    ValidationError naming `shards`: a shard still live (rerunning it beside itself would run
    it twice), none left to rerun, a shard named that it does not have. One query, of the
    batch's shards: they have all ended, so no lock is needed (an ended job never moves)."""
    if job.parent_id is not None:
        raise NotResubmittable(
            f"Job #{job.pk} is a shard of batch #{job.parent_id}: resubmit the batch."
        )
    rows = list(job.batch().values_list("shard_index", "state"))
    if live := [(index, state) for index, state in rows if state not in states.TERMINAL]:
        if shards is not None:
            index, state = live[0]
            raise ValidationError({"shards": [
                f"Batch #{job.pk} still has live shards (shard {index} is {state}): rerun "
                "shards once it has ended, or cancel it first; a shard rerun while it runs "
                "would run twice."
            ]})  # fmt: skip
        what = "still has live shards" if job.is_batch else f"is still {live[0][1]}"
        raise NotResubmittable(f"Job #{job.pk} {what}: cancel it or wait for it to end.")
    if shards is None:
        return None if len(rows) == job.shards else sorted(index for index, _ in rows)
    return rerun_shards(job, rows, shards, idempotency_key)


def rerun_shards(
    job: Job, rows: list[tuple[int, str]], shards: str | list[int], idempotency_key: str | None
) -> list[int]:
    """The indexes of the batch's shards to run again: those that did not succeed
    (UNSUCCEEDED), or those named, which must be among its shards (`rows`: index, state)."""
    if shards == UNSUCCEEDED:
        chosen = sorted(index for index, state in rows if state != State.SUCCEEDED)
        if not chosen:
            raise ValidationError(
                {"shards": [f"Every shard of batch #{job.pk} succeeded: none to rerun."]}
            )
    else:
        has = {index for index, _ in rows}
        if missing := sorted(set(shards) - has):
            raise ValidationError({"shards": [
                f"Batch #{job.pk} has no shard {missing[0]}: it runs {len(has)} of the "
                f"{job.shards} shards alone (list them with ?batch={job.pk})."
            ]})  # fmt: skip
        chosen = sorted(shards)
    check_not_rerunning(job, chosen, idempotency_key)
    return chosen


def check_not_rerunning(job: Job, chosen: list[int], idempotency_key: str | None) -> None:
    """Refuse (on `shards`) a rerun of shards an earlier rerun of this batch still runs: they
    would run twice at once; not the rerun a repeated request (its `idempotency_key`) answers.
    resubmit asks it under a lock of the batch's first job, so of two reruns sent at the same
    instant the second asks once the first has committed its shards."""
    rerunning = Job.objects.filter(resubmitted_from=job, shard_index__in=chosen)  # every row
    if idempotency_key:
        first = Job.objects.filter(tenant_id=job.tenant_id, idempotency_key=idempotency_key)
        rerunning = rerunning.exclude(Q(pk__in=first.values("pk")) | Q(parent__in=first))
    again = rerunning.live().order_by("shard_index", "pk").first()
    if again is not None:
        raise ValidationError({"shards": [
            f"Shard {again.shard_index} of batch #{job.pk} runs again already, as job "
            f"#{again.pk} ({again.state}): wait for it to end, or cancel it."
        ]})  # fmt: skip


@retrying.atomic
def resubmit(
    user, job: Job, idempotency_key: str | None = None, shards: str | list[int] | None = None
) -> tuple[Job, bool]:
    """Run an ended job again: a new job of the same spec, owned by `user`, recording `job` as
    the one it was resubmitted from; (the job, whether it is new). A batch (its first shard)
    comes back as a batch of the shards it has; its other shards are resubmitted only with
    it. With `shards` (check_resubmittable), a batch of those shards alone (Slurm's
    `sbatch --array=3,17,512`): each keeps its index, and the batch's `shards` stays its
    count, so each worker is told the same MLSCHED_SHARD_INDEX and MLSCHED_SHARDS and reads
    the same part of the input. Under an `idempotency_key` already used in the tenant, that
    job comes back instead (a repeated request, a double click).

    The spec goes through a submission's own checks (SubmitSerializer) and submit(), so every
    rule applies as it does today: the user may still submit to the tenant, the priority class
    is still open to it, the tenant's queue has room for the shards. A spec they refuse raises
    the serializer's ValidationError, as does a refused `shards`.

    Resubmits of one job take turns (a lock of its row, to the commit): a rerun checks what
    earlier reruns still run once they have written it.
    """
    Job.objects.select_for_update().values_list("pk").get(pk=job.pk)
    indexes = check_resubmittable(job, shards, idempotency_key)
    data = submission_of(job)
    if idempotency_key:
        data["idempotency_key"] = idempotency_key
    checked = SubmitSerializer(
        data=data, tenants=access.submit_tenants(user), jobs=access.visible_jobs(user)
    )
    if not checked.is_valid():
        raise ValidationError(resubmit_errors(job, checked.errors))
    spec = dict(checked.validated_data)
    if indexes is not None:
        spec["shard_indexes"] = indexes
    return submit(user, spec.pop("tenant"), {**spec, "resubmitted_from": job})


def resubmit_errors(job: Job, errors: dict) -> dict:
    """A resubmission's refusals, said for a resubmission: a deadline it keeps but can no
    longer meet cannot be changed here."""
    if "deadline" not in errors or job.deadline is None:
        return errors
    problem = " ".join(str(text) for text in errors["deadline"]).removesuffix(
        " Give a later deadline, or none."
    )
    return {**errors, "deadline": [
        f"A resubmission keeps the job's deadline, {job.deadline:%Y-%m-%d %H:%M:%S} UTC: "
        f"{problem} Submit the job again with a later deadline, or none."
    ]}  # fmt: skip


class DependenciesRefused(Exception):
    """A change of dependencies the job does not allow (a conflict): a shard, or a job that
    has left the queue."""


@retrying.atomic
def set_dependencies(job: Job, waits: list[dependencies.Wait], singleton: bool, by: str) -> int:
    """Replace a queued job's dependencies (Slurm's `scontrol update dependency=`): `waits`
    (dependencies.Wait, as submit takes them: jobs of its tenant the caller may see, no shard
    but a batch's first, each named once) and whether it is a singleton. A batch (its first
    shard) changes for all its shards, while every one of them is queued. Records an event
    from and to queued on each; returns how many jobs changed.

    Locks as dependencies.lock_change says: the tenant, the job's rows, then the jobs waited
    for. Raises DependenciesRefused for a shard or a job that has left the queue; the
    serializer's ValidationError for what submit refuses and for a dependency on itself or a
    cycle (dependencies.check_change). Nothing is written then."""
    if job.parent_id is not None:
        raise DependenciesRefused(
            f"Job #{job.pk} is shard {job.shard_index} of batch #{job.parent_id}: change the "
            f"batch's dependencies, #{job.parent_id}."
        )
    shards, locked = dependencies.lock_change(job, waits)
    if left := sorted(pk for pk, state in shards.items() if state != State.QUEUED):
        what = f"shard #{left[0]} of batch #{job.pk}" if job.is_batch else f"job #{job.pk}"
        raise DependenciesRefused(
            f"Only a queued job's dependencies change: {what} is {shards[left[0]]}."
        )
    dependencies.check_change(job, waits, singleton, locked)
    dependencies.replace(job, waits, singleton)
    recheck_eligible(list(shards))
    reason = f"dependencies {dependencies.written(waits, singleton)}, set by {by}"
    _note(dict.fromkeys(shards, (job.tenant_id, "")), list(shards), reason)
    transaction.on_commit(kick)
    return len(shards)


class HoldRefused(Exception):
    """A hold or a release the job's state does not allow (a conflict)."""


class AdminHold(HoldRefused):
    """A platform admin's hold, which someone else asked to release."""


@retrying.atomic
def hold(job: Job, by: str, *, admin: bool = False) -> int:
    """Keep a queued job from being placed until it is released (Slurm's hold); for a batch
    (its first shard), every shard still queued. A platform admin's hold (`admin`) only a
    platform admin releases, and a team's hold never replaces it. A held job that had evicted
    work for itself gives up its claim on the room. Returns how many jobs it held.

    Raises HoldRefused when nothing of the job is queued."""
    shards = _queued_shards(job)
    if not shards:
        raise HoldRefused(f"Only a queued job can be held: job #{job.pk} is not queued.")
    kind = Job.Hold.ADMIN if admin else Job.Hold.USER
    ids = [pk for pk, (_, held) in shards.items() if held != Job.Hold.ADMIN or admin]
    who = f"a platform admin ({by}): only a platform admin releases it" if admin else by
    Job.objects.filter(pk__in=ids).update(**held_fields(kind, f"Held by {who}."))
    _note(shards, ids, f"held by {by}")
    return len(ids)


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


@retrying.atomic
def release_hold(job: Job, by: str, *, admin: bool = False) -> int:
    """Let a held job (a batch: its held shards) be placed again, from the next cycle; a
    platform admin's holds only by a platform admin (`admin`): anyone else releases the
    team's. Returns how many jobs it released.

    Raises HoldRefused when none is held, AdminHold when only a platform admin's hold is."""
    held = {pk: row for pk, row in _queued_shards(job).items() if row[1]}
    if not held:
        raise HoldRefused(f"Job #{job.pk} is not held.")
    shards = {pk: row for pk, row in held.items() if may_release(row[1], admin=admin)}
    if not shards:
        raise AdminHold(
            f"Job #{job.pk} is held by a platform admin: only a platform admin releases it."
        )
    Job.objects.filter(pk__in=shards).update(held="", pending_reason="", pending_message="")
    recheck_eligible(list(shards))
    _note(shards, list(shards), f"released by {by}")
    transaction.on_commit(kick)
    return len(shards)


class RequeueRefused(Exception):
    """A requeue of a job with nothing running that is not stopping already (a conflict)."""


@retrying.atomic
def requeue(job: Job, by: str, *, hold: bool = False, admin: bool = False, now=None) -> int:
    """Stop a scheduled or running job (a batch, its first shard: every such shard) as a
    preemption stops it, with its grace period to checkpoint, and queue it again without
    using a retry (Slurm's `scontrol requeue`); with `hold`, held once queued until it is
    released (`scontrol requeuehold`; a platform admin's hold (`admin`) only a platform admin
    releases). It keeps its eligibility: its wait is counted as a preempted job's. Returns how
    many jobs it asked to stop.

    The jobs and then their attempts are locked as cancel() locks them (lock_live), so a
    cancel or an attempt's end racing the requeue waits for it. Raises RequeueRefused when
    none of the job runs, or all of it has been asked to stop already."""
    now = now or database_now()  # the scheduler reads the stop request's time on this clock
    live = Attempt.objects.filter(job__in=job.batch(), outcome="", stop_requested_at=None)
    lock_live(live)
    ids = list(live.values_list("job_id", flat=True))
    if not ids:
        raise RequeueRefused(
            f"Only a scheduled or running job can be requeued: job #{job.pk} has nothing "
            "running that is not being stopped already."
        )
    if hold:
        Job.objects.filter(pk__in=ids).update(held=Job.Hold.ADMIN if admin else Job.Hold.USER)
    message = f"requeued by {by}" + (", held" if hold else "")
    return stop_attempts(Attempt.objects.filter(job_id__in=ids), Attempt.Outcome.PREEMPTED,
                         message, now, cause=Attempt.StopCause.REQUEUE)  # fmt: skip


class NotQueued(Exception):
    """A change only a queued job takes, asked of a job with nothing queued (a conflict)."""


@retrying.atomic
def reprioritize(job: Job, by: str, priority_class=None, priority: int | None = None) -> int:
    """Set a queued job's priority class, its priority within the class, or both (Slurm's
    `scontrol update priority=`, Armada's reprioritize); for a batch (its first shard), every
    shard still queued. From the next cycle it is ordered, and may preempt, as the class it is
    in then; what it started with stays. Returns how many jobs it changed.

    Raises NotQueued when nothing of the job is queued."""
    shards = _queued_shards(job)
    if not shards:
        raise NotQueued(f"Only a queued job changes priority: job #{job.pk} is not queued.")
    fields: dict = {}
    if priority_class is not None:
        fields["priority_class"] = priority_class
    if priority is not None:
        fields["priority"] = priority
    Job.objects.filter(pk__in=shards).update(**fields)
    first = Job.objects.select_related("priority_class").get(pk=min(shards))
    _note(shards, list(shards),
          f"priority set to {first.priority_class.name} {first.priority:+d} by {by}")  # fmt: skip
    transaction.on_commit(kick)
    return len(shards)


class ShardLimitRefused(Exception):
    """A change of a batch's limit on its shards running at once that the job does not allow
    (a conflict): a shard other than the batch's first, or a batch that has ended."""


@retrying.atomic
def set_shard_limit(job: Job, limit: int | None, by: str) -> int:
    """Let at most `limit` of a batch's shards run at once from the next cycle (Slurm's
    array throttle, `scontrol update ArrayTaskThrottle=`), None for no limit: one UPDATE of
    every shard row of the batch (its first shard), while any of them lives. A lower limit
    stops no running shard: the batch starts no more until fewer run. Records an event on the
    batch's first shard and wakes the scheduler; returns how many shards it changed.

    Raises ShardLimitRefused for a shard other than the batch's first, or a batch that has
    ended; the serializer's ValidationError, on max_running_shards, for a job of no batch."""
    if job.parent_id is not None:
        raise ShardLimitRefused(
            f"Job #{job.pk} is shard {job.shard_index} of batch #{job.parent_id}: change the "
            f"batch's limit, #{job.parent_id}."
        )
    if not job.is_batch:
        raise ValidationError({"max_running_shards": [
            f"Job #{job.pk} is not a batch: only a batch limits how many of its shards run at "
            "once."
        ]})  # fmt: skip
    # Its rows in id order, as cancel() locks them: a cancel racing the change waits for it.
    shards = dict(job.batch().select_for_update().values_list("id", "state"))
    if all(state in states.TERMINAL for state in shards.values()):
        raise ShardLimitRefused(f"Batch #{job.pk} has ended: no shard of it is left to run.")
    changed = job.batch().update(max_running_shards=limit)
    said = "no limit" if limit is None else f"at most {limit}"
    reason = f"shards running at once: {said}, set by {by}"
    first = {job.pk: (job.tenant_id, shards[job.pk])}
    write_events(first, shards[job.pk], {job.pk: reason}, {}, timezone.now())
    transaction.on_commit(kick)
    return changed


def may_release(held: str, *, admin: bool) -> bool:
    """Whether a hold of this kind (`Job.held`) is one the asker may release: a team's hold by
    whoever may cancel the job, a platform admin's only by a platform admin (`admin`)."""
    return bool(held) and (admin or held != Job.Hold.ADMIN)


def hold_verb(job: Job, *, admin: bool) -> str:
    """The hold verb open to someone who may cancel the job: `release` if they may release a
    hold of it (a batch: of a queued shard), else `hold` if some of it is queued and not held,
    else "" (nothing of it is queued, or a platform admin holds it all)."""
    holds = set(job.batch().filter(state=State.QUEUED).values_list("held", flat=True))
    if any(may_release(held, admin=admin) for held in holds):
        return "release"
    return "hold" if "" in holds else ""


def _queued_shards(job: Job) -> dict[int, tuple[int, str]]:
    """The job's queued jobs (a batch: its queued shards), {id: (tenant id, hold)}, locked in
    id order, as cancel() locks them: the scheduler's commit skips a job being held."""
    rows = job.batch().filter(state=State.QUEUED).select_for_update()
    return {pk: (tenant, held) for pk, tenant, held in rows.values_list("id", "tenant_id", "held")}


def before_start(value):
    """`eligible_at` set to `value` on a job that has not started yet; one that has keeps its
    own (its queue wait is over)."""
    return Case(When(started_at=None, then=Value(value)), default=F("eligible_at"))


def recheck_eligible(job_ids: list[int]) -> None:
    """Whether these queued jobs, whose rows the caller holds, are free to run, once a hold
    was released or their dependencies changed. One that must wait (held, a dependency not
    met, an earlier job of a singleton's group live) is not eligible; one free to run that was
    not is eligible from now, or from its `not_before` (its begin, or the end of its retry's
    backoff) if that is later; one that was stays so. One UPDATE; a job that has started keeps
    its eligibility."""
    waits = ~Q(held="") | dependencies.waits()
    Job.objects.filter(pk__in=job_ids, started_at=None).update(
        eligible_at=Case(
            When(waits, then=Value(None)),
            When(eligible_at=None, then=from_now_or_not_before()),
            default=F("eligible_at"),
        )
    )


def _note(shards: dict[int, tuple[int, str]], ids: list[int], reason: str) -> None:
    """One event per job, from and to queued: a hold, a release or a change of priority is in
    its history and on its page."""
    queued = {pk: (shards[pk][0], State.QUEUED) for pk in ids}
    write_events(queued, State.QUEUED, dict.fromkeys(ids, reason), {}, timezone.now())
