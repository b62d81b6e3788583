"""Sweeps that make the end paths whole, whatever crashed half-way through them."""

import logging
from datetime import UTC, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Value
from django.db.models.functions import Coalesce

from clusters import agents
from clusters.models import Allocation, Booking, MaintenanceWindow
from jobs import actions
from jobs.clock import database_now
from jobs.models import Attempt, Job, duration_of
from jobs.states import State

log = logging.getLogger(__name__)


def sweep(now=None) -> dict[str, int]:
    """Release allocations of ended attempts; stop attempts some worker of which never ran, and
    attempts that ran well past their runtime limit; mark clusters whose agent went quiet
    unhealthy, and end their attempts after a grace period (lost, or as the stop asked of them);
    stop attempts whose GPUs have read idle past their tenant's limit;
    cancel the queued jobs that could no longer end by their deadline; stop the work on nodes
    whose maintenance window has begun, and other tenants' work on nodes whose booking has.

    An attempt asked to stop ends when its agent reports its workers gone, never earlier: while
    a worker still runs (a stop that did not take, which the agent asks again) its GPUs must not
    go to another job.

    Times are the database's clock (`now` by default), as heartbeats and placements write them:
    the hosts that write them and this one may disagree by more than any timeout here."""
    now = now or database_now()
    clusters = agents.sweep_silent_clusters(now)
    return {
        "released": release_orphans(now),
        "unstarted": stop_unstarted(now),
        "past_limit": stop_past_limit(now),
        "gpu_idle": stop_idle_gpus(now),
        "past_deadline": cancel_past_deadline(now),
        "maintenance": stop_for_maintenance(now),
        **clusters,
    }


def release_orphans(now) -> int:
    ended = Allocation.objects.active().exclude(attempt__outcome="")
    return actions.release(ended.values("attempt_id"), now)


@transaction.atomic
def stop_unstarted(now) -> int:
    """Attempts not started ``MLSCHED_START_TIMEOUT_S`` after placement (a worker that has never
    run: neither running nor exited): stop them as lost, so the job is retried from scratch.

    A gang whose rank never came up (its process died before reporting, its pod cannot be
    scheduled or pulled) would otherwise hold its GPUs while the other ranks wait at the
    rendezvous until the runtime limit.
    """
    timeout = settings.MLSCHED_START_TIMEOUT_S
    deadline = now - timedelta(seconds=timeout)
    unstarted = Attempt.objects.filter(
        outcome="",
        started_at__isnull=True,
        stop_requested_at__isnull=True,
        scheduled_at__lt=deadline,
    )
    message = f"not every worker had run {timeout}s after placement"
    # Job rows, then attempts, in id order, as a cancel locks them (a batch whose shards never
    # started may be canceled meanwhile). The conditions hold at the write: an attempt that
    # started meanwhile goes on.
    locked = unstarted.filter(pk__in=actions.lock_live(unstarted))
    return actions.stop_attempts(locked, Attempt.Outcome.LOST, message, now=now)


@transaction.atomic
def stop_past_limit(now) -> int:
    """Attempts still running past their job's runtime limit (``max_runtime_s``, from their
    start), the stop grace and ``MLSCHED_RUNTIME_LIMIT_SLACK_S`` more: stop them as timed out,
    as the agent's own enforcement ends them (the job fails, and is not retried).

    The agent enforces the limit itself, from its workers' launch (before the start recorded
    here), SIGKILL coming a stop grace after the SIGTERM: it comes first, with the exact exit.
    This is the backstop for an agent that does not (a backend bug, a pod without its
    deadline), which would otherwise let a job hold its GPUs for ever. An attempt already asked
    to stop (preempted, canceled) is left to that stop.
    """
    late = timedelta(seconds=settings.MLSCHED_STOP_GRACE_S + settings.MLSCHED_RUNTIME_LIMIT_SLACK_S)
    past_limit = Attempt.objects.filter(
        outcome="", started_at__isnull=False, stop_requested_at__isnull=True
    ).filter(started_at__lt=Value(now - late) - duration_of("job__max_runtime_s"))
    # Locked as stop_unstarted() locks, and asked again at the write: an attempt that ended or
    # was asked to stop meanwhile keeps its own end.
    locked = past_limit.filter(pk__in=actions.lock_live(past_limit))
    stopped = stop_each(
        locked, "job__max_runtime_s", Attempt.Outcome.TIMEOUT, now,
        lambda seconds: f"ran past its runtime limit of {seconds}s; the control plane stopped it",
    )  # fmt: skip
    if stopped:
        log.warning("%d attempts ran past their runtime limit without their agent ending them: "
                    "asked to stop", stopped)  # fmt: skip
    return stopped


@transaction.atomic
def stop_idle_gpus(now) -> int:
    """Attempts whose whole GPUs have all read idle for their tenant's `gpu_idle_limit_min` or
    more (`Attempt.gpu_idle_since`, where their cluster measures GPU time): stop them as
    `gpu_idle`, with the stop grace for a checkpoint; the job fails and is not retried (a hung
    job would hang again). An attempt already asked to stop keeps that stop."""
    idle = Attempt.objects.filter(
        outcome="",
        stop_requested_at__isnull=True,
        gpu_idle_since__isnull=False,
        job__tenant__gpu_idle_limit_min__isnull=False,
    ).filter(gpu_idle_since__lte=Value(now) - duration_of("job__tenant__gpu_idle_limit_min", 60))
    # Locked as stop_unstarted() locks; an attempt whose GPUs read busy meanwhile still stops:
    # they were idle past the limit.
    locked = idle.filter(pk__in=actions.lock_live(idle))
    stopped = stop_each(
        locked, "job__tenant__gpu_idle_limit_min", Attempt.Outcome.GPU_IDLE, now,
        lambda minutes: f"its GPUs read idle for {minutes} min, its team's limit; the control "
        "plane stopped it",
    )  # fmt: skip
    if stopped:
        log.info("%d attempts whose GPUs read idle past their team's limit: asked to stop", stopped)
    return stopped


def stop_each(locked, limit: str, outcome: str, now, says) -> int:
    """Ask the locked attempts to stop as `outcome`: one stop for the attempts of each value of
    their `limit` field, with the message `says(value)`; how many."""
    return sum(
        actions.stop_attempts(locked.filter(**{limit: value}), outcome, says(value), now=now)
        for value in sorted(set(locked.values_list(limit, flat=True)))
    )


def cancel_past_deadline(now) -> int:
    """Cancel the queued jobs (held, waiting for a dependency, deferred or backing off before a
    retry included) that, started now and running their whole runtime limit, would end after
    their deadline (Slurm's --deadline); how many. Through the cancel verb, so their dependents
    are canceled with them, and the events, live messages and job-end notifications are those
    of any cancel. A running job is left to its runtime limit. Asked again under the rows'
    locks (cancel_live): a job placed meanwhile runs. Here rather than in the cycle: the sweep
    runs after every cycle, one that failed too, and the cycle never places such a job
    meanwhile (its snapshot and its claim exclude them)."""
    late = Job.objects.filter(Job.late_for_deadline(now), state=State.QUEUED)
    deadlines = dict(late.values_list("pk", "deadline"))
    if not deadlines:
        return 0
    # One cancel for them all, each saying its own deadline.
    reasons = {
        pk: f"deadline {zulu(when)}: could not end by then" for pk, when in deadlines.items()
    }
    return len(actions.cancel_jobs(late.filter(pk__in=deadlines), reasons))


@transaction.atomic
def stop_for_maintenance(now) -> int:
    """Ask the work still on nodes whose maintenance window has begun to stop, and other
    tenants' work on nodes whose booking has, as a drain does: with the grace period for a
    checkpoint, to be requeued without using a retry (a gang with one worker there stops
    whole); how many attempts. The scheduler placed there only work whose runtime limit ended
    it by the window's start; this stops what outlived its run (one placed before the window
    was planned, one decided from a snapshot read before it). The nodes come back by
    themselves at the window's end."""
    stopped = 0
    for window in MaintenanceWindow.objects.begun(now).select_related("cluster"):
        what = f"maintenance of {window.cluster.name}"
        stopped += _stop_on(window, what + _span(window), now, Attempt.StopCause.MAINTENANCE)
    for booking in Booking.objects.begun(now).select_related("cluster"):
        # The sentence goes to the other tenants' jobs: it does not name the tenant.
        what = f"nodes of {booking.cluster.name} booked for another team"
        stopped += _stop_on(booking, what + _span(booking), now, Attempt.StopCause.BOOKING)
    return stopped


def kept_off(window):
    """The live attempts on the window's nodes that it does not let in (a booking lets its
    tenant's in), not asked to stop yet."""
    on_nodes = Allocation.objects.active().filter(node_id__in=window.node_ids())
    attempts = Attempt.objects.filter(
        pk__in=on_nodes.values("attempt_id"), outcome="", stop_requested_at__isnull=True
    )
    tenant = getattr(window, "tenant_id", None)
    return attempts.exclude(job__tenant_id=tenant) if tenant else attempts


def running_into(window) -> int:
    """How many jobs on the window's nodes, not let in, may run past its start by their
    runtime limit: the sweep will stop them then."""
    end = Coalesce("started_at", "scheduled_at") + duration_of("job__max_runtime_s")
    outlasting = kept_off(window).annotate(end=end).filter(end__gt=window.starts_at)
    return outlasting.values("job_id").distinct().count()


def _span(window) -> str:
    reason = f": {window.reason}" if window.reason else ""
    return f" from {zulu(window.starts_at)} to {zulu(window.ends_at)}{reason}; requeued"


def _stop_on(window, message: str, now, cause: str) -> int:
    """Ask the live attempts on the window's nodes that it does not let in to stop as
    preempted."""
    live = kept_off(window)
    if not live.exists():
        return 0
    # Locked as a drain locks them (actions.lock_live), and asked again at the write.
    locked = live.filter(pk__in=actions.lock_live(live))
    return actions.stop_attempts(locked, Attempt.Outcome.PREEMPTED, message, now=now, cause=cause)


def zulu(moment) -> str:
    """A time as ISO 8601 writes it in UTC, as the API shows it: 2026-12-02T10:00:00Z."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")
