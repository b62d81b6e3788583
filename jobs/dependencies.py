"""Job dependencies (Slurm's `--dependency`): which queued jobs wait and for what, and which
jobs can never run once a dependency has ended the wrong way.

Each dependency has a kind: afterok waits for its job to succeed, afterany for it to end in any
way, afternotok for it to fail or be canceled. A dependency that ends otherwise (afterok:
failed or canceled; afternotok: succeeded) cuts its dependent off: it is canceled, and so, in
turn, are the jobs that wait for that one to succeed.

A submission's dependencies are held by its first job: a single job, or a batch's first shard,
whose other shards wait with it (their `parent`). A dependency on a batch's first shard stands
for the batch: ended once every shard has ended, succeeded once every shard has succeeded.
A submission names earlier jobs only; a change of a queued job's dependencies
(jobs.actions.set_dependencies) may name later ones, and is refused where it would close a
cycle (`check_change`).

Singleton (Slurm's --dependency=singleton): the jobs of one tenant, submitter and name form a
group, queued in id order. A singleton job is placed only once every earlier job of its group
has ended, singleton or not (a batch counts as one job, from its first shard: its shards run
side by side, and a later job waits for all of them); so of the group's singleton jobs one runs
at a time. Submissions of one group take turns (`take_turn`), so their ids follow their
commits: a snapshot that sees a job sees every earlier job of its group, and since an ended job
never runs again (a held or retried one has not ended: it keeps the later ones waiting), the
commit's claim needs no lock of its own for them.

These are the queries and the locks; the verbs that use them (submit, set_dependencies,
cancel_dependents) are in jobs.actions, the wait's explanation in jobs.cycle.
"""

from collections import defaultdict
from functools import reduce
from operator import or_
from typing import NamedTuple

from django.db import OperationalError, connection, transaction
from django.db.models import Exists, OuterRef, Q
from django.db.models.functions import Coalesce
from rest_framework.exceptions import ValidationError

from jobs.models import Dependency, Job
from jobs.states import TERMINAL, State
from mlsched_site import turns
from quotas.models import Tenant

Kind = Dependency.Kind
MAX_DEPENDENCIES = 64
SHOWN = 10  # dependencies a waiting job's sentence names; the rest are counted
# A job ended in one of these can never succeed: the jobs waiting for that never run.
CUT_OFF = (State.FAILED, State.CANCELED)
ENDED = sorted(TERMINAL)  # in one order everywhere: the partial indexes job_shard_live's and
# job_live_by_name's
SINGLETON = "singleton"  # the kind `waiting` gives a singleton job's wait for its group
# What each kind waits for, as the waiting sentence says it.
VERBS = {Kind.AFTEROK: "succeed", Kind.AFTERANY: "end", Kind.AFTERNOTOK: "fail",
         SINGLETON: "end (singleton)"}  # fmt: skip
# Advisory lock keys: (this class, a hash of the group; two groups sharing a hash only take
# turns together). The scheduler's and retention's single-key locks are another key space.
GROUP_LOCK = 0x6D6C7367


class Wait(NamedTuple):
    """One dependency of a submission: the job (a batch's first shard) and the kind."""

    on: int
    kind: str


def any_job(on, condition: Q) -> Q:
    """Some job of `on` (itself, or a shard of the batch it stands for) meets `condition`: two
    index probes, the job's own row and a partial index of shards (job_shard_unsucceeded for
    "not succeeded", job_shard_live for "not ended")."""
    jobs = Job.objects.filter(condition)
    return Exists(jobs.filter(pk=on)) | Exists(jobs.filter(parent_id=on))


def unsucceeded(on) -> Q:
    return any_job(on, ~Q(state=State.SUCCEEDED))


def unended(on) -> Q:
    return any_job(on, ~Q(state__in=ENDED))


def unmet(on) -> Q:
    """For a Dependency queryset: the link's job `on` has not ended as its kind asks. afterok:
    it has not succeeded; the others: it has not ended, or (afternotok) it ended without a
    failure: with nothing left to run, a batch's unsucceeded shards are its failed and
    canceled ones. (Such a dependent is canceled in the transaction that saw the success:
    see lock_success.)"""
    return Q(kind=Kind.AFTEROK) & unsucceeded(on) | ~Q(kind=Kind.AFTEROK) & (
        unended(on) | Q(kind=Kind.AFTERNOTOK) & ~unsucceeded(on)
    )


def blocked() -> Exists:
    """For a Job queryset: the job's submission (its batch's first shard, or itself) has a
    dependency that is not met. An index probe per job (dependency_unique), and the `unmet`
    probes only for jobs that have dependencies."""
    root = Coalesce(OuterRef("parent_id"), OuterRef("pk"))
    return Exists(Dependency.objects.filter(job_id=root).filter(unmet(OuterRef("on_id"))))


def singleton_waits() -> Q:
    """For a Job queryset: a singleton job with an earlier job of its group (tenant, submitter,
    name) that has not ended; earlier than its submission, so a batch's own shards do not
    count. One probe of job_live_by_name, only for singleton jobs."""
    earlier = Job.objects.filter(
        tenant_id=OuterRef("tenant_id"),
        owner_id=OuterRef("owner_id"),
        name=OuterRef("name"),
        id__lt=Coalesce(OuterRef("parent_id"), OuterRef("pk")),
    ).exclude(state__in=ENDED)
    return Q(singleton=True) & Exists(earlier)


def waits() -> Q:
    """For a Job queryset: the job may not be placed yet, for a dependency not met or as a
    singleton. The snapshot leaves these jobs out, and the commit's claim asks again: the
    dependencies may have changed since the snapshot."""
    return blocked() | singleton_waits()


def take_turn(tenant_id: int, owner_id: int, name: str) -> None:
    """Wait for the submissions of this group in flight, in the caller's transaction: so the
    group's ids follow their commits, and a job committed with an earlier id than one already
    seen is never found later (a singleton job would not have waited for it). SQLite has one
    writer at a time."""
    turns.take_turn(GROUP_LOCK, f"{tenant_id}:{owner_id}:{name}")


def _any_job_sql(on: str, condition: str) -> str:
    """`any_job` in SQL, for the raw queries below; `condition` on a job's row, `x`."""
    jobs = Job._meta.db_table
    return (
        f"(EXISTS (SELECT 1 FROM {jobs} x WHERE x.id = {on} AND {condition})"
        f" OR EXISTS (SELECT 1 FROM {jobs} x WHERE x.parent_id = {on} AND {condition}))"
    )


def _unmet_sql(link: str) -> tuple[str, list]:
    """`unmet` in SQL, for the dependency row `link`, and its parameters."""
    unsucceeded_sql = _any_job_sql(f"{link}.on_id", "x.state <> %s")
    unended_sql = _any_job_sql(f"{link}.on_id", "x.state NOT IN (%s, %s, %s)")
    # `unmet` rearranged: every job succeeded, only afternotok is unmet (never to be met); one
    # has not, afterok is unmet, and the others until every job has ended. A CASE, not an OR of
    # "kind = ... AND ...", which the planner takes for rare (without statistics, 0.5% of the
    # links a kind) and plans for a handful of rows. Each probe is a hashed subplan, a scan of
    # the jobs built if it is ever reached: each appears once, and afterok needs only one.
    sql = f"""CASE
        WHEN NOT {unsucceeded_sql} THEN {link}.kind = %s
        ELSE {link}.kind = %s OR {unended_sql}
    END"""
    succeeded, ended = [State.SUCCEEDED.value] * 2, [state.value for state in ENDED] * 2
    params = [*succeeded, Kind.AFTERNOTOK.value, Kind.AFTEROK.value, *ended]
    return sql, params


def waiting() -> tuple[dict[int, tuple[str, str, object]], dict[int, list[tuple[int, str]]]]:
    """The queued jobs, not held, that wait for a dependency or as singletons (a held job
    keeps saying it is held): ({id: its explanation as stored}, {id: the dependencies not met
    yet, (job, kind) by job, and for a singleton job the earliest submission of its group
    that has not ended, (job, SINGLETON)}). One query, however many jobs wait: each queued
    job's links with the `unmet` probes, spelled in SQL as `blocked` spells them in the ORM,
    and each queued singleton job's first probe of job_live_by_name."""
    jobs, links = Job._meta.db_table, Dependency._meta.db_table
    unmet_sql, params = _unmet_sql("d")
    ended = ", ".join(["%s"] * len(ENDED))
    earliest = f"""SELECT COALESCE(o.parent_id, o.id) FROM {jobs} o
        WHERE o.tenant_id = j.tenant_id AND o.owner_id = j.owner_id AND o.name = j.name
        AND o.id < COALESCE(j.parent_id, j.id) AND o.state NOT IN ({ended})
        ORDER BY o.id LIMIT 1"""
    sql = f"""
        SELECT j.id, j.pending_reason, j.pending_message, j.estimated_start, d.on_id, d.kind
        FROM {jobs} j JOIN {links} d ON d.job_id = COALESCE(j.parent_id, j.id)
        WHERE j.state = %s AND j.held = '' AND {unmet_sql}
        UNION ALL
        SELECT * FROM (
            SELECT j.id, j.pending_reason, j.pending_message, j.estimated_start,
                ({earliest}) AS on_id, %s AS kind
            FROM {jobs} j WHERE j.state = %s AND j.held = '' AND j.singleton
        ) s WHERE s.on_id IS NOT NULL
        ORDER BY 1, 5
    """
    queued = State.QUEUED.value
    pending, waits_for = {}, defaultdict(list)
    with connection.cursor() as cursor:
        cursor.execute(sql, [queued, *params, *[s.value for s in ENDED], SINGLETON, queued])
        for job_id, reason, message, estimate, on, kind in cursor.fetchall():
            pending[job_id] = (reason, message, estimate)
            waits_for[job_id].append((on, kind))  # a plain tuple: a third faster than a Wait
    return pending, dict(waits_for)


def sentence(waits_for: list[tuple[int, str]]) -> str:
    """What a waiting job shows: the jobs it waits for and what for, by kind ("Waiting for job
    #12 to succeed and jobs #14, #15 to end."), naming the first SHOWN of them by id. A job
    both depended on and in a singleton's way is named once, for its dependency: whatever the
    kind, the job waits for it to end at least (afterany: "to end", as the singleton would)."""
    depended = {on for on, kind in waits_for if kind != SINGLETON}
    waits_for = [(on, kind) for on, kind in waits_for if kind != SINGLETON or on not in depended]
    named = {on for on, _ in sorted(waits_for)[:SHOWN]}
    parts = []
    for kind, verb in VERBS.items():
        ids = sorted(on for on, of_kind in waits_for if of_kind == kind)
        if ids:
            parts.append(f"{jobs_named(ids, named)} to {verb}")
    listed = parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"
    return f"Waiting for {listed}."


def jobs_named(ids: list[int], named: set[int]) -> str:
    """ "job #12", "jobs #12, #13 and 2 more", or "2 more jobs" when none of them is named."""
    shown = [f"#{pk}" for pk in ids if pk in named]
    rest = len(ids) - len(shown)
    if not shown:
        return f"{rest} more job{'s' if rest > 1 else ''}"
    more = f" and {rest} more" if rest else ""
    return f"job{'s' if len(ids) > 1 else ''} {', '.join(shown)}{more}"


def hold(waits: list[Wait]) -> None:
    """Lock the jobs a submission depends on (a batch: with its live shards) in id order, as
    cancel() locks them, so that none ends while the job waiting for it is written: an end
    that cuts the new job off waits for the submission and then finds it to cancel
    (actions.cancel_dependents), or it came first and is seen here.

    Raises the serializer's ValidationError on `depends_on` for a dependency that has already
    ended the wrong way (afterok: failed or canceled; afternotok: succeeded), so that a job
    waiting for it would never run, or that is gone (pruned) since the serializer saw it.
    """
    _check_awaited(waits, _lock_awaited([wait.on for wait in waits]))


def check(waits: list[Wait]) -> None:
    """`hold`'s refusals without its locks, for a submission that writes nothing (a test-only
    one: jobs.trial)."""
    found = Job.objects.filter(pk__in=[wait.on for wait in waits]).values_list("pk", flat=True)
    _check_awaited(waits, set(found))


def unmet_now(waits: list[Wait], singleton: bool, group: dict) -> list[tuple[int, str]]:
    """What a submission not written would wait for, as `waiting` gives it for a stored job:
    its dependencies not met yet, and as a singleton (`group`: tenant_id, owner_id, name) the
    earliest submission of its group that has not ended. Run after `check`: none has ended
    the wrong way."""
    ids = [wait.on for wait in waits]
    jobs = Job.objects.filter(pk__in=ids)
    unsucceeded_ids = set(jobs.filter(unsucceeded(OuterRef("pk"))).values_list("pk", flat=True))
    unended_ids = set(jobs.filter(unended(OuterRef("pk"))).values_list("pk", flat=True))
    found = [
        (on, kind)
        for on, kind in waits
        if on in (unsucceeded_ids if kind == Kind.AFTEROK else unended_ids)
    ]
    if singleton:
        live = Job.objects.filter(**group).exclude(state__in=ENDED).order_by("pk")
        earliest = live.values_list(Coalesce("parent_id", "pk"), flat=True).first()
        if earliest is not None:
            found.append((earliest, SINGLETON))
    return sorted(found)


def _lock_awaited(ids: list[int], *, nowait: bool = False) -> set[int]:
    """Lock these jobs and their batches' live shards in id order; the ids found of `ids`.
    `nowait`: raise OperationalError rather than wait for a lock another transaction holds."""
    if not ids:
        return set()
    live_shards = Q(parent_id__in=ids) & ~Q(state__in=TERMINAL)
    locked = (
        Job.objects.filter(Q(pk__in=ids) | live_shards)
        .select_for_update(no_key=True, nowait=nowait)
        .order_by("id")
        .values_list("id", flat=True)
    )
    return set(locked) & set(ids)


def _check_awaited(waits: list[Wait], locked: set[int]) -> None:
    """`hold`'s refusals, once the jobs waited for are locked (`locked`: those found)."""
    if gone := sorted({wait.on for wait in waits} - locked):
        raise ValidationError({"depends_on": [f"No job #{gone[0]} you can see."]})
    awaited = {kind: [on for on, of_kind in waits if of_kind == kind] for kind in Kind}
    if problem := _failed(awaited[Kind.AFTEROK]) or _succeeded(awaited[Kind.AFTERNOTOK]):
        raise ValidationError({"depends_on": [problem]})


LOCK_NOT_AVAILABLE = "55P03"  # PostgreSQL's error for a NOWAIT lock another transaction holds


def lock_change(job: Job, waits: list[Wait]) -> tuple[dict[int, str], set[int]]:
    """Lock what a change of `job`'s dependencies to `waits` reads and writes: ({id: state} of
    the job's rows (a batch: every shard), the ids of `waits` found).

    1. The tenant's row (FOR NO KEY UPDATE: submissions' foreign key checks pass): changes of
       one tenant's dependencies take turns, so that the later one's cycle check sees the
       earlier one's links. Locks on the jobs changed and named would not do: two changes
       closing a ring of four jobs at once share no job.
    2. The job's rows, in id order, as cancel() locks them: the commit's claim skips a job
       being changed (SKIP LOCKED), or the change waits for the placement and finds the job
       scheduled; the two never both win.
    3. The jobs it waits for now and is to wait for, as submit holds them, without waiting:
       one may be ending, its transaction about to lock this job to cancel it (or holding the
       link a success locks), and waiting for it while holding the job would deadlock. Then
       the locks of 2 and 3 go (a savepoint rolled back), the busy jobs are waited for alone,
       and all are taken again.
    """
    list(Tenant.objects.filter(pk=job.tenant_id).select_for_update(no_key=True).values("pk"))
    awaited = [wait.on for wait in waits]
    while True:
        try:
            with transaction.atomic():  # a savepoint: rolled back, its row locks go with it
                rows = dict(job.batch().select_for_update().values_list("id", "state"))
                old = Dependency.objects.filter(job=job).values_list("on_id", flat=True)
                awaited = sorted({*awaited, *old})
                return rows, _lock_awaited(awaited, nowait=True)
        except OperationalError as busy:
            if getattr(busy.__cause__, "sqlstate", None) != LOCK_NOT_AVAILABLE:
                raise
        with transaction.atomic():
            _lock_awaited(awaited)  # until the busy ones' holders have committed
            transaction.set_rollback(True)


class Refusal(ValidationError):
    """A refused change whose sentence (`said`, on `field`) names a job the caller did not name
    (`named`): an earlier job of the group, which a holder of a grant on this job alone may not
    see. `unnamed` says the same without its id (access.refusal_as_read picks)."""

    def __init__(self, field: str, *, named: int, said: str, unnamed: str):
        super().__init__({field: [said]})
        self.field, self.named, self.unnamed = field, named, unnamed


def check_change(job: Job, waits: list[Wait], singleton: bool, locked: set[int]) -> None:
    """Raise the serializer's ValidationError for a change of `job`'s dependencies, under
    `lock_change`'s locks, that submit would refuse (`hold`), or that would have it wait for
    itself: on `depends_on` for itself, or for a job that waits for it, directly or through
    others; on `singleton` for an earlier job of its group that does (a Refusal: the caller
    may not see that job). The other refusals name only jobs the caller named."""
    if any(wait.on == job.pk for wait in waits):
        raise ValidationError({"depends_on": [f"Job #{job.pk} cannot wait for itself."]})
    _check_awaited(waits, locked)
    waiting = waiters(job.pk)
    if looped := sorted(wait.on for wait in waits if wait.on in waiting):
        raise ValidationError({"depends_on": [
            f"Job #{looped[0]} waits for job #{job.pk}, directly or through other jobs: if "
            "each waited for the other, neither would ever run."
        ]})  # fmt: skip
    if not (singleton and waiting):
        return
    group = Job.objects.filter(tenant_id=job.tenant_id, owner_id=job.owner_id, name=job.name)
    if earlier := group.filter(pk__lt=job.pk, pk__in=waiting).order_by("pk").first():
        why = (
            f"waits for job #{job.pk}, directly or through other jobs: a singleton waits for it, "
            "so neither would ever run."
        )
        raise Refusal(
            "singleton",
            named=earlier.pk,
            said=f"Job #{earlier.pk}, an earlier job of the same name, {why}",
            unnamed=f"An earlier job of the same name {why}",
        )


def waiters(root: int) -> set[int]:
    """The submissions (first jobs) not ended that wait for `root`, directly or through
    others: those with a dependency on it and the later singleton jobs of its group, then
    theirs in turn. Three queries a step along the longest way back."""
    found: set[int] = set()
    step = {root}
    while step:
        linked = set(Dependency.objects.filter(on_id__in=step).values_list("job_id", flat=True))
        reached = (linked | _later_singletons(step)) - found - {root}
        live = Job.objects.filter(pk__in=reached).filter(unended(OuterRef("pk")))
        step = set(live.values_list("pk", flat=True))
        found |= step
    return found


def _later_singletons(roots: set[int]) -> set[int]:
    """The singleton submissions not ended that come after any of `roots` in its group, and so
    wait for it (ids follow commits in a group: `take_turn`)."""
    first: dict[tuple, int] = {}
    rows = Job.objects.filter(pk__in=roots).order_by("pk")
    for pk, *group in rows.values_list("pk", "tenant_id", "owner_id", "name"):
        first.setdefault(tuple(group), pk)
    if not first:
        return set()
    later = reduce(or_, [
        Q(tenant_id=tenant, owner_id=owner, name=name, pk__gt=pk) & ~Q(parent_id=pk)
        for (tenant, owner, name), pk in first.items()
    ])  # fmt: skip
    found = Job.objects.filter(later, singleton=True).exclude(state__in=ENDED)
    return set(found.values_list(Coalesce("parent_id", "pk"), flat=True))


def replace(job: Job, waits: list[Wait], singleton: bool) -> None:
    """Write `job`'s dependencies in place of those it had, and whether it (a batch: every
    shard) is a singleton."""
    Dependency.objects.filter(job=job).delete()
    Dependency.objects.bulk_create(Dependency(job=job, on_id=on, kind=kind) for on, kind in waits)
    job.batch().update(singleton=singleton)


def written(waits: list[Wait], singleton: bool) -> str:
    """Dependencies as Slurm's --dependency writes them ("afterok:12:13,afterany:14,singleton"),
    "none" for none."""
    by_kind: dict[str, list[str]] = defaultdict(list)
    for on, kind in sorted(waits):
        by_kind[kind].append(str(on))
    parts = [f"{kind}:{':'.join(by_kind[kind])}" for kind in Kind.values if kind in by_kind]
    return ",".join(parts + ([SINGLETON] if singleton else [])) or "none"


def _failed(ids: list[int]) -> str:
    """Why waiting for these jobs to succeed is refused: the first of them (or of their shards)
    that failed or was canceled; "" if none has."""
    if not ids:
        return ""
    cut_off = Q(pk__in=ids) | Q(parent_id__in=ids)
    ended = Job.objects.filter(cut_off, state__in=CUT_OFF).order_by("id").first()
    if ended is None:
        return ""
    verb = "failed" if ended.state == State.FAILED else "was canceled"
    what = f"Job #{ended.pk}"
    if ended.parent_id:
        what = f"Shard {ended.shard_index} of batch #{ended.parent_id}"
    return f"{what} {verb}: a job that depends on it would never run."


def _succeeded(ids: list[int]) -> str:
    """Why waiting for these jobs to fail is refused: the first of them that has succeeded (a
    batch: every shard); "" if none has."""
    if not ids:
        return ""
    succeeded = Job.objects.filter(pk__in=ids).exclude(unsucceeded(OuterRef("pk")))
    done = succeeded.order_by("id").first()
    if done is None:
        return ""
    what = f"Batch #{done.pk} (every shard)" if done.is_batch else f"Job #{done.pk}"
    return f"{what} succeeded: a job that waits for it to fail would never run."


def dependents(ended: list[int]) -> dict[int, int]:
    """The submissions that can never run now that these jobs have ended as they did: those
    waiting for their batches (or these single jobs) in a way that can no longer be met, and,
    in turn, the ones waiting for those to succeed. {first job: the dependency it waits for
    that is among them or in the way (the lowest, where several are)}. One recursive query, no
    lock; some may have ended already."""
    if not ended:
        return {}
    links, jobs = Dependency._meta.db_table, Job._meta.db_table
    marks = ", ".join(["%s"] * len(ended))
    failed = _any_job_sql("d.on_id", "x.state IN (%s, %s)")
    unsucceeded_sql = _any_job_sql("d.on_id", "x.state <> %s")
    sql = f"""
        WITH RECURSIVE cut(job_id, cause) AS (
            SELECT d.job_id, d.on_id FROM {links} d
            WHERE d.on_id IN (SELECT COALESCE(parent_id, id) FROM {jobs} WHERE id IN ({marks}))
            AND (d.kind = %s AND {failed} OR d.kind = %s AND NOT {unsucceeded_sql})
            UNION
            SELECT d.job_id, d.on_id FROM {links} d JOIN cut ON d.on_id = cut.job_id
            WHERE d.kind = %s
        )
        SELECT job_id, MIN(cause) FROM cut GROUP BY job_id
    """
    cut_off = [state.value for state in CUT_OFF] * 2
    params = [*ended, Kind.AFTEROK.value, *cut_off, Kind.AFTERNOTOK.value,
              *[State.SUCCEEDED.value] * 2, Kind.AFTEROK.value]  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return dict(cursor.fetchall())


def lock_success(succeeded: list[int]) -> bool:
    """Whether any job waits for these jobs' batches to fail: their afternotok links, locked.

    Two shards that succeed at once each see the other still running, and neither would find
    the batch succeeded whole: taking these locks, the second waits for the first to commit,
    then sees it. A submission or a change adding such a link locks the batch's live shards
    first (`hold`, `lock_change`), so it comes before a shard's success or sees it."""
    roots = Job.objects.filter(pk__in=succeeded).values(root=Coalesce("parent_id", "pk"))
    links = Dependency.objects.filter(on_id__in=roots, kind=Kind.AFTERNOTOK)
    return bool(list(links.select_for_update().order_by("id").values_list("id", flat=True)))


class _Grown(Exception):
    """More submissions depend on the jobs locked than when they were read."""


def lock_dependents(ended: list[int]) -> tuple[dict[int, int], dict[int, tuple[int, str, int]]]:
    """The submissions cut off by `ended` ({first job: cause}, as `dependents`) and their live
    jobs, {id: (tenant id, state, first job)}, locked in id order.

    A submission or a change naming one of them as a dependency locks it first (`hold`,
    `lock_change`), so once they are all locked, none gains a dependent, and reading them
    again finds them all. One that committed while this waited for a lock is found by that
    second read: then the locks are let go (the savepoint rolled back) and taken again with
    it, so that no row is ever locked out of id order.
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
