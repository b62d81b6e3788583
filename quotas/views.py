"""The portal's quota page: what each of the user's teams may still start, and why its jobs
wait for quota."""

from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from jobs import access
from quotas import status
from quotas.api import fair_share_classes


@login_required
def quotas(request):
    teams = list(access.report_tenants(request.user).order_by("name"))
    context = {
        "teams": status.of(teams, request.user),
        "fair_share_classes": fair_share_classes(),
    }
    return render(request, "portal/quotas.html", context)
