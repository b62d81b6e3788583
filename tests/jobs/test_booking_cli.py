"""The command line's `bookings`: the user's tenants' bookings not yet ended, as a table with
their tenant, on a live server, as a user runs it."""

from datetime import timedelta

import pytest
from django.utils import timezone

from quotas.models import Membership
from tests.factories import ClusterFactory, MembershipFactory, NodeFactory, TenantFactory
from tests.jobs.test_booking_api import booking
from tests.jobs.test_cli import cli  # noqa: F401 - the fixture, for the command line's tests
from tests.jobs.test_maintenance_api import next_month

pytestmark = pytest.mark.django_db(transaction=True)


def cells(stdout: str) -> list[list[str]]:
    rows = [line.split("  ") for line in stdout.splitlines()]
    return [[cell.strip() for cell in row if cell.strip()] for row in rows]


def test_the_cli_lists_the_bookings_not_yet_ended_in_a_table_with_their_tenant(cli, alpha):  # noqa: F811
    east, west = ClusterFactory(name="east"), ClusterFactory(name="west")
    begun = timezone.now().replace(microsecond=0) - timedelta(hours=1)
    booking(alpha, east, begun - timedelta(hours=5), hours=1, reason="long over")
    now = booking(alpha, east, begun, reason="pretraining")
    nodes = [NodeFactory(cluster=west, name=name) for name in ("gpu-b", "gpu-a")]
    starts = next_month()
    later = booking(alpha, west, starts, nodes=nodes, reason="deadline")

    done = cli("bookings")

    assert done.returncode == 0, done.stderr
    assert cells(done.stdout) == [
        ["id", "tenant", "cluster", "nodes", "from", "to", "status", "reason"],
        [str(now.pk), "alpha", "east", "all", begun.isoformat().replace("+00:00", "Z"),
         (begun + timedelta(hours=4)).isoformat().replace("+00:00", "Z"), "in progress",
         "pretraining"],
        [str(later.pk), "alpha", "west", "gpu-a,gpu-b", f"{starts:%Y-%m-%dT%H}:00:00Z",
         f"{starts + timedelta(hours=4):%Y-%m-%dT%H}:00:00Z", "upcoming", "deadline"],
    ]  # fmt: skip


def test_the_cli_narrows_to_one_tenant_and_never_shows_another_tenants(cli, alice, alpha, gamma):  # noqa: F811
    delta = TenantFactory(slug="delta")
    MembershipFactory(tenant=delta, user=alice, role=Membership.Role.VIEWER)
    east = ClusterFactory(name="east")
    starts = timezone.now() + timedelta(hours=1)
    for tenant in (alpha, delta, gamma):
        booking(tenant, east, starts, reason=f"{tenant.slug} run")

    every = cli("bookings")
    one = cli("bookings", "--tenant", "delta")

    assert [row[1] for row in cells(every.stdout)] == ["tenant", "alpha", "delta"]
    assert [row[1] for row in cells(one.stdout)] == ["tenant", "delta"]


def test_the_cli_refuses_a_tenant_not_yours_as_an_unknown_one(cli, gamma):  # noqa: F811
    booking(gamma, ClusterFactory(name="east"), timezone.now() + timedelta(hours=1))

    done = cli("bookings", "--tenant", "gamma")

    assert done.returncode == 1
    assert (
        done.stderr.startswith("error 400") and "None of your tenants has this slug" in done.stderr
    )


def test_the_cli_says_so_when_there_are_no_bookings(cli, alpha, gamma):  # noqa: F811
    east = ClusterFactory(name="east")
    booking(alpha, east, timezone.now() - timedelta(hours=5), hours=1)
    booking(gamma, east, timezone.now() + timedelta(hours=1))

    done = cli("bookings")

    assert (done.returncode, done.stdout) == (0, "No bookings.\n")
