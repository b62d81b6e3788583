"""Job lists with each batch folded into one row, its first shard's (which stands for the
batch, Job.is_batch), as Slurm's squeue folds an array's tasks: the portal's job list always,
the API's with `?fold=1`, the CLI's `list` unless it asks for one batch's shards."""

from dataclasses import dataclass, field

from django.db.models import Count, Exists, OuterRef, Q

from jobs.access import granted, tenant_ids
from jobs.models import Job
from jobs.states import State


def rows(user) -> Q:
    """The folded list's rows: jobs of no batch, batches' first shards (by the partial index
    job_unsharded_id), and the shards shared with the user alone whose batch they cannot see."""
    if not user.is_authenticated:
        return Q(parent__isnull=True)
    shared = granted(user, "view_job")
    alone = Job.objects.filter(pk__in=shared, parent__isnull=False).exclude(parent__in=shared)
    ids = list(alone.exclude(tenant__in=tenant_ids(user)).values_list("pk", flat=True))
    return Q(parent__isnull=True) | Q(pk__in=ids) if ids else Q(parent__isnull=True)


def any_shard(matches: Q) -> Q:
    """The rows that match, or are a batch one of whose other shards does (a state or held
    asked of a folded list)."""
    if not matches:
        return matches
    others = Job.objects.filter(matches, parent_id=OuterRef("pk"))
    return matches | (Q(shards__gt=1, parent__isnull=True) & Exists(others))


@dataclass
class Shards:
    """A batch's shards: how many are in each state, in the lifecycle's order, and why its
    queued ones wait, how many for each reason code, the most first."""

    states: dict[str, int] = field(default_factory=dict)
    waiting: dict[str, int] = field(default_factory=dict)


def shards_of(page: list[Job]) -> dict[int, Shards]:
    """The shards of each batch of `page`, as Job.shard_states() counts one batch's, with why
    its queued ones wait: one query for the page."""
    batches = {job.pk: job for job in page if job.is_batch}
    rows = [(pk, job.state, job.pending_reason, 1) for pk, job in batches.items()]
    found = Job.objects.filter(parent_id__in=batches).order_by()
    rows += found.values_list("parent_id", "state", "pending_reason").annotate(n=Count("pk"))
    states: dict[int, dict[str, int]] = {pk: {} for pk in batches}
    waiting: dict[int, dict[str, int]] = {pk: {} for pk in batches}
    for pk, state, reason, n in rows:
        states[pk][state] = states[pk].get(state, 0) + n
        if state == State.QUEUED:
            waiting[pk][reason] = waiting[pk].get(reason, 0) + n
    return {
        pk: Shards(
            {s: states[pk][s] for s in State.values if s in states[pk]},
            dict(sorted(waiting[pk].items(), key=lambda item: (-item[1], item[0]))),
        )
        for pk in batches
    }
