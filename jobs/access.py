"""Who may see and act on which jobs: tenant membership first, guardian grants for exceptions."""

from django.db.models import Q
from guardian.shortcuts import get_objects_for_user

from jobs.models import Job
from quotas.models import Membership, Tenant

SUBMITTERS = (Membership.Role.OWNER, Membership.Role.MEMBER)


def tenants_of(user):
    """The tenants the user belongs to, in any role."""
    if not user.is_authenticated:
        return Tenant.objects.none()
    return Tenant.objects.filter(memberships__user=user)


def submit_tenants(user):
    """The tenants the user may submit to and cancel in (owners and members, not viewers)."""
    return tenants_of(user).filter(memberships__user=user, memberships__role__in=SUBMITTERS)


def visible_jobs(user):
    """Jobs of the user's tenants, plus single jobs shared with the user (guardian view_job)."""
    if not user.is_authenticated:
        return Job.objects.none()
    shared = get_objects_for_user(user, "jobs.view_job", klass=Job, accept_global_perms=False)
    return Job.objects.filter(Q(tenant__in=tenants_of(user)) | Q(pk__in=shared.values("pk")))


def cancelable_jobs(user):
    """Jobs the user may cancel: their submit tenants' jobs, plus single jobs granted to them
    with guardian's cancel_job (which does not need the job to be visible to them)."""
    if not user.is_authenticated:
        return Job.objects.none()
    granted = get_objects_for_user(user, "jobs.cancel_job", klass=Job, accept_global_perms=False)
    return Job.objects.filter(Q(tenant__in=submit_tenants(user)) | Q(pk__in=granted.values("pk")))


def cancel_targets(user):
    """Jobs a cancel request may name without a 404: the visible ones and the cancelable ones.

    A visible job the user may not cancel is a 403 (they know it exists); any other is a 404.
    """
    return visible_jobs(user) | cancelable_jobs(user)


def can_cancel(user, job: Job) -> bool:
    return cancelable_jobs(user).filter(pk=job.pk).exists()


def can_see(user, job: Job) -> bool:
    return visible_jobs(user).filter(pk=job.pk).exists()
