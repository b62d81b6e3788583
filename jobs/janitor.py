"""Sweeps that make the end paths whole, whatever crashed half-way through them."""

from datetime import timedelta

from django.conf import settings

from clusters import agents
from clusters.models import Allocation
from jobs import actions
from jobs.clock import database_now
from jobs.models import Attempt


def sweep(now=None) -> dict[str, int]:
    """Release allocations of ended attempts; stop attempts that never got all their workers
    running; mark clusters whose agent went quiet unhealthy, and their attempts lost after a
    grace period.

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
    # The conditions hold at the write: an attempt that started meanwhile goes on.
    return actions.stop_attempts(unstarted, Attempt.Outcome.LOST, message, now=now)
