"""GET /api/v1/clusters/ and GET /api/v1/nodes/: the clusters and their nodes as users see
them, as Slurm's `sinfo` and `sinfo -N` show them: each node's state and how much of it is
allocated, each cluster's nodes counted by state and its GPUs by type, with the idle ones the
caller's work could start on now.

Clusters are shared infrastructure: every authenticated user reads them, as the maintenance
windows and the overview's GPU figures. Nothing here names a job or a tenant: a booking says
only whether it is for one of the caller's own teams. A node's window is read as the scheduler
reads it (clusters.maintenance.next_window), on the database's clock. A few queries whatever
the number of nodes. Rate limited as every user endpoint (the default throttles).
"""

from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Sum
from django.shortcuts import get_object_or_404
from rest_framework import serializers
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from clusters.maintenance import Span, next_window
from clusters.models import GPU_MILLI, Allocation, Cluster, Node
from jobs import access, actions, retrying
from jobs.clock import database_now
from jobs.fields import body_of
from jobs.reports import BadParameter
from quotas import history

# A node's state, the first that holds (Slurm's down, maint, drain, drng, resv, alloc, mix,
# idle): its agent does not report it ready, or its cluster's agent is silent; a maintenance
# window over it has begun; the control plane quarantined it for failing jobs; an admin
# cordoned it, with no work left, or with work still running; another team's booking of it has
# begun (one of yours: it takes your work, and says so); all its GPUs (a CPU-only node: its
# CPU) are allocated, some are, none is.
STATES = (
    DOWN, MAINTENANCE, QUARANTINED, DRAINED, DRAINING, BOOKED, ALLOCATED, MIXED, IDLE,
) = ("down", "maintenance", "quarantined", "drained", "draining", "booked", "allocated",
     "mixed", "idle")  # fmt: skip
TAKING_WORK = (ALLOCATED, MIXED, IDLE)
TIME = serializers.DateTimeField()  # times written as the rest of the API writes them


@dataclass
class Listed:
    """A node as the listing shows it: what of it is allocated, and its state for the caller."""

    node: Node
    gpu_milli: int  # allocated, in thousandths of a GPU
    gpus_busy: int  # GPUs with any share allocated
    cpu_milli: int
    memory_mb: int
    window: Span | None  # its next window, begun or not
    yours: bool  # booked for one of the caller's teams
    state: str = IDLE
    sole: bool = False  # an exclusive job's: it takes nothing else while that runs

    @property
    def gpus_idle(self) -> int:
        """Its whole GPUs with nothing allocated."""
        return self.node.gpu_count - self.gpus_busy

    @property
    def takes_your_work(self) -> bool:
        """Whether the scheduler would start the caller's work here now."""
        return self.state in TAKING_WORK

    # As the portal writes them: GPUs, cores and GiB.
    @property
    def gpus_allocated(self) -> float:
        return self.gpu_milli / GPU_MILLI

    @property
    def cpus(self) -> float:
        return self.node.cpu_milli / 1000

    @property
    def cpus_allocated(self) -> float:
        return self.cpu_milli / 1000

    @property
    def memory_gib(self) -> float:
        return self.node.memory_mb / 1024

    @property
    def memory_gib_allocated(self) -> float:
        return self.memory_mb / 1024

    @property
    def reason(self) -> str:
        return reason_of(self)

    @property
    def window_kind(self) -> str | None:
        if self.window is None:
            return None
        return "maintenance" if self.window.tenant is None else "booking"


def state_of(row: Listed, cluster_healthy: bool, now: datetime) -> str:
    """The node's state for the caller: the first of STATES that holds."""
    node, kind = row.node, row.window_kind
    begun = row.window is not None and row.window.starts <= now
    if not (node.healthy and cluster_healthy):
        return DOWN
    if begun and kind == "maintenance":
        return MAINTENANCE
    if node.quarantined_at is not None:
        return QUARANTINED
    if not node.schedulable:
        return DRAINING if row.cpu_milli or row.gpu_milli else DRAINED
    if begun and not row.yours:
        return BOOKED
    if row.sole:
        full = True
    elif node.gpu_count:
        full = row.gpu_milli >= node.gpu_count * GPU_MILLI
    else:
        full = row.cpu_milli >= node.cpu_milli
    return ALLOCATED if full else MIXED if row.cpu_milli or row.gpu_milli else IDLE


def reason_of(row: Listed) -> str:
    """Why a node that takes no work is in its state (Slurm's sinfo -R), "" for one that
    takes work: its agent's or its cluster's silence, its maintenance window or another team's
    booking and until when, why the control plane quarantined it, or why, by whom and when a
    platform admin cordoned it."""
    node, window = row.node, row.window
    until = f"until {window.ends:%Y-%m-%d %H:%M} UTC" if window else ""
    if row.state == DOWN:
        if node.healthy:
            return "its cluster's agent is not reporting"
        why = node.not_ready_reason
        return f"its agent does not report it ready: {why}" if why else (
            "its agent does not report it ready")  # fmt: skip
    if row.state == MAINTENANCE:
        return f"in a maintenance window {until}"
    if row.state == BOOKED:
        return f"booked for another team {until}"
    if row.state == QUARANTINED:
        return node.quarantine_reason
    if row.state in (DRAINED, DRAINING):
        who = [node.cordoned_by] if node.cordoned_by else []
        who += [f"{node.cordoned_at:%Y-%m-%d %H:%M} UTC"] if node.cordoned_at else []
        said = node.cordon_reason or "cordoned, no reason given"
        return f"{said} ({', '.join(who)})" if who else said
    return ""


def listed(nodes, user=None) -> list[Listed]:
    """`nodes` (a queryset), each with its allocations summed and its state for `user` (None:
    for no one's team, as the platform's metrics count them), by cluster and name."""
    nodes = list(nodes.select_related("cluster").order_by("cluster__name", "name"))
    use: dict[int, list[int]] = defaultdict(lambda: [0, 0, 0, 0])  # milli, busy, cpu, memory
    per_gpu = (
        Allocation.objects.active()
        .filter(node__in=[n.pk for n in nodes])
        .values_list("node_id", "gpu_index")
        .annotate(milli=Sum("gpu_milli"), cpu=Sum("cpu_milli"), memory=Sum("memory_mb"))
        .order_by()
    )
    sole = set(
        Allocation.objects.active()
        .filter(node__in=[n.pk for n in nodes], attempt__job__exclusive=True)
        .values_list("node_id", flat=True)
    )
    for node_id, gpu_index, milli, cpu, memory in per_gpu:
        sums = use[node_id]
        sums[0] += milli
        sums[1] += gpu_index is not None
        sums[2] += cpu
        sums[3] += memory
    now = database_now()
    windows = next_window(now, [(n.pk, n.cluster_id) for n in nodes])
    mine = set() if user is None else access.tenant_ids(user)
    rows = []
    for node in nodes:
        span = windows.get(node.pk)
        row = Listed(node, *use[node.pk], span, bool(span and span.tenant in mine))
        row.sole = node.pk in sole
        row.state = state_of(row, node.cluster.health == Cluster.Health.HEALTHY, now)
        rows.append(row)
    return rows


def node_json(row: Listed) -> dict:
    node, span = row.node, row.window
    window = span and {
        "kind": row.window_kind,
        "starts_at": TIME.to_representation(span.starts),
        "ends_at": TIME.to_representation(span.ends),
        "yours": row.yours,
    }
    return {
        "cluster": node.cluster.name, "name": node.name, "state": row.state,
        "gpu_type": node.gpu_type, "gpus": node.gpu_count,
        "gpus_allocated": row.gpus_allocated, "gpus_idle": row.gpus_idle,
        "cpu_milli": node.cpu_milli, "cpu_milli_allocated": row.cpu_milli,
        "memory_mb": node.memory_mb, "memory_mb_allocated": row.memory_mb,
        "topology": node.topology, "features": node.features, "window": window,
        "reason": row.reason,
        "last_seen": node.last_seen and TIME.to_representation(node.last_seen),
    }  # fmt: skip


def clusters_json(rows: list[Listed]) -> list[dict]:
    """Each cluster (those without nodes too): its agent's health, its nodes counted by
    state, and per GPU type its GPUs: total, allocated, and `idle_for_you`, the whole idle GPUs
    of nodes that take the caller's work now."""
    of = defaultdict(list)
    for row in rows:
        of[row.node.cluster_id].append(row)
    answer = []
    for cluster in Cluster.objects.order_by("name"):
        states = Counter(row.state for row in of[cluster.pk])
        gpus: dict[str, dict] = defaultdict(lambda: {"total": 0, "allocated": 0.0,
                                                     "idle_for_you": 0})  # fmt: skip
        for row in of[cluster.pk]:
            if row.node.gpu_count:
                kind = gpus[row.node.gpu_type]
                kind["total"] += row.node.gpu_count
                kind["allocated"] += row.gpus_allocated
                kind["idle_for_you"] += row.gpus_idle if row.takes_your_work else 0
        answer.append({
            "name": cluster.name, "region": cluster.region, "health": cluster.health,
            "placement_cost": cluster.placement_cost, "interruptible": cluster.interruptible,
            "last_heartbeat": cluster.last_heartbeat
            and TIME.to_representation(cluster.last_heartbeat),
            "nodes": {state: states[state] for state in STATES},
            "gpus": [{"gpu_type": kind, **figures} for kind, figures in sorted(gpus.items())],
        })  # fmt: skip
    return answer


def asked(params):
    """The nodes a query asks for, `cluster` (a name) and `gpu_type`, and the state it keeps
    (`state`; None: any); BadParameter naming an unknown cluster or state."""
    nodes = Node.objects.all()
    if name := params.get("cluster"):
        if not Cluster.objects.filter(name=name).exists():
            raise BadParameter("cluster", f"No cluster is named {name[:80]!r}.")
        nodes = nodes.filter(cluster__name=name)
    if kind := params.get("gpu_type"):
        nodes = nodes.filter(gpu_type=kind)
    state = params.get("state") or None
    if state is not None and state not in STATES:
        raise BadParameter("state", f"One of {', '.join(STATES)}.")
    return nodes, state


def in_state(rows: list[Listed], state: str | None) -> list[Listed]:
    return [row for row in rows if state is None or row.state == state]


class ClustersView(APIView):
    def get(self, request):
        return Response({"clusters": clusters_json(listed(Node.objects.all(), request.user))})


class NodesView(APIView):
    """The nodes, by cluster and name; `?cluster=`, `?gpu_type=`, `?state=` narrow them."""

    def get(self, request):
        try:
            nodes, state = asked(request.query_params)
        except BadParameter as bad:
            raise ValidationError({bad.field: bad.message}) from None
        rows = in_state(listed(nodes, request.user), state)
        return Response({"nodes": [node_json(row) for row in rows]})


# What a platform admin may do to a node through the API (Slurm's `scontrol update NodeName=
# State=DRAIN|RESUME Reason=`), as the admin's node list does it.
NODE_VERBS = ("cordon", "drain", "uncordon")
MAX_REASON = 200  # characters, as the admin's reason fields take them


def reason_asked(request, limit: int = MAX_REASON) -> str:
    """A platform admin's `reason` for a verb of the API (a node's cordon, a team's pause),
    stripped ("": none given); 400 naming `reason` for anything but text of at most `limit`
    characters."""
    reason = body_of(request, "reason").get("reason", "")
    if not isinstance(reason, str) or len(reason.strip()) > limit:
        raise ValidationError({"reason": f"At most {limit} characters of text."})
    return reason.strip()


class NodeServiceView(APIView):
    """Cordon, drain or uncordon one node (`verb`), for platform admins alone: what a health
    checker or a maintenance script does without the admin's pages. `reason` (at most 200
    characters) is shown beside the node's state, with who and when, as a cordon in the admin
    is. 200 with the node as the nodes API gives it and what changed (`changed`: 0 for a node
    already in that state; a drain's `stopped`, the attempts asked to stop); 403 for anyone
    else, 404 for a node no cluster of that name has, 400 naming `reason`."""

    verb = "cordon"

    def post(self, request, cluster, node):
        if not request.user.is_superuser:
            raise PermissionDenied(f"Only a platform admin may {self.verb} a node.")
        found = get_object_or_404(Node, cluster__name=cluster, name=node)
        by, reason = request.user.get_username(), reason_asked(request)

        @retrying.atomic  # the change and its history entry, or neither; again after a deadlock
        def serviced() -> dict:
            told: dict = {}
            if self.verb == "drain":
                told["stopped"] = actions.drain([found.pk], by, reason=reason)
                told["changed"] = int(found.schedulable)  # as it was before
            else:
                changed = actions.set_schedulable([found.pk], self.verb == "uncordon", by, reason)
                told["changed"] = len(changed)
            if told["changed"] or told.get("stopped"):
                said = f"{self.verb.capitalize()}ed through the API"
                history.record(request.user, [found], f"{said}: {reason}" if reason else said)
            return told

        told = serviced()
        (row,) = listed(Node.objects.filter(pk=found.pk), request.user)
        return Response({**node_json(row), **told})
