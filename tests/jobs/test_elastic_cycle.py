"""An elastic gang through a real cycle: the commit records the size it started with on its
attempt and gives each worker placed its allocation; the migration gives earlier attempts
their job's whole gang."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from clusters.models import Allocation
from jobs import cycle
from jobs.models import Attempt, Family, Job
from jobs.states import State
from tests.factories import ClusterFactory, JobFactory, NodeFactory

BEFORE = [("jobs", "0034_attempt_gpu_epoch")]
AFTER = [("jobs", "0035_elastic_gangs")]


@pytest.mark.django_db
def test_an_elastic_gang_starts_with_the_nodes_free_and_its_attempt_says_how_many():
    NodeFactory.create_batch(3, cluster=ClusterFactory())
    gang = JobFactory(family=Family.TRAINING, workers=4, min_workers=2, gpus=8)

    assert len(cycle.run_cycle().placed) == 1

    attempt = Attempt.objects.get(job=gang)
    assert attempt.workers == 3
    ranks = Allocation.objects.filter(attempt=attempt).values_list("worker", flat=True)
    assert sorted(set(ranks)) == [0, 1, 2]
    assert Job.objects.get(pk=gang.pk).state == State.SCHEDULED


@pytest.mark.django_db
def test_a_rigid_gang_that_fits_records_its_whole_size():
    NodeFactory.create_batch(2, cluster=ClusterFactory())
    gang = JobFactory(family=Family.TRAINING, workers=2, gpus=8)

    assert len(cycle.run_cycle().placed) == 1

    assert Attempt.objects.get(job=gang).workers == 2


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("latest_migrations_after")
def test_the_migration_gives_earlier_attempts_their_jobs_whole_gang():
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps
    cluster = old.get_model("clusters", "Cluster").objects.create(name="c")
    tenant = old.get_model("quotas", "Tenant").objects.create(name="t", slug="t")
    owner = old.get_model("auth", "User").objects.create(username="u")
    normal = old.get_model("quotas", "PriorityClass").objects.create(name="normal", value=0)
    Job_ = old.get_model("jobs", "Job")
    Attempt_ = old.get_model("jobs", "Attempt")

    def attempt(workers):
        job = Job_.objects.create(
            tenant=tenant, owner=owner, name="j", family="training", image="i", command=["x"],
            cpu_milli=1, memory_mb=1, priority_class=normal, max_runtime_s=60, workers=workers,
        )  # fmt: skip
        return Attempt_.objects.create(job=job, number=1, cluster=cluster).pk

    one, six = attempt(1), attempt(6)
    executor = MigrationExecutor(connection)
    executor.migrate(AFTER)

    sizes = dict(Attempt.objects.values_list("pk", "workers"))
    assert (sizes[one], sizes[six]) == (1, 6)
