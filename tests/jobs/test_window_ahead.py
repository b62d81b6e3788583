"""A running job is told, in its document and on its page, of the maintenance window or the
other team's booking that will stop it before its runtime limit would end it."""

from datetime import timedelta
from html import unescape

import pytest
from django.utils import timezone

from clusters.models import Booking, MaintenanceWindow
from jobs import cycle
from tests.factories import JobFactory, NodeFactory
from tests.jobs.test_maintenance_api import client_for

pytestmark = pytest.mark.django_db
HOUR = timedelta(hours=1)


@pytest.fixture
def running(east, alpha, alice):
    """Alice's job of alpha placed on east's one node, its runtime limit ten hours away."""
    NodeFactory(cluster=east, name="east-0", gpu_count=1)
    job = JobFactory(tenant=alpha, owner=alice, gpus=1, max_runtime_s=10 * 3600)
    cycle.run_cycle()
    job.refresh_from_db()
    return job


def ahead(alice, job):
    return client_for(alice).get(f"/api/v1/jobs/{job.pk}/").json()["window_ahead"]


def page(client, alice, job) -> str:
    client.force_login(alice)
    return client.get(f"/jobs/{job.pk}/").content.decode()


def planned(model, cluster, starts, hours=2, nodes=(), **fields):
    window = model.objects.create(
        cluster=cluster, starts_at=starts, ends_at=starts + hours * HOUR, **fields
    )
    window.nodes.set(nodes)
    return window


def test_a_maintenance_window_before_its_limit_is_given(running, east, alice, client):
    starts = timezone.now() + 2 * HOUR
    planned(MaintenanceWindow, east, starts, reason="firmware")

    window = ahead(alice, running)

    assert (window["kind"], window["cluster"], window["reason"]) == (
        "maintenance",
        "east",
        "firmware",
    )
    assert window["starts_at"].startswith(starts.strftime("%Y-%m-%dT%H:%M"))
    assert window["sentence"].startswith("Maintenance of east (firmware) starts")
    assert "Maintenance of east (firmware) starts" in page(client, alice, running)


def test_a_window_after_its_limit_is_not(running, east, alice, client):
    planned(MaintenanceWindow, east, timezone.now() + 11 * HOUR)

    assert ahead(alice, running) is None
    assert '<p class="note" id="window-ahead" hidden></p>' in page(client, alice, running)


def test_its_own_teams_booking_does_not_stop_it(running, east, alpha, alice):
    planned(Booking, east, timezone.now() + HOUR, tenant=alpha)

    assert ahead(alice, running) is None


def test_another_teams_booking_is_given_without_naming_the_team(
    running, east, gamma, alice, client
):
    planned(Booking, east, timezone.now() + HOUR, tenant=gamma, reason="Gamma's launch")

    window = ahead(alice, running)

    assert (window["kind"], window["reason"]) == ("booking", "")
    html = unescape(page(client, alice, running))
    assert "A booking of east's nodes for another team starts" in html
    assert "Gamma" not in html


def test_a_window_over_other_nodes_is_not(running, east, alice):
    other = NodeFactory(cluster=east, name="east-1", gpu_count=1)
    planned(MaintenanceWindow, east, timezone.now() + HOUR, nodes=[other])

    assert ahead(alice, running) is None


def test_a_queued_job_has_none(east, alpha, alice):
    planned(MaintenanceWindow, east, timezone.now() + HOUR)
    job = JobFactory(tenant=alpha, owner=alice, gpus=1)

    assert ahead(alice, job) is None
