"""Maintenance windows in the admin: planned, changed and deleted by platform admins (superusers),
each written into the admin's history and waking the scheduler (through the API too); read by
tenant admins; a bad window refused on its field, nothing saved; the list reading each window's
status by the database's clock and its nodes in a constant number of queries."""

import re
from datetime import timedelta
from html import unescape

import pytest
from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from clusters.models import MaintenanceWindow
from jobs import actions
from tests.factories import ClusterFactory, NodeFactory
from tests.jobs.test_maintenance_api import next_month
from tests.jobs.test_maintenance_api import window as planned_window
from tests.quotas import test_admin as quota_admin_tests
from tests.security import test_admin_scope

pytestmark = pytest.mark.django_db

LIST = "/admin/clusters/maintenancewindow/"
ADD = f"{LIST}add/"

admin_client = quota_admin_tests.admin_client  # a superuser's client
tenant_admin = test_admin_scope.tenant_admin  # Alice's, owner of alpha, as staff


def may_do_anything_with_windows(user) -> None:
    """Every model permission on windows, and a look at clusters and nodes: only being no
    superuser holds the user back."""
    codenames = ["view_cluster", "view_node"]
    windows = Permission.objects.filter(codename__endswith="_maintenancewindow")
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames), *windows)


def window(cluster, hours_from_now=1, hours=4, nodes=(), reason="firmware"):
    starts = timezone.now() + timedelta(hours=hours_from_now)
    return planned_window(cluster, starts, hours=hours, nodes=nodes, reason=reason)


DAY = next_month().date().isoformat()  # a day to come


def form(cluster, nodes=(), starts=f"{DAY} 02:00:00", ends=f"{DAY} 06:00:00") -> dict:
    """The add and change form as the admin posts it (date and time apart, in UTC)."""
    (start_day, start_time), (end_day, end_time) = starts.split(), ends.split()
    return {
        "cluster": cluster.pk, "nodes": [node.pk for node in nodes], "reason": "new PSUs",
        "starts_at_0": start_day, "starts_at_1": start_time,
        "ends_at_0": end_day, "ends_at_1": end_time,
    }  # fmt: skip


def history(window_id) -> list[int]:
    rows = LogEntry.objects.filter(object_id=str(window_id)).order_by("pk")
    return [row.action_flag for row in rows]


def test_a_platform_admin_plans_a_window_over_some_nodes_written_into_the_history(admin_client):
    east = ClusterFactory(name="east")
    chosen = [NodeFactory(cluster=east, name="east-0"), NodeFactory(cluster=east, name="east-1")]
    NodeFactory(cluster=east, name="east-2")

    page = admin_client.post(ADD, form(east, chosen))

    assert page.status_code == 302
    saved = MaintenanceWindow.objects.get()
    assert sorted(node.name for node in saved.nodes.all()) == ["east-0", "east-1"]
    assert (saved.starts_at.isoformat(), saved.reason) == (f"{DAY}T02:00:00+00:00", "new PSUs")
    assert history(saved.pk) == [ADDITION]


def test_a_platform_admin_changes_then_deletes_a_window_each_written_into_the_history(admin_client):
    east = ClusterFactory(name="east")
    planned = window(east)

    changed = admin_client.post(f"{LIST}{planned.pk}/change/", form(east, ends=f"{DAY} 08:00:00"))
    deleted = admin_client.post(f"{LIST}{planned.pk}/delete/", {"post": "yes"})

    assert (changed.status_code, deleted.status_code) == (302, 302)
    assert not MaintenanceWindow.objects.exists()
    assert history(planned.pk) == [CHANGE, DELETION]


def test_a_platform_admin_deletes_windows_from_the_list(admin_client):
    east = ClusterFactory(name="east")
    windows = [window(east, nodes=[NodeFactory(cluster=east)]), window(east)]

    page = admin_client.post(
        LIST,
        {"action": "delete_selected", "post": "yes", "_selected_action": [w.pk for w in windows]},
    )

    assert page.status_code == 302
    assert not MaintenanceWindow.objects.exists()


def test_a_tenant_admin_sees_the_windows_but_cannot_add_change_or_delete_one(
    tenant_admin,
    alice,
):
    may_do_anything_with_windows(alice)
    east = ClusterFactory(name="east")
    planned = window(east, reason="rack move")
    before = (planned.starts_at, planned.ends_at)

    listed = tenant_admin.get(LIST)
    shown = tenant_admin.get(f"{LIST}{planned.pk}/change/")
    added = tenant_admin.post(ADD, form(east))
    changed = tenant_admin.post(f"{LIST}{planned.pk}/change/", form(east))
    deleted = tenant_admin.post(f"{LIST}{planned.pk}/delete/", {"post": "yes"})
    bulk = tenant_admin.post(
        LIST, {"action": "delete_selected", "post": "yes", "_selected_action": [planned.pk]}
    )

    assert listed.status_code == 200 and "rack move" in listed.text
    assert shown.status_code == 200 and 'name="_save"' not in shown.text
    assert (added.status_code, changed.status_code, deleted.status_code) == (403, 403, 403)
    assert bulk.status_code in (200, 302)
    planned.refresh_from_db()
    assert (planned.starts_at, planned.ends_at) == before
    assert MaintenanceWindow.objects.count() == 1


@pytest.mark.parametrize("ends", [f"{DAY} 02:00:00", f"{DAY} 01:00:00"])
def test_an_end_not_after_the_start_is_refused_on_the_end_field(admin_client, ends):
    east = ClusterFactory(name="east")

    page = admin_client.post(ADD, form(east, ends=ends))

    assert page.status_code == 200
    assert page.context["adminform"].form.errors == {
        "ends_at": ["The end must come after the start."]
    }
    assert not MaintenanceWindow.objects.exists()


def test_a_new_window_whose_end_has_passed_is_refused_on_the_end_field(admin_client):
    east = ClusterFactory(name="east")
    ago = timezone.now() - timedelta(days=2)
    day = ago.date().isoformat()

    page = admin_client.post(ADD, form(east, starts=f"{day} 01:00:00", ends=f"{day} 02:00:00"))

    assert page.status_code == 200
    assert page.context["adminform"].form.errors == {
        "ends_at": ["The end has passed: the window would change nothing."]
    }
    assert not MaintenanceWindow.objects.exists()


@pytest.mark.parametrize("typed", ["x", "2026-13-45", "9" * 40, ""])
def test_the_add_page_leaves_out_a_start_from_its_address_that_is_no_date_and_time(
    admin_client, typed
):
    admin_client.raise_request_exception = False

    page = admin_client.get(ADD, {"starts_at": typed, "ends_at": typed, "reason": "disks"})

    assert page.status_code == 200
    form = page.context["adminform"].form
    assert (form["starts_at"].value(), form["ends_at"].value()) == (None, None)
    assert form["reason"].value() == "disks"


def test_the_add_page_fills_in_a_start_from_its_address(admin_client):
    page = admin_client.get(ADD, {"starts_at": "2026-05-01 10:00"})

    assert page.status_code == 200
    assert 'name="starts_at_0" value="2026-05-01"' in page.text
    assert 'name="starts_at_1" value="10:00:00"' in page.text


def test_a_node_of_another_cluster_is_refused_on_the_nodes_field_naming_it(admin_client):
    east, west = ClusterFactory(name="east"), ClusterFactory(name="west")
    ours, theirs = NodeFactory(cluster=east, name="east-0"), NodeFactory(cluster=west, name="w-7")

    page = admin_client.post(ADD, form(east, [ours, theirs]))

    assert page.status_code == 200
    assert page.context["adminform"].form.errors == {"nodes": ["Not nodes of east: west/w-7."]}
    assert not MaintenanceWindow.objects.exists()


def rows(html: str) -> dict[str, dict[str, str]]:
    """The list's rows by reason: each column's text by its field name."""
    found = {}
    for row in re.findall(r"<tr>(.*?)</tr>", html, re.S):
        cells = dict(re.findall(r'<t[dh] class="field-(\w+)[^"]*"[^>]*>(.*?)</t[dh]>', row, re.S))
        if "reason" in cells:
            found[cells["reason"]] = {
                k: unescape(re.sub("<[^>]+>", "", v)) for k, v in cells.items()
            }
    return found


def test_the_list_gives_each_windows_nodes_and_whether_it_is_upcoming_in_progress_or_ended(
    admin_client,
):
    east = ClusterFactory(name="east")
    many = [NodeFactory(cluster=east, name=f"gpu-{i:02}") for i in range(12)]
    window(east, hours_from_now=-3, hours=1, reason="past")
    window(east, hours_from_now=-1, hours=4, nodes=many[:2], reason="now")
    window(east, hours_from_now=2, nodes=many, reason="later")

    listed = rows(admin_client.get(LIST).text)

    assert {reason: row["status"] for reason, row in listed.items()} == {
        "past": "ended", "now": "in progress", "later": "upcoming",
    }  # fmt: skip
    assert listed["past"]["nodes_listed"] == "all nodes"
    assert listed["now"]["nodes_listed"] == "gpu-00, gpu-01"
    names = ", ".join(f"gpu-{i:02}" for i in range(10))
    assert listed["later"]["nodes_listed"] == f"{names} and 2 more"
    assert list(listed) == ["past", "now", "later"]  # by start


def list_queries(client) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert client.get(LIST).status_code == 200
    return len(queries)


def test_the_list_reads_as_many_queries_for_many_windows_as_for_one(admin_client):
    clusters = [ClusterFactory(name=f"c{i}") for i in range(6)]
    window(clusters[0], nodes=[NodeFactory(cluster=clusters[0])])
    one = list_queries(admin_client)
    for cluster in clusters[1:]:
        window(cluster, nodes=[NodeFactory(cluster=cluster) for _ in range(3)])
        window(cluster)

    assert list_queries(admin_client) == one


def test_the_form_lists_the_node_choices_in_a_constant_number_of_queries(admin_client):
    east = ClusterFactory(name="east")
    NodeFactory(cluster=east)
    admin_client.get(ADD)  # what a process reads once (the admin's content types) is read
    with CaptureQueriesContext(connection) as few:
        admin_client.get(ADD)
    for _ in range(10):
        NodeFactory(cluster=ClusterFactory())

    with CaptureQueriesContext(connection) as many:
        page = admin_client.get(ADD)

    assert page.status_code == 200 and len(many) == len(few)


def test_each_change_of_a_window_in_the_admin_or_the_api_wakes_the_scheduler(
    admin_client, django_capture_on_commit_callbacks
):
    east = ClusterFactory(name="east")
    api = APIClient()
    api.force_authenticate(User.objects.get(is_superuser=True))  # the admin client's
    starts = next_month()
    woken = []

    for act in (
        lambda: admin_client.post(ADD, form(east)),
        lambda: admin_client.post(f"{LIST}{MaintenanceWindow.objects.get().pk}/delete/",
                                  {"post": "yes"}),
        lambda: api.post("/api/v1/maintenance/", {
            "cluster": "east", "starts_at": starts.isoformat(),
            "ends_at": (starts + timedelta(hours=4)).isoformat()}, format="json"),
        lambda: api.delete(f"/api/v1/maintenance/{MaintenanceWindow.objects.get().pk}/"),
    ):  # fmt: skip
        with django_capture_on_commit_callbacks() as hooks:
            answer = act()
        woken.append((answer.status_code, actions.kick in hooks))

    assert woken == [(302, True), (302, True), (201, True), (204, True)]
