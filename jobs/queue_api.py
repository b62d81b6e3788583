"""GET /api/v1/queue/ and the portal's queue page: the caller's teams' waiting jobs in the order
the last placement cycle left them (Kueue's pending workloads of a queue, Slurm's `squeue -t PD`
sorted as the scheduler takes them, with `sprio`'s points): each with its place in line and in
its team, its effective priority inside its team and why it waits (jobs.standing); and each
of the caller's teams' fair share and turn among the teams waiting (Slurm's sshare).

Tenant first: only the caller's teams' jobs are listed; the other teams' are counted, in
`waiting`, as the job document's standing counts them. A job placed, canceled or held since
that cycle is left out; those listed keep their places as of it (`as_of`).
"""

from dataclasses import dataclass, field

from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from jobs import access, listing, standing
from jobs.models import Job
from jobs.states import State
from quotas.models import Tenant

DEFAULT_LIMIT, MAX_LIMIT = 100, 1000
TIME = serializers.DateTimeField()


@dataclass
class Asked:
    tenant: str = ""
    mine: bool = False  # only the caller's own jobs (squeue --me)
    after: int = 0
    limit: int = DEFAULT_LIMIT
    errors: dict[str, str] = field(default_factory=dict)


def asked(params) -> Asked:
    """The query's `tenant`, `mine`, `after` (a place in line) and `limit`, and what is wrong
    with them."""
    out = Asked(tenant=params.get("tenant", ""))
    out.mine = listing.yes(params, "mine", out.errors)
    limit = listing.number(params, "limit", "How many jobs", out.errors)
    after = listing.number(params, "after", "A place in line", out.errors)
    if limit is not None and not 1 <= limit <= MAX_LIMIT:
        out.errors["limit"] = f"From 1 to {MAX_LIMIT}."
    out.after, out.limit = after or 0, limit or out.limit
    return out


@dataclass
class InLine:
    line: standing.TeamsLine | None  # None: no line recorded yet
    jobs: list[tuple[standing.InLine, Job]]
    slugs: dict[int, str]  # the teams read, by id
    names: dict[int, str]


def in_line(user, asked: Asked) -> InLine:
    """The user's teams' (one, if asked) jobs of the recorded line (the user's own, if asked),
    as asked, with their rows: one query for the teams, one for the jobs still queued and not
    held, and for the user's own one for their ids."""
    teams = Tenant.objects.filter(pk__in=access.tenant_ids(user))
    if asked.tenant:
        teams = teams.filter(slug=asked.tenant)  # another team's slug just finds nothing
    read = list(teams.values_list("pk", "slug", "name"))
    slugs, names = {pk: slug for pk, slug, _ in read}, {pk: name for pk, _, name in read}
    own = None
    if asked.mine:
        mine = Job.objects.filter(owner=user, tenant__in=slugs, state=State.QUEUED, held="")
        own = frozenset(mine.values_list("pk", flat=True))
    line = standing.line_of(frozenset(slugs), asked.after, asked.limit, own)
    if line is None:
        return InLine(None, [], slugs, names)
    rows = Job.objects.filter(
        pk__in=[entry.job_id for entry in line.jobs],
        tenant__in=slugs,
        state=State.QUEUED,
        held="",
    ).select_related("owner", "priority_class")
    still = {job.pk: job for job in rows}
    jobs = [(e, still[e.job_id]) for e in line.jobs if e.job_id in still]
    return InLine(line, jobs, slugs, names)


def fair_shares(found: InLine) -> dict[str, dict]:
    """Each of the found teams' fair share and turn, by slug, said with its name."""
    if found.line is None:
        return {}
    return {
        found.slugs[tenant]: standing.turn_json(turn, found.names[tenant])
        for tenant, turn in sorted(found.line.turns.items(), key=lambda item: item[1].turn)
    }


class QueueView(APIView):
    def get(self, request):
        query = asked(request.query_params)
        if query.errors:
            raise ValidationError(query.errors)
        found = in_line(request.user, query)
        line = found.line
        if line is None:
            return Response({"as_of": None, "waiting": 0, "teams": {}, "fair_share": {},
                             "jobs": [], "next": None})  # fmt: skip
        return Response({
            "as_of": TIME.to_representation(line.at),
            "waiting": line.waiting,
            "teams": {found.slugs[tenant]: n for tenant, n in line.teams.items()},
            "fair_share": fair_shares(found),
            "jobs": [job_json(entry, job, found.slugs) for entry, job in found.jobs],
            "next": line.jobs[-1].position if line.more else None,
        })  # fmt: skip


def job_json(entry: standing.InLine, job: Job, slugs: dict[int, str]) -> dict:
    return {
        "position": entry.position,
        "in_team": entry.in_team,
        "points": round(entry.points.total, 3),
        "id": job.pk,
        "name": job.name,
        "tenant": slugs[job.tenant_id],
        "owner": job.owner.username,
        "priority_class": job.priority_class.name,
        "priority": job.priority,
        "workers": job.workers,
        "min_workers": job.min_workers,
        "gpus": job.gpus,
        "gpu_milli": job.gpu_milli,
        "topology": job.topology,
        "exclusive": job.exclusive,
        "created": TIME.to_representation(job.created),
        "pending_reason": job.pending_reason,
    }
