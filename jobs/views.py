"""The web portal's pages."""

import secrets

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, render

from jobs import metrics as metrics_text
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


def metrics(request):
    """Prometheus scrape: `Authorization: Bearer $MLSCHED_METRICS_TOKEN`, or a staff session.

    The numbers name clusters and GPU types, so they are not public.
    """
    token = settings.MLSCHED_METRICS_TOKEN
    bearer = request.headers.get("Authorization", "").removeprefix("Bearer ")
    allowed = request.user.is_staff or (token and secrets.compare_digest(bearer, token))
    if not allowed:
        return HttpResponse("metrics need a staff session or the metrics token\n", status=403)
    return HttpResponse(metrics_text.render(), content_type="text/plain; version=0.0.4")
