"""Job dependencies (Slurm's `--dependency=afterok`): which queued jobs wait and for what, and
which jobs can never run once a dependency has failed or been canceled.

A submission's dependencies are held by its first job: a single job, or a batch's first shard,
whose other shards wait with it (their `parent`). A dependency on a batch's first shard is met
once every shard of the batch has succeeded. Dependencies point to earlier jobs only (a check
constraint), so they never form a cycle, and a dependent's id is above its dependencies'.

These are the queries and the locks; the verbs that use them (submit, cancel_dependents) are
in jobs.actions, the wait's explanation in jobs.cycle.
"""

from collections import defaultdict

from django.db import connection, transaction
from django.db.models import Exists, OuterRef, Q
from django.db.models.functions import Coalesce
from rest_framework.exceptions import ValidationError

from jobs.models import Dependency, Job
from jobs.states import TERMINAL, State

MAX_DEPENDENCIES = 64
SHOWN = 10  # dependencies a waiting job's sentence names; the rest are counted
# A job ended in one of these can never succeed: the jobs that depend on it never run.
CUT_OFF = (State.FAILED, State.CANCELED)


def unmet(on) -> Q:
    """Job `on` (a batch's first shard: any shard of it) has not succeeded. Two probes: the
    job's own row, and the partial index of the shards not succeeded (job_shard_unsucceeded)."""
    not_done = Job.objects.exclude(state=State.SUCCEEDED)
    return Exists(not_done.filter(pk=on)) | Exists(not_done.filter(parent_id=on))


def blocked() -> Exists:
    """For a Job queryset: the job's submission (its batch's first shard, or itself) has a
    dependency that has not succeeded. An index probe per job (dependency_unique), and the
    `unmet` probes only for jobs that have dependencies."""
    root = Coalesce(OuterRef("parent_id"), OuterRef("pk"))
    return Exists(Dependency.objects.filter(job_id=root).filter(unmet(OuterRef("on_id"))))


def waiting() -> tuple[dict[int, tuple[str, str, object]], dict[int, list[int]]]:
    """The queued jobs that wait for a dependency: ({id: its explanation as stored}, {id: the
    dependencies not succeeded yet, by id}). One query, however many jobs wait: each queued
    job's links (by their index) with the `unmet` probes, spelled in SQL as `blocked` spells
    them in the ORM."""
    jobs, links = Job._meta.db_table, Dependency._meta.db_table
    sql = f"""
        SELECT j.id, j.pending_reason, j.pending_message, j.estimated_start, d.on_id
        FROM {jobs} j JOIN {links} d ON d.job_id = COALESCE(j.parent_id, j.id)
        WHERE j.state = %s AND (
            EXISTS (SELECT 1 FROM {jobs} o WHERE o.id = d.on_id AND o.state <> %s)
            OR EXISTS (SELECT 1 FROM {jobs} s WHERE s.parent_id = d.on_id AND s.state <> %s)
        )
        ORDER BY j.id, d.on_id
    """
    pending, waits_for = {}, defaultdict(list)
    with connection.cursor() as cursor:
        cursor.execute(sql, [State.QUEUED.value, State.SUCCEEDED.value, State.SUCCEEDED.value])
        for job_id, reason, message, estimate, on in cursor.fetchall():
            pending[job_id] = (reason, message, estimate)
            waits_for[job_id].append(on)
    return pending, dict(waits_for)


def sentence(waits_for: list[int]) -> str:
    """What a waiting job shows: the jobs it waits for, the first SHOWN of them by id."""
    named = ", ".join(f"#{pk}" for pk in waits_for[:SHOWN])
    more = f" and {len(waits_for) - SHOWN} more" if len(waits_for) > SHOWN else ""
    return f"Waiting for job{'s' if len(waits_for) > 1 else ''} {named}{more} to succeed."


def hold(ids: list[int]) -> None:
    """Lock the jobs a submission depends on (a batch: with its live shards) in id order, as
    cancel() locks them, so that none ends while the job waiting for it is written: a failure
    or cancel waits for the submission and then finds the new job to cancel with it
    (actions.cancel_dependents), or it came first and is seen here.

    Raises the serializer's ValidationError on `depends_on` for a dependency that failed or was
    canceled (a job that waits for it would never run), or that is gone (pruned) since the
    serializer saw it.
    """
    if not ids:
        return
    live_shards = Q(parent_id__in=ids) & ~Q(state__in=TERMINAL)
    locked = set(
        Job.objects.filter(Q(pk__in=ids) | live_shards)
        .select_for_update(no_key=True)
        .order_by("id")
        .values_list("id", flat=True)
    )
    if gone := sorted(set(ids) - locked):
        raise ValidationError({"depends_on": [f"No job #{gone[0]} you can see."]})
    ended = (
        Job.objects.filter(Q(pk__in=ids) | Q(parent_id__in=ids), state__in=CUT_OFF)
        .order_by("id")
        .first()
    )
    if ended is not None:
        verb = "failed" if ended.state == State.FAILED else "was canceled"
        what = f"Job #{ended.pk}"
        if ended.parent_id:
            what = f"Shard {ended.shard_index} of batch #{ended.parent_id}"
        message = f"{what} {verb}: a job that depends on it would never run."
        raise ValidationError({"depends_on": [message]})


def dependents(ended: list[int]) -> dict[int, int]:
    """The submissions that wait, directly or through others, for these jobs (or for their
    batches): {first job: the dependency it waits for that is among them or in the way (the
    lowest, where several are)}. One recursive query, no lock; some may have ended already."""
    if not ended:
        return {}
    links, jobs = Dependency._meta.db_table, Job._meta.db_table
    marks = ", ".join(["%s"] * len(ended))
    sql = f"""
        WITH RECURSIVE cut(job_id, cause) AS (
            SELECT d.job_id, d.on_id FROM {links} d
            WHERE d.on_id IN (SELECT COALESCE(parent_id, id) FROM {jobs} WHERE id IN ({marks}))
            UNION
            SELECT d.job_id, d.on_id FROM {links} d JOIN cut ON d.on_id = cut.job_id
        )
        SELECT job_id, MIN(cause) FROM cut GROUP BY job_id
    """
    with connection.cursor() as cursor:
        cursor.execute(sql, ended)
        return dict(cursor.fetchall())


class _Grown(Exception):
    """More submissions depend on the jobs locked than when they were read."""


def lock_dependents(ended: list[int]) -> tuple[dict[int, int], dict[int, tuple[int, str, int]]]:
    """The submissions cut off by `ended` ({first job: cause}, as `dependents`) and their live
    jobs, {id: (tenant id, state, first job)}, locked in id order.

    A submission naming one of them as a dependency locks it first (`hold`), so once they
    are all locked, none gains a dependent, and reading them again finds them all. One that
    committed while this waited for a lock is found by that second read: then the locks are
    let go (the savepoint rolled back) and taken again with it, so that no row is ever locked
    out of id order.
    """
    while True:
        cut = dependents(ended)
        if not cut:
            return {}, {}
        try:
            with transaction.atomic():  # a savepoint: rolled back, its row locks go with it
                rows = (
                    Job.objects.filter(Q(pk__in=cut) | Q(parent_id__in=cut))
                    .live()
                    .select_for_update()
                    .order_by("id")
                    .values_list("id", "tenant_id", "state", "parent_id")
                )
                live = {pk: (tenant, state, parent or pk) for pk, tenant, state, parent in rows}
                if dependents(ended) != cut:
                    raise _Grown
                return cut, live
        except _Grown:
            continue
