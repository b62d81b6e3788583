"""Planning a maintenance window or a booking in the admin says how many running jobs on its
nodes may run past its start by their runtime limit, which the sweep will stop then."""

from datetime import timedelta

import pytest
from django.contrib.messages import get_messages
from django.utils import timezone

from jobs import cycle
from tests.clusters.test_maintenance_admin import form as window_form
from tests.factories import ClusterFactory, JobFactory, NodeFactory
from tests.quotas import test_admin as quota_admin_tests

pytestmark = pytest.mark.django_db
admin_client = quota_admin_tests.admin_client  # a superuser's client


def in_hours(hours: int) -> str:
    """A time that many hours from now, as the admin's form posts it."""
    return (timezone.now() + timedelta(hours=hours)).strftime("%Y-%m-%d %H:%M:%S")


def warnings(page) -> list[str]:
    return [str(m) for m in get_messages(page.wsgi_request) if m.level_tag == "warning"]


@pytest.fixture
def busy(alpha, gamma):
    """One node of east running a short job of alpha's and a long one of gamma's."""
    east = ClusterFactory(name="east")
    node = NodeFactory(cluster=east, name="east-0", gpu_count=2)
    JobFactory(tenant=alpha, gpus=1, max_runtime_s=3600)
    JobFactory(tenant=gamma, gpus=1, max_runtime_s=10 * 3600)
    cycle.run_cycle()
    return east, node


def test_maintenance_says_how_many_running_jobs_it_will_stop(admin_client, busy):
    east, node = busy

    page = admin_client.post(
        "/admin/clusters/maintenancewindow/add/",
        window_form(east, [node], starts=in_hours(2), ends=in_hours(4)),
        follow=True,
    )

    (warning,) = warnings(page)
    assert warning.startswith("1 running job on these nodes may run past")
    assert "will be stopped then" in warning


def test_maintenance_after_every_runtime_limit_says_nothing(admin_client, busy):
    east, node = busy

    page = admin_client.post(
        "/admin/clusters/maintenancewindow/add/",
        window_form(east, [node], starts=in_hours(11), ends=in_hours(12)),
        follow=True,
    )

    assert warnings(page) == []


def test_a_booking_counts_only_the_other_tenants_jobs(admin_client, busy, alpha, gamma):
    east, node = busy
    now_on = window_form(east, [node], starts=in_hours(-1), ends=in_hours(2))

    for_alpha = admin_client.post(
        "/admin/clusters/booking/add/", {**now_on, "tenant": alpha.pk}, follow=True
    )
    for_gamma = admin_client.post(
        "/admin/clusters/booking/add/",
        {**window_form(east, [node], starts=in_hours(3), ends=in_hours(5)), "tenant": gamma.pk},
        follow=True,
    )

    assert [w[:2] for w in warnings(for_alpha)] == ["1 "]  # gamma's long job
    assert warnings(for_gamma) == []  # alpha's job ends first; gamma's own is let in
