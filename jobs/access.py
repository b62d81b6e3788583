"""Who may see and act on which jobs: tenant membership first, guardian grants for exceptions."""

import re
from collections.abc import Collection
from contextvars import ContextVar
from itertools import chain

from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import PermissionDenied
from django.db.models import Q, prefetch_related_objects
from django.shortcuts import get_object_or_404
from guardian.models import GroupObjectPermission, UserObjectPermission
from rest_framework.exceptions import ValidationError

from jobs.dependencies import Refusal
from jobs.models import Dependency, Job
from quotas.models import Membership, Tenant

SUBMITTERS = (Membership.Role.OWNER, Membership.Role.MEMBER)


def tenants_of(user):
    """The tenants the user belongs to, in any role."""
    if not user.is_authenticated:
        return Tenant.objects.none()
    return Tenant.objects.filter(memberships__user=user)


def tenant_ids(user) -> frozenset[int]:
    """The ids of the tenants the user belongs to (read once per request)."""
    return read_once(
        user, "tenants", lambda: frozenset(tenants_of(user).values_list("pk", flat=True))
    )


# What one request has read of who its user is (opened by read_once_per_request).
READ: ContextVar[dict | None] = ContextVar("access_read", default=None)


def read_once(user, key: str, read):
    """`read()`, read once per request for its user (the visibility filter, the folded list
    and the answer's reader each ask the same); outside a request (a task, a consumer, a
    script), read each time. Kept no longer than the request, so the next one sees a change of
    membership or grant."""
    kept = READ.get()
    if kept is None:
        return read()
    slot = (user.pk, key)
    if slot not in kept:
        kept[slot] = read()
    return kept[slot]


def read_once_per_request(get_response):
    """Middleware: each request its own store of what read_once has read."""

    def middleware(request):
        opened = READ.set({})
        try:
            return get_response(request)
        finally:
            READ.reset(opened)

    return middleware


def report_tenants(user):
    """The tenants whose usage the user may read: a platform admin (superuser) every tenant;
    anyone else the tenants they belong to in any role, viewers included. A tenant admin's
    tenants (quotas.models.administered_tenants) are those they own: among these."""
    if not user.is_authenticated:
        return Tenant.objects.none()
    if user.is_superuser:
        return Tenant.objects.all()
    return tenants_of(user)


def submit_tenants(user):
    """The tenants the user may submit to and cancel in (owners and members, not viewers)."""
    return tenants_of(user).filter(memberships__user=user, memberships__role__in=SUBMITTERS)


def visible_jobs(user):
    """Jobs of the user's tenants, plus single jobs shared with the user (guardian view_job)."""
    if not user.is_authenticated:
        return Job.objects.none()
    mine = tenant_ids(user)
    return Job.objects.filter(Q(tenant__in=mine) | Q(pk__in=granted(user, "view_job")))


def cancelable_jobs(user):
    """Jobs the user may cancel: their submit tenants' jobs, plus single jobs granted to them
    with guardian's cancel_job (which does not need the job to be visible to them)."""
    if not user.is_authenticated:
        return Job.objects.none()
    mine = list(submit_tenants(user).values_list("pk", flat=True))
    return Job.objects.filter(Q(tenant__in=mine) | Q(pk__in=granted(user, "cancel_job")))


def granted(user, codename: str) -> list[int]:
    """The ids of the jobs granted to the user with a guardian permission, directly or through
    a group (global permissions do not count). Like the tenants, a short list read first, so
    that a job query is an index lookup on ids the planner can see, not a subquery over every
    job on the platform."""
    return list(read_once(user, f"granted {codename}", lambda: grants(user, codename)))


def grants(user, codename: str) -> tuple[int, ...]:
    kind = ContentType.objects.get_for_model(Job)
    rows = {"permission__codename": codename, "content_type": kind}
    direct = UserObjectPermission.objects.filter(user=user, **rows)
    via_groups = GroupObjectPermission.objects.filter(group__user=user, **rows)
    ids = chain(direct.values_list("object_pk", flat=True),
                via_groups.values_list("object_pk", flat=True))  # fmt: skip
    return tuple(sorted({int(pk) for pk in ids}))


def cancel_targets(user):
    """Jobs a cancel request may name without a 404: the visible ones and the cancelable ones.

    A visible job the user may not cancel is a 403 (they know it exists); any other is a 404.
    """
    return visible_jobs(user) | cancelable_jobs(user)


def cancel_matches(user, *, ids=None, name=None, tenant=None, mine=False, state=None,
                   labels=None):  # fmt: skip
    """The live jobs a cancel of many names (Slurm's scancel filters, each narrowing the rest)
    among those the user may cancel. A batch matched through its first shard stands for all its
    shards, as a cancel of it does; `state` then keeps those of its shards in that state.

    A filter other than `ids` reads what a job is (its name, tenant, owner, labels or state), so it
    matches only jobs the user can see: a job they may cancel but not see (a cancel_job grant
    alone) is named by its id alone, or not at all. Were a filter to match it, the answer would
    tell a right guess of its name or state from a wrong one."""
    jobs = cancelable_jobs(user)
    if ids is not None:
        jobs = jobs.filter(pk__in=ids)
    if name is not None or tenant is not None or mine or state is not None or labels:
        jobs = jobs & visible_jobs(user)
    if name is not None:
        jobs = jobs.filter(name=name)
    if labels:
        jobs = jobs.labelled(list(labels.items()))
    if tenant is not None:
        jobs = jobs.filter(tenant=tenant)
    if mine:
        jobs = jobs.filter(owner=user)
    named = with_shards(jobs).live()
    return named.filter(state=state) if state is not None else named


def with_shards(jobs):
    """These jobs (a queryset) and, for each that is a batch's first shard, its other shards:
    a batch named by its first shard stands for all of them, as a cancel of it does."""
    batches = jobs.filter(parent_id=None, shards__gt=1).values("pk")
    return Job.objects.filter(Q(pk__in=jobs.values("pk")) | Q(parent_id__in=batches))


def can_cancel(user, job: Job) -> bool:
    return cancelable_jobs(user).filter(pk=job.pk).exists()


def to_change(user, pk: int, doing: str, *related: str) -> Job:
    """The job `pk` (with its `related` rows) for a change whoever may cancel it may make
    (`doing`, for the refusal): a 404 if it is not among the jobs the user may see or cancel, a
    403 if they may see it but not cancel it (a viewer)."""
    jobs = cancel_targets(user)
    job = get_object_or_404(jobs.select_related(*related) if related else jobs, pk=pk)
    if not can_cancel(user, job):
        raise PermissionDenied(f"You may see this job but not {doing}.")
    return job


def can_resubmit(user, job: Job) -> bool:
    """Running a job again is a submission to its tenant: for its owners and members, not its
    viewers nor the holders of a grant on the job alone."""
    return submit_tenants(user).filter(pk=job.tenant_id).exists()


def can_see(user, job: Job) -> bool:
    return visible_jobs(user).filter(pk=job.pk).exists()


def dependencies_refusal(user, job: Job) -> str:
    """Why the user may not change the job's dependencies, "" if they may: whoever may cancel
    a job may, if they see every job it waits for now (a change replaces them all, and would
    drop those they cannot see: an outsider's grant shows them one job, not its team's)."""
    if not can_cancel(user, job):
        return "You may see this job but not change its dependencies."
    if not sees_dependencies(user, job):
        return "It waits for jobs you cannot see: a change replaces them all, and would drop them."
    return ""


def sees_dependencies(user, job: Job) -> bool:
    """Whether the user sees every job the job (a shard: its batch) waits for now."""
    awaited = Dependency.objects.filter(job_id=job.parent_id or job.pk)
    return not awaited.exclude(on__in=visible_jobs(user)).exists()


JOB_NAMED = re.compile(r"#(\d+)")


def named_jobs(job: Job) -> set[int]:
    """The other jobs a job's page and answer name: those it depends on, and those its wait
    sentence names (a singleton's earlier job is no dependency)."""
    prefetch_related_objects([job], "dependency_links")
    named = {link.on_id for link in job.dependency_links.all()}
    if job.pending_reason == "waiting_for_dependency":
        named.update(int(pk) for pk in JOB_NAMED.findall(job.pending_message))
    return named - {job.pk}


def hidden_from(user, jobs, mine: Collection[int] | None = None) -> frozenset[int]:
    """The jobs these jobs name that the user may not see (those they wait for, and the one
    each was resubmitted from): a guardian grant shows an outsider one job, not the ids and
    outcomes of its team's others. A job of the user's own tenants names only jobs of its
    tenant, which they see: only the jobs shared with them alone are looked at. `mine`: the
    user's tenant ids, where the caller has read them already."""
    mine = tenant_ids(user) if mine is None else mine
    shared = [job for job in jobs if job.tenant_id not in mine]
    if not shared:
        return frozenset()
    prefetch_related_objects(shared, "dependency_links")
    named = set().union(*(named_jobs(job) | {job.resubmitted_from_id} for job in shared))
    named.discard(None)
    if not named:
        return frozenset()
    seen = visible_jobs(user).filter(pk__in=named).values_list("pk", flat=True)
    return frozenset(named - set(seen))


def wait_sentence(job: Job, hidden: frozenset[int]) -> str:
    """The job's wait sentence as a reader who may not see the `hidden` jobs reads it."""
    if not hidden or job.pending_reason != "waiting_for_dependency":
        return job.pending_message  # it names no job
    if named_jobs(job) & hidden:
        return "Waiting for jobs of its team that you cannot see."
    return job.pending_message


DEPENDENCY_NAMED = re.compile(r"\bdependency \d+")
KIND_NAMES = re.compile(r"\b(afterok|afterany|afternotok)((?::\d+)+)")


def refusal_as_read(user, refusal: ValidationError) -> ValidationError:
    """A refused change as the user reads it: one naming a job they may not see (a Refusal: an
    earlier job of a singleton's group, for the holder of a grant on the later job alone) says
    the same without its id."""
    if isinstance(refusal, Refusal) and not visible_jobs(user).filter(pk=refusal.named).exists():
        return ValidationError({refusal.field: [refusal.unnamed]})
    return refusal


def outsiders_reason(reason: str) -> str:
    """An event's reason as a reader outside the job's tenant reads it (a guardian grant on
    this one job): without the ids of the team's other jobs it names ("dependency 12 failed",
    "dependencies afterok:12:13, set by ...")."""
    return KIND_NAMES.sub(r"\1:...", DEPENDENCY_NAMED.sub("a dependency", reason))


def end_reason(job: Job, mine: Collection[int]) -> str:
    """Why the job ended (Job.why_ended) as a reader of the tenants `mine` (their ids) reads
    it: an outsider's without the ids of the team's other jobs."""
    reason = job.why_ended()
    return reason if job.tenant_id in mine else outsiders_reason(reason)


def is_outsider(user, job: Job) -> bool:
    """Whether the user reads the job from outside its tenant (through a grant on it alone)."""
    return job.tenant_id not in tenant_ids(user)
