"""GET /api/v1/bookings/: the bookings not yet ended of the caller's tenants (every tenant's for
a platform admin), first to start first, in a constant number of queries. Another tenant's
booking is never listed, nor its slug told from an unknown one."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from clusters.models import Booking
from quotas.models import Membership
from tests.factories import (
    ClusterFactory,
    MembershipFactory,
    NodeFactory,
    TenantFactory,
    UserFactory,
)
from tests.jobs.test_maintenance_api import client_for, next_month, window

pytestmark = pytest.mark.django_db

URL = "/api/v1/bookings/"


def booking(tenant, cluster, starts_at, hours=4, nodes=(), reason=""):
    made = Booking.objects.create(
        tenant=tenant, cluster=cluster, starts_at=starts_at,
        ends_at=starts_at + timedelta(hours=hours), reason=reason,
    )  # fmt: skip
    made.nodes.set(nodes)
    return made


def listed(user, **params) -> list[dict]:
    answer = client_for(user).get(URL, params)
    assert answer.status_code == 200, answer.content
    return answer.json()["bookings"]


def test_each_booking_gives_its_tenant_cluster_nodes_times_reason_and_whether_in_progress(
    alice, alpha
):
    east = ClusterFactory(name="east")
    nodes = [NodeFactory(cluster=east, name=name) for name in ("gpu-b", "gpu-a")]
    starts = next_month()
    booked = booking(alpha, east, starts, nodes=nodes, reason="LLM pretraining")

    answer = client_for(alice).get(URL)

    assert answer.status_code == 200
    assert answer.json() == {
        "bookings": [{
            "id": booked.pk, "tenant": "alpha", "cluster": "east", "nodes": ["gpu-a", "gpu-b"],
            "starts_at": f"{starts:%Y-%m-%dT%H}:00:00Z",
            "ends_at": f"{starts + timedelta(hours=4):%Y-%m-%dT%H}:00:00Z",
            "reason": "LLM pretraining", "in_progress": False,
        }]
    }  # fmt: skip


def test_a_booking_of_every_node_gives_no_node_names_and_one_begun_is_in_progress(alice, alpha):
    east = ClusterFactory(name="east")
    NodeFactory(cluster=east)
    booking(alpha, east, timezone.now() - timedelta(minutes=5))

    (only,) = listed(alice)

    assert (only["nodes"], only["in_progress"]) == ([], True)


def test_a_member_sees_the_bookings_of_their_tenant_not_yet_ended_first_to_start_first(bob, alpha):
    east, west = ClusterFactory(name="east"), ClusterFactory(name="west")
    now = timezone.now()
    booking(alpha, east, now - timedelta(hours=3), hours=1, reason="ended")
    later = booking(alpha, west, now + timedelta(hours=5))
    tie_first = booking(alpha, east, now + timedelta(hours=1))
    tie_second = booking(alpha, west, now + timedelta(hours=1))
    under_way = booking(alpha, west, now - timedelta(hours=1))

    ids = [b["id"] for b in listed(bob)]

    assert ids == [under_way.pk, tie_first.pk, tie_second.pk, later.pk]


def test_another_tenants_booking_is_never_listed(alice, alpha, charlie, gamma):
    east = ClusterFactory(name="east")
    starts = timezone.now() + timedelta(hours=1)
    ours = booking(alpha, east, starts, reason="ours")
    theirs = booking(gamma, east, starts + timedelta(hours=8), reason="gamma's secret run")

    assert [b["id"] for b in listed(alice)] == [ours.pk]
    assert [b["id"] for b in listed(charlie)] == [theirs.pk]
    assert "gamma" not in client_for(alice).get(URL).text


def test_a_user_of_no_tenant_sees_no_booking(alpha):
    booking(alpha, ClusterFactory(name="east"), timezone.now() + timedelta(hours=1))
    assert listed(UserFactory(username="loner")) == []


def test_a_platform_admin_sees_every_tenants_bookings(alpha, gamma):
    root = UserFactory(username="root", is_staff=True, is_superuser=True)
    east = ClusterFactory(name="east")
    starts = timezone.now() + timedelta(hours=1)
    first = booking(alpha, east, starts)
    second = booking(gamma, east, starts + timedelta(hours=8))

    assert [(b["id"], b["tenant"]) for b in listed(root)] == [
        (first.pk, "alpha"), (second.pk, "gamma"),
    ]  # fmt: skip


def test_tenant_narrows_the_list_to_one_of_the_callers_tenants(alice, alpha):
    delta = TenantFactory(slug="delta")
    MembershipFactory(tenant=delta, user=alice, role=Membership.Role.VIEWER)
    east = ClusterFactory(name="east")
    starts = timezone.now() + timedelta(hours=1)
    booking(alpha, east, starts)
    deltas = booking(delta, east, starts + timedelta(hours=8))

    assert len(listed(alice)) == 2
    assert [b["id"] for b in listed(alice, tenant="delta")] == [deltas.pk]


def test_another_tenants_slug_is_a_400_naming_tenant_as_an_unknown_one_is(alice, gamma):
    booking(gamma, ClusterFactory(name="east"), timezone.now() + timedelta(hours=1))
    client = client_for(alice)

    theirs = client.get(URL, {"tenant": "gamma"})
    unknown = client.get(URL, {"tenant": "no-such-team"})
    usage = client.get("/api/v1/usage/", {"tenant": "gamma"})

    assert (theirs.status_code, unknown.status_code) == (400, 400)
    assert theirs.json() == unknown.json() == usage.json()
    assert theirs.json() == {"tenant": ["None of your tenants has this slug."]}


def test_bookings_and_maintenance_windows_are_listed_apart(alice, alpha):
    east = ClusterFactory(name="east")
    starts = timezone.now() + timedelta(hours=1)
    booked = booking(alpha, east, starts, reason="booked")
    planned = window(east, starts, reason="maintenance")

    windows = client_for(alice).get("/api/v1/maintenance/").json()["windows"]

    assert [b["id"] for b in listed(alice)] == [booked.pk]
    assert [w["id"] for w in windows] == [planned.pk]


def queries(user, **params) -> int:
    client = client_for(user)
    with CaptureQueriesContext(connection) as done:
        assert client.get(URL, params).status_code == 200
    return len(done)


@pytest.mark.parametrize("params", [{}, {"tenant": "alpha"}])
def test_it_reads_as_many_queries_for_many_bookings_as_for_one(alice, alpha, params):
    starts = timezone.now() + timedelta(hours=1)
    east = ClusterFactory(name="east")
    booking(alpha, east, starts, nodes=[NodeFactory(cluster=east)])
    one = queries(alice, **params)
    for i in range(8):
        cluster = ClusterFactory(name=f"c{i}")
        booking(alpha, cluster, starts, nodes=[NodeFactory(cluster=cluster) for _ in range(3)])
        booking(alpha, cluster, starts)

    many = queries(alice, **params)

    assert len(listed(alice, **params)) == 17
    assert many == one


def test_an_anonymous_caller_is_refused_as_on_the_other_endpoints(alpha):
    booking(alpha, ClusterFactory(name="east"), timezone.now() + timedelta(hours=1), reason="x")

    answer = APIClient().get(URL)

    assert answer.status_code == APIClient().get("/api/v1/usage/").status_code == 401
    assert "bookings" not in answer.json()


@pytest.mark.parametrize("slug", ["\x00", "a\x00b", "%ED%A0%80", "x" * 70_000, "é", "١٢"])
def test_an_odd_tenant_is_a_400_naming_tenant(alice, alpha, slug):
    answer = client_for(alice).get(f"{URL}?tenant={slug}")

    assert answer.status_code == 400 and list(answer.json()) == ["tenant"]
