"""The web portal's pages."""

from django.shortcuts import render

from jobs.models import Job
from quotas.models import Tenant


def tenants_of(user):
    """The tenants whose objects the user may see: the start of every portal queryset."""
    if not user.is_authenticated:
        return Tenant.objects.none()
    return Tenant.objects.filter(memberships__user=user)


def index(request):
    jobs = (
        Job.objects.for_tenants(tenants_of(request.user))
        .select_related("tenant", "priority_class")
        .order_by("-created", "-id")[:50]
    )
    return render(request, "portal/index.html", {"jobs": jobs})
