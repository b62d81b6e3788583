"""Submissions: a job or a batch queued, with its limits checked, and an ended job run again
(whole, or some of a batch's shards)."""

from django.db import IntegrityError, transaction
from django.db.models import DateTimeField, Q, Value
from django.db.models.functions import Greatest, Now
from rest_framework.exceptions import ValidationError

from jobs import access, dependencies, events, retrying, states
from jobs.action_serializers import UNSUCCEEDED
from jobs.actions.lifecycle import kick
from jobs.models import Dependency, Job, JobEvent
from jobs.serializers import SubmitSerializer, existing_nodes, submission_of
from jobs.states import State
from mlsched_site import turns
from quotas import tenant_secrets, tenant_volumes
from quotas.models import Tenant


def keyed_job(tenant, key: str | None) -> Job | None:
    """The tenant's job submitted with this idempotency key, if there is one."""
    return Job.objects.filter(tenant=tenant, idempotency_key=key).first() if key else None


@retrying.atomic
def submit(owner, tenant, spec: dict) -> tuple[Job, bool]:
    """Queue a job for `tenant`; return (job, created).

    A batch inference job of M shards becomes M jobs, one per shard, so each is placed, retried
    and preempted on its own; shard 0 is returned and the others point to it as their parent.
    With `shard_indexes` (a rerun of some of a batch's shards: resubmit), one job per index
    instead, each keeping its index among the M, the first of them returned.
    With an idempotency key already used in the tenant, the existing job comes back and nothing
    is written: a client that retries a submission gets one job.

    `depends_on` (dependencies.Wait: job ids the caller has checked, jobs of the tenant, no
    shard but a batch's first, each with its kind) is held by the first job;
    dependencies.hold says what is refused, and when.

    A job with nothing to wait for is eligible from its submission (`eligible_at`, written
    by the same INSERT as `created`, so the two are equal), or from its `begin` if that is
    later; one with dependencies or a singleton from the first cycle that finds it free to run
    (stamp_eligible), which is never before its begin.

    A `begin` (Slurm's --begin; every shard of a batch has it) is kept as asked and copied to
    `not_before`, which the snapshot and the commit's claim read as they read a retry's
    backoff: the job is queued but not placed before it. A retry moves `not_before` on, and
    only comes after a placement, so past the begin. A `deadline` (Slurm's --deadline) is kept
    on every shard as well: the janitor cancels a queued job that could no longer end by it. So
    is a batch's `max_running_shards` (Slurm's --array=...%N), which the placement core reads
    off each queued shard.
    """
    spec = dict(spec)
    depends_on = spec.pop("depends_on", [])
    indexes = spec.pop("shard_indexes", None) or range(spec.get("shards", 1))
    key = spec.get("idempotency_key")
    if existing := keyed_job(tenant, key):
        return existing, False
    dependencies.take_turn(tenant.pk, owner.pk, spec["name"])  # ids follow commits: singleton
    try:
        check_queue_room(tenant, len(indexes))
    except ValidationError:
        if existing := keyed_job(tenant, key):  # a twin of this submission took the room first
            return existing, False
        raise
    dependencies.hold(depends_on)
    check_secrets(tenant, spec.get("secrets", []))
    check_volumes(tenant, spec.get("volumes", []))
    free = not (depends_on or spec.get("singleton"))
    if (begin := spec.get("begin")) is not None:
        spec["not_before"] = begin
    spec["eligible_at"] = eligible_from(begin) if free else None
    try:
        # In a savepoint: a concurrent submission with the same key may have inserted since the
        # check above. The unique constraint then refuses this row, and that job is the answer,
        # as it would be for a retry that came second.
        with transaction.atomic():
            first = Job.objects.create(
                tenant=tenant, owner=owner, **{**spec, "shard_index": indexes[0]}
            )
    except IntegrityError:
        if existing := keyed_job(tenant, key):
            return existing, False
        raise
    jobs = [first]
    if len(indexes) > 1:
        rest = {**spec, "idempotency_key": None, "parent": first}
        jobs += Job.objects.bulk_create(
            Job(tenant=tenant, owner=owner, **{**rest, "shard_index": i}) for i in indexes[1:]
        )
    for job in jobs:  # what the database wrote for Now(): the statement's time, as `created`
        job.eligible_at = max(job.created, begin or job.created) if free else None
    Dependency.objects.bulk_create(
        Dependency(job=first, on_id=on, kind=kind) for on, kind in depends_on
    )
    written = JobEvent.objects.bulk_create(
        JobEvent(job=job, to_state=State.QUEUED, reason=f"submitted by {owner}") for job in jobs
    )
    events.publish_on_commit((vars(event), tenant.pk) for event in written)
    transaction.on_commit(kick)
    return first, True


def check_secrets(tenant, names: list[str]) -> None:
    """That the tenant still has the secrets the submission names, checked under the tenant's
    row lock, which a secret's deletion takes too: neither passes the other unseen (the
    serializer checked them before, unlocked)."""
    if not names:
        return
    Tenant.objects.select_for_update().get(pk=tenant.pk)
    if problem := tenant_secrets.unusable(tenant, names):
        raise ValidationError({"secrets": problem})


def check_volumes(tenant, mounts: list[dict]) -> None:
    """That the tenant still has the volumes the submission mounts, writable where it writes,
    checked under the tenant's row lock, which the admin takes to delete a volume or make it
    read only (quotas.tenant_volumes.jobs_mounting): neither passes the other unseen."""
    if not mounts:
        return
    Tenant.objects.select_for_update().get(pk=tenant.pk)
    if problem := tenant_volumes.unusable(tenant, mounts):
        raise ValidationError({"volumes": problem})


def eligible_from(begin):
    """When a job with nothing to wait for becomes eligible: at its submission (the database's
    time, as `created`), or at its begin if that is later."""
    if begin is None:
        return Now()
    return Greatest(Now(), Value(begin, output_field=DateTimeField()))


QUEUE_LOCK = 0x6D6C_7171  # advisory lock space: one key per tenant with a queue limit


def check_queue_room(tenant, shards: int) -> None:
    """Refuse, on `tenant`, a submission of `shards` jobs that would take the tenant past its
    `max_queued_jobs` (Slurm's MaxSubmitJobs): one team's flood of submissions cannot make
    every cycle of the platform decide its hundreds of thousands of jobs. The submissions of
    a tenant with a limit take turns (an advisory lock, to its commit), so two cannot both take
    the last room. Held jobs are queued; a job requeued for a retry is never refused."""
    limit = type(tenant).objects.values_list("max_queued_jobs", flat=True).get(pk=tenant.pk)
    if limit is None:
        return
    turns.take_turn(QUEUE_LOCK, tenant.pk)
    queued = Job.objects.filter(tenant=tenant, state=State.QUEUED).count()
    if queued + shards > limit:
        these = f"these {shards} jobs" if shards > 1 else "one more"
        raise ValidationError({"tenant": [
            f"{tenant.slug} has {queued} jobs queued and may have at most {limit} "
            f"(max_queued_jobs), not {these}: wait for some to start, or cancel some."
        ]})  # fmt: skip


class NotResubmittable(Exception):
    """A job that cannot run again as it stands: it has not ended, or it is one shard of a
    batch. The message says which, for people."""


def check_resubmittable(
    job: Job, shards: str | list[int] | None = None, idempotency_key: str | None = None
) -> list[int] | None:
    """Raise NotResubmittable unless the job may run again as it stands (a cheap check the
    views make before counting a submission against the rates); return the shard indexes the
    new job runs, None for a job or batch run whole.

    A batch (its first shard) comes back with the shards it has: every one of its `shards`,
    or, for a rerun of some of them, those. With `shards` (a ResubmitSerializer's: UNSUCCEEDED,
    or indexes below the batch's `shards`), only those: the ones that failed or were canceled,
    or the ones named, which must be shards it has. Those refused raise the serializer's
    ValidationError naming `shards`: a shard still live (rerunning it beside itself would run
    it twice), none left to rerun, a shard named that it does not have. One query, of the
    batch's shards: they have all ended, so no lock is needed (an ended job never moves)."""
    if job.parent_id is not None:
        raise NotResubmittable(
            f"Job #{job.pk} is a shard of batch #{job.parent_id}: resubmit the batch."
        )
    rows = list(job.batch().values_list("shard_index", "state"))
    if live := [(index, state) for index, state in rows if state not in states.TERMINAL]:
        if shards is not None:
            index, state = live[0]
            raise ValidationError({"shards": [
                f"Batch #{job.pk} still has live shards (shard {index} is {state}): rerun "
                "shards once it has ended, or cancel it first; a shard rerun while it runs "
                "would run twice."
            ]})  # fmt: skip
        what = "still has live shards" if job.is_batch else f"is still {live[0][1]}"
        raise NotResubmittable(f"Job #{job.pk} {what}: cancel it or wait for it to end.")
    if shards is None:
        return None if len(rows) == job.shards else sorted(index for index, _ in rows)
    return rerun_shards(job, rows, shards, idempotency_key)


def rerun_shards(
    job: Job, rows: list[tuple[int, str]], shards: str | list[int], idempotency_key: str | None
) -> list[int]:
    """The indexes of the batch's shards to run again: those that did not succeed
    (UNSUCCEEDED), or those named, which must be among its shards (`rows`: index, state)."""
    if shards == UNSUCCEEDED:
        chosen = sorted(index for index, state in rows if state != State.SUCCEEDED)
        if not chosen:
            raise ValidationError(
                {"shards": [f"Every shard of batch #{job.pk} succeeded: none to rerun."]}
            )
    else:
        has = {index for index, _ in rows}
        if missing := sorted(set(shards) - has):
            raise ValidationError({"shards": [
                f"Batch #{job.pk} has no shard {missing[0]}: it runs {len(has)} of the "
                f"{job.shards} shards alone (list them with ?batch={job.pk})."
            ]})  # fmt: skip
        chosen = sorted(shards)
    check_not_rerunning(job, chosen, idempotency_key)
    return chosen


def check_not_rerunning(job: Job, chosen: list[int], idempotency_key: str | None) -> None:
    """Refuse (on `shards`) a rerun of shards an earlier rerun of this batch still runs: they
    would run twice at once; not the rerun a repeated request (its `idempotency_key`) answers.
    resubmit asks it under a lock of the batch's first job, so of two reruns sent at the same
    instant the second asks once the first has committed its shards."""
    rerunning = Job.objects.filter(resubmitted_from=job, shard_index__in=chosen)  # every row
    if idempotency_key:
        first = Job.objects.filter(tenant_id=job.tenant_id, idempotency_key=idempotency_key)
        rerunning = rerunning.exclude(Q(pk__in=first.values("pk")) | Q(parent__in=first))
    again = rerunning.live().order_by("shard_index", "pk").first()
    if again is not None:
        raise ValidationError({"shards": [
            f"Shard {again.shard_index} of batch #{job.pk} runs again already, as job "
            f"#{again.pk} ({again.state}): wait for it to end, or cancel it."
        ]})  # fmt: skip


@retrying.atomic
def resubmit(
    user, job: Job, idempotency_key: str | None = None, shards: str | list[int] | None = None
) -> tuple[Job, bool]:
    """Run an ended job again: a new job of the same spec, owned by `user`, recording `job` as
    the one it was resubmitted from; (the job, whether it is new). A batch (its first shard)
    comes back as a batch of the shards it has; its other shards are resubmitted only with
    it. With `shards` (check_resubmittable), a batch of those shards alone (Slurm's
    `sbatch --array=3,17,512`): each keeps its index, and the batch's `shards` stays its
    count, so each worker is told the same MLSCHED_SHARD_INDEX and MLSCHED_SHARDS and reads
    the same part of the input. Under an `idempotency_key` already used in the tenant, that
    job comes back instead (a repeated request, a double click).

    The spec goes through a submission's own checks (SubmitSerializer) and submit(), so every
    rule applies as it does today: the user may still submit to the tenant, the priority class
    is still open to it, the tenant's queue has room for the shards. A spec they refuse raises
    the serializer's ValidationError, as does a refused `shards`.

    Resubmits of one job take turns (a lock of its row, to the commit): a rerun checks what
    earlier reruns still run once they have written it.
    """
    Job.objects.select_for_update().values_list("pk").get(pk=job.pk)
    indexes = check_resubmittable(job, shards, idempotency_key)
    data = submission_of(job)
    if idempotency_key:
        data["idempotency_key"] = idempotency_key
    # A node it excluded that no cluster has any more (renamed, removed) excludes nothing: left
    # out, not refused as a name typed wrong would be. One it ran on alone is left out while
    # another it names is there (it ran on those alone all the same), and refused once none is.
    for field in ("exclude_nodes", "only_nodes"):
        found = existing_nodes(data[field]) if data[field] else set()
        kept = [name for name in data[field] if name in found]
        if kept or field == "exclude_nodes":
            data[field] = kept
    checked = SubmitSerializer(
        data=data, tenants=access.submit_tenants(user), jobs=access.visible_jobs(user), user=user
    )
    if not checked.is_valid():
        raise ValidationError(resubmit_errors(job, checked.errors))
    spec = dict(checked.validated_data)
    if indexes is not None:
        spec["shard_indexes"] = indexes
    return submit(user, spec.pop("tenant"), {**spec, "resubmitted_from": job})


def resubmit_errors(job: Job, errors: dict) -> dict:
    """A resubmission's refusals, said for a resubmission: a deadline it keeps but can no
    longer meet cannot be changed here."""
    if "deadline" not in errors or job.deadline is None:
        return errors
    problem = " ".join(str(text) for text in errors["deadline"]).removesuffix(
        " Give a later deadline, or none."
    )
    return {**errors, "deadline": [
        f"A resubmission keeps the job's deadline, {job.deadline:%Y-%m-%d %H:%M:%S} UTC: "
        f"{problem} Submit the job again with a later deadline, or none."
    ]}  # fmt: skip
