"""Fair share with memory: the cycle keeps each tenant's recent use (quotas.RecentUse), an
average of what its running work held in which each moment weighs half as much every
MLSCHED_FAIR_SHARE_HALF_LIFE_H hours, and orders tenants by it beside what they hold now."""

import time
from datetime import UTC, datetime, timedelta

import pytest
from rest_framework.test import APIClient

from jobs import cycle
from jobs.models import Job
from jobs.states import State
from quotas.models import RecentUse
from tests.factories import JobFactory, NodeFactory
from tests.jobs import test_cli

pytestmark = pytest.mark.django_db

cli = test_cli.cli  # the command line against a live server, as Alice

HOUR = 3600.0


@pytest.fixture
def room(east):
    """One 8-GPU node."""
    return NodeFactory(cluster=east, name="east-0", gpu_type="A100", gpu_count=8)


@pytest.fixture(autouse=True)
def half_life_of_an_hour(settings):
    settings.MLSCHED_FAIR_SHARE_HALF_LIFE_H = 1.0


def gpus_recently(tenant) -> float:
    return RecentUse.objects.get(tenant=tenant).use.get("gpu", 0.0) / 1000


def test_a_tenants_recent_use_moves_halfway_to_what_it_holds_each_half_life(alpha, room):
    JobFactory(tenant=alpha, gpus=8)
    start = time.time()
    cycle.run_cycle(now=start)  # first seen: its recent use starts from nothing

    cycle.run_cycle(now=start + HOUR)
    after_one = gpus_recently(alpha)
    cycle.run_cycle(now=start + 2 * HOUR)

    assert (after_one, gpus_recently(alpha)) == pytest.approx((4.0, 6.0))


def test_it_is_brought_up_to_date_once_a_minute_at_most(alpha, room):
    JobFactory(tenant=alpha, gpus=8)
    start = time.time()
    cycle.run_cycle(now=start)

    cycle.run_cycle(now=start + 30)

    assert gpus_recently(alpha) == 0.0
    assert RecentUse.objects.get(tenant=alpha).at.timestamp() == pytest.approx(start)


@pytest.mark.parametrize(
    ("half_life_h", "placed"), [(1.0, "gamma"), (0.0, "alpha")],
    ids=["counted", "switched off: what each holds now alone"],
)  # fmt: skip
def test_a_team_that_held_the_gpus_recently_waits_behind_one_that_did_not(
    alpha, gamma, room, settings, half_life_h, placed
):
    settings.MLSCHED_FAIR_SHARE_HALF_LIFE_H = half_life_h
    now = time.time()
    at = datetime.fromtimestamp(now, tz=UTC)
    RecentUse.objects.create(tenant=alpha, use={"gpu": 16_000.0}, at=at)
    RecentUse.objects.create(tenant=gamma, use={}, at=at)
    jobs = {"alpha": JobFactory(tenant=alpha, gpus=8), "gamma": JobFactory(tenant=gamma, gpus=8)}
    # alpha's has waited an hour longer: on what each holds now alone, it goes first.
    earlier = at - timedelta(hours=1)
    Job.objects.filter(pk=jobs["alpha"].pk).update(created=earlier, eligible_at=earlier)

    cycle.run_cycle(now=now)

    assert Job.objects.get(pk=jobs[placed].pk).state == State.SCHEDULED
    assert Job.objects.filter(state=State.QUEUED).count() == 1


def test_the_quota_api_and_page_show_what_a_team_held_recently(alpha, alice, client):
    RecentUse.objects.create(tenant=alpha, use={"gpu": 2_500.0}, at=datetime.now(tz=UTC))
    api = APIClient()
    api.force_authenticate(alice)
    client.force_login(alice)

    (team,) = api.get("/api/v1/quotas/").json()["tenants"]
    page = client.get("/quotas/").text

    assert team["recent_gpus"] == 2.5
    assert "2.5 GPUs held recently" in page


def test_the_cli_quota_says_what_a_team_held_recently(alpha, cli):
    RecentUse.objects.create(tenant=alpha, use={"gpu": 2_500.0}, at=datetime.now(tz=UTC))

    shown = cli("quota")

    assert "alpha: 0 queued, 0 waiting for quota, 2.5 GPUs held recently (fair share)" in (
        shown.stdout
    )
