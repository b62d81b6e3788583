"""Sweeps that make the end paths whole, whatever crashed half-way through them."""

from datetime import timedelta

from django.conf import settings
from django.db import transaction

from clusters import agents
from clusters.models import Allocation
from jobs import actions
from jobs.clock import database_now
from jobs.models import Attempt


def sweep(now=None) -> dict[str, int]:
    """Release allocations of ended attempts; stop attempts some worker of which never ran;
    mark clusters whose agent went quiet unhealthy, and end their attempts after a grace period
    (lost, or as the stop asked of them).

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
