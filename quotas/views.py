"""The portal's quota page: what each of the user's teams may still start, and why its jobs
wait for quota."""

from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from jobs import access
from quotas import status


@login_required
def quotas(request):
    teams = list(access.report_tenants(request.user).order_by("name"))
    return render(request, "portal/quotas.html", {"teams": status.of(teams, request.user)})
