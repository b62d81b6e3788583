"""Bookings in the admin: made, changed and deleted by platform admins (superusers) for a tenant,
each written into the admin's history; read by tenant admins, their own tenants' only; a bad
booking refused on its field, nothing saved, and one overlapping another tenant's booking on a
node they share refused, naming it (two saved at once take turns). A maintenance window over
the same nodes is no reason to refuse. A booking of more GPUs than the tenant's quota lets its
jobs hold is saved with a warning saying so."""

from datetime import datetime, timedelta

import pytest
from django.contrib.admin.models import ADDITION, CHANGE, DELETION
from django.contrib.auth.models import Permission
from django.contrib.messages import get_messages
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from clusters.models import Booking
from clusters.window_forms import BOOKING_LOCK
from tests.clusters.test_maintenance_admin import DAY, history, rows
from tests.clusters.test_maintenance_admin import form as window_form
from tests.factories import ClusterFactory, NodeFactory, QuotaFactory
from tests.jobs.test_booking_api import booking as booked
from tests.jobs.test_lock_order import commit_once_waited_on, in_a_thread, other_connection
from tests.jobs.test_maintenance_api import window
from tests.quotas import test_admin as quota_admin_tests
from tests.security import test_admin_scope

pytestmark = pytest.mark.django_db

LIST = "/admin/clusters/booking/"
ADD = f"{LIST}add/"

admin_client = quota_admin_tests.admin_client  # a superuser's client
tenant_admin = test_admin_scope.tenant_admin  # Alice's, owner of alpha, as staff


def at(hour: int) -> datetime:
    """That hour of DAY (a day to come), UTC."""
    return datetime.fromisoformat(f"{DAY}T{hour:02}:00:00+00:00")


def form(tenant, cluster, nodes=(), **times) -> dict:
    """The add and change form as the admin posts it: from 02:00 to 06:00 of DAY by default."""
    return {**window_form(cluster, nodes, **times), "tenant": tenant.pk}


def booking(tenant, cluster, starts=2, ends=6, nodes=(), reason=""):
    """A booking from one hour of DAY to another."""
    return booked(tenant, cluster, at(starts), hours=ends - starts, nodes=nodes, reason=reason)


def errors(page) -> dict:
    assert page.status_code == 200
    return page.context["adminform"].form.errors


def test_a_platform_admin_books_nodes_for_a_tenant_written_into_the_history(admin_client, alpha):
    east = ClusterFactory(name="east")
    chosen = [NodeFactory(cluster=east, name="east-0"), NodeFactory(cluster=east, name="east-1")]
    NodeFactory(cluster=east, name="east-2")

    page = admin_client.post(ADD, form(alpha, east, chosen))

    assert page.status_code == 302
    saved = Booking.objects.get()
    assert (saved.tenant, saved.starts_at, saved.reason) == (alpha, at(2), "new PSUs")
    assert sorted(node.name for node in saved.nodes.all()) == ["east-0", "east-1"]
    assert history(saved.pk) == [ADDITION]


def test_a_platform_admin_changes_then_deletes_a_booking_each_written_into_the_history(
    admin_client, alpha
):
    east = ClusterFactory(name="east")
    made = booking(alpha, east)

    changed = admin_client.post(
        f"{LIST}{made.pk}/change/", form(alpha, east, ends=f"{DAY} 08:00:00")
    )
    deleted = admin_client.post(f"{LIST}{made.pk}/delete/", {"post": "yes"})

    assert (changed.status_code, deleted.status_code) == (302, 302)
    assert not Booking.objects.exists()
    assert history(made.pk) == [CHANGE, DELETION]


def test_a_booking_without_a_tenant_is_refused_on_the_tenant_field(admin_client):
    east = ClusterFactory(name="east")

    page = admin_client.post(ADD, window_form(east))

    assert errors(page) == {"tenant": ["This field is required."]}
    assert not Booking.objects.exists()


def test_the_list_shows_each_bookings_tenant_and_filters_by_it(admin_client, alpha, gamma):
    east = ClusterFactory(name="east")
    booking(alpha, east, reason="alpha run")
    booking(gamma, east, starts=8, ends=10, reason="gamma run")

    everything = rows(admin_client.get(LIST).text)
    filtered = rows(admin_client.get(LIST, {"tenant__id__exact": gamma.pk}).text)

    assert {reason: row["tenant"] for reason, row in everything.items()} == {
        "alpha run": "Alpha", "gamma run": "Gamma",
    }  # fmt: skip
    assert list(filtered) == ["gamma run"]


def may_do_anything_with_bookings(user) -> None:
    """Every model permission on bookings, and a look at clusters and nodes: only being no
    superuser holds the user back."""
    bookings = Permission.objects.filter(codename__endswith="_booking")
    looks = Permission.objects.filter(codename__in=["view_cluster", "view_node"])
    user.user_permissions.add(*looks, *bookings)


def test_a_tenant_admin_sees_their_tenants_bookings_but_cannot_add_change_or_delete_one(
    tenant_admin, alice, alpha
):
    may_do_anything_with_bookings(alice)
    east = ClusterFactory(name="east")
    made = booking(alpha, east, reason="alpha's run")

    listed = tenant_admin.get(LIST)
    shown = tenant_admin.get(f"{LIST}{made.pk}/change/")
    added = tenant_admin.post(ADD, form(alpha, east))
    changed = tenant_admin.post(
        f"{LIST}{made.pk}/change/", form(alpha, east, ends=f"{DAY} 09:00:00")
    )
    deleted = tenant_admin.post(f"{LIST}{made.pk}/delete/", {"post": "yes"})
    bulk = tenant_admin.post(
        LIST, {"action": "delete_selected", "post": "yes", "_selected_action": [made.pk]}
    )

    assert listed.status_code == 200 and "alpha&#x27;s run" in listed.text
    assert shown.status_code == 200 and 'name="_save"' not in shown.text
    assert (added.status_code, changed.status_code, deleted.status_code) == (403, 403, 403)
    assert bulk.status_code in (200, 302)
    assert list(Booking.objects.values_list("pk", "ends_at")) == [(made.pk, at(6))]


def test_a_tenant_admin_is_shown_neither_another_tenants_bookings_nor_its_name(
    tenant_admin, alice, gamma
):
    may_do_anything_with_bookings(alice)
    theirs = booking(gamma, ClusterFactory(name="east"), reason="secret run")

    listed = tenant_admin.get(LIST)
    shown = tenant_admin.get(f"{LIST}{theirs.pk}/change/")

    assert listed.status_code == 200
    assert "secret run" not in listed.text and "Gamma" not in listed.text
    assert shown.status_code == 302  # to the admin's index: "does not exist"


AGO = (timezone.now() - timedelta(days=2)).date().isoformat()  # a day gone


@pytest.mark.parametrize(
    "times, message",
    [
        ({"ends": f"{DAY} 02:00:00"}, "The end must come after the start."),
        ({"starts": f"{AGO} 01:00:00", "ends": f"{AGO} 02:00:00"},
         "The end has passed: the booking would change nothing."),
    ],
)  # fmt: skip
def test_times_that_make_no_booking_are_refused_on_the_end_field(
    admin_client, alpha, times, message
):
    page = admin_client.post(ADD, form(alpha, ClusterFactory(name="east"), **times))

    assert errors(page) == {"ends_at": [message]}
    assert not Booking.objects.exists()


def test_a_node_of_another_cluster_is_refused_on_the_nodes_field_naming_it(admin_client, alpha):
    east, west = ClusterFactory(name="east"), ClusterFactory(name="west")
    theirs = NodeFactory(cluster=west, name="w-7")

    page = admin_client.post(ADD, form(alpha, east, [NodeFactory(cluster=east), theirs]))

    assert errors(page) == {"nodes": ["Not nodes of east: west/w-7."]}
    assert not Booking.objects.exists()


# Overlaps.


def test_overlapping_another_tenants_booking_on_a_shared_node_is_refused_naming_it(
    admin_client, alpha, gamma
):
    east = ClusterFactory(name="east")
    a, b, c = (NodeFactory(cluster=east, name=f"gpu-{i}") for i in "abc")
    theirs = booking(gamma, east, starts=4, ends=8, nodes=[b, c])

    page = admin_client.post(ADD, form(alpha, east, [a, b]))

    assert errors(page) == {"nodes": [
        f"Overlaps booking #{theirs.pk} of Gamma (gamma), {DAY} 04:00 to {DAY} 08:00 UTC, on "
        "gpu-b: a node is booked for one tenant at a time."
    ]}  # fmt: skip
    assert list(Booking.objects.all()) == [theirs]


def test_a_booking_of_the_whole_cluster_overlapping_another_tenants_is_refused_on_the_start(
    admin_client, alpha, gamma
):
    east = ClusterFactory(name="east")
    theirs = booking(gamma, east, starts=1, ends=3, nodes=[NodeFactory(cluster=east, name="g")])

    page = admin_client.post(ADD, form(alpha, east))

    assert errors(page) == {"starts_at": [
        f"Overlaps booking #{theirs.pk} of Gamma (gamma), {DAY} 01:00 to {DAY} 03:00 UTC, on "
        "g: a node is booked for one tenant at a time."
    ]}  # fmt: skip


def test_nodes_named_overlapping_another_tenants_booking_of_the_whole_cluster_are_refused(
    admin_client, alpha, gamma
):
    east = ClusterFactory(name="east")
    node = NodeFactory(cluster=east, name="gpu-a")
    theirs = booking(gamma, east, starts=5, ends=9)

    page = admin_client.post(ADD, form(alpha, east, [node]))

    assert f"Overlaps booking #{theirs.pk} of Gamma" in errors(page)["nodes"][0]
    assert "on gpu-a:" in errors(page)["nodes"][0]


@pytest.mark.parametrize(
    "theirs",
    [
        {"starts": 6, "ends": 9, "nodes": "same"},  # begins as ours ends
        {"starts": 0, "ends": 2, "nodes": "same"},  # ends as ours begins
        {"starts": 2, "ends": 6, "nodes": "other"},  # at the same time, on another node
    ],
)
def test_another_tenants_booking_at_another_time_or_on_other_nodes_does_not_stand_in_the_way(
    admin_client, alpha, gamma, theirs
):
    east = ClusterFactory(name="east")
    ours, other = NodeFactory(cluster=east), NodeFactory(cluster=east)
    nodes = [ours] if theirs["nodes"] == "same" else [other]
    booking(gamma, east, theirs["starts"], theirs["ends"], nodes=nodes)

    page = admin_client.post(ADD, form(alpha, east, [ours]))

    assert page.status_code == 302
    assert Booking.objects.filter(tenant=alpha).count() == 1


def test_an_overlapping_booking_of_the_same_tenant_and_a_booking_changed_over_itself_are_kept(
    admin_client, alpha
):
    east = ClusterFactory(name="east")
    node = NodeFactory(cluster=east)
    earlier = booking(alpha, east, starts=1, ends=5, nodes=[node])

    added = admin_client.post(ADD, form(alpha, east, [node]))
    changed = admin_client.post(f"{LIST}{earlier.pk}/change/", form(alpha, east, [node]))

    assert (added.status_code, changed.status_code) == (302, 302)
    assert Booking.objects.count() == 2


def test_a_maintenance_window_over_the_booked_nodes_is_no_reason_to_refuse_nor_to_warn(
    admin_client, alpha
):
    east = ClusterFactory(name="east")
    node = NodeFactory(cluster=east)
    window(east, at(3), hours=2, nodes=[node])

    page = admin_client.post(ADD, form(alpha, east, [node]))

    assert page.status_code == 302 and Booking.objects.count() == 1
    levels = [message.level_tag for message in get_messages(page.wsgi_request)]
    assert levels == ["success"]


@pytest.mark.django_db(transaction=True)
def test_a_booking_saved_while_another_is_saved_on_the_cluster_waits_and_is_checked_against_it(
    admin_client, alpha, gamma
):
    east = ClusterFactory(name="east")
    # Another admin's save in flight: it holds the cluster's turn and adds gamma's booking.
    holder = other_connection()
    holder.execute("SELECT pg_advisory_xact_lock(%s, %s)", [BOOKING_LOCK, east.pk])
    holder.execute(
        "INSERT INTO clusters_booking (tenant_id, cluster_id, starts_at, ends_at, reason) "
        "VALUES (%s, %s, %s, %s, '')",
        [gamma.pk, east.pk, at(3), at(5)],
    )
    pages = []

    saving = in_a_thread(lambda: pages.append(admin_client.post(ADD, form(alpha, east))))
    commit_once_waited_on(holder, saving, "pg_advisory_xact_lock")

    (page,) = pages
    assert "Overlaps booking #" in errors(page)["starts_at"][0]
    assert list(Booking.objects.values_list("tenant__slug", flat=True)) == ["gamma"]


# The list.


def test_the_list_reads_as_many_queries_for_many_bookings_as_for_one(admin_client, alpha):
    clusters = [ClusterFactory(name=f"c{i}") for i in range(6)]
    booking(alpha, clusters[0], nodes=[NodeFactory(cluster=clusters[0])])
    one = list_queries(admin_client)
    for cluster in clusters[1:]:
        booking(alpha, cluster, nodes=[NodeFactory(cluster=cluster) for _ in range(3)])
        booking(alpha, cluster)

    assert list_queries(admin_client) == one


def list_queries(client) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert client.get(LIST).status_code == 200
    return len(queries)


def warnings(page) -> list[str]:
    return [m.message for m in get_messages(page.wsgi_request) if m.level_tag == "warning"]


def test_a_booking_past_what_the_tenants_quota_lets_it_hold_is_saved_with_a_warning(
    admin_client, alpha
):
    east = ClusterFactory(name="east")
    chosen = [NodeFactory(cluster=east, name=f"east-{i}") for i in range(2)]  # 16 A100
    NodeFactory(cluster=east, name="east-t4", gpu_type="T4", gpu_count=4)  # not booked
    QuotaFactory(tenant=alpha, flavor="gpu:A100", guaranteed=4, borrow_limit=4)
    QuotaFactory(tenant=alpha, flavor="gpu:T4", guaranteed=0, borrow_limit=0)

    page = admin_client.post(ADD, form(alpha, east, chosen))

    assert page.status_code == 302 and Booking.objects.count() == 1
    assert warnings(page) == [
        "Alpha (alpha): 16 A100 GPUs booked, of which its quota lets its jobs hold 8 at once "
        "(guaranteed 4, borrow limit 4). A booking sets nodes apart, not quota: the rest stays "
        "idle unless its quota is raised for the booking's time."
    ]


def test_a_booking_of_every_node_counts_the_clusters_gpus(admin_client, alpha):
    east = ClusterFactory(name="east")
    NodeFactory(cluster=east, gpu_type="T4", gpu_count=4)
    QuotaFactory(tenant=alpha, flavor="gpu:T4", guaranteed=2, borrow_limit=1)

    page = admin_client.post(ADD, form(alpha, east))

    assert "4 T4 GPUs booked, of which its quota lets its jobs hold 3 at once" in warnings(page)[0]


@pytest.mark.parametrize(("guaranteed", "borrow_limit"), [(16, 0), (8, 8)])
def test_a_booking_the_tenants_quota_can_fill_gets_no_warning(
    admin_client, alpha, guaranteed, borrow_limit
):
    east = ClusterFactory(name="east")
    chosen = [NodeFactory(cluster=east, name=f"east-{i}") for i in range(2)]
    QuotaFactory(tenant=alpha, flavor="gpu:A100", guaranteed=guaranteed, borrow_limit=borrow_limit)

    page = admin_client.post(ADD, form(alpha, east, chosen))

    assert page.status_code == 302 and warnings(page) == []


def test_a_booking_of_a_gpu_type_the_tenant_has_no_quota_row_for_gets_no_warning(
    admin_client, alpha
):
    # No row: its cohort's rules apply (no limit of its own to compare with).
    east = ClusterFactory(name="east")

    page = admin_client.post(ADD, form(alpha, east, [NodeFactory(cluster=east)]))

    assert page.status_code == 302 and warnings(page) == []
