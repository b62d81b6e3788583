"""Job lists with each batch folded into one row, its first shard's (which stands for the
batch, Job.is_batch), as Slurm's squeue folds an array's tasks: the portal's job list always,
the API's with `?fold=1`, the CLI's `list` unless it asks for one batch's shards."""

from django.db.models import Count, Exists, OuterRef, Q

from jobs.access import granted, tenants_of
from jobs.models import Job
from jobs.states import State


def rows(user) -> Q:
    """The folded list's rows: jobs of no batch, batches' first shards (by the partial index
    job_unsharded_id), and the shards shared with the user alone whose batch they cannot see."""
    if not user.is_authenticated:
        return Q(parent__isnull=True)
    shared = granted(user, "view_job")
    alone = Job.objects.filter(pk__in=shared, parent__isnull=False).exclude(parent__in=shared)
    ids = list(alone.exclude(tenant__in=tenants_of(user)).values_list("pk", flat=True))
    return Q(parent__isnull=True) | Q(pk__in=ids) if ids else Q(parent__isnull=True)


def any_shard(matches: Q) -> Q:
    """The rows that match, or are a batch one of whose other shards does (a state or held
    asked of a folded list)."""
    if not matches:
        return matches
    others = Job.objects.filter(matches, parent_id=OuterRef("pk"))
    return matches | (Q(shards__gt=1, parent__isnull=True) & Exists(others))


def shard_states(page: list[Job]) -> dict[int, dict[str, int]]:
    """The shards of each batch of `page` counted by state, in the lifecycle's order, as
    Job.shard_states() counts one batch's: one query for the page."""
    batches = {job.pk: job for job in page if job.is_batch}
    counts = {pk: {job.state: 1} for pk, job in batches.items()}
    found = Job.objects.filter(parent_id__in=batches).order_by().values("parent_id", "state")
    for row in found.annotate(n=Count("pk")):
        states = counts[row["parent_id"]]
        states[row["state"]] = states.get(row["state"], 0) + row["n"]
    return {pk: {s: c[s] for s in State.values if s in c} for pk, c in counts.items()}
