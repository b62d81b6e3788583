"""Real scheduler processes racing and dying on PostgreSQL."""

import signal
from collections import defaultdict

import pytest
from django.db.models import Count, Sum

from clusters.models import Allocation, Node
from jobs import cycle
from jobs.models import Attempt, Family, Job, JobEvent
from jobs.states import State
from tests.factories import ClusterFactory, JobFactory, NodeFactory
from tests.jobs.test_lock_order import other_connection
from tests.processes import manage, process_env, wait_until, waiting_on_a_lock

pytestmark = pytest.mark.django_db(transaction=True)


def cluster_with_nodes(count, gpus=8, cpu_milli=32_000, memory_mb=256_000):
    cluster = ClusterFactory()
    return [
        NodeFactory(cluster=cluster, gpu_count=gpus, cpu_milli=cpu_milli, memory_mb=memory_mb)
        for _ in range(count)
    ]


def mixed_jobs(count):
    """Training and evaluation jobs of 1-8 GPUs and 2-16 cores: more than the nodes hold."""
    shapes = [(1, 2000), (2, 16_000), (4, 8000), (8, 4000), (1, 12_000), (2, 4000)]
    return [
        JobFactory(family=Family.TRAINING if gpus > 1 else Family.EVALUATION, gpus=gpus,
                   cpu_milli=cpu, memory_mb=16_000)
        for gpus, cpu in (shapes[i % len(shapes)] for i in range(count))
    ]  # fmt: skip


def assert_nothing_over_committed():
    live = Allocation.objects.active()
    per_node = live.values("node_id").annotate(cpu=Sum("cpu_milli"), mem=Sum("memory_mb"))
    capacity = {n.pk: n for n in Node.objects.all()}
    for row in per_node:
        node = capacity[row["node_id"]]
        assert row["cpu"] <= node.cpu_milli, f"CPU over-committed on {node}"
        assert row["mem"] <= node.memory_mb, f"memory over-committed on {node}"
    per_gpu = (
        live.exclude(gpu_index=None).values("node_id", "gpu_index").annotate(milli=Sum("gpu_milli"))
    )
    assert all(row["milli"] <= 1000 for row in per_gpu), "a GPU is over-committed"


def test_concurrent_schedulers_without_single_flight_never_double_book():
    cluster_with_nodes(6)
    jobs = mixed_jobs(60)
    env = process_env(MLSCHED_SINGLE_FLIGHT=0, MLSCHED_COMMIT_BATCH=3)
    # Every process decides on the same snapshot: the nodes are locked until all four wait
    # for them to commit, however long each took to start.
    blocker = other_connection()
    blocker.execute("SELECT * FROM clusters_node FOR UPDATE")
    schedulers = [
        manage("run_scheduler", "--ticks", "3", "--interval", "0", env=env) for _ in range(4)
    ]
    try:
        racing = wait_until(lambda: waiting_on_a_lock("clusters_node", sessions=4), 120)
        assert racing, "the schedulers never all reached their commits"
    finally:
        blocker.rollback()
        blocker.close()
    outputs = [p.communicate(timeout=120)[0] for p in schedulers]

    assert [p.returncode for p in schedulers] == [0] * 4, outputs
    assert_nothing_over_committed()
    attempts = Attempt.objects.values("job_id").annotate(n=Count("id"))
    assert {row["n"] for row in attempts} == {1}, "a job was placed twice"
    placed = Job.objects.filter(state=State.SCHEDULED).count()
    assert placed == len(attempts) > 0
    assert JobEvent.objects.filter(to_state=State.SCHEDULED).count() == placed
    reported = defaultdict(int)
    for out in outputs:
        fields = out.strip().splitlines()[-1].split()
        reported["placed"] += int(fields[3])
        reported["skipped"] += int(fields[5])
        reported["errors"] += int(fields[7])
    assert reported["errors"] == 0, outputs
    assert reported["placed"] == placed
    # The race was real: decisions made on the same snapshot lost to another scheduler's commit.
    assert reported["skipped"] > 0
    assert len(jobs) > placed


def test_a_scheduler_killed_mid_commit_leaves_nothing_and_the_next_cycle_completes():
    cluster_with_nodes(2)
    jobs = [JobFactory(family=Family.TRAINING, gpus=4) for _ in range(4)]
    cycle.beat()  # the shard row exists
    blocker = other_connection()
    # Hold the shard row: the scheduler's batch writes attempts, allocations, job updates and
    # events, then waits here, on its last statement before COMMIT.
    blocker.execute("SELECT * FROM jobs_schedulershard WHERE name = 'default' FOR UPDATE")
    scheduler = manage("run_scheduler", "--ticks", "1")
    try:
        waiting = wait_until(lambda: waiting_on_a_lock("jobs_schedulershard"), 60)
        assert waiting, "the scheduler never reached the end of its commit"
        assert Allocation.objects.count() == 0  # its rows are not visible before COMMIT
        scheduler.send_signal(signal.SIGKILL)
        scheduler.wait(timeout=30)
    finally:
        blocker.rollback()
        blocker.close()

    assert Allocation.objects.count() == 0
    assert Attempt.objects.count() == 0
    assert JobEvent.objects.count() == 0
    assert set(Job.objects.values_list("state", flat=True)) == {State.QUEUED}

    result = cycle.run_cycle()

    assert sorted(result.placed) == sorted(j.pk for j in jobs)
    assert Allocation.objects.active().count() == 16
    assert_nothing_over_committed()
