"""The commit re-checks quotas and users' GPU limits under lock, against what the live
allocations hold now: two schedulers deciding at once (MLSCHED_SINGLE_FLIGHT=0), each on a
snapshot from before the other's placements, cannot both admit a tenant's work past its quota,
and a quota lowered between a snapshot and its commit holds at once."""

import time
from datetime import UTC, datetime

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from clusters.models import Node
from jobs import actions, cycle, snapshot
from jobs.commit import commit_batch
from jobs.models import Family, Job
from jobs.placement import PLACED, place
from jobs.states import State
from quotas.models import Quota
from tests.factories import (
    ClusterFactory,
    JobFactory,
    NodeFactory,
    PriorityClassFactory,
    QuotaFactory,
    TenantFactory,
    UserFactory,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def roomy():
    """A 16-GPU cluster of two nodes: capacity never stops anything here, only limits do."""
    east = ClusterFactory(name="east")
    return [NodeFactory(cluster=east, name=name, gpu_type="A100", gpu_count=8) for name in "ab"]


def decided_apart(first: Job, second: Job, nodes):
    """Two schedulers' placements, each decided on a snapshot that does not see the other's job
    placed, on different nodes (so that capacity lets both through): the first job's decision
    is taken while the second is out of the queue and the second node cordoned, and the other
    way round.
    Returns the placed outcomes of each."""

    def decide(job: Job, other: Job, cordoned):
        # Out of the snapshot for a moment, as a job backing off before a retry is.
        Job.objects.filter(pk=other.pk).update(not_before=datetime(2999, 1, 1, tzinfo=UTC))
        Node.objects.filter(pk=cordoned.pk).update(schedulable=False)
        outcomes = place(snapshot.load(time.time()).snapshot).outcomes
        Node.objects.filter(pk=cordoned.pk).update(schedulable=True)
        Job.objects.filter(pk=other.pk).update(not_before=None)
        placed = [o for o in outcomes if o.status == PLACED]
        assert [int(o.job_id) for o in placed] == [job.pk]
        return placed

    return decide(first, second, nodes[1]), decide(second, first, nodes[0])


def commit_both(first, second) -> list[int]:
    """Commit the first scheduler's placements, then the second's: the placed job ids."""
    moment = datetime.now(tz=UTC)
    return [*commit_batch(first, moment), *commit_batch(second, moment)]


def test_two_schedulers_cannot_both_place_a_tenants_work_past_its_quota(roomy):
    team = TenantFactory(cohort="solo")
    QuotaFactory(tenant=team, flavor="gpu:A100", guaranteed=4, borrow_limit=0)
    one, two = (JobFactory(tenant=team, gpus=4) for _ in range(2))

    placed = commit_both(*decided_apart(one, two, roomy))

    assert placed == [one.pk]
    assert Job.objects.get(pk=two.pk).state == State.QUEUED


def test_the_cohorts_pool_holds_across_two_schedulers(roomy):
    # Two teams of one cohort, each guaranteed 2 and free to borrow 4 more: the cohort's
    # idle guarantee (2 of team c's) lends to one of them, not to both.
    lender = TenantFactory(cohort="pool")
    QuotaFactory(tenant=lender, flavor="gpu:A100", guaranteed=2, borrow_limit=0)
    a, b = TenantFactory(cohort="pool"), TenantFactory(cohort="pool")
    for team in (a, b):
        QuotaFactory(tenant=team, flavor="gpu:A100", guaranteed=2, borrow_limit=4)
    one, two = JobFactory(tenant=a, gpus=4), JobFactory(tenant=b, gpus=4)

    placed = commit_both(*decided_apart(one, two, roomy))

    assert placed == [one.pk]


def test_two_schedulers_cannot_both_take_a_user_past_the_tenants_gpu_limit(roomy):
    team = TenantFactory(cohort="solo", max_gpus_per_user=4)
    user = UserFactory()
    one, two = (JobFactory(tenant=team, owner=user, gpus=4) for _ in range(2))

    placed = commit_both(*decided_apart(one, two, roomy))

    assert placed == [one.pk]


def test_another_user_of_the_tenant_is_not_held_by_the_first_users_limit(roomy):
    team = TenantFactory(cohort="solo", max_gpus_per_user=4)
    one = JobFactory(tenant=team, owner=UserFactory(), gpus=4)
    two = JobFactory(tenant=team, owner=UserFactory(), gpus=4)

    placed = commit_both(*decided_apart(one, two, roomy))

    assert sorted(placed) == [one.pk, two.pk]


def test_a_quota_lowered_after_the_snapshot_holds_at_the_commit(roomy):
    team = TenantFactory(cohort="solo")
    quota = QuotaFactory(tenant=team, flavor="gpu:A100", guaranteed=8, borrow_limit=0)
    job = JobFactory(tenant=team, gpus=4)
    decision = place(snapshot.load(time.time()).snapshot)
    Quota.objects.filter(pk=quota.pk).update(guaranteed=2)

    result = cycle.CycleResult()
    cycle.commit(decision, time.time(), result)

    assert (result.placed, result.skipped) == ([], [job.pk])
    cycle.run_cycle()
    assert Job.objects.get(pk=job.pk).pending_reason == "quota_exceeded"


def test_placements_of_one_batch_are_charged_one_after_another(roomy):
    # One decision placing two jobs that the quota, as it is at the commit, fits only one of.
    team = TenantFactory(cohort="solo")
    quota = QuotaFactory(tenant=team, flavor="gpu:A100", guaranteed=8, borrow_limit=0)
    one, two = (JobFactory(tenant=team, gpus=4) for _ in range(2))
    decision = place(snapshot.load(time.time()).snapshot)
    Quota.objects.filter(pk=quota.pk).update(guaranteed=4)

    result = cycle.CycleResult()
    cycle.commit(decision, time.time(), result)

    assert (result.placed, result.skipped) == ([one.pk], [two.pk])


def test_work_within_limits_is_placed_as_decided(roomy):
    team = TenantFactory(cohort="solo", max_gpus_per_user=8)
    QuotaFactory(tenant=team, flavor="gpu:A100", guaranteed=8, borrow_limit=0)
    QuotaFactory(tenant=team, flavor="cpu", guaranteed=64_000, borrow_limit=0)
    jobs = [JobFactory(tenant=team, gpus=2) for _ in range(4)]

    result = cycle.run_cycle()

    assert sorted(result.placed) == [job.pk for job in jobs] and result.skipped == []


def test_two_schedulers_cannot_both_run_a_batch_past_its_shards_limit(roomy, alpha, alice):
    spec = {"name": "embed", "family": Family.BATCH_INFERENCE, "image": "i", "command": ["x"],
            "cpu_milli": 1000, "memory_mb": 1000, "gpus": 1, "max_runtime_s": 600, "shards": 2,
            "max_running_shards": 1, "priority_class": PriorityClassFactory()}  # fmt: skip
    first = actions.submit(alice, alpha, spec)[0]
    one, two = first.batch()

    placed = commit_both(*decided_apart(one, two, roomy))

    assert placed == [one.pk]


def test_a_shards_limit_lowered_after_the_snapshot_holds_at_the_commit(roomy, alpha, alice):
    spec = {"name": "embed", "family": Family.BATCH_INFERENCE, "image": "i", "command": ["x"],
            "cpu_milli": 1000, "memory_mb": 1000, "gpus": 1, "max_runtime_s": 600, "shards": 3,
            "max_running_shards": 3, "priority_class": PriorityClassFactory()}  # fmt: skip
    first = actions.submit(alice, alpha, spec)[0]
    decision = place(snapshot.load(time.time()).snapshot)
    actions.set_shard_limit(first, 1, "alice")

    result = cycle.CycleResult()
    cycle.commit(decision, time.time(), result)

    assert len(result.placed) == 1 and len(result.skipped) == 2


def test_without_quotas_or_limits_the_commit_reads_no_use(roomy):
    JobFactory(tenant=TenantFactory(cohort="solo"), gpus=4)
    decision = place(snapshot.load(time.time()).snapshot)

    with CaptureQueriesContext(connection) as queries:
        result = cycle.CycleResult()
        cycle.commit(decision, time.time(), result)

    assert len(result.placed) == 1
    assert not [q for q in queries if "SUM(" in q["sql"]]
