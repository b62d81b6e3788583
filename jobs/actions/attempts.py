"""Attempts and the nodes they run on: preemption, cordon and drain, an attempt's start and
end and what its end does to its job (retry, requeue, fail), late successes, and waste."""

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Sum
from django.db.models.functions import Greatest, Now
from django.utils import timezone

from clusters.models import Allocation, Cluster, Node
from jobs import dependencies, events, quarantine, retrying, rollup
from jobs.actions.lifecycle import (
    ENDED_VERBS,
    before_start,
    kick,
    lock_live,
    stop_attempts,
    stop_live,
    transition,
)
from jobs.clock import database_now
from jobs.models import Attempt, Job, JobEvent
from jobs.states import State

# What a victim's attempt is told, by why it goes (the placement core's victim causes).
PREEMPTED_FOR = {
    "priority": "preempted for a higher-priority job",
    "quota": "preempted: its team ran on another team's idle guarantee, which that team needed "
    "back",
    "fair_share": "preempted: its team held more GPUs than its fair share while another team "
    "waited",
}


@retrying.atomic
def preempt(
    victims_of: dict[int, list[int]],
    now=None,
    claims_seen=None,
    attempts_seen=None,
    causes: dict[int, str] | None = None,
) -> list[int]:
    """Ask the victims to stop and give the room they leave to the jobs they stop for,
    {preemptor id: victim ids}; return the victims asked. `causes` ({victim id: why}, as
    PREEMPTED_FOR names them; by default for a higher-priority job) says what each is told.

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
    told: dict[str, list[int]] = {}
    for victim in victims:
        told.setdefault((causes or {}).get(victim, "priority"), []).append(victim)
    for cause, jobs in sorted(told.items()):
        stop_attempts(live.filter(job_id__in=jobs), Attempt.Outcome.PREEMPTED,
                      PREEMPTED_FOR[cause], now, cause=Attempt.StopCause.PREEMPTION)  # fmt: skip
    until = now + timedelta(seconds=2 * settings.MLSCHED_STOP_GRACE_S + 60)
    Job.objects.filter(id__in=waiting).update(preempting_until=until)
    return victims


@retrying.atomic
def grow(sizes: dict[int, tuple[int, int]], now=None) -> list[int]:
    """Ask running elastic gangs to stop, with the grace period for a checkpoint, to start
    again larger: {job id: (its live attempt as the deciding snapshot read it, the workers it
    restarts with)}; the jobs asked. The room is the job's own until it starts again, as a
    preemptor's (`preempting_until`), so it comes first of the queue once requeued. Only
    that attempt, still live, not asked to stop, and smaller than it would restart: one that
    ended, or that a user requeued or canceled meanwhile, is left alone. Locked as cancel()
    locks (lock_live)."""
    now = now or timezone.now()
    live = Attempt.objects.filter(pk__in=[attempt for attempt, _ in sizes.values()])
    lock_live(live)
    asked = []
    for attempt in live.filter(outcome="", stop_requested_at__isnull=True).order_by("id"):
        workers = sizes[attempt.job_id][1]
        if attempt.workers >= workers:
            continue
        message = (
            f"stopped to restart with {workers} workers: its elastic gang, running with "
            f"{attempt.workers}, grows into room that is free"
        )
        if stop_attempts(Attempt.objects.filter(pk=attempt.pk), Attempt.Outcome.PREEMPTED,
                         message, now, cause=Attempt.StopCause.GROW):  # fmt: skip
            Attempt.objects.filter(pk=attempt.pk).update(restart_workers=workers)
            asked.append(attempt.job_id)
    until = now + timedelta(seconds=2 * settings.MLSCHED_STOP_GRACE_S + 60)
    Job.objects.filter(id__in=asked).update(preempting_until=until)
    return asked


@retrying.atomic
def set_schedulable(
    node_ids: list[int], schedulable: bool, by: str = "", reason: str = ""
) -> list[int]:
    """Cordon these nodes (nothing new is placed there; what runs goes on) or uncordon them;
    the ids of those it changed. A cordon records who and why (`by`, `reason`; a reason given
    replaces that of a node cordoned already), an uncordon clears it. The nodes are locked in
    id order, as the commit locks them: one changed by someone else meanwhile is not counted
    twice."""
    changing = Node.objects.select_for_update().filter(pk__in=node_ids).order_by("id")
    ids = list(changing.exclude(schedulable=schedulable).values_list("id", flat=True))
    if schedulable:  # back in service: its quarantine, if any, is over, its faults forgiven
        Node.objects.filter(pk__in=ids).update(
            schedulable=True, quarantined_at=None, quarantine_reason="", faults_cleared_at=Now(),
            cordon_reason="", cordoned_by="", cordoned_at=None,
        )  # fmt: skip
    else:
        Node.objects.filter(pk__in=node_ids if reason else ids).update(
            schedulable=False, cordon_reason=reason[:200], cordoned_by=by[:150], cordoned_at=Now()
        )
    return ids


@retrying.atomic
def drain(node_ids: list[int], by: str, now=None, reason: str = "") -> int:
    """Take nodes out of service (Slurm's drain, `kubectl drain`): cordon them, so nothing new
    is placed there, and ask the work on them to stop as a preemption does, with the grace
    period for a checkpoint, to be requeued without using a retry and placed elsewhere. A gang
    with one worker there stops whole. Records who and why (`reason`: a node cordoned already
    keeps its own unless one is given). How many attempts were asked to stop.

    The nodes are cordoned first (set_schedulable, which locks them in id order, as the commit
    locks them): a placement on them committed meanwhile is waited for and stopped with the
    rest, and any later one sees them cordoned. Then the jobs and their attempts, as cancel()
    locks them (lock_live)."""
    now = now or database_now()  # the scheduler reads the stop request's time on this clock
    set_schedulable(node_ids, False, by, reason)
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
    attempt_id: int,
    outcome: str,
    *,
    exit_code: int | None = None,
    reason: str = "",
    now=None,
    retriable: bool = True,
) -> Attempt:
    """End an attempt: record its outcome, release its resources, move its job on.

    Ending an attempt that has already ended changes nothing. The job follows the failure
    rules: user errors (but those it asked to retry: retry_user_errors, retry_exit_codes),
    timeouts and GPUs idle past the team's limit fail it visibly; infrastructure failures
    and lost attempts requeue it with exponential backoff until max_retries is used;
    preemption requeues it without using a retry, and so does a node's failure or loss on an
    interruptible cluster (its node taken back), up to MLSCHED_INTERRUPTION_REQUEUES times, then
    each uses one. A user error that is not ``retriable`` (the
    job's set-up, which no run of it mends: a secret gone) fails it even if it asked to retry
    its own errors.
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
        follow_outcome(job, attempt, now, retriable)
    return attempt


def follow_outcome(job: Job, attempt: Attempt, now, retriable: bool = True) -> None:
    outcome, reason = attempt.outcome, attempt.reason
    if outcome == Outcome.SUCCEEDED:
        if job.state == State.SCHEDULED:
            transition(job, State.RUNNING, "started", attempt=attempt, now=now)
        transition(job, State.SUCCEEDED, reason or "exit code 0", attempt=attempt, now=now)
    elif outcome == Outcome.USER_ERROR and retriable and job.retries_exit(attempt.exit_code):
        if job.retries_used < job.max_retries:
            retry(job, attempt, now)
        else:
            transition(job, State.FAILED, f"{reason or f'exit code {attempt.exit_code}'} "
                       "(retries exhausted)", attempt=attempt, now=now)  # fmt: skip
    elif outcome in (Outcome.USER_ERROR, Outcome.TIMEOUT, Outcome.GPU_IDLE):
        transition(job, State.FAILED, reason or f"exit code {attempt.exit_code}",
                   attempt=attempt, now=now)  # fmt: skip
    elif outcome == Outcome.CANCELED:
        transition(job, State.CANCELED, reason or "canceled", attempt=attempt, now=now)
    elif outcome == Outcome.PREEMPTED:
        transition(job, State.QUEUED, reason or "preempted", attempt=attempt, now=now)
    elif attempt.node_faulted and on_interruptible(attempt):
        if job.interruptions < settings.MLSCHED_INTERRUPTION_REQUEUES:
            # Its node taken back (a spot instance): queued again as a preemption is.
            Job.objects.filter(pk=job.pk).update(interruptions=F("interruptions") + 1)
            transition(job, State.QUEUED, f"{outcome}: {reason} ({INTERRUPTED})",
                       attempt=attempt, now=now)  # fmt: skip
        else:
            infra_failure(job, attempt, now, past_interruptions(job.interruptions))
    else:
        infra_failure(job, attempt, now)


INTERRUPTED = "an interruptible cluster's node: queued again, no retry used"


def past_interruptions(count: int) -> str:
    return f"its node taken back {count} times already"


def infra_failure(job: Job, attempt: Attempt, now, why: str = "") -> None:
    """Retry the job after an infrastructure failure while it has retries left, else fail it;
    ``why``: said after its reason, why one is used."""
    note = f" ({why})" if why else ""
    if job.retries_used < job.max_retries:
        retry(job, attempt, now, note)
    else:
        transition(job, State.FAILED, f"{attempt.outcome}: {attempt.reason}{note} "
                   "(retries exhausted)", attempt=attempt, now=now)  # fmt: skip


def on_interruptible(attempt: Attempt) -> bool:
    """Whether the attempt ran on a cluster whose nodes may be taken back at any time."""
    return Cluster.objects.filter(pk=attempt.cluster_id, interruptible=True).exists()


def retry(job: Job, attempt: Attempt, now, note: str = "") -> None:
    """Requeue after an infrastructure failure (or a user error the job asked to retry), not
    before the exponential backoff has passed; ``note``: said after the attempt's reason."""
    delay = min(settings.MLSCHED_RETRY_BACKOFF_S * 2**job.retries_used, 600)
    until = now + timedelta(seconds=delay)
    # A job that never started is eligible again once its backoff ends: its wait is not the
    # backoff's, nor that of the placement that failed.
    Job.objects.filter(pk=job.pk).update(
        retries_used=F("retries_used") + 1, not_before=until, eligible_at=before_start(until)
    )
    transition(job, State.QUEUED, f"{attempt.outcome}: {attempt.reason}{note}; retry in "
               f"{delay}s", attempt=attempt, now=now)  # fmt: skip


@retrying.atomic
def late_success(attempt_id: int, now=None, started=None) -> None:
    """Every worker of an attempt declared lost has exited 0 after all: its agent was away,
    not its workers (the janitor gives up the attempts of a silent cluster).

    A job that has not ended takes the success: it ends succeeded by that attempt, and the
    retry its loss asked for is dropped if it is still queued, or asked to stop, as a cancel
    stops it, if it was placed (take_late_success). A job that has ended keeps its end (its
    dependents were released or canceled by it): one event on the lost attempt records the
    report. Once per attempt: the exit code written marks the report as seen, so a report
    sent again changes nothing. An attempt never seen running starts when its workers say
    they started (`started`), within its placement and its end.
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
    if attempt.started_at is None and started is not None:
        attempt.started_at = min(max(started, attempt.scheduled_at), attempt.ended_at)
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
    attempt.save(
        update_fields=["outcome", "exit_code", "reason", "wasted_gpu_seconds", "started_at"]
    )
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
    attempt.save(update_fields=["exit_code", "reason", "started_at"])
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
