"""The portal's quota page: what each of the user's teams may still start, why its jobs wait
for quota, and what an hour of each flavor costs (the rate card); its Teams page, where owners
manage their teams' members (quotas.memberships); and the user's own sign-ins."""

from dataclasses import replace

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import Prefetch
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from jobs import access
from jobs.costs import RateCard
from quotas import memberships, status
from quotas.api import classes_of, fair_share_classes
from quotas.models import Membership, SignIn, utc_today


@login_required
def quotas(request):
    teams = list(access.report_tenants(request.user).order_by("name"))
    shown = [
        replace(team, flavors=[status.for_people(f) for f in team.flavors])
        for team in status.of(teams, request.user)
    ]
    card = RateCard.read()
    # The rate card (one query), with the flavors the teams' rows name that it does not price.
    prices = card.listed(utc_today(), (f.flavor for team in shown for f in team.flavors))
    context = {
        "teams": shown,
        "fair_share_classes": fair_share_classes(),
        # The classes open to those teams, with their limits and what their work holds now.
        "classes": classes_of(teams, request.user),
        "prices": prices,
        "scheduled": any(price.changes for price in prices),  # a column for the changes
        "currency": card.currency,  # of the teams' spend alerts and costs
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


@login_required
def teams(request, refused: tuple[str, memberships.Refused] | None = None, values=None):
    """The user's teams and their members; an owner's form to add one, and each member's role
    to change or remove (not those a sign-on group gives)."""
    listed = Membership.objects.select_related("user").order_by("user__username")
    mine = (
        access.tenants_of(request.user)
        .order_by("name")
        .prefetch_related(Prefetch("memberships", queryset=listed))
    )
    owned = set(
        Membership.objects.filter(user=request.user, role=Membership.Role.OWNER).values_list(
            "tenant__slug", flat=True
        )
    )
    context = {
        "teams": mine,
        "owned": owned,
        "roles": memberships.ROLES,
        "refused": refused,
        "values": values or {"username": "", "role": Membership.Role.MEMBER},
    }
    return render(request, "portal/teams.html", context, status=400 if refused else 200)


@login_required
@require_POST
def team_members(request, slug):
    """An owner's change of the team's members: `action` add (`username`, `role`), role
    (`username`, `role`) or remove (`username`); the Teams page again, saying what was done,
    or why not (a 400)."""
    tenant = get_object_or_404(access.tenants_of(request.user), slug=slug)
    if not memberships.owns(request.user, tenant):
        raise PermissionDenied("Only the team's owners change its members.")
    action = request.POST.get("action", "")
    username, role = request.POST.get("username", ""), request.POST.get("role", "")
    try:
        if action == "add":
            memberships.add(tenant, username, role, request.user)
            done = f"{username.strip()} added to {tenant.name} as {role}."
        elif action in ("role", "remove"):
            kept = memberships.change(tenant, username, role if action == "role" else None,
                                      request.user)  # fmt: skip
            now = "removed from" if kept is None else f"is {role} of"
            done = f"{username} {now} {tenant.name}."
        else:
            raise memberships.Refused("action", "Add, change a role or remove.")
    except memberships.Refused as refused:
        return teams(request, (tenant.slug, refused), {"username": username, "role": role})
    messages.success(request, done)
    return redirect("teams")
