"""A tenant's recent use goes on when the database's clock steps back: the moment its
average runs to (quotas.RecentUse.at), written while the clock ran ahead, does not stop the
average for as long as the clock was ahead."""

import time
from datetime import UTC, datetime, timedelta

import pytest

from jobs import cycle, recent_use, snapshot
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


@pytest.mark.django_db(transaction=True)
def test_a_tenant_deleted_since_the_snapshot_does_not_fail_the_cycles_update(alpha, gamma):
    seen = snapshot.tenants([], recent_use.stored())
    gamma.delete()

    recent_use.update(seen, {}, time.time())  # the cycle's step 1, with its snapshot's tenants
    recent_use.update(snapshot.tenants([], {}), recent_use.stored(), time.time())  # the next

    assert list(RecentUse.objects.values_list("tenant_id", flat=True)) == [alpha.pk]
