"""Maintenance windows and bookings as the scheduler reads them: for each node, when its next
window starts, when it ends, and the tenant it is booked for (None: maintenance)."""

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import NamedTuple

from django.db.models import Q
from django.utils import timezone

from clusters.models import Booking, MaintenanceWindow


class Span(NamedTuple):
    """A node's next window: its start, its end, and whom it is booked for (None:
    maintenance); for a booking, ``then``, the first window after it that stops the booked
    tenant's work (maintenance, or another tenant's booking: (start, end, tenant)), if any."""

    starts: datetime
    ends: datetime
    tenant: int | None
    then: tuple[datetime, datetime, int | None] | None = None


def next_window(now: datetime, nodes: Iterable[tuple[int, int]]) -> dict[int, Span]:
    """The next window not yet ended of each of the nodes given, as (node id, cluster id),
    that has one. A later window of the same kind (maintenance, or a booking of the same
    tenant) that overlaps or touches it counts as one with it; one of another kind that
    overlaps it makes the whole maintenance (maintenance wins over a booking: the node takes
    nobody's work then). A booking also gives the first window after it of another kind
    (``Span.then``): the booked tenant's work, which the booking lets in, must keep off that
    one. One query per kind when none is planned, two otherwise."""
    windows = sorted(
        [*_windows(MaintenanceWindow, now, tenant=False), *_windows(Booking, now, tenant=True)],
        key=lambda w: w[2],
    )
    if not windows:
        return {}
    by_cluster: dict[int, list[int]] = defaultdict(list)
    for node_id, cluster_id in nodes:
        by_cluster[cluster_id].append(node_id)
    given = {node_id for ids in by_cluster.values() for node_id in ids}
    spans: dict[int, Span] = {}
    for chosen, cluster_id, starts, ends, tenant in windows:  # by start
        # Only those of its chosen nodes that were given: a commit gives the few it locks.
        listed = [node_id for node_id in chosen if node_id in given]
        for node_id in listed if chosen else by_cluster[cluster_id]:
            span = spans.get(node_id)
            if span is None:
                spans[node_id] = Span(starts, ends, tenant)
            elif starts <= span.ends and tenant == span.tenant:  # one longer window
                spans[node_id] = Span(span.starts, max(span.ends, ends), tenant)
            elif starts < span.ends:  # kinds that overlap: nobody's
                spans[node_id] = Span(span.starts, max(span.ends, ends), None)
            elif span.tenant is not None and span.then is None and tenant != span.tenant:
                # The first after a booking of another kind: what its tenant must keep off.
                spans[node_id] = span._replace(then=(starts, ends, tenant))
    return spans


def _windows(model, now: datetime, tenant: bool) -> list[tuple]:
    """The model's windows not yet ended: (chosen node ids, cluster id, start, end, tenant)."""
    fields = ["id", "cluster_id", "starts_at", "ends_at"] + (["tenant_id"] if tenant else [])
    rows = list(model.objects.not_ended(now).order_by("starts_at", "id").values_list(*fields))
    if not rows:
        return []
    chosen: dict[int, list[int]] = defaultdict(list)
    key = f"{model._meta.model_name}_id"
    through = model.nodes.through.objects.filter(**{f"{key}__in": [r[0] for r in rows]})
    for window_id, node_id in through.values_list(key, "node_id"):
        chosen[window_id].append(node_id)
    return [(chosen.get(r[0], []), r[1], r[2], r[3], r[4] if tenant else None) for r in rows]


class Ahead(NamedTuple):
    """A window that will stop a job running on its nodes."""

    kind: str  # "maintenance", or "booking" (for another tenant)
    cluster: str
    starts_at: datetime
    ends_at: datetime
    reason: str  # a maintenance window's; "" for a booking, which is another tenant's affair

    @property
    def sentence(self) -> str:
        """What it does to the job, for people (the job page, the job document)."""
        if self.kind == "maintenance":
            why = f" ({self.reason})" if self.reason else ""
            what = f"Maintenance of {self.cluster}{why}"
        else:
            what = f"A booking of {self.cluster}'s nodes for another team"
        return (
            f"{what} starts {self.starts_at:%Y-%m-%d %H:%M} UTC, before its runtime limit "
            "would end it: it will be stopped then, with its grace period to checkpoint, and "
            "requeued without using a retry."
        )


def ahead_of(node_ids: list[int], tenant_id: int, now: datetime, until: datetime) -> Ahead | None:
    """The first window not yet ended that will stop work of the tenant on these nodes before
    ``until`` (when it would end by its runtime limit): a maintenance window, or a booking for
    another tenant, starting before then over one of the nodes (or all of its cluster's). Two
    queries."""
    found: list[Ahead] = []
    for model, kind in ((MaintenanceWindow, "maintenance"), (Booking, "booking")):
        windows = model.objects.not_ended(now).filter(
            Q(nodes__in=node_ids) | Q(nodes__isnull=True, cluster__nodes__in=node_ids),
            starts_at__lt=until,
        )
        if model is Booking:
            windows = windows.exclude(tenant_id=tenant_id)
        first = windows.select_related("cluster").order_by("starts_at", "id").first()
        if first is not None:
            reason = first.reason if kind == "maintenance" else ""
            found.append(Ahead(kind, first.cluster.name, first.starts_at, first.ends_at, reason))
    return min(found, key=lambda a: a.starts_at, default=None)


def ahead_of_job(job) -> Ahead | None:
    """The window that will stop the job's live attempt before its runtime limit would end it,
    if one will (None: none, or no live attempt not asked to stop yet)."""
    attempt = job.attempts.filter(outcome="", stop_requested_at__isnull=True).first()
    if attempt is None:
        return None
    nodes = list(attempt.allocations.filter(active=True).values_list("node_id", flat=True))
    if not nodes:
        return None
    started = attempt.started_at or attempt.scheduled_at
    until = started + timedelta(seconds=job.max_runtime_s)
    return ahead_of(nodes, job.tenant_id, timezone.now(), until)
