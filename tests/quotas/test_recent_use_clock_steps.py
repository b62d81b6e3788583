"""A tenant's recent use goes on when the database's clock steps back: the moment its
average runs to (quotas.RecentUse.at), written while the clock ran ahead, does not stop the
average for as long as the clock was ahead."""

import time
from datetime import UTC, datetime, timedelta

import pytest

from jobs import cycle
from quotas.models import RecentUse
from tests.factories import JobFactory, NodeFactory

pytestmark = pytest.mark.django_db

HOUR = 3600.0


@pytest.fixture(autouse=True)
def half_life_of_an_hour(settings):
    settings.MLSCHED_FAIR_SHARE_HALF_LIFE_H = 1.0


def test_it_moves_on_from_now_once_the_clock_has_stepped_back_a_day(alpha, east):
    NodeFactory(cluster=east, name="east-0", gpu_type="A100", gpu_count=8)
    JobFactory(tenant=alpha, gpus=8)
    now = time.time()
    ahead = datetime.fromtimestamp(now, tz=UTC) + timedelta(days=1)
    RecentUse.objects.create(tenant=alpha, use={}, at=ahead)  # the clock ran a day ahead

    cycle.run_cycle(now=now)  # places the job
    cycle.run_cycle(now=now + HOUR)

    assert RecentUse.objects.get(tenant=alpha).use.get("gpu", 0.0) == pytest.approx(4000.0)
