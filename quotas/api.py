"""GET /api/v1/quotas/: the quota status (quotas.status) of the caller's teams, every team for
a platform admin, as the usage report chooses them; ``?tenant=<slug>`` for one (another
team's slug is refused as an unknown one is). GET /api/v1/priority-classes/: the classes
those teams may submit at. GET /api/v1/volumes/: those teams' data volumes. GET
/api/v1/rates/: the rate card in force on a day and the changes scheduled after it, for every
signed-in user. Rate limited as every user endpoint.
POST /api/v1/tenants/<slug>/pause/ and .../resume/: a platform admin pauses or resumes a
team's placements."""

from datetime import date

from django.conf import settings
from django.contrib.admin.models import LogEntry
from django.contrib.contenttypes.models import ContentType
from django.db.models import Prefetch
from django.http import Http404
from django.shortcuts import get_object_or_404
from rest_framework import serializers
from rest_framework.exceptions import AuthenticationFailed, PermissionDenied, ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from clusters.models import Cluster
from jobs import access, actions, reports, retrying
from jobs.costs import RateCard
from jobs.fields import body_of
from jobs.listing import moment, number, yes
from jobs.models import Job
from jobs.nodes_api import reason_asked
from jobs.states import State
from quotas import declared, exported, history, memberships, status, tokens
from quotas.models import (
    ApiToken,
    Membership,
    PriorityClass,
    Rate,
    SignIn,
    Tenant,
    TenantVolume,
    utc_today,
)
from quotas.usage import class_gpus_held


def teams_asked(request) -> list:
    """The caller's teams (every team for a platform admin), or the one `?tenant=` names."""
    try:
        return reports.pick_tenants(
            access.report_tenants(request.user), request.query_params.get("tenant")
        )
    except reports.BadParameter as bad:
        raise ValidationError({bad.field: bad.message}) from None


class QuotasView(APIView):
    def get(self, request):
        answer = status.of(teams_asked(request), request.user)
        return Response({
            "tenants": [team.as_json() for team in answer],
            "currency": settings.MLSCHED_CURRENCY,  # of their spend alerts and costs
            "fair_share_preemption": settings.MLSCHED_FAIR_SHARE_PREEMPTION,
            "fair_share_preemption_classes": fair_share_classes(),
        })  # fmt: skip


def fair_share_classes() -> list[str]:
    """The priority classes whose GPU jobs may evict by fair share, highest first."""
    return [rank.name for rank in PriorityClass.objects.order_by("-value") if rank.fair_shares()]


class PriorityClassesView(APIView):
    """The priority classes open to the caller's teams (Slurm's `sacctmgr show qos`), highest
    first, with what a job at each meets (whether it may preempt, its exempt time, its longest
    runtime limit and the one a job submitted without one gets, the GPUs one user's work of it
    and all its work may hold at once, and those its running work holds now, every team's and
    the caller's), `open_to`, those of the
    teams that may submit at it, and `default_for`, those whose jobs submitted without a class
    get it (Tenant.default_priority_class, else normal); a class open to none of them is left
    out, unless a platform admin lists every team. The tenants a class lists are other teams'
    affair: only the caller's are named."""

    def get(self, request):
        teams = teams_asked(request)
        every = request.user.is_superuser and not request.query_params.get("tenant")
        return Response({"priority_classes": classes_of(teams, request.user, every=every)})


def classes_of(teams: list, user, *, every: bool = False) -> list[dict]:
    """The priority classes open to `teams` (every class with `every`), highest first, as the
    classes API gives them to `user`; the quotas page lists the same."""
    listed = []
    defaults = {team.slug: team.default_priority_class_id for team in teams}
    held, yours = class_gpus_held(user.pk)
    for rank in PriorityClass.objects.prefetch_related("tenants").order_by("-value"):
        open_to = [team.slug for team in teams if rank.open_to(team)]
        default_for = [slug for slug, pk in defaults.items()
                       if pk == rank.pk or (pk is None and rank.name == "normal")]  # fmt: skip
        if open_to or every:
            listed.append({
                "name": rank.name, "value": rank.value, "may_preempt": rank.may_preempt,
                "fair_share_preemption": rank.fair_shares(),
                "preempt_exempt_s": rank.preempt_exempt_s,
                "max_runtime_s": rank.max_runtime_s,
                "default_runtime_s": rank.default_runtime_s,
                "max_gpus_per_user": rank.max_gpus_per_user, "max_gpus": rank.max_gpus,
                "gpus_held": held.get(rank.pk, 0), "your_gpus_held": yours.get(rank.pk, 0),
                "description": rank.description,
                "open_to": open_to, "default_for": default_for,
            })  # fmt: skip
    return listed


class VolumesView(APIView):
    """The data volumes of the caller's teams (every team's for a platform admin), by tenant
    and name: what a job of theirs may mount (``volumes``), whether a job may write to it, and
    the clusters that have it, by name (``[]``: every cluster), where such a job is placed.
    Where each one is (its claim, its host folder) is the platform's affair: not given."""

    def get(self, request):
        clusters = Prefetch("clusters", queryset=Cluster.objects.order_by("name"))
        volumes = (
            TenantVolume.objects.filter(tenant__in=teams_asked(request))
            .select_related("tenant")
            .prefetch_related(clusters)
            .order_by("tenant__slug", "name")
        )
        return Response({"volumes": [volume_json(volume) for volume in volumes]})


def volume_json(volume: TenantVolume) -> dict:
    return {
        "tenant": volume.tenant.slug,
        "name": volume.name,
        "description": volume.description,
        "writable": volume.writable,
        "clusters": [cluster.name for cluster in volume.clusters.all()],
    }


class RateSerializer(serializers.ModelSerializer):
    class Meta:
        model = Rate
        fields = ["flavor", "price", "since"]


class RatesView(APIView):
    """The rate card (quotas.Rate) in force on a day (`?at=YYYY-MM-DD`, default today, UTC), by
    flavor, each rate with the day it holds from; the changes scheduled after that day
    (`upcoming`: the rates dated later, by day); and its currency (MLSCHED_CURRENCY): what the
    usage reports price an hour of each at. Not secret: every signed-in user sees what their
    work costs. Prices as strings, as the API writes a decimal ("2.500000")."""

    def get(self, request):
        at = card_day(request.query_params.get("at"))
        card = RateCard.read()
        return Response({
            "currency": card.currency,
            "at": at,
            "rates": RateSerializer(card.in_force(at), many=True).data,
            "upcoming": RateSerializer(card.upcoming(at), many=True).data,
        })  # fmt: skip


def card_day(text: str | None) -> date:
    """The day `?at=` asks the card of (YYYY-MM-DD), today (UTC) without it; a 400 naming
    `at` for another."""
    if not text:
        return utc_today()
    try:
        return reports.day("at", text).date()
    except reports.BadParameter as bad:
        raise ValidationError({bad.field: bad.message}) from None


class MeView(APIView):
    """Who the caller is, as the API sees them (Slurm's `sacctmgr show assoc user=...`): their
    username and email address (where jobs that ask are emailed), whether they are a platform
    admin or a tenant admin (staff, not a superuser: the admin's pages of the teams they own),
    their teams with their role in each (owner, member, viewer) and the sign-on group it comes
    from ("": given by hand), and the API token the call came with, its name, when it expires
    (null: a session, or a token that does not) and whether it only reads."""

    def get(self, request):
        user = request.user
        memberships = user.memberships.select_related("tenant").order_by("tenant__slug")
        token = request.auth if isinstance(request.auth, ApiToken) else None
        return Response({
            "username": user.get_username(),
            "email": user.email,
            "platform_admin": user.is_superuser,
            "tenant_admin": user.is_staff and not user.is_superuser,
            "tenants": [{"slug": m.tenant.slug, "name": m.tenant.name, "role": m.role,
                         "from_group": m.from_group} for m in memberships],
            "token": token and {"name": token.name, "expires": token.expires,
                                "read_only": token.read_only},
        })  # fmt: skip


class OwnTokenView(APIView):
    """Revoke the API token the call came with (`DELETE`), as `mlsched logout` does, a
    read-only token's too: a token ending itself changes nothing else. 204; a call that came
    with a session, not a token, is a 400 naming `token`."""

    writes_nothing = True  # what a read-only token may do: it ends itself alone

    def delete(self, request):
        if not isinstance(request.auth, ApiToken):
            return Response({"token": ["This call came with no API token."]}, status=400)
        if not tokens.revoke_token(request.auth, request.user):
            # Revoked meanwhile: answered as a call with a revoked key is.
            raise AuthenticationFailed("Invalid, revoked or expired token.")
        return Response(status=204)


# Characters of a pause's reason, as the admin's field takes them.
MAX_PAUSE_REASON = Tenant._meta.get_field("placements_paused").max_length


class PauseView(APIView):
    """Pause a team's placements (`{"reason": "..."}`: why, shown to the team and on its
    queued jobs) or resume them (`resume`; a `reason` kept in the history alone), for platform
    admins alone, as the admin's field does: what an incident runbook or a budget system does
    without the admin's pages. 200 with the team's quota status as `GET /api/v1/quotas/`
    gives it, `changed` (false: it was so already, with that reason) and `queued`, its queued
    jobs; 403 for anyone else, 404 for no such team, 400 naming `reason` (none given to pause,
    or too long) or a field it does not take."""

    resume = False

    def post(self, request, slug):
        if not request.user.is_superuser:
            verb = "resumes" if self.resume else "pauses"
            raise PermissionDenied(f"Only a platform admin {verb} a team's placements.")
        tenant = get_object_or_404(Tenant, slug=slug)
        reason = reason_asked(request, MAX_PAUSE_REASON)
        if not self.resume and not reason:
            raise ValidationError({"reason": "Say why its placements are paused: its members "
                                             "and its queued jobs are told."})  # fmt: skip

        @retrying.atomic  # the change and its history entry, or neither; again after a deadlock
        def paused() -> bool:
            changed = actions.pause_placements(tenant, "" if self.resume else reason)
            if changed:
                said = "Placements resumed through the API" if self.resume else (
                    "Placements paused through the API"
                )  # fmt: skip
                history.record(request.user, [tenant], f"{said}: {reason}" if reason else said)
            return changed

        changed = paused()
        (team,) = status.of([tenant], request.user)
        queued = Job.objects.filter(tenant=tenant, state=State.QUEUED).count()
        return Response({**team.as_json(), "changed": changed, "queued": queued})


# Characters of a teams file the API reads: a few thousand teams' worth.
MAX_TEAMS_DOCUMENT = 2_000_000


class TeamsApplyView(APIView):
    """Teams as code from a pipeline (`manage.py apply_teams` without a shell on the server; CLI
    `apply-teams FILE`): `{"document": "<the file's YAML or JSON text>", "dry_run": false}` makes
    the tenants and quotas it declares as the command does (quotas.declared), as the caller's edit,
    for platform admins alone. 200 with `lines` (a line per change), `summary` (the command's last
    line), `created`, `changed`, `unchanged` and `dry_run`; 403 for anyone else; 400 naming
    `document` (none, too long, or refused: the tenant and the field, nothing changed) or
    `dry_run`."""

    def post(self, request):
        if not request.user.is_superuser:
            raise PermissionDenied("Only a platform admin applies a teams file.")
        data = body_of(request, "document", "dry_run")
        document = data.get("document")
        if not isinstance(document, str) or not document.strip():
            raise ValidationError({"document": ["Give the teams file's text (YAML or JSON)."]})
        if len(document) > MAX_TEAMS_DOCUMENT:
            raise ValidationError(
                {"document": [f"At most {MAX_TEAMS_DOCUMENT:,} characters: split the file."]}
            )
        dry_run = data.get("dry_run", False)
        if not isinstance(dry_run, bool):
            raise ValidationError({"dry_run": ["true or false."]})
        try:
            outcome = declared.apply(
                declared.parse(document, "document"), request.user, dry_run=dry_run
            )
        except declared.Refused as refused:
            raise ValidationError({"document": [str(refused)]}) from None
        counts, classes = outcome.counts, outcome.classes
        kinds = ("created", "changed", "unchanged")
        return Response({"lines": outcome.lines, "summary": outcome.summary(),
                         **{kind: counts[kind] for kind in kinds},
                         "classes": {kind: classes[kind] for kind in kinds},
                         "dry_run": dry_run})  # fmt: skip


class TeamsExportView(APIView):
    """The teams as a file (`manage.py export_teams` without a shell on the server; CLI
    `export-teams`), for platform admins alone: `{"document": "<YAML>"}`, the text the apply
    call takes back (quotas.exported: every tenant, or those `?tenant=` names, several
    allowed, and every priority class), with `tenants` and `classes`, how many it holds. 403
    for anyone else; 400 naming `tenant` for a slug no tenant has."""

    def get(self, request):
        if not request.user.is_superuser:
            raise PermissionDenied("Only a platform admin exports the teams.")
        slugs = request.query_params.getlist("tenant") or None
        if missing := exported.unknown(slugs):
            raise ValidationError({"tenant": [f"No tenant {missing!r}."]})
        document = exported.document(slugs)
        return Response({"document": exported.written(document),
                         "tenants": len(document["tenants"]),
                         "classes": len(document["priority_classes"])})  # fmt: skip


# The platform's history and its sign-ins as the API reads them: rows an answer holds at most,
# and by default.
MAX_HISTORY = 500
HISTORY = 100
TIME = serializers.DateTimeField()  # as the rest of the API writes times


def history_kinds() -> dict[str, ContentType]:
    """What the history may be narrowed to (`?kind=`): each model's name, `node`, `tenant`."""
    return {kind.model: kind for kind in ContentType.objects.all()}


def timed(rows, params, field: str, errors: dict[str, str]):
    """`rows` narrowed to `since` and `until` (times, as the job lists take them) by `field`."""
    since, until = moment(params, "since", errors), moment(params, "until", errors)
    if since is not None:
        rows = rows.filter(**{f"{field}__gte": since})
    if until is not None:
        rows = rows.filter(**{f"{field}__lt": until})
    return rows


def paged(rows, params, what: str, errors: dict[str, str]) -> list:
    """A page of `rows`, newest first by id: those before `before` (`what`: a row's id), at
    most `limit` (MAX_HISTORY; HISTORY by default); none where a parameter is at fault."""
    before = number(params, "before", what, errors)
    if before is not None:
        rows = rows.filter(id__lt=before)
    limit = number(params, "limit", "How many entries", errors)
    if limit is not None and not 1 <= limit <= MAX_HISTORY:
        errors["limit"] = f"From 1 to {MAX_HISTORY}."
    return list(rows.order_by("-id")[: limit or HISTORY]) if not errors else []


def page_answer(params, read, key: str, shown) -> Response:
    """A page `read` gives for `params` (a 400 naming each parameter at fault), `shown` under
    `key`, and `next`: the `before` of the page after (null: none)."""
    rows, errors = read(params)
    if errors:
        raise ValidationError(errors)
    more = len(rows) == int(params.get("limit") or HISTORY)
    return Response({key: [shown(row) for row in rows], "next": rows[-1].pk if more else None})


def history_read(params) -> tuple[list[LogEntry], dict[str, str]]:
    """The entries the parameters ask for, newest first, and the parameters at fault by name:
    `since` and `until` (times, as the job lists take them), `user` (a username), `kind` (a
    model's name), `object` (an object's id, with `kind`), `before` (an entry's id, to page)
    and `limit` (at most MAX_HISTORY)."""
    errors: dict[str, str] = {}
    entries = timed(LogEntry.objects.select_related("user", "content_type"), params,
                    "action_time", errors)  # fmt: skip
    if username := params.get("user", "").strip():
        entries = entries.filter(user__username=username)
    if name := params.get("kind", "").strip():
        kind = history_kinds().get(name.lower())
        if kind is None:
            errors["kind"] = "A model's name: node, tenant, quota, cluster, maintenancewindow..."
        else:
            entries = entries.filter(content_type=kind)
    if pk := params.get("object", "").strip():
        if not name:
            errors["object"] = "An object's id, beside its kind."
        entries = entries.filter(object_id=pk[:100])
    return paged(entries, params, "An entry's id", errors), errors


def history_entry(entry: LogEntry) -> dict:
    kind = entry.content_type
    return {
        "id": entry.pk,
        "time": TIME.to_representation(entry.action_time),
        "user": entry.user.get_username(),
        "action": history.ACTIONS.get(entry.action_flag, str(entry.action_flag)),
        "kind": kind.model if kind else None,
        "object_id": entry.object_id,
        "object": entry.object_repr,
        "message": entry.get_change_message(),
    }


class HistoryView(APIView):
    """The platform's history (quotas.history), for platform admins alone: `entries`, newest
    first, each with `id`, `time`, `user`, `action` (added, changed, deleted), `kind` (the
    model's name), `object_id`, `object` and `message`; `next`, the `before` of the page after
    (null: none). `?since=`, `?until=`, `?user=`, `?kind=`, `?object=`, `?before=`, `?limit=`
    (100 by default, at most 500); 400 naming each one at fault; 403 for anyone else."""

    def get(self, request):
        if not request.user.is_superuser:
            raise PermissionDenied("Only a platform admin reads the platform's history.")
        return page_answer(request.query_params, history_read, "entries", history_entry)


def sign_ins_read(params) -> tuple[list[SignIn], dict[str, str]]:
    """The sign-ins the parameters ask for, newest first, and the parameters at fault by name:
    `since` and `until` (times), `user` (the name given), `failed` (1: the failed ones alone),
    `address` (the client's), `before` (a sign-in's id, to page) and `limit`."""
    errors: dict[str, str] = {}
    rows = timed(SignIn.objects.all(), params, "at", errors)
    if username := params.get("user", "").strip():
        rows = rows.filter(username=username[:150])
    if yes(params, "failed", errors):
        rows = rows.filter(succeeded=False)
    if address := params.get("address", "").strip():
        rows = rows.filter(address=address[:45])
    return paged(rows, params, "A sign-in's id", errors), errors


def sign_in_shown(row: SignIn) -> dict:
    return {"id": row.pk, "at": TIME.to_representation(row.at), "username": row.username,
            "method": row.method, "succeeded": row.succeeded, "address": row.address,
            "reason": row.reason}  # fmt: skip


class SignInsView(APIView):
    """The sign-ins and the attempts that failed (quotas.sign_ins), for platform admins alone:
    `sign_ins`, newest first, each with `id`, `at`, `username`, `method` (password, proxy,
    oidc), `succeeded`, `address` and `reason`; `next`, the `before` of the page after (null:
    none). `?since=`, `?until=`, `?user=`, `?failed=1`, `?address=`, `?before=`, `?limit=`
    (100 by default, at most 500); 400 naming each one at fault; 403 for anyone else."""

    def get(self, request):
        if not request.user.is_superuser:
            raise PermissionDenied("Only a platform admin reads the sign-ins.")
        return page_answer(request.query_params, sign_ins_read, "sign_ins", sign_in_shown)


def member_shown(membership) -> dict:
    return {"username": membership.user.get_username(), "role": membership.role,
            "from_group": membership.from_group}  # fmt: skip


class MembersView(APIView):
    """A team's members, to its members (`members`: each `username`, `role`, `from_group`, by
    name; 404 for a team the caller is not in); its owners add one (POST `{"username",
    "role"}`: 201 with the member; 400 naming `username` or `role`; 403 for anyone else), as
    the portal's Teams page does (quotas.memberships)."""

    def get(self, request, slug):
        tenant = get_object_or_404(access.tenants_of(request.user), slug=slug)
        listed = tenant.memberships.select_related("user").order_by("user__username")
        return Response({"tenant": tenant.slug, "members": [member_shown(m) for m in listed]})

    def post(self, request, slug):
        tenant = owned_team(request, slug)
        data = body_of(request, "username", "role")
        username, role = data.get("username"), data.get("role", Membership.Role.MEMBER)
        if not isinstance(username, str) or not isinstance(role, str):
            raise ValidationError({"username": ["A username and a role, as text."]})
        try:
            made = memberships.add(tenant, username, role, request.user)
        except memberships.Refused as refused:
            raise ValidationError({refused.field: [str(refused)]}) from None
        return Response(member_shown(made), status=201)


class MemberView(APIView):
    """A team's owners change a member's role (PATCH `{"role"}`: 200 with the member) or remove
    them (DELETE: 204), as the Teams page does; 400 naming `role` or `username` (a member by a
    sign-on group, the last owner); 403 for anyone else; 404 for no such member."""

    def patch(self, request, slug, username):
        tenant = owned_team(request, slug)
        role = body_of(request, "role").get("role")
        if not isinstance(role, str):
            raise ValidationError({"role": [f"One of {', '.join(memberships.ROLES)}."]})
        return Response(member_shown(member_changed(tenant, username, role, request.user)))

    def delete(self, request, slug, username):
        member_changed(owned_team(request, slug), username, None, request.user)
        return Response(status=204)


def owned_team(request, slug: str) -> Tenant:
    """The caller's team `slug` (404: not theirs), if they own it (403: they do not)."""
    tenant = get_object_or_404(access.tenants_of(request.user), slug=slug)
    if not memberships.owns(request.user, tenant):
        raise PermissionDenied("Only the team's owners change its members.")
    return tenant


def member_changed(tenant: Tenant, username: str, role: str | None, by):
    """memberships.change, its refusals a 400 (404 for no such member)."""
    try:
        return memberships.change(tenant, username, role, by)
    except memberships.NotMember:
        raise Http404("No such member.") from None
    except memberships.Refused as refused:
        raise ValidationError({refused.field: [str(refused)]}) from None
