"""An attempt records the GPU type it runs on: the usage reports read it after the allocation
rows are gone."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from jobs import cycle
from jobs.models import Attempt, Family
from tests.factories import JobFactory, NodeFactory

BEFORE = [("jobs", "0014_job_created_on_database_clock")]
AFTER = [("jobs", "0015_attempt_gpu_type")]


@pytest.mark.django_db
def test_the_commit_records_each_attempts_gpu_type_and_none_for_cpu_only_work():
    NodeFactory(gpu_type="A100", gpu_count=8)
    gang = JobFactory(family=Family.TRAINING, workers=1, gpus=8)
    cpu_only = JobFactory(family=Family.BATCH_INFERENCE, gpus=0, gpu_milli=0)

    assert len(cycle.run_cycle().placed) == 2

    assert Attempt.objects.get(job=gang).gpu_type == "A100"
    assert Attempt.objects.get(job=cpu_only).gpu_type == ""


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("latest_migrations_after")
def test_the_migration_takes_earlier_attempts_gpu_types_from_their_allocation_rows():
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps
    cluster = old.get_model("clusters", "Cluster").objects.create(name="c")
    Node = old.get_model("clusters", "Node")
    gpu_node = Node.objects.create(cluster=cluster, name="g", cpu_milli=8000, memory_mb=8000,
                                   gpu_type="H100", gpu_count=8)  # fmt: skip
    tenant = old.get_model("quotas", "Tenant").objects.create(name="t", slug="t")
    owner = old.get_model("auth", "User").objects.create(username="u")
    normal = old.get_model("quotas", "PriorityClass").objects.create(name="normal", value=0)
    Job = old.get_model("jobs", "Job")
    Attempt_ = old.get_model("jobs", "Attempt")
    Allocation = old.get_model("clusters", "Allocation")

    def attempt(gpu_index):
        job = Job.objects.create(tenant=tenant, owner=owner, name="j", family="training",
                                 image="i", command=["x"], cpu_milli=1, memory_mb=1,
                                 priority_class=normal, max_runtime_s=60)  # fmt: skip
        made = Attempt_.objects.create(job=job, number=1, cluster=cluster)
        if gpu_index != "pruned":
            Allocation.objects.create(attempt=made, node=gpu_node, gpu_index=gpu_index,
                                      gpu_milli=1000 if gpu_index is not None else 0)  # fmt: skip
        return made.pk

    on_gpu, cpu_only, pruned = attempt(0), attempt(None), attempt("pruned")
    executor = MigrationExecutor(connection)
    executor.migrate(AFTER)

    types = dict(Attempt.objects.values_list("pk", "gpu_type"))
    assert (types[on_gpu], types[cpu_only], types[pruned]) == ("H100", "", None)
