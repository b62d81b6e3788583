"""Maintenance windows as the scheduler reads them: for each node, when its next window starts
and when it ends."""

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime

from clusters.models import MaintenanceWindow

Span = tuple[datetime, datetime]


def next_window(now: datetime, nodes: Iterable[tuple[int, int]]) -> dict[int, Span]:
    """The next maintenance window not yet ended of each node that has one, given the nodes as
    (node id, cluster id): its start, and its end, windows that overlap or touch it counted as
    one. One query when no window is planned, two otherwise."""
    windows = list(
        MaintenanceWindow.objects.not_ended(now)
        .order_by("starts_at", "id")
        .values_list("id", "cluster_id", "starts_at", "ends_at")
    )
    if not windows:
        return {}
    chosen: dict[int, list[int]] = defaultdict(list)
    through = MaintenanceWindow.nodes.through.objects.filter(
        maintenancewindow_id__in=[w[0] for w in windows]
    )
    for window_id, node_id in through.values_list("maintenancewindow_id", "node_id"):
        chosen[window_id].append(node_id)
    by_cluster: dict[int, list[int]] = defaultdict(list)
    for node_id, cluster_id in nodes:
        by_cluster[cluster_id].append(node_id)
    spans: dict[int, Span] = {}
    for window_id, cluster_id, starts, ends in windows:  # by start
        for node_id in chosen.get(window_id) or by_cluster[cluster_id]:
            span = spans.get(node_id)
            if span is None:
                spans[node_id] = (starts, ends)
            elif starts <= span[1]:  # overlaps or touches the first: one longer window
                spans[node_id] = (span[0], max(span[1], ends))
    return spans
