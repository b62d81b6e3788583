"""Changes to a job after its submission: its dependencies, holds and releases, a requeue,
its priority, a batch's limit on its shards running at once, a training gang's fewest
workers, and its labels."""

from dataclasses import dataclass

from django.db import transaction
from django.db.models import Case, F, Q, Value, When
from django.utils import timezone
from rest_framework.exceptions import ValidationError

from jobs import dependencies, retrying, states
from jobs.actions.lifecycle import (
    from_now_or_not_before,
    held_fields,
    kick,
    lock_live,
    stop_attempts,
    write_events,
)
from jobs.cli.client import CONSTRAINTS, NOTICES, where
from jobs.cli.written import exit_codes_said
from jobs.clock import database_now
from jobs.efficiency import limit_said
from jobs.fields import MAX_LABELS, deadline_problem
from jobs.models import Attempt, Job
from jobs.serializers import (
    BATCH_TIME_LIMIT,
    REQUEST,
    RETRIES_EVERY_CODE,
    exclusive_problem,
    first_type_problem,
    mail_problem,
    min_workers_problem,
    nodes_problem,
    request_problem,
)
from jobs.states import State
from quotas.models import Tenant


class DependenciesRefused(Exception):
    """A change of dependencies the job does not allow (a conflict): a shard, or a job that
    has left the queue."""


@retrying.atomic
def set_dependencies(job: Job, waits: list[dependencies.Wait], singleton: bool, by: str) -> int:
    """Replace a queued job's dependencies (Slurm's `scontrol update dependency=`): `waits`
    (dependencies.Wait, as submit takes them: jobs of its tenant the caller may see, no shard
    but a batch's first, each named once) and whether it is a singleton. A batch (its first
    shard) changes for all its shards, while every one of them is queued. Records an event
    from and to queued on each; returns how many jobs changed.

    Locks as dependencies.lock_change says: the tenant, the job's rows, then the jobs waited
    for. Raises DependenciesRefused for a shard or a job that has left the queue; the
    serializer's ValidationError for what submit refuses and for a dependency on itself or a
    cycle (dependencies.check_change). Nothing is written then."""
    if job.parent_id is not None:
        raise DependenciesRefused(
            f"Job #{job.pk} is shard {job.shard_index} of batch #{job.parent_id}: change the "
            f"batch's dependencies, #{job.parent_id}."
        )
    shards, locked = dependencies.lock_change(job, waits)
    if left := sorted(pk for pk, state in shards.items() if state != State.QUEUED):
        what = f"shard #{left[0]} of batch #{job.pk}" if job.is_batch else f"job #{job.pk}"
        raise DependenciesRefused(
            f"Only a queued job's dependencies change: {what} is {shards[left[0]]}."
        )
    dependencies.check_change(job, waits, singleton, locked)
    dependencies.replace(job, waits, singleton)
    recheck_eligible(list(shards))
    reason = f"dependencies {dependencies.written(waits, singleton)}, set by {by}"
    _note(dict.fromkeys(shards, (job.tenant_id, "")), list(shards), reason)
    transaction.on_commit(kick)
    return len(shards)


class HoldRefused(Exception):
    """A hold or a release the job's state does not allow (a conflict)."""


class AdminHold(HoldRefused):
    """A platform admin's hold, which someone else asked to release."""


@retrying.atomic
def hold(job: Job, by: str, *, admin: bool = False) -> int:
    """Keep a queued job from being placed until it is released (Slurm's hold); for a batch
    (its first shard), every shard still queued. A platform admin's hold (`admin`) only a
    platform admin releases, and a team's hold never replaces it. A held job that had evicted
    work for itself gives up its claim on the room. Returns how many jobs it held.

    Raises HoldRefused when nothing of the job is queued."""
    shards = _queued_shards(job)
    if not shards:
        raise HoldRefused(f"Only a queued job can be held: job #{job.pk} is not queued.")
    kind = Job.Hold.ADMIN if admin else Job.Hold.USER
    ids = [pk for pk, (_, held) in shards.items() if held != Job.Hold.ADMIN or admin]
    who = f"a platform admin ({by}): only a platform admin releases it" if admin else by
    Job.objects.filter(pk__in=ids).update(**held_fields(kind, f"Held by {who}."))
    _note(shards, ids, f"held by {by}")
    return len(ids)


@retrying.atomic
def hold_disallowed_images(tenant, by: str, *, admin: bool = True) -> int:
    """Hold, as a platform admin's hold, the tenant's queued jobs whose image its allowed
    images no longer let through (they were checked when submitted): once its patterns are
    narrowed, a queued job starts no image the team may no longer run. Only a platform admin
    releases one; its team may cancel it, or resubmit it with an allowed image. Jobs already
    held by a platform admin are left as they are. ``by``: the platform admin who narrowed
    them, or, not ``admin``, who found them narrowed (the scheduler, where they were changed
    outside the admin). Returns how many jobs it held.

    The jobs are locked in id order, as cancel() locks them: the scheduler's commit skips a
    job being held, and one it has placed already is no longer queued here."""
    queued = Job.objects.filter(tenant=tenant, state=State.QUEUED).exclude(held=Job.Hold.ADMIN)
    images = set(queued.order_by().values_list("image", flat=True).distinct())
    refused = sorted(image for image in images if tenant.image_refusal(image))
    if not refused:
        return 0
    rows = queued.filter(image__in=refused).select_for_update().order_by("id")
    shards = {pk: (tenant_id, held) for pk, tenant_id, held in
              rows.values_list("id", "tenant_id", "held")}  # fmt: skip
    if not shards:
        return 0
    who = f"a platform admin ({by})" if admin else by
    message = (
        f"Held by {who}: its image is no longer among its team's allowed images. Only a "
        "platform admin releases it; resubmit it with an allowed image."
    )
    Job.objects.filter(pk__in=shards).update(**held_fields(Job.Hold.ADMIN, message))
    _note(shards, list(shards), f"held by {by}: its image is no longer allowed")
    return len(shards)


@retrying.atomic
def release_hold(job: Job, by: str, *, admin: bool = False) -> int:
    """Let a held job (a batch: its held shards) be placed again, from the next cycle; a
    platform admin's holds only by a platform admin (`admin`): anyone else releases the
    team's. Returns how many jobs it released.

    Raises HoldRefused when none is held, AdminHold when only a platform admin's hold is."""
    held = {pk: row for pk, row in _queued_shards(job).items() if row[1]}
    if not held:
        raise HoldRefused(f"Job #{job.pk} is not held.")
    shards = {pk: row for pk, row in held.items() if may_release(row[1], admin=admin)}
    if not shards:
        raise AdminHold(
            f"Job #{job.pk} is held by a platform admin: only a platform admin releases it."
        )
    Job.objects.filter(pk__in=shards).update(held="", pending_reason="", pending_message="")
    recheck_eligible(list(shards))
    _note(shards, list(shards), f"released by {by}")
    transaction.on_commit(kick)
    return len(shards)


class RequeueRefused(Exception):
    """A requeue of a job with nothing running that is not stopping already (a conflict)."""


@retrying.atomic
def requeue(job: Job, by: str, *, hold: bool = False, admin: bool = False, now=None) -> int:
    """Stop a scheduled or running job (a batch, its first shard: every such shard) as a
    preemption stops it, with its grace period to checkpoint, and queue it again without
    using a retry (Slurm's `scontrol requeue`); with `hold`, held once queued until it is
    released (`scontrol requeuehold`; a platform admin's hold (`admin`) only a platform admin
    releases). It keeps its eligibility: its wait is counted as a preempted job's. Returns how
    many jobs it asked to stop.

    The jobs and then their attempts are locked as cancel() locks them (lock_live), so a
    cancel or an attempt's end racing the requeue waits for it. Raises RequeueRefused when
    none of the job runs, or all of it has been asked to stop already."""
    now = now or database_now()  # the scheduler reads the stop request's time on this clock
    live = Attempt.objects.filter(job__in=job.batch(), outcome="", stop_requested_at=None)
    lock_live(live)
    ids = list(live.values_list("job_id", flat=True))
    if not ids:
        raise RequeueRefused(
            f"Only a scheduled or running job can be requeued: job #{job.pk} has nothing "
            "running that is not being stopped already."
        )
    if hold:
        Job.objects.filter(pk__in=ids).update(held=Job.Hold.ADMIN if admin else Job.Hold.USER)
    message = f"requeued by {by}" + (", held" if hold else "")
    return stop_attempts(Attempt.objects.filter(job_id__in=ids), Attempt.Outcome.PREEMPTED,
                         message, now, cause=Attempt.StopCause.REQUEUE)  # fmt: skip


class NotQueued(Exception):
    """A change only a queued job takes, asked of a job with nothing queued (a conflict)."""


@retrying.atomic
def reprioritize(job: Job, by: str, priority_class=None, priority: int | None = None) -> int:
    """Set a queued job's priority class, its priority within the class, or both (Slurm's
    `scontrol update priority=`, Armada's reprioritize); for a batch (its first shard), every
    shard still queued. From the next cycle it is ordered, and may preempt, as the class it is
    in then; what it started with stays. Returns how many jobs it changed.

    Raises NotQueued when nothing of the job is queued."""
    shards = _queued_shards(job)
    if not shards:
        raise NotQueued(f"Only a queued job changes priority: job #{job.pk} is not queued.")
    fields: dict = {}
    if priority_class is not None:
        fields["priority_class"] = priority_class
    if priority is not None:
        fields["priority"] = priority
    Job.objects.filter(pk__in=shards).update(**fields)
    first = Job.objects.select_related("priority_class").get(pk=min(shards))
    _note(shards, list(shards),
          f"priority set to {first.priority_class.name} {first.priority:+d} by {by}")  # fmt: skip
    transaction.on_commit(kick)
    return len(shards)


@retrying.atomic
def set_runtime_limit(job: Job, seconds: int, by: str) -> int:
    """Set a job's runtime limit (Slurm's `scontrol update TimeLimit=`): a queued job's to any
    its class and deadline allow; a placed one's (scheduled or running) only lower, as Slurm
    lets a user lower a running job's. For a batch (its first shard), every shard still
    queued and, for a lower limit, every placed shard whose limit is higher. From the next
    cycle it is ordered, placed and backfilled by it (a shorter limit is a smaller job, and
    fits before a reservation or a window sooner; a running job's ends sooner). A running
    job's agent lowers its workers' limit, counted from their launch as the one they started
    with, at its next heartbeat: one that has run that long stops then, timed out, with its
    stop grace to checkpoint. Records an event on each job and wakes the scheduler; returns
    how many jobs it changed.

    Raises the serializer's ValidationError, on max_runtime_s, for a limit its priority class
    does not allow, or past which its deadline could not be met; NotQueued when no job of it
    takes the limit: a higher one asked of a job placed, or a job that has ended."""
    if too_long := job.priority_class.runtime_refusal(seconds):
        raise ValidationError({"max_runtime_s": [too_long]})
    begin = job.begin if job.begin and job.begin > timezone.now() else None
    if late := deadline_problem({"deadline": job.deadline, "begin": begin,
                                 "max_runtime_s": seconds}):  # fmt: skip
        raise ValidationError({"max_runtime_s": [late]})
    live = _live_shards(job)
    changed = {
        pk: (tenant, state)
        for pk, (tenant, state, limit) in live.items()
        if state == State.QUEUED or seconds < limit
    }
    if not changed:
        if not live:
            raise NotQueued(f"Job #{job.pk} has ended: its runtime limit no longer changes.")
        limit = min(limit for _, _, limit in live.values())
        raise NotQueued(
            f"A placed job's runtime limit can only be lowered: job #{job.pk} runs under "
            f"{limit_said(limit)}."
        )
    Job.objects.filter(pk__in=changed).update(max_runtime_s=seconds)
    reason = f"runtime limit set to {limit_said(seconds)} by {by}"
    now = timezone.now()
    for state in sorted({state for _, state in changed.values()}):
        jobs = {pk: (tenant, was) for pk, (tenant, was) in changed.items() if was == state}
        write_events(jobs, state, dict.fromkeys(jobs, reason), {}, now)
    transaction.on_commit(kick)
    return len(changed)


@retrying.atomic
def change_request(job: Job, asked: dict, by: str) -> int:
    """Set what each worker of a queued job asks for, any of cpu_milli, memory_mb, gpus and
    gpu_milli in `asked`, the others kept (Slurm's `scontrol update` of a pending job's
    NumCPUs, MinMemoryNode and Gres); for a batch (its first shard), every shard still
    queued. It keeps its place: its submit time, and so its wait's aging, stay. From the next
    cycle it is placed, counted against quotas and ordered by its size as it asks now; a job
    placed keeps what it started with. One that had evicted work for itself gives up its
    claim on that room, which was made for what it asked before. Records an event on each
    job and wakes the scheduler; returns how many jobs it changed.

    Raises the serializer's ValidationError, on the field at fault, for a request a job of
    its family may not make; NotQueued when nothing of the job is queued."""
    wanted = {name: asked.get(name, getattr(job, name)) for name in REQUEST}
    if problem := request_problem(job.family, wanted):
        raise ValidationError({field: [message] for field, message in problem.items()})
    if job.exclusive and (problem := exclusive_problem(wanted)):
        raise ValidationError({"gpu_milli" if wanted["gpu_milli"] else "gpus": [problem]})
    shards = _queued_shards(job)
    if not shards:
        raise NotQueued(
            f"Only a queued job's request changes: job #{job.pk} is not queued (a job placed "
            "keeps what it started with)."
        )
    Job.objects.filter(pk__in=shards).update(**wanted, preempting_until=None)
    gpus = f"{wanted['gpus']} GPUs" if not wanted["gpu_milli"] else f"{wanted['gpu_milli']}m GPU"
    said = f"{wanted['cpu_milli']}m CPU, {wanted['memory_mb']} MiB, {gpus}"
    _note(shards, list(shards), f"request per worker set to {said} by {by}")
    transaction.on_commit(kick)
    return len(shards)


@retrying.atomic
def change_constraints(job: Job, asked: dict, by: str) -> int:
    """Set where a queued job may run, any of gpu_types (most preferred first), cluster_selector,
    exclude_nodes, only_nodes, features, first_type_wait_s and exclusive in `asked`, the others
    kept (Slurm's `scontrol update` of a pending job's Features, Partition and ExcNodeList); for a
    batch (its first shard), every shard still queued. It keeps its place; from the next cycle it
    is placed on the GPU types, clusters and nodes it takes now; a job placed keeps where it runs.
    One that had evicted work for itself gives up its claim on that room, which may no longer be
    where it runs. Records an event on each job and wakes the scheduler; returns how many jobs it
    changed.

    Raises NotQueued when nothing of the job is queued; the serializer's ValidationError, on
    first_type_wait_s, for a wait for the first of fewer than two GPU types, on only_nodes, for
    a node it both excludes and runs on alone (``serializers.nodes_problem``), on exclusive, for
    a tenant that may not take nodes whole (``Tenant.exclusive_allowed``) or a request no node
    could hold whole (``serializers.exclusive_problem``)."""
    shards = _queued_shards(job)
    if not shards:
        raise NotQueued(
            f"Only a queued job's GPU types and clusters change: job #{job.pk} is not queued "
            "(a job placed keeps where it runs)."
        )
    wanted = {name: asked.get(name, getattr(job, name)) for name in CONSTRAINTS}
    asks_gpus = {"gpus": job.gpus, "gpu_milli": job.gpu_milli}
    if wanted["first_type_wait_s"] and (problem := first_type_problem({**wanted, **asks_gpus})):
        if "first_type_wait_s" not in asked:  # the wait it has, kept
            problem += " It keeps the wait it has: give first_type_wait_s null to drop it."
        raise ValidationError({"first_type_wait_s": [problem]})
    if problem := nodes_problem(wanted["only_nodes"], wanted["exclude_nodes"]):
        raise ValidationError({"only_nodes": [problem]})
    if wanted["exclusive"] and (refused := job.tenant.exclusive_refusal()):
        if "exclusive" not in asked:  # exclusive as it was, kept
            refused += " It is exclusive: give exclusive false to make it shared."
        raise ValidationError({"exclusive": [refused]})
    if wanted["exclusive"] and (problem := exclusive_problem(asks_gpus)):
        raise ValidationError({"exclusive": [problem]})
    Job.objects.filter(pk__in=shards).update(**wanted, preempting_until=None)
    said = where(*(wanted[name] for name in CONSTRAINTS))
    _note(shards, list(shards), f"may run on {said} by {by}")
    transaction.on_commit(kick)
    return len(shards)


class ShardLimitRefused(Exception):
    """A change of a batch's limit on its shards running at once that the job does not allow
    (a conflict): a shard other than the batch's first, or a batch that has ended."""


@retrying.atomic
def set_shard_limit(job: Job, limit: int | None, by: str) -> int:
    """Let at most `limit` of a batch's shards run at once from the next cycle (Slurm's
    array throttle, `scontrol update ArrayTaskThrottle=`), None for no limit: one UPDATE of
    every shard row of the batch (its first shard), while any of them lives. A lower limit
    stops no running shard: the batch starts no more until fewer run. Records an event on the
    batch's first shard and wakes the scheduler; returns how many shards it changed.

    Raises ShardLimitRefused for a shard other than the batch's first, or a batch that has
    ended; the serializer's ValidationError, on max_running_shards, for a job of no batch."""
    if job.parent_id is not None:
        raise ShardLimitRefused(not_first_shard(job, "limit"))
    if not job.is_batch:
        raise ValidationError({"max_running_shards": [
            f"Job #{job.pk} is not a batch: only a batch limits how many of its shards run at "
            "once."
        ]})  # fmt: skip
    # Its rows in id order, as cancel() locks them: a cancel racing the change waits for it.
    shards = dict(job.batch().select_for_update().values_list("id", "state"))
    if all(state in states.TERMINAL for state in shards.values()):
        raise ShardLimitRefused(f"Batch #{job.pk} has ended: no shard of it is left to run.")
    changed = job.batch().update(max_running_shards=limit)
    said = "no limit" if limit is None else f"at most {limit}"
    reason = f"shards running at once: {said}, set by {by}"
    first = {job.pk: (job.tenant_id, shards[job.pk])}
    write_events(first, shards[job.pk], {job.pk: reason}, {}, timezone.now())
    transaction.on_commit(kick)
    return changed


class MinWorkersRefused(Exception):
    """A change of a training gang's fewest workers asked of a job that is not queued (a
    conflict): a gang placed keeps the size it started with."""


@retrying.atomic
def set_min_workers(job: Job, min_workers: int | None, by: str) -> None:
    """Let a queued training gang start with as few as `min_workers` of its workers when all
    of them do not fit (elastic), or, None, only with all of them (rigid), from the next
    cycle (Slurm's `scontrol update NumNodes=MIN-MAX` for a pending job). It keeps its place
    in the queue. Equal to its workers is rigid, stored as None, as at submit. Records an
    event from and to queued and wakes the scheduler.

    Raises the serializer's ValidationError, on min_workers, for what submit refuses (a job
    that is not training, fewer than 1, more than its workers); MinWorkersRefused when the
    job is not queued. Its row is locked, as reprioritize locks it: the scheduler's commit
    of a placement waits for the change, or the change sees the job placed."""
    asked = {"family": job.family, "workers": job.workers, "min_workers": min_workers}
    if problem := min_workers_problem(asked):  # family and workers never change
        raise ValidationError({"min_workers": [problem]})
    state = Job.objects.select_for_update().values_list("state", flat=True).get(pk=job.pk)
    if state != State.QUEUED:
        raise MinWorkersRefused(
            f"Only a queued job's fewest workers change: job #{job.pk} is {state}."
        )
    least = None if min_workers == job.workers else min_workers
    Job.objects.filter(pk=job.pk).update(min_workers=least)
    said = f"at least {least}" if least else f"none (all {job.workers} together)"
    _note({job.pk: (job.tenant_id, "")}, [job.pk], f"min workers: {said}, set by {by}")
    transaction.on_commit(kick)


class RelabelRefused(Exception):
    """A change of labels asked of a batch's shard other than its first (a conflict)."""


@retrying.atomic
def relabel(job: Job, labels: dict[str, str], remove: list[str], by: str) -> tuple[dict, int]:
    """Set `labels` on a job and drop the keys in `remove` (`kubectl label`; a batch, through
    its first shard: every shard, which all carry its labels), whatever its state: they are the
    submitter's own, which the scheduler does not read; usage reports split by a label read
    them as they are now. Its rows are locked in id order, as cancel() locks them, and
    written by one UPDATE; an event on the job (a batch: its first shard) says what changed,
    and who changed it. Returns the labels and how many jobs carry them.

    Raises RelabelRefused for a shard other than a batch's first; the serializer's
    ValidationError, on labels, when the job would carry more than MAX_LABELS."""
    if job.parent_id is not None:
        raise RelabelRefused(not_first_shard(job, "labels"))
    rows = job.batch().select_for_update().order_by("id")
    current, state = {pk: (labels, state) for pk, labels, state
                      in rows.values_list("id", "labels", "state")}[job.pk]  # fmt: skip
    kept = {key: value for key, value in {**current, **labels}.items() if key not in remove}
    if len(kept) > MAX_LABELS:
        raise ValidationError({"labels": [
            f"Job #{job.pk} would carry {len(kept)} labels: at most {MAX_LABELS}."
        ]})  # fmt: skip
    changed = job.batch().update(labels=kept)
    said = [", ".join(f"{key}={value}" for key, value in labels.items()),
            "removed " + ", ".join(remove) if remove else ""]  # fmt: skip
    reason = f"labels changed by {by}: " + "; ".join(part for part in said if part)
    write_events({job.pk: (job.tenant_id, state)}, state, {job.pk: reason}, {}, timezone.now())
    return kept, changed


def not_first_shard(job: Job, what: str) -> str:
    """Why a change of a batch's `what` asked of one of its shards other than its first is
    refused, for people."""
    return (
        f"Job #{job.pk} is shard {job.shard_index} of batch #{job.parent_id}: change the "
        f"batch's {what}, #{job.parent_id}."
    )


# What a job may ask to be told of beyond its end, and whether by email, as its events say it.
TOLD = {**NOTICES, "notify_email": "email to its submitter"}


class LiveChangeRefused(Exception):
    """A change of a job while it has not ended (what it is told of, what it retries) that it
    does not allow (a conflict): a shard other than its batch's first, or a job that has
    ended."""


def _live_batch(job: Job, what: str, ended: str) -> dict[int, str]:
    """The states of the job's batch (a job of one shard: the job), its rows locked in id order
    as cancel() locks them, for a change of its `what`; LiveChangeRefused, saying `ended`, once
    every one has ended."""
    if job.parent_id is not None:
        raise LiveChangeRefused(not_first_shard(job, what))
    rows = dict(job.batch().select_for_update().order_by("id").values_list("id", "state"))
    if all(state in states.TERMINAL for state in rows.values()):
        raise LiveChangeRefused(f"Job #{job.pk} has ended: {ended}")
    return rows


@retrying.atomic
def set_notifications(job: Job, asked: dict[str, bool], by: str) -> int:
    """Set what a job's team's webhook is told of it and whether its submitter is emailed
    (any of TOLD in `asked`, the others kept), as Slurm's `scontrol update MailType=
    MailUser=`, while it has not ended; a batch, through its first shard: every shard. From
    then on its notifications go as they say: a start already told is not told again, a run
    past 90 % of its runtime limit is warned by the next check. Its rows are locked in id
    order, as cancel() locks them; an event on the job says what changed and who changed it.
    Returns how many jobs it changed.

    Raises LiveChangeRefused for a shard other than a batch's first, or a job that has ended; the
    serializer's ValidationError, on notify_time_limit for a batch of several shards, and on
    notify_email when its submitter cannot be emailed."""
    rows = _live_batch(job, "notifications", "nothing more is told of it.")
    if asked.get("notify_time_limit") and job.is_batch:
        raise ValidationError({"notify_time_limit": [BATCH_TIME_LIMIT]})
    if asked.get("notify_email") and (problem := mail_problem(job.owner, "Its submitter's")):
        raise ValidationError({"notify_email": [problem]})
    changed = job.batch().update(**asked)
    said = ", ".join(f"{TOLD[name]} {'on' if on else 'off'}" for name, on in asked.items())
    reason = f"notifications changed by {by}: {said}"
    write_events({job.pk: (job.tenant_id, rows[job.pk])}, rows[job.pk], {job.pk: reason}, {},
                 timezone.now())  # fmt: skip
    return changed


@retrying.atomic
def set_retries(job: Job, asked: dict, by: str) -> int:
    """Set what a job retries (any of max_retries, retry_user_errors and retry_exit_codes in
    `asked`, the others kept) while it has not ended; a batch, through its first shard: every
    shard that has not ended (each retries itself). Its next failure follows them: a run
    already failing is judged by them when its attempt ends, and fewer retries than it has used
    fails it at its next failure. An event on the job says what changed and who changed it.
    Returns how many jobs it changed.

    Raises LiveChangeRefused for a shard other than a batch's first, or a job that has ended;
    the serializer's ValidationError, on retry_exit_codes, for codes beside retry_user_errors
    (which retries every code)."""
    rows = _live_batch(job, "retries", "it retries nothing more.")
    job.refresh_from_db(fields=["retry_user_errors", "retry_exit_codes"])  # as locked
    user_errors = asked.get("retry_user_errors", job.retry_user_errors)
    codes = asked.get("retry_exit_codes", job.retry_exit_codes)
    if user_errors and codes:
        kept = "" if "retry_exit_codes" in asked else " It keeps its exit codes: give [] too."
        raise ValidationError({"retry_exit_codes": [RETRIES_EVERY_CODE + kept]})
    live = [pk for pk, state in rows.items() if state not in states.TERMINAL]
    changed = Job.objects.filter(pk__in=live).update(**asked)
    said = ", ".join(retries_said(name, value) for name, value in asked.items())
    reason = f"retries changed by {by}: {said}"
    write_events({job.pk: (job.tenant_id, rows[job.pk])}, rows[job.pk], {job.pk: reason}, {},
                 timezone.now())  # fmt: skip
    return changed


def retries_said(name: str, value) -> str:
    """One retry setting as the job's events say it."""
    if name == "max_retries":
        return f"at most {value}"
    if name == "retry_user_errors":
        return f"its own failures {'retried' if value else 'not retried'}"
    return f"exit codes {exit_codes_said(value)}" if value else "no exit code"


def may_release(held: str, *, admin: bool) -> bool:
    """Whether a hold of this kind (`Job.held`) is one the asker may release: a team's hold by
    whoever may cancel the job, a platform admin's only by a platform admin (`admin`)."""
    return bool(held) and (admin or held != Job.Hold.ADMIN)


def hold_verb(job: Job, *, admin: bool) -> str:
    """The hold verb open to someone who may cancel the job: `release` if they may release a
    hold of it (a batch: of a queued shard), else `hold` if some of it is queued and not held,
    else "" (nothing of it is queued, or a platform admin holds it all)."""
    holds = set(job.batch().filter(state=State.QUEUED).values_list("held", flat=True))
    if any(may_release(held, admin=admin) for held in holds):
        return "release"
    return "hold" if "" in holds else ""


def _live_shards(job: Job) -> dict[int, tuple[int, str, int]]:
    """The job's live jobs (a batch: its live shards), {id: (tenant id, state, runtime
    limit)}, locked in id order, as cancel() locks them."""
    rows = job.batch().exclude(state__in=states.TERMINAL).select_for_update()
    fields = ("id", "tenant_id", "state", "max_runtime_s")
    return {pk: (tenant, state, limit) for pk, tenant, state, limit in rows.values_list(*fields)}


def _queued_shards(job: Job) -> dict[int, tuple[int, str]]:
    """The job's queued jobs (a batch: its queued shards), {id: (tenant id, hold)}, locked in
    id order, as cancel() locks them: the scheduler's commit skips a job being held."""
    rows = job.batch().filter(state=State.QUEUED).select_for_update()
    return {pk: (tenant, held) for pk, tenant, held in rows.values_list("id", "tenant_id", "held")}


@retrying.atomic
def pause_placements(tenant: Tenant, reason: str) -> bool:
    """Pause a tenant's placements, saying why (`reason`), or resume them (""), as a platform
    admin's save in the admin does (Kueue's ClusterQueue stopPolicy Hold): its row locked
    first, as the commit locks it before the jobs it places; then pause_changed. Returns
    whether it changed (paused again with another reason: the reason)."""
    locked = Tenant.objects.select_for_update().get(pk=tenant.pk)
    if locked.placements_paused == reason:
        return False
    locked.placements_paused = tenant.placements_paused = reason
    locked.save(update_fields=["placements_paused"])
    pause_changed(locked)
    return True


@dataclass(frozen=True)
class SettingsFollowed:
    """What a platform admin's change of a tenant's settings did to its queued jobs."""

    held: int = 0  # held for an image its allowed images no longer let through
    waiting_whole: int = 0  # exclusive, waiting now that it may no longer take nodes whole


def settings_changed(tenant, changed, by: str) -> SettingsFollowed:
    """Follow a platform admin's change of the tenant's fields `changed` (saved, in the admin
    or from a teams file) through its queued jobs: a pause or its lift restamps their
    eligibility (`pause_changed`), narrowed images hold those of other images
    (`hold_disallowed_images`, as `by`'s hold), and exclusive jobs are counted once it may no
    longer take nodes whole (the cycle sets them aside)."""
    if "placements_paused" in changed:
        pause_changed(tenant)
    held = hold_disallowed_images(tenant, by) if "allowed_images" in changed else 0
    waiting = 0
    if "exclusive_allowed" in changed and not tenant.exclusive_allowed:
        waiting = tenant.jobs.filter(state=State.QUEUED, exclusive=True).count()
    return SettingsFollowed(held, waiting)


@retrying.atomic
def pause_changed(tenant) -> int:
    """A platform admin paused or resumed a tenant's placements (`Tenant.placements_paused`):
    its queued jobs not started are not eligible while it is paused, so their queue wait
    stops, as a hold stops it, and are again from now, or from their `not_before`, once it is
    lifted (recheck_eligible). Their rows locked in id order, as cancel() locks them; returns
    how many it read."""
    rows = (
        Job.objects.select_for_update()
        .filter(tenant=tenant, state=State.QUEUED, started_at=None)
        .order_by("id")
    )
    ids = list(rows.values_list("id", flat=True))
    if tenant.placements_paused:
        Job.objects.filter(pk__in=ids).update(eligible_at=None)
    else:
        recheck_eligible(ids)
    transaction.on_commit(kick)
    return len(ids)


def recheck_eligible(job_ids: list[int]) -> None:
    """Whether these queued jobs, whose rows the caller holds, are free to run, once a hold
    was released or their dependencies changed. One that must wait (held, a dependency not
    met, an earlier job of a singleton's group live) is not eligible; one free to run that was
    not is eligible from now, or from its `not_before` (its begin, or the end of its retry's
    backoff) if that is later; one that was stays so. One UPDATE; a job that has started keeps
    its eligibility."""
    waits = ~Q(held="") | dependencies.waits()
    Job.objects.filter(pk__in=job_ids, started_at=None).update(
        eligible_at=Case(
            When(waits, then=Value(None)),
            When(eligible_at=None, then=from_now_or_not_before()),
            default=F("eligible_at"),
        )
    )


def _note(shards: dict[int, tuple[int, str]], ids: list[int], reason: str) -> None:
    """One event per job, from and to queued: a hold, a release or a change of priority is in
    its history and on its page."""
    queued = {pk: (shards[pk][0], State.QUEUED) for pk in ids}
    write_events(queued, State.QUEUED, dict.fromkeys(ids, reason), {}, timezone.now())
