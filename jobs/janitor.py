"""Sweeps that make the end paths whole, whatever crashed half-way through them."""

from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from clusters import agents
from clusters.models import Allocation
from jobs import actions
from jobs.models import Attempt


def sweep(now=None) -> dict[str, int]:
    """Release allocations of ended attempts; stop attempts that never got all their workers
    running; end attempts whose stop grace ran out; mark clusters whose agent went quiet
    unhealthy, and their attempts lost after a grace period."""
    now = now or timezone.now()
    clusters = agents.sweep_silent_clusters(now)
    return {
        "released": release_orphans(now),
        "unstarted": stop_unstarted(now),
        "forced": force_overdue_stops(now),
        **clusters,
    }


def release_orphans(now) -> int:
    ended = Allocation.objects.active().exclude(attempt__outcome="")
    return actions.release(ended.values("attempt_id"), now)


def stop_unstarted(now) -> int:
    """Attempts not all of whose workers run ``MLSCHED_START_TIMEOUT_S`` after placement: stop
    them as lost, so the job is retried from scratch.

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
    message = f"not every worker was running {timeout}s after placement"
    job_ids = list(unstarted.values_list("job_id", flat=True))
    return actions.request_stop(job_ids, Attempt.Outcome.LOST, message, now=now)


def stop_confirm_window() -> timedelta:
    """How long an agent has to confirm a stop before the janitor ends the attempt anyway."""
    return timedelta(seconds=settings.MLSCHED_STOP_GRACE_S * 2)


def force_overdue_stops(now) -> int:
    """An agent that never confirmed a stop: end the attempt so its GPUs come back. The stop's
    own reason (preempted by whom, canceled by whom) stays the attempt's reason.

    The agent kills what it still runs when it next reconciles with the control plane.
    """
    deadline = now - stop_confirm_window()
    overdue = Attempt.objects.filter(outcome="", stop_requested_at__lt=deadline)
    forced = 0
    for attempt_id, stop_reason, why in overdue.values_list("id", "stop_reason", "reason"):
        actions.end_attempt(
            attempt_id,
            stop_reason or Attempt.Outcome.CANCELED,
            reason=f"{why or 'stopped'} (the stop was not confirmed within the grace period)",
            now=now,
        )
        forced += 1
    return forced
