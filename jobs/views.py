"""The web portal's pages."""

from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, render

from jobs.access import visible_jobs


def index(request):
    jobs = (
        visible_jobs(request.user)
        .select_related("tenant", "priority_class")
        .order_by("-created", "-id")[:50]
    )
    return render(request, "portal/index.html", {"jobs": jobs})


@login_required
def job_detail(request, pk):
    job = get_object_or_404(
        visible_jobs(request.user).select_related("tenant", "priority_class", "owner"), pk=pk
    )
    attempts = job.attempts.select_related("cluster").order_by("number")
    return render(request, "portal/job.html", {"job": job, "attempts": attempts})
