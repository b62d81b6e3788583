"""The database itself refuses to over-commit a GPU, whatever the scheduler believes."""

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from clusters.models import Allocation
from tests.factories import AttemptFactory, JobFactory, NodeFactory

ROOT = Path(__file__).resolve().parents[2]


def allocate(node, gpu_index, milli=1000, start=0, active=True):
    attempt = AttemptFactory(job=JobFactory(), cluster=node.cluster)
    return Allocation.objects.create(
        attempt=attempt, node=node, gpu_index=gpu_index, gpu_milli_start=start,
        gpu_milli=milli, active=active, released=None if active else timezone.now(),
    )  # fmt: skip


@pytest.fixture
def node(db):
    return NodeFactory()


def test_it_refuses_a_second_whole_allocation_of_one_gpu(node):
    allocate(node, gpu_index=3)

    with pytest.raises(IntegrityError), transaction.atomic():
        allocate(node, gpu_index=3)

    assert Allocation.objects.active().filter(node=node, gpu_index=3).count() == 1


def test_it_allows_whole_allocations_of_different_gpus(node):
    for index in range(node.gpu_count):
        allocate(node, gpu_index=index)

    assert Allocation.objects.active().filter(node=node).count() == 8


def test_it_allows_shares_that_add_up_to_one_gpu(node):
    allocate(node, gpu_index=0, milli=250, start=0)
    allocate(node, gpu_index=0, milli=750, start=250)

    assert Allocation.objects.active().filter(node=node, gpu_index=0).count() == 2


def test_it_refuses_a_share_beyond_the_gpus_capacity(node):
    allocate(node, gpu_index=0, milli=500, start=0)
    allocate(node, gpu_index=0, milli=500, start=500)

    for start in (0, 250, 999):
        with pytest.raises(IntegrityError), transaction.atomic():
            allocate(node, gpu_index=0, milli=1, start=start)


def test_it_refuses_a_share_that_reaches_past_the_end_of_the_gpu(node):
    with pytest.raises(IntegrityError), transaction.atomic():
        allocate(node, gpu_index=0, milli=200, start=900)


def test_it_refuses_a_share_on_a_gpu_held_whole(node):
    allocate(node, gpu_index=1)

    with pytest.raises(IntegrityError), transaction.atomic():
        allocate(node, gpu_index=1, milli=100, start=900)


def test_a_released_allocation_frees_its_gpu(node):
    held = allocate(node, gpu_index=2)
    Allocation.objects.filter(pk=held.pk).update(active=False, released=timezone.now())

    allocate(node, gpu_index=2)

    assert Allocation.objects.active().filter(node=node, gpu_index=2).count() == 1


def test_it_refuses_reactivating_an_allocation_whose_gpu_was_given_away(node):
    old = allocate(node, gpu_index=4, active=False)
    allocate(node, gpu_index=4)

    with pytest.raises(IntegrityError), transaction.atomic():
        Allocation.objects.filter(pk=old.pk).update(active=True, released=None)


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_transactions_cannot_take_the_same_gpu():
    node = NodeFactory()
    attempts = [AttemptFactory(job=JobFactory(), cluster=node.cluster) for _ in range(2)]
    first_inserted, results = threading.Event(), {}

    def take(i):
        try:
            with transaction.atomic():
                Allocation.objects.create(
                    attempt=attempts[i], node=node, gpu_index=0, gpu_milli=1000
                )
                if i == 0:
                    first_inserted.set()
                    # Hold the transaction open while the other one tries.
                    threading.Event().wait(0.5)
            results[i] = "committed"
        except IntegrityError:
            results[i] = "refused"
        finally:
            connection.close()

    holder = threading.Thread(target=take, args=(0,))
    holder.start()
    first_inserted.wait(5)
    contender = threading.Thread(target=take, args=(1,))
    contender.start()
    holder.join()
    contender.join()

    assert results == {0: "committed", 1: "refused"}
    assert Allocation.objects.active().filter(node=node, gpu_index=0).count() == 1


SQLITE_SCRIPT = """
import django
django.setup()
from django.core.management import call_command
from django.db import IntegrityError, transaction
from clusters.models import Allocation, Cluster, Node
from jobs.models import Attempt, Job
from quotas.models import PriorityClass, Tenant
from django.contrib.auth.models import User

call_command("migrate", verbosity=0)
cluster = Cluster.objects.create(name="c")
node = Node.objects.create(cluster=cluster, name="n", cpu_milli=1, memory_mb=1,
                           gpu_type="T4", gpu_count=1)
tenant = Tenant.objects.create(name="t", slug="t")
user = User.objects.create(username="u")
pc = PriorityClass.objects.create(name="normal", value=0)
def attempt():
    job = Job.objects.create(tenant=tenant, owner=user, name="j", family="evaluation",
                             image="i", command=["x"], cpu_milli=1, memory_mb=1,
                             priority_class=pc, max_runtime_s=1)
    return Attempt.objects.create(job=job, number=1, cluster=cluster)
Allocation.objects.create(attempt=attempt(), node=node, gpu_index=0, gpu_milli=600)
Allocation.objects.create(attempt=attempt(), node=node, gpu_index=0, gpu_milli_start=600,
                          gpu_milli=400)
try:
    with transaction.atomic():
        Allocation.objects.create(attempt=attempt(), node=node, gpu_index=0,
                                  gpu_milli_start=500, gpu_milli=200)
    print("accepted")
except IntegrityError:
    print("refused")
"""


def test_the_embedded_sqlite_database_refuses_gpu_overcommit_too(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(MLSCHED_VAR_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="mlsched_site.settings")

    out = subprocess.run(
        [sys.executable, "-c", SQLITE_SCRIPT],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "refused"
