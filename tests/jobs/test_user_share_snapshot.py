"""The snapshot gives the placement core each job's owner and, per tenant, the GPUs each user's
running workers hold: fair share between a team's users orders the tenant's queue by them."""

import time

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from jobs import cycle, snapshot
from jobs.models import Family
from tests.factories import ClusterFactory, JobFactory, NodeFactory, TenantFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def room():
    """An 8-GPU node and a CPU-only node in one cluster."""
    cluster = ClusterFactory()
    NodeFactory(cluster=cluster, gpu_type="A100", gpu_count=8)
    NodeFactory(cluster=cluster, gpu_type="", gpu_count=0)


def test_it_gives_each_job_its_owner(room, alpha, alice, bob):
    running = JobFactory(tenant=alpha, owner=alice)
    cycle.run_cycle()
    queued = JobFactory(tenant=alpha, owner=bob, gpus=16)  # fits nowhere

    loaded = snapshot.load(time.time()).snapshot

    assert [(j.id, j.owner) for j in loaded.running] == [(str(running.pk), str(alice.pk))]
    assert [(j.id, j.owner) for j in loaded.queued] == [(str(queued.pk), str(bob.pk))]


def test_it_gives_each_tenant_the_gpus_its_users_running_workers_hold(
    room, alpha, alice, bob, gamma, charlie
):
    JobFactory(tenant=alpha, owner=alice, workers=2, gpus=2)  # 4 GPUs
    JobFactory(tenant=alpha, owner=alice, family=Family.BATCH_INFERENCE, workers=2, gpus=0)
    JobFactory(tenant=alpha, owner=bob, gpus=1)
    JobFactory(tenant=gamma, owner=charlie, gpus=1)
    JobFactory(tenant=gamma, owner=alice, gpus=2)
    cycle.run_cycle()

    loaded = snapshot.load(time.time()).snapshot

    use = {t.id: dict(t.user_use) for t in loaded.tenants}
    # A CPU-only worker counts as an eighth of a GPU, as a job's size does.
    assert use[str(alpha.pk)] == {str(alice.pk): 4.25, str(bob.pk): 1.0}
    assert use[str(gamma.pk)] == {str(charlie.pk): 1.0, str(alice.pk): 2.0}


def test_a_tenant_with_nothing_running_has_no_users_gpus(room, alpha):
    assert [dict(t.user_use) for t in snapshot.load(time.time()).snapshot.tenants] == [{}]


def test_the_snapshot_costs_the_same_queries_for_one_user_as_for_five(room):
    # Owners and users' GPUs come with the rows the snapshot reads anyway.
    tenant = TenantFactory()
    JobFactory(tenant=tenant, owner=UserFactory())
    cycle.run_cycle()
    one = _queries_of_a_load()
    for _ in range(4):
        JobFactory(tenant=tenant, owner=UserFactory())
    cycle.run_cycle()

    assert _queries_of_a_load() == one


def _queries_of_a_load() -> int:
    with CaptureQueriesContext(connection) as queries:
        snapshot.load(time.time())
    return len(queries)


def test_a_teammates_jobs_take_turns_with_a_users_long_queue_in_one_cycle(room, alpha, alice, bob):
    # Alice queued ten one-GPU jobs before Bob's two, on a node of eight GPUs: by submission
    # alone Alice would take all eight.
    alices = [JobFactory(tenant=alpha, owner=alice, gpus=1, cpu_milli=1000) for _ in range(10)]
    bobs = [JobFactory(tenant=alpha, owner=bob, gpus=1, cpu_milli=1000) for _ in range(2)]

    placed = set(cycle.run_cycle().placed)

    assert {job.pk for job in bobs} <= placed
    assert len(placed & {job.pk for job in alices}) == 6
