"""The portal's quota page: what each of the user's teams may still start, and why its jobs
wait for quota; and the user's own sign-ins."""

from dataclasses import replace

from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from jobs import access
from quotas import status
from quotas.api import classes_of, fair_share_classes
from quotas.models import SignIn


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


SIGN_INS_SHOWN = 50  # the newest of the user's own sign-ins their page shows


@login_required
def my_sign_ins(request):
    """The user's own sign-ins, newest first, the failed attempts on their account among them,
    as GitHub's security log shows its users theirs: an address or a time they do not know is
    theirs to act on (a password changed, a platform admin told)."""
    rows = SignIn.objects.filter(user=request.user).order_by("-id")[:SIGN_INS_SHOWN]
    return render(request, "portal/sign_ins.html", {"sign_ins": rows, "shown": SIGN_INS_SHOWN})
