"""A platform admin plans a maintenance window through the API and the CLI, and takes one
back, as the admin's pages do (`POST /api/v1/maintenance/`, `DELETE /api/v1/maintenance/<id>/`):
for a change-management system or a maintenance script. The same checks as the admin's form."""

# ruff: noqa: F811 (a fixture imported from another test file is a test's argument)

from datetime import timedelta

import pytest
from django.utils import timezone

from clusters.models import Booking, MaintenanceWindow
from tests.clusters.test_node_service_api import as_user, cli_of, platform_admin  # noqa: F401
from tests.factories import NodeFactory

pytestmark = pytest.mark.django_db
Z = "%Y-%m-%dT%H:%M:%SZ"


def hours(n: float) -> str:
    return (timezone.now() + timedelta(hours=n)).strftime(Z)


def plan(user, **body):
    return as_user(user).post("/api/v1/maintenance/", body, format="json")


def test_a_window_on_some_nodes_is_planned_and_says_what_it_will_stop(platform_admin, gang):
    # The gang runs on east-0 and east-1 with an hour's runtime limit: past a start in 30 min.
    answer = plan(platform_admin, cluster="east", nodes=["east-0"], starts_at="now+30m",
                  ends_at="now+2h", reason="new PSUs")  # fmt: skip

    assert answer.status_code == 201, answer.json()
    window = MaintenanceWindow.objects.get()
    assert [n.name for n in window.nodes.all()] == ["east-0"]
    assert answer.json()["nodes"] == ["east-0"] and answer.json()["reason"] == "new PSUs"
    assert (answer.json()["in_progress"], answer.json()["stops"]) == (False, 1)
    listed = as_user(platform_admin).get("/api/v1/maintenance/").json()["windows"]
    assert [w["id"] for w in listed] == [window.pk]


def test_a_window_of_no_nodes_named_covers_the_whole_cluster(platform_admin, east):
    NodeFactory(cluster=east, name="gpu-0")

    answer = plan(platform_admin, cluster="east", starts_at=hours(1), ends_at=hours(3))

    assert answer.status_code == 201 and answer.json()["nodes"] == []
    assert answer.json()["stops"] == 0


@pytest.mark.parametrize(
    ("body", "field", "why"),
    [
        ({"cluster": "west"}, "cluster", "No cluster is named 'west'."),
        ({"nodes": ["gpu-9"]}, "nodes", "east has no node 'gpu-9'."),
        ({"ends_at": "now+30m", "starts_at": "now+1h"}, "ends_at",
         "The end must come after the start."),
        ({"starts_at": "now-3h", "ends_at": "now-1h"}, "ends_at", "The end has passed"),
        ({"starts_at": "2026-12-07T10:00:00"}, "starts_at", "No time zone"),
    ],
)  # fmt: skip
def test_what_the_admins_form_refuses_is_a_400_naming_it(platform_admin, east, body, field, why):
    NodeFactory(cluster=east, name="gpu-0")
    asked = {"cluster": "east", "starts_at": "now+1h", "ends_at": "now+3h", **body}

    answer = plan(platform_admin, **asked)

    assert answer.status_code == 400
    assert list(answer.json()) == [field] and why in str(answer.json()[field])
    assert not MaintenanceWindow.objects.exists()


def test_only_a_platform_admin_plans_or_takes_back(platform_admin, alice, east):
    refused = plan(alice, cluster="east", starts_at="now+1h", ends_at="now+3h")
    window = plan(platform_admin, cluster="east", starts_at="now+1h", ends_at="now+3h").json()
    kept = as_user(alice).delete(f"/api/v1/maintenance/{window['id']}/")
    gone = as_user(platform_admin).delete(f"/api/v1/maintenance/{window['id']}/")
    again = as_user(platform_admin).delete(f"/api/v1/maintenance/{window['id']}/")

    assert (refused.status_code, kept.status_code) == (403, 403)
    assert (gone.status_code, again.status_code) == (204, 404)
    assert not MaintenanceWindow.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_the_cli_plans_and_takes_back_a_window(live_server, east, platform_admin):
    NodeFactory(cluster=east, name="gpu-0")
    cli = cli_of(live_server, platform_admin)

    planned = cli("maintenance-add", "east", "--from", "now+1h", "--to", "now+3h",
                  "--nodes", "gpu-0", "--reason", "firmware")  # fmt: skip
    window = MaintenanceWindow.objects.get()
    listed = cli("maintenance")
    taken_back = cli("maintenance-delete", str(window.pk))

    assert planned.returncode == 0, planned.stderr
    assert planned.stdout.startswith(f"maintenance #{window.pk} of east (gpu-0) from ")
    assert planned.stdout.endswith(": 0 running jobs stopped at its start\n")
    assert listed.stdout.splitlines()[1].split()[:3] == [str(window.pk), "east", "gpu-0"]
    assert taken_back.stdout == f"maintenance #{window.pk} taken back: its nodes take work again\n"
    assert not MaintenanceWindow.objects.exists()


def test_a_booking_is_planned_for_a_tenant_and_taken_back(platform_admin, alpha, gang):
    answer = plan_booking(platform_admin, tenant="alpha", cluster="east", nodes=["east-1"],
                          starts_at="now+30m", ends_at="now+2h", reason="deadline")  # fmt: skip
    unknown = plan_booking(platform_admin, tenant="nobody", cluster="east",
                           starts_at="now+1h", ends_at="now+2h")  # fmt: skip
    gone = as_user(platform_admin).delete(f"/api/v1/bookings/{answer.json()['id']}/")

    assert answer.status_code == 201, answer.json()
    # The gang on east-0 and east-1 is not alpha's: it runs past the start, stopped then.
    assert (answer.json()["tenant"], answer.json()["nodes"], answer.json()["stops"]) == (
        "alpha", ["east-1"], 1)  # fmt: skip
    assert unknown.status_code == 400 and list(unknown.json()) == ["tenant"]
    assert gone.status_code == 204 and not Booking.objects.exists()


def test_a_booking_overlapping_another_tenants_is_refused_as_the_admin_refuses_it(
    platform_admin, alpha, gamma, east
):
    NodeFactory(cluster=east, name="gpu-0")
    plan_booking(platform_admin, tenant="gamma", cluster="east", starts_at="now+1h",
                 ends_at="now+3h")  # fmt: skip

    clash = plan_booking(platform_admin, tenant="alpha", cluster="east", nodes=["gpu-0"],
                         starts_at="now+2h", ends_at="now+4h")  # fmt: skip

    assert clash.status_code == 400 and "Overlaps booking #" in str(clash.json()["nodes"])
    assert Booking.objects.count() == 1


def plan_booking(user, **body):
    return as_user(user).post("/api/v1/bookings/", body, format="json")


@pytest.mark.django_db(transaction=True)
def test_the_cli_books_nodes_for_a_tenant_and_takes_the_booking_back(
    live_server, alpha, east, platform_admin
):
    NodeFactory(cluster=east, name="gpu-0")
    cli = cli_of(live_server, platform_admin)

    booked = cli("booking-add", "alpha", "east", "--from", "now+1h", "--to", "now+3h")
    booking = Booking.objects.get()
    taken_back = cli("booking-delete", str(booking.pk))

    assert booked.returncode == 0, booked.stderr
    assert booked.stdout.startswith(f"booking #{booking.pk} for alpha of east (all nodes) from ")
    assert taken_back.stdout == f"booking #{booking.pk} taken back: its nodes take work again\n"
    assert not Booking.objects.exists()
