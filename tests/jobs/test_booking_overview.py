"""The overview's Bookings section: the bookings not yet ended of the user's teams, never
another team's, read in two queries whatever their number."""

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from quotas.models import Membership
from tests.factories import ClusterFactory, MembershipFactory, NodeFactory, TenantFactory
from tests.jobs.test_booking_api import booking
from tests.jobs.test_maintenance_api import next_month
from tests.jobs.test_maintenance_overview import rows as maintenance_rows
from tests.jobs.test_overview import page, section  # noqa: F401 - the page fixture

pytestmark = pytest.mark.django_db


def rows(html: str) -> list[list[str]]:
    return maintenance_rows(html, "bookings")


def test_it_lists_the_teams_bookings_not_yet_ended_with_nodes_times_status_and_team(
    page,  # noqa: F811
    alpha,
):
    east, west = ClusterFactory(name="east"), ClusterFactory(name="west")
    begun = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(hours=1)
    booking(alpha, east, begun - timedelta(hours=5), hours=1, reason="long over")
    booking(alpha, east, begun, reason="pretraining")
    nodes = [NodeFactory(cluster=west, name=name) for name in ("gpu-b", "gpu-a")]
    starts = next_month()
    booking(alpha, west, starts, nodes=nodes, reason="Tom's deadline")

    listed = rows(page())

    assert listed == [
        ["east", "all nodes", f"{begun:%Y-%m-%d %H:%M}",
         f"{begun + timedelta(hours=4):%Y-%m-%d %H:%M}", "in progress", "Alpha", "pretraining"],
        ["west", "gpu-a, gpu-b", f"{starts:%Y-%m-%d %H:%M}",
         f"{starts + timedelta(hours=4):%Y-%m-%d %H:%M}", "upcoming", "Alpha", "Tom's deadline"],
    ]  # fmt: skip


def test_another_teams_booking_is_not_shown(page, alice, alpha, gamma):  # noqa: F811
    delta = TenantFactory(name="Delta", slug="delta")
    MembershipFactory(tenant=delta, user=alice, role=Membership.Role.VIEWER)
    east = ClusterFactory(name="east")
    starts = timezone.now() + timedelta(hours=1)
    booking(alpha, east, starts, reason="alpha run")
    booking(delta, east, starts + timedelta(hours=4), reason="delta run")
    booking(gamma, east, starts + timedelta(hours=8), reason="gamma secret run")

    html = page()

    assert [(row[5], row[6]) for row in rows(html)] == [
        ("Alpha", "alpha run"),
        ("Delta", "delta run"),
    ]
    assert "gamma secret run" not in html


def test_it_says_there_are_none_for_the_users_teams(page, gamma):  # noqa: F811
    booking(gamma, ClusterFactory(name="east"), timezone.now() + timedelta(hours=1))

    bookings = section(page(), "bookings")

    assert "No bookings for your teams." in bookings and "<table" not in bookings


def test_it_reads_the_bookings_in_two_queries_whatever_their_number(page, alpha):  # noqa: F811
    starts = timezone.now() + timedelta(hours=1)
    east = ClusterFactory(name="east")
    booking(alpha, east, starts, nodes=[NodeFactory(cluster=east)])
    with CaptureQueriesContext(connection) as one:
        page()
    for i in range(8):
        cluster = ClusterFactory(name=f"c{i}")
        booking(alpha, cluster, starts, nodes=[NodeFactory(cluster=cluster) for _ in range(3)])
        booking(alpha, cluster, starts)

    with CaptureQueriesContext(connection) as many:
        html = page()

    assert len(rows(html)) == 17
    assert len(many) == len(one)
    # The section's own: the bookings with their clusters and tenants, then their nodes.
    reads = [q["sql"] for q in many if '"clusters_booking"."reason"' in q["sql"]
             or "_prefetch_related_val_booking_id" in q["sql"]]  # fmt: skip
    assert len(reads) == 2
