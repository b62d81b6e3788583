"""The web portal's pages."""

from django.shortcuts import render

from jobs.access import visible_jobs


def index(request):
    jobs = (
        visible_jobs(request.user)
        .select_related("tenant", "priority_class")
        .order_by("-created", "-id")[:50]
    )
    return render(request, "portal/index.html", {"jobs": jobs})
