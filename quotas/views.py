"""The portal's quota page: what each of the user's teams may still start, and why its jobs
wait for quota."""

from dataclasses import replace

from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from jobs import access
from quotas import status
from quotas.api import classes_of, fair_share_classes


@login_required
def quotas(request):
    teams = list(access.report_tenants(request.user).order_by("name"))
    shown = [
        replace(team, flavors=[status.for_people(f) for f in team.flavors])
        for team in status.of(teams, request.user)
    ]
    context = {
        "teams": shown,
        "fair_share_classes": fair_share_classes(),
        # The classes open to those teams, with their limits and what their work holds now.
        "classes": classes_of(teams, request.user),
    }
    return render(request, "portal/quotas.html", context)
