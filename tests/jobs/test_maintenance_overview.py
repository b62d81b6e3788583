"""The overview's Maintenance section: the clusters' windows not yet ended, to every user, read
in two queries whatever their number."""

import re
from datetime import UTC, datetime, timedelta
from html import unescape

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from tests.factories import ClusterFactory, NodeFactory
from tests.jobs.test_maintenance_api import next_month, window
from tests.jobs.test_overview import page, section  # noqa: F401 - the page fixture

pytestmark = pytest.mark.django_db


def rows(html: str, name: str = "maintenance") -> list[list[str]]:
    """The cells of each row of the section's table (the Bookings section's too)."""
    body = section(html, name)
    return [
        [unescape(cell) for cell in re.findall(r"<td>(.*?)</td>", row)]
        for row in re.findall(r"<tr><td>.*?</tr>", body)
    ]


def test_it_lists_the_windows_not_yet_ended_with_their_nodes_times_and_status(page):  # noqa: F811
    east, west = ClusterFactory(name="east"), ClusterFactory(name="west")
    begun = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(hours=1)
    window(east, begun - timedelta(hours=5), hours=1, reason="long over")
    window(east, begun, reason="firmware")
    nodes = [NodeFactory(cluster=west, name=name) for name in ("gpu-b", "gpu-a")]
    starts = next_month()
    window(west, starts, nodes=nodes, reason="Tom's PSUs")

    listed = rows(page())

    assert listed == [
        ["east", "all nodes", f"{begun:%Y-%m-%d %H:%M}",
         f"{begun + timedelta(hours=4):%Y-%m-%d %H:%M}", "in progress", "firmware"],
        ["west", "gpu-a, gpu-b", f"{starts:%Y-%m-%d %H:%M}",
         f"{starts + timedelta(hours=4):%Y-%m-%d %H:%M}", "upcoming", "Tom's PSUs"],
    ]  # fmt: skip


def test_it_says_no_maintenance_is_planned_when_none_is_to_come(page):  # noqa: F811
    window(ClusterFactory(name="east"), timezone.now() - timedelta(hours=5), hours=1)

    maintenance = section(page(), "maintenance")

    assert "No maintenance planned." in maintenance and "<table" not in maintenance


def page_queries(page) -> list[str]:  # noqa: F811
    with CaptureQueriesContext(connection) as queries:
        page()
    return [query["sql"] for query in queries]


def test_it_reads_the_windows_in_two_queries_whatever_their_number(page):  # noqa: F811
    starts = timezone.now() + timedelta(hours=1)
    east = ClusterFactory(name="east")
    window(east, starts, nodes=[NodeFactory(cluster=east)])
    one = page_queries(page)
    for i in range(8):
        cluster = ClusterFactory(name=f"c{i}")
        window(cluster, starts, nodes=[NodeFactory(cluster=cluster) for _ in range(3)])
        window(cluster, starts)

    many = page_queries(page)

    assert len(rows(page())) == 17
    assert len(many) == len(one)
    # The section's own: the windows with their clusters (the only reading of their reasons),
    # then their nodes.
    section_reads = [sql for sql in many if '"clusters_maintenancewindow"."reason"' in sql
                     or "_prefetch_related_val_maintenancewindow_id" in sql]  # fmt: skip
    assert len(section_reads) == 2
