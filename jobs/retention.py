"""Retention: delete what the control plane no longer needs, so the database stops growing.

Five passes, each in batches of at most ``BATCH`` rows per DELETE (no giant transaction, no
long lock), each a no-op when there is nothing to do, so running it twice is harmless:

1. log lines of attempts that ended more than ``log_days`` ago;
2. released allocations released more than ``log_days`` ago (a node whose allocations are all
   released can be deleted at any time; see ``clusters.models.protect_live``);
3. finished jobs, more than ``job_days`` after they ended, with their attempts, events, log
   lines, allocations and object permissions. Only a job that is terminal, finished before the
   cutoff, all of whose attempts ended before the cutoff and hold nothing; a batch (its first shard
   and the shards pointing at it) only when every shard of it qualifies. With them, the budget
   alerts sent for months before the cutoff's (``BudgetAlert``: a month's rows claim its
   thresholds only while it lasts).
4. sign-ins and failed attempts (``quotas.SignIn``) more than ``sign_in_days`` old;
5. entries of the platform's history (Django's admin ``LogEntry``, ``quotas.history``) more
   than ``history_days`` old.

Live work is never touched: a live attempt has no ``ended_at``, and a job is deleted only when
nothing of it can change again (a terminal job gets no new attempts, an ended attempt never
ends again).

``MLSCHED_LOG_RETENTION_DAYS`` (30) governs 1 and 2, ``MLSCHED_JOB_RETENTION_DAYS`` (90) 3,
``MLSCHED_SIGN_IN_RETENTION_DAYS`` (365) 4, ``MLSCHED_HISTORY_RETENTION_DAYS`` (730) 5; 0 switches
a pass off.
"""

from datetime import timedelta

from django.conf import settings
from django.contrib.admin.models import LogEntry
from django.contrib.contenttypes.models import ContentType
from django.db import transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone
from guardian.models import GroupObjectPermission, UserObjectPermission

from clusters.models import Allocation
from jobs import rollup
from jobs.models import Attempt, BudgetAlert, Job, JobEvent, LogChunk
from jobs.states import TERMINAL
from quotas.models import SignIn

BATCH = 10_000
KEYS = [
    "log_lines", "allocations", "jobs", "attempts", "events", "budget_alerts", "sign_ins",
    "history",
]  # fmt: skip
LABELS = {
    "jobs.LogChunk": "log_lines",
    "clusters.Allocation": "allocations",
    "jobs.Job": "jobs",
    "jobs.Attempt": "attempts",
    "jobs.JobEvent": "events",
}


def retention_days(name: str) -> int:
    """A retention setting, in days; 0 switches that pass off."""
    days = int(getattr(settings, name))
    if days < 0:
        raise ValueError(f"{name} must be 0 (keep forever) or a number of days, not {days}")
    return days


def prune(
    now=None,
    keep_days: int | None = None,
    job_days: int | None = None,
    sign_in_days: int | None = None,
    history_days: int | None = None,
    *,
    dry_run: bool = False,
    batch: int = BATCH,
) -> dict[str, int]:
    """Delete old log lines, released allocations, finished jobs, sign-ins and history
    entries; return what was deleted (with ``dry_run``, what would be), by kind.

    ``keep_days`` (log lines, released allocations), ``job_days`` (finished jobs),
    ``sign_in_days`` (sign-ins) and ``history_days`` (the platform's history) default to the
    settings; 0 keeps that kind forever.
    """
    now = now or timezone.now()
    keep_days = retention_days("MLSCHED_LOG_RETENTION_DAYS") if keep_days is None else keep_days
    job_days = retention_days("MLSCHED_JOB_RETENTION_DAYS") if job_days is None else job_days
    if sign_in_days is None:
        sign_in_days = retention_days("MLSCHED_SIGN_IN_RETENTION_DAYS")
    if history_days is None:
        history_days = retention_days("MLSCHED_HISTORY_RETENTION_DAYS")
    if min(keep_days, job_days, sign_in_days, history_days) < 0:
        raise ValueError("retention days must be 0 (keep forever) or more")
    counts = dict.fromkeys(KEYS, 0)
    log_cutoff = now - timedelta(days=keep_days) if keep_days else None
    if log_cutoff is not None:
        lines = LogChunk.objects.filter(attempt__in=_ended_before(log_cutoff))
        released = Allocation.objects.filter(active=False, released__lt=log_cutoff)
        counts["log_lines"] += _delete(lines, dry_run, batch)
        counts["allocations"] += _delete(released, dry_run, batch)
    if not dry_run:
        rollup.roll_up(now)  # what the jobs used outlives them
    if job_days:
        # Not a job the roll-up has not reached (it reaches the settled days: this one did).
        cutoff = min(now - timedelta(days=job_days), rollup.settled_end(now))
        _prune_jobs(cutoff, log_cutoff, counts, dry_run, batch)
        sent = BudgetAlert.objects.filter(month__lt=cutoff.date().replace(day=1))
        counts["budget_alerts"] += _delete(sent, dry_run, batch)
    if sign_in_days:
        old = SignIn.objects.filter(at__lt=now - timedelta(days=sign_in_days))
        counts["sign_ins"] += _delete(old, dry_run, batch)
    if history_days:
        entries = LogEntry.objects.filter(action_time__lt=now - timedelta(days=history_days))
        counts["history"] += _delete(entries, dry_run, batch)
    return counts


def _ended_before(cutoff):
    return Attempt.objects.filter(ended_at__lt=cutoff).exclude(outcome="")


def _delete(queryset, dry_run: bool, batch: int) -> int:
    """Delete the queryset's rows (of a model nothing points at) by primary key, ``batch`` ids
    per DELETE, each in a transaction of its own."""
    if dry_run:
        return queryset.count()
    deleted = 0
    ids = queryset.order_by().values_list("pk", flat=True)
    while chunk := list(ids[:batch]):
        deleted += queryset.model.objects.filter(pk__in=chunk).delete()[0]
        if len(chunk) < batch:
            break
    return deleted


def finished(cutoff) -> Q:
    """Jobs that can be deleted on their own: terminal and finished before the cutoff, every
    attempt ended before it, no allocation still held."""
    unended = Attempt.objects.filter(job_id=OuterRef("pk")).filter(
        Q(outcome="") | Q(ended_at__isnull=True) | Q(ended_at__gte=cutoff)
    )
    held = Allocation.objects.filter(attempt__job_id=OuterRef("pk"), active=True)
    return Q(state__in=TERMINAL, finished_at__lt=cutoff) & ~Exists(unended) & ~Exists(held)


def finished_batches(cutoff):
    """The first jobs (single jobs, and the first shards of batches) of the submissions that can be
    deleted: the job qualifies, and so does every shard pointing at it."""
    shard_left = Job.objects.filter(parent_id=OuterRef("pk")).exclude(finished(cutoff))
    return (
        # created before the cutoff too (a job finishes after it is created): the range of the
        # (state, created) index.
        Job.objects.filter(parent__isnull=True, created__lt=cutoff)
        .filter(finished(cutoff))
        .exclude(Exists(shard_left))
    )


def _prune_jobs(cutoff, log_cutoff, counts: dict[str, int], dry_run: bool, batch: int) -> None:
    roots = finished_batches(cutoff).order_by("pk").values_list("pk", flat=True)
    last = 0
    while root_ids := list(roots.filter(pk__gt=last)[:batch]):
        last = root_ids[-1]
        # Shards before their first job: the first job's row goes last, and a batch stopped
        # half-way (a crash, a timeout) still qualifies as a whole at the next run.
        shard_ids = list(
            Job.objects.filter(parent_id__in=root_ids).order_by("pk").values_list("pk", flat=True)
        )
        job_ids = shard_ids + root_ids
        for start in range(0, len(job_ids), batch):
            chunk = job_ids[start : start + batch]
            if dry_run:
                _count_jobs(chunk, log_cutoff, counts)
            else:
                _delete_jobs(chunk, counts, batch)
        if len(root_ids) < batch:
            break


def _count_jobs(job_ids: list[int], log_cutoff, counts: dict[str, int]) -> None:
    """What deleting these jobs would delete, beyond what the log pass already counted."""
    attempts = Attempt.objects.filter(job_id__in=job_ids)
    lines = LogChunk.objects.filter(attempt__in=attempts)
    allocations = Allocation.objects.filter(attempt__in=attempts)
    if log_cutoff is not None:
        lines = lines.filter(attempt__ended_at__gte=log_cutoff)
        allocations = allocations.filter(released__gte=log_cutoff)
    counts["jobs"] += len(job_ids)
    counts["attempts"] += attempts.count()
    counts["events"] += JobEvent.objects.filter(job_id__in=job_ids).count()
    counts["log_lines"] += lines.count()
    counts["allocations"] += allocations.count()


def _delete_jobs(job_ids: list[int], counts: dict[str, int], batch: int) -> None:
    # Their log lines first, in batches of their own: an attempt may have millions.
    counts["log_lines"] += _delete(
        LogChunk.objects.filter(attempt__job_id__in=job_ids), dry_run=False, batch=batch
    )
    pks = [str(pk) for pk in job_ids]
    job_type = ContentType.objects.get_for_model(Job)
    with transaction.atomic():
        # Events first: the attempts' delete would otherwise null their attempt column.
        counts["events"] += JobEvent.objects.filter(job_id__in=job_ids).delete()[0]
        _, by_model = Job.objects.filter(pk__in=job_ids).delete()
        for label, n in by_model.items():
            if label in LABELS:
                counts[LABELS[label]] += n
        # Guardian's grants name the job by a text key, not a foreign key.
        for grants in (UserObjectPermission, GroupObjectPermission):
            grants.objects.filter(content_type=job_type, object_pk__in=pks).delete()
