"""Quarantine: a node that failed the attempts of several jobs in a short time is cordoned, so
that it stops taking every job placed there down with it (a GPU throwing Xid errors, a node
that cannot start pods), as Slurm drains a node its health check fails and Armada quarantines
nodes that fail jobs. Each job retried keeps off the nodes it failed on already (the snapshot's
``failed_nodes``); this spares the next jobs their first failure there.

Quarantine takes out at most a quarter of a cluster's nodes: more failing at once points at
the platform (a registry, the network, a driver rolled out everywhere), not at its nodes, and
cordoning them all would stop the cluster. A platform admin uncordons a node once it is fixed,
which ends its quarantine.
"""

import logging
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Count, F, Q, QuerySet

from clusters.models import Allocation, Cluster, Node
from jobs.clock import database_now
from jobs.models import Attempt

log = logging.getLogger(__name__)


def check(node_ids: list[int], now=None) -> list[int]:
    """Cordon those of these nodes where attempts of ``MLSCHED_QUARANTINE_JOBS`` distinct jobs
    ended for a node's fault (``Attempt.node_fault``) in the last
    ``MLSCHED_QUARANTINE_WINDOW_S``, while quarantine holds at most a quarter of their
    cluster's nodes; the ids of those cordoned. Called after an attempt ends so."""
    least = settings.MLSCHED_QUARANTINE_JOBS
    if not least or not node_ids:
        return []
    now = now or database_now()
    window = settings.MLSCHED_QUARANTINE_WINDOW_S
    failing = (
        held_against(now)
        .filter(node_id__in=node_ids, node__schedulable=True)
        .values("node_id", "node__cluster_id")
        .annotate(jobs=Count("attempt__job_id", distinct=True))
        .filter(jobs__gte=least)
        .order_by("node_id")
    )
    reason = f"{{}} jobs failed here for the infrastructure within {window} s"
    return [
        row["node_id"]
        for row in failing
        if cordon(row["node_id"], row["node__cluster_id"], reason.format(row["jobs"]), now)
    ]


def held_against(now) -> QuerySet[Allocation]:
    """The allocations of attempts whose end is held against their node: ended for its fault
    (``Attempt.node_fault``) in the last ``MLSCHED_QUARANTINE_WINDOW_S``, and since an admin
    last put the node back in service (``Node.faults_cleared_at``: repaired, or looked at).
    Quarantine counts them, and a job retried keeps off their nodes (the snapshot's
    ``failed_nodes``)."""
    since = now - timedelta(seconds=settings.MLSCHED_QUARANTINE_WINDOW_S)
    cleared = F("node__faults_cleared_at")
    return Allocation.objects.filter(
        Attempt.node_fault("attempt__"),
        Q(node__faults_cleared_at__isnull=True) | Q(attempt__ended_at__gt=cleared),
        attempt__ended_at__gte=since,
    )


@transaction.atomic
def cordon(node_id: int, cluster_id: int, reason: str, now) -> bool:
    """Quarantine the node, unless its cluster has a quarter of its nodes quarantined already.
    The cluster's row is locked first: two attempts ending at once on two of its nodes are
    judged one after the other."""
    cluster = Cluster.objects.select_for_update().get(pk=cluster_id)
    nodes = Node.objects.filter(cluster_id=cluster_id)
    held = nodes.filter(quarantined_at__isnull=False).count()
    if held + 1 > nodes.count() // 4:
        log.warning("node %s: %s, but %d of %s's %d nodes are quarantined already: not "
                    "cordoned (a fault of the platform rather than of its nodes?)",
                    node_id, reason, held, cluster.name, nodes.count())  # fmt: skip
        return False
    cordoned = nodes.filter(pk=node_id, schedulable=True).update(
        schedulable=False, quarantined_at=now, quarantine_reason=reason[:300]
    )
    if cordoned:
        log.warning("node %s of %s quarantined: %s", node_id, cluster.name, reason)
    return bool(cordoned)
