"""Where a waiting job stands in line, as the last placement cycle ordered the queue (Kueue's
pending-workloads positions, Slurm's sprio): its place among the jobs left waiting, in all
and in its team; the jobs ahead of it by why they are ahead (its team's, of a higher class,
other teams' turns by fair share); and the points of its effective priority inside its team
(``ordering.points``); and its team's fair share, which decides the other teams' turns
(``ordering.team_share``, Slurm's sshare).

The cycle records it (``record``), at most every MLSCHED_LINE_EVERY_S seconds, in the shared
cache (Redis when there is one), for the first ``RECORDED`` jobs in line, as Kueue keeps a
bounded head of each queue: a job further back is said to be. The owner's GPUs are as the
cycle began, before it placed anything. A reader reads a small stamp, and the line itself
once per process per line recorded (``Line.read``). Nothing depends on it: a cycle whose
record fails (Redis down) goes on, and a reader then finds none.
"""

from __future__ import annotations

import secrets
from array import array
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime

from django.conf import settings
from django.core.cache import caches
from rest_framework import serializers

from jobs import access, events
from jobs.cli.client import ordinal
from jobs.efficiency import span
from jobs.models import State
from jobs.placement import PENDING, PLACED, Decision, Snapshot
from jobs.placement.ordering import HOUR, Points, TeamShare, gpu_hours, points, team_share

KEY = "queue-standing"
DUE = "queue-standing-kept"  # set while the line kept is recent enough
STAMP = "queue-standing-stamp"  # which line is kept: a reader reads a line once per process
BEYOND = "beyond_queue_depth"
# What a queued job waits for that keeps it out of the cycle's line (cycle.explain).
NOT_IN_LINE = frozenset({"waiting_for_dependency", "retry_backoff", "deferred"})
RECORDED = 10_000
# Kept past its cycle long enough for a stalled scheduler's line to read as old, not as gone.
KEPT_S = 3600
# Per job in line: its priority, waited, size and owner points, its owner's GPUs (-1: not
# counted) and its GPU-hours (-1: no runtime limit).
TERMS = 6


@dataclass(frozen=True)
class Turn:
    """A team's fair share as the cycle began, and its turn (from 1) among the ``teams`` with
    jobs in line: the lowest share less the aging of its next job's wait goes first."""

    share: TeamShare
    turn: int
    teams: int


@dataclass(frozen=True)
class Standing:
    at: datetime  # the cycle's time
    waiting: int  # jobs in line after that cycle
    team_waiting: int  # of them, its team's
    # Its place (from 1) in line and in its team's; None: further back than the cycle looked,
    # or than the RECORDED jobs.
    position: int | None = None
    in_team: int | None = None
    # The jobs ahead of it: its team's, other teams' of a higher class, other teams' others.
    ahead_in_team: int = 0
    ahead_higher_class: int = 0
    ahead_other_teams: int = 0
    points: Points | None = None
    owner_gpus: float | None = None  # None: its team's order does not count them
    gpu_hours: float | None = None  # None: no runtime limit
    turn: Turn | None = None  # its team's; None: not recorded


def record(decision: Decision, snapshot: Snapshot, placed: set[int]) -> None:
    """Keep the line the cycle left, unless one was kept less than MLSCHED_LINE_EVERY_S ago
    (Kueue's visibility updates every 5 s too): a cycle every second need not pay for it
    every second."""
    every = settings.MLSCHED_LINE_EVERY_S
    with events.best_effort("recording the queue's line"):
        if every > 0 and not caches["shared"].add(DUE, 1, timeout=every):
            return
        kept = line(decision, snapshot, placed)
        # The stamp after the line: a reader that finds a new stamp finds its line.
        caches["shared"].set(KEY, kept, timeout=KEPT_S)
        caches["shared"].set(STAMP, kept["stamp"], timeout=KEPT_S)


def line(decision: Decision, snapshot: Snapshot, placed: set[int]) -> dict:
    """The line the cycle left: its outcomes in the order it considered the jobs, less the
    jobs it ``placed``, and the jobs it did not reach, counted at the back."""
    queued = {job.id: job for job in snapshot.queued}
    users = {tenant.id: tenant.user_use for tenant in snapshot.tenants}
    owners: dict[tuple[int, str], set[str]] = {}
    for job in snapshot.queued:
        owners.setdefault((job.tier, job.tenant), set()).add(job.owner)
    counts_owners = bool(snapshot.policy.user_share_priority_per_doubling)
    ids, tenants, higher, terms = array("q"), array("q"), array("q"), array("d")
    teams: Counter[int] = Counter()
    heads: dict[str, float] = {}  # each team's next job's submit time
    by_tier: Counter[int] = Counter()  # the recorded jobs ahead, by class
    by_team_tier: Counter[tuple[str, int]] = Counter()  # and by team and class
    for outcome in decision.outcomes:
        if outcome.status == PLACED and int(outcome.job_id) in placed:
            continue
        job = queued[outcome.job_id]
        teams[int(job.tenant)] += 1
        heads.setdefault(job.tenant, job.submit_time)
        if len(ids) == RECORDED or (outcome.status == PENDING and outcome.reason == BEYOND):
            continue
        ids.append(int(job.id))
        tenants.append(int(job.tenant))
        higher.append(
            sum(n - by_team_tier[job.tenant, t] for t, n in by_tier.items() if t > job.tier)
        )
        by_tier[job.tier] += 1
        by_team_tier[job.tenant, job.tier] += 1
        counted = counts_owners and len(owners[job.tier, job.tenant]) > 1
        owner_gpus = users.get(job.tenant, {}).get(job.owner, 0.0) if counted else None
        hours = gpu_hours(job)
        terms.extend(points(job, snapshot.policy, snapshot.now, owner_gpus))
        terms.extend((-1.0 if owner_gpus is None else owner_gpus, -1.0 if hours is None else hours))
    return {
        "stamp": secrets.token_hex(8),
        "at": snapshot.now,
        "teams": dict(teams),
        "shares": _shares(decision, snapshot, heads),
        "ids": ids.tobytes(),
        "tenants": tenants.tobytes(),
        "higher": higher.tobytes(),
        "terms": terms.tobytes(),
    }


def _shares(decision: Decision, snapshot: Snapshot, heads: dict[str, float]) -> dict:
    """The fair share of each team with jobs in line (``ordering.team_share``), and the key of
    its turn, as the queue order keys it: its share less its aging for its next job's wait."""
    aging = snapshot.policy.aging_share_per_hour
    out = {}
    for tenant in snapshot.tenants:
        if tenant.id in heads:
            share = team_share(tenant, decision.totals, snapshot.policy)
            wait = max(snapshot.now - heads[tenant.id], 0.0) / HOUR
            out[int(tenant.id)] = (*share, share.share - aging * wait)
    return out


def of(job) -> Standing | None:
    """The queued job's standing in the last recorded line; None if it is not in it: not
    queued, held, waiting for a dependency, its begin or a retry's backoff, or submitted
    since that cycle (or no line is recorded)."""
    if job.state != State.QUEUED or job.held or job.pending_reason in NOT_IN_LINE:
        return None
    line = Line.read()
    if line is None or job.tenant_id not in line.teams or job.created > line.at:
        return None
    waiting, team_waiting = line.waiting, line.teams[job.tenant_id]
    at_index = line.index.get(job.pk)
    if at_index is None:
        # Further back than the cycle reached, or than the line records.
        if job.pending_reason == BEYOND or len(line.ids) == RECORDED:
            return Standing(line.at, waiting, team_waiting, turn=line.turns.get(job.tenant_id))
        return None
    in_team = line.tenants[:at_index].count(job.tenant_id)
    higher = line.higher[at_index]
    terms = line.terms[at_index * TERMS : (at_index + 1) * TERMS]
    return Standing(
        line.at,
        waiting,
        team_waiting,
        position=at_index + 1,
        in_team=in_team + 1,
        ahead_in_team=in_team,
        ahead_higher_class=higher,
        ahead_other_teams=at_index - in_team - higher,
        points=Points(*terms[:4]),
        owner_gpus=None if terms[4] < 0 else terms[4],
        gpu_hours=None if terms[5] < 0 else terms[5],
        turn=line.turns.get(job.tenant_id),
    )


def places(jobs, tenant_ids) -> dict[int, int]:
    """The places in the recorded line (from 1) of those of ``jobs`` (a list's page) that
    are queued, not held, of the teams ``tenant_ids`` and recorded in it, by id."""
    wanted = [
        job.pk
        for job in jobs
        if job.state == State.QUEUED and not job.held and job.tenant_id in tenant_ids
    ]
    line = Line.read() if wanted else None
    if line is None:
        return {}
    return {pk: line.index[pk] + 1 for pk in wanted if pk in line.index}


class Line:
    """A recorded line as read: its arrays, and each recorded job's index in it."""

    def __init__(self, kept: dict):
        self.stamp: str = kept["stamp"]
        self.at = datetime.fromtimestamp(kept["at"], tz=UTC)
        self.teams: dict[int, int] = kept["teams"]
        self.waiting = sum(self.teams.values())
        self.ids, self.tenants = _read("q", kept["ids"]), _read("q", kept["tenants"])
        self.higher, self.terms = _read("q", kept["higher"]), _read("d", kept["terms"])
        self.index = {job_id: i for i, job_id in enumerate(self.ids)}
        # Each team's turn by fair share, the teams keyed as the queue order keys them.
        shares = kept.get("shares", {})
        by_key = sorted(shares, key=lambda tenant: (shares[tenant][-1], str(tenant)))
        self.turns = {
            tenant: Turn(TeamShare(*shares[tenant][:-1]), turn, len(by_key))
            for turn, tenant in enumerate(by_key, 1)
        }

    # This process's copy of the line last read: read again once another is recorded.
    _last: Line | None = None

    @classmethod
    def read(cls) -> Line | None:
        """The line last recorded; None if none is (or Redis does not answer)."""
        with events.best_effort("reading the queue's line"):
            stamp = caches["shared"].get(STAMP)
            if stamp is None:
                return None
            if cls._last is not None and cls._last.stamp == stamp:
                return cls._last
            kept = caches["shared"].get(KEY)
            if kept is None:
                return None
            cls._last = line = cls(kept)
            return line
        return None


@dataclass(frozen=True)
class InLine:
    """One job of a team's in the recorded line (``line_of``)."""

    job_id: int
    position: int
    in_team: int
    points: Points


@dataclass(frozen=True)
class TeamsLine:
    at: datetime
    waiting: int  # jobs in line after that cycle, every team's
    teams: dict[int, int]  # of them, each of the asked teams'
    turns: dict[int, Turn]  # the asked teams' fair shares and turns
    jobs: list[InLine]  # the asked teams' recorded jobs in line, from `after`, at most `limit`
    more: bool  # whether more of theirs are recorded past these


def line_of(tenant_ids, after: int = 0, limit: int = 100, only=None) -> TeamsLine | None:
    """The recorded line's jobs of the teams ``tenant_ids`` (those of them in ``only``, if
    given) past the position ``after``, at most ``limit``; None when no line is recorded."""
    line = Line.read()
    if line is None:
        return None
    seen: Counter[int] = Counter()
    jobs: list[InLine] = []
    more = False
    for index, tenant in enumerate(line.tenants):
        if tenant not in tenant_ids:
            continue
        seen[tenant] += 1
        if index < after or (only is not None and line.ids[index] not in only):
            continue
        if len(jobs) == limit:
            more = True
            break
        term = line.terms[index * TERMS : index * TERMS + 4]
        jobs.append(InLine(line.ids[index], index + 1, seen[tenant], Points(*term)))
    teams = {t: n for t, n in line.teams.items() if t in tenant_ids}
    turns = {t: turn for t, turn in line.turns.items() if t in tenant_ids}
    return TeamsLine(line.at, line.waiting, teams, turns, jobs, more)


def _read(kind: str, data: bytes) -> array:
    values = array(kind)
    values.frombytes(data)
    return values


def line_sentence(standing: Standing) -> str:
    """Where it stands, for people: "4th in line of 230 waiting jobs (2nd of its team's 12);
    ahead of it: 1 of its team's, 1 of a higher class, 1 of another team's turn"."""
    of_all = f"of {standing.waiting:,} waiting {_jobs(standing.waiting)}"
    of_team = f"of its team's {standing.team_waiting:,}"
    if standing.position is None:
        back = f"Further back in line than the last cycle looked, {of_all}"
        return f"{back} ({standing.team_waiting:,} its team's)."
    said = f"{ordinal(standing.position)} in line {of_all} ({ordinal(standing.in_team)} {of_team})"
    ahead = [
        f"{n:,} {what}"
        for n, what in (
            (standing.ahead_in_team, "of its team's"),
            (standing.ahead_higher_class, "of other teams at a higher class"),
            (standing.ahead_other_teams, "of other teams whose turn came first (fair share)"),
        )
        if n
    ]
    return f"{said}; ahead of it: {', '.join(ahead)}." if ahead else f"{said}."


def points_sentence(standing: Standing, waited_s: float) -> str:
    """Its effective priority in its team's line, term by term, for people: "Its points in its
    team's line: -151.4 (priority 5, + 2 for 2 h waited, - 158.4 for its size: 16 GPU-hours at
    its runtime limit, - 0: its owner holds no GPUs in the team)"."""
    p = standing.points
    if p is None:
        return ""
    size = (
        f"{_number(standing.gpu_hours)} GPU-hours at its runtime limit"
        if standing.gpu_hours is not None
        else "no runtime limit, the largest"
    )
    terms = [
        f"priority {_number(p.priority)}",
        f"+ {_number(p.waited)} for {span(waited_s)} waited",
        f"- {_number(p.size)} for its size: {size}",
    ]
    if standing.owner_gpus:
        gpus = f"{_number(standing.owner_gpus)} GPU{'' if standing.owner_gpus == 1 else 's'}"
        terms.append(f"- {_number(p.owner)} for the {gpus} its owner holds in the team")
    elif standing.owner_gpus is not None:
        terms.append("- 0: its owner holds no GPUs in the team")
    return f"Its points in its team's line: {_number(p.total)} ({', '.join(terms)})."


RESOURCES = {"gpu": "GPUs", "cpu": "CPU", "memory": "memory"}


def share_sentence(turn: Turn, team: str = "Its team") -> str:
    """A team's fair share and turn, for people: "Its team's fair share: 0.31 (it holds 25 %
    of the platform's GPUs, and counts 6 % more for its recent use, for a fair-share weight of
    1); its turn comes 2nd of the 4 teams with jobs waiting (...)"."""
    share = turn.share
    if not share.resource:
        made_of = "it holds nothing and has used nothing recently"
    else:
        what = RESOURCES.get(share.resource, share.resource)
        if share.resource_weight != 1:
            what += f" (a resource counted at {_number(share.resource_weight, 2)})"
        made_of = f"it holds {_percent(share.held)} of the platform's {what}"
        if round(100 * share.recent, 1):  # not "0 %" for a use just begun
            made_of += f", and counts {_percent(share.recent)} more for its recent use"
        made_of += f", for a fair-share weight of {_number(share.weight, 2)}"
    turns = (
        f"its turn comes {ordinal(turn.turn)} of the {turn.teams:,} teams with jobs waiting"
        if turn.teams > 1
        else "no other team has jobs waiting"
    )
    return (
        f"{team}'s fair share: {share_of(turn)} ({made_of}); {turns} (the lowest share goes "
        "first, less its aging for how long its next job has waited)."
    )


def share_of(turn: Turn) -> str:
    """The share, as people read it: "0.25"."""
    return _number(turn.share.share, 3)


def turn_json(turn: Turn | None, team: str = "Its team") -> dict | None:
    if turn is None:
        return None
    return {
        **turn.share._asdict(),
        "turn": turn.turn,
        "teams": turn.teams,
        "sentence": share_sentence(turn, team),
    }


def read_by(user, job) -> dict | None:
    """The job's standing as its reader reads it (the job document's, the job page's): none
    for a reader from outside its team (a grant on the job alone), whom its team's queue is
    not shown to."""
    if access.is_outsider(user, job):
        return None
    return as_json(of(job), job)


def as_json(standing: Standing | None, job) -> dict | None:
    """The job document's ``standing``: the numbers, and the sentences the portal shows."""
    if standing is None:
        return None
    p = standing.points
    return {
        "as_of": serializers.DateTimeField().to_representation(standing.at),
        "position": standing.position,
        "waiting": standing.waiting,
        "in_team": standing.in_team,
        "team_waiting": standing.team_waiting,
        "ahead": {
            "in_team": standing.ahead_in_team,
            "higher_class": standing.ahead_higher_class,
            "other_teams": standing.ahead_other_teams,
        },
        "points": None if p is None else {**p._asdict(), "total": p.total},
        "owner_gpus": standing.owner_gpus,
        "gpu_hours": standing.gpu_hours,
        "sentence": line_sentence(standing),
        "points_sentence": points_sentence(standing, waited(standing, job)),
        "team_share": turn_json(standing.turn),
    }


def waited(standing: Standing, job) -> float:
    """The seconds the job had waited at the line's cycle, as its points count them."""
    return max((standing.at - job.created).total_seconds(), 0.0)


def _number(value: float, digits: int = 1) -> str:
    """``value`` to ``digits`` decimals, without trailing zeros: "158.4", "2", "0.31"."""
    said = f"{value:,.{digits}f}"
    return said.rstrip("0").removesuffix(".") if "." in said else said


def _percent(fraction: float) -> str:
    return f"{_number(100 * fraction)} %"


def _jobs(n: int) -> str:
    return "job" if n == 1 else "jobs"
