"""The placement cycle against PostgreSQL: load, decide, commit, explain."""

import time
from datetime import timedelta

import pytest
from django.db.models import Count
from django.utils import timezone

from clusters.models import Allocation, Cluster
from jobs import actions, cycle, snapshot
from jobs.models import Attempt, Family, Job, JobEvent
from jobs.placement import place
from jobs.states import State
from tests.factories import (
    AttemptFactory,
    ClusterFactory,
    JobFactory,
    NodeFactory,
    PriorityClassFactory,
    QuotaFactory,
    TenantFactory,
)

pytestmark = pytest.mark.django_db


def n8_a100_nodes(count, cluster=None):
    cluster = cluster or ClusterFactory()
    return [NodeFactory(cluster=cluster, gpu_type="A100", gpu_count=8) for _ in range(count)]


def n1_t4_shareable_nodes(count):
    cluster = ClusterFactory()
    return [
        NodeFactory(cluster=cluster, gpu_type="T4", gpu_count=1, gpu_shareable=True)
        for _ in range(count)
    ]


def training(workers=1, gpus=8, **kw):
    return JobFactory(family=Family.TRAINING, workers=workers, gpus=gpus, **kw)


def test_it_places_a_gang_whole_with_one_attempt_and_one_event():
    n8_a100_nodes(2)
    job = training(workers=2, gpus=8)

    result = cycle.run_cycle()

    job.refresh_from_db()
    assert result.placed == [job.pk]
    assert job.state == State.SCHEDULED
    attempt = job.attempts.get()
    rows = Allocation.objects.filter(attempt=attempt)
    assert rows.count() == 16
    assert rows.values("node_id", "gpu_index").distinct().count() == 16
    assert sorted(rows.values_list("worker", flat=True).distinct()) == [0, 1]
    assert list(job.events.values_list("from_state", "to_state")) == [("queued", "scheduled")]


def test_the_snapshot_counts_the_running_workers_shapes_for_the_workload_mix():
    n8_a100_nodes(2)
    gang = training(workers=2, gpus=4, gpu_types=["A100"])
    n1_t4_shareable_nodes(1)
    share = JobFactory(family=Family.EVALUATION, gpus=0, gpu_milli=250, cpu_milli=500)
    cycle.run_cycle()

    loaded = snapshot.load(time.time()).snapshot

    assert {(s.cpu_milli, s.gpu_milli, s.count, s.gpu_types) for s in loaded.recent_shapes} == {
        (gang.cpu_milli, 4000, 2, ("A100",)),
        (500, 250, 1, ()),
    }
    assert share.attempts.exists()


def test_it_puts_cpu_and_memory_on_each_workers_first_row():
    n8_a100_nodes(1)
    job = training(workers=1, gpus=4, cpu_milli=8000, memory_mb=32_000)

    cycle.run_cycle()

    rows = Allocation.objects.filter(attempt__job=job).order_by("slot")
    assert [(r.slot, r.cpu_milli, r.memory_mb) for r in rows] == [
        (0, 8000, 32_000), (1, 0, 0), (2, 0, 0), (3, 0, 0),
    ]  # fmt: skip


def test_it_leaves_a_job_that_cannot_fit_queued_with_a_reason():
    n8_a100_nodes(2)
    job = training(workers=3, gpus=8)

    cycle.run_cycle()

    job.refresh_from_db()
    assert job.state == State.QUEUED
    assert job.pending_reason != ""
    assert job.pending_message != ""
    assert not job.attempts.exists()


def test_mlsched_queue_depth_stops_the_cycle_after_that_many_waiting_jobs(settings):
    settings.MLSCHED_QUEUE_DEPTH = 1
    n8_a100_nodes(1)
    first, second = training(workers=2), training(workers=2)  # neither fits on one node

    cycle.run_cycle()

    reasons = [Job.objects.get(pk=job.pk).pending_reason for job in (first, second)]
    assert reasons.count("beyond_queue_depth") == 1
    assert all(reasons)


def test_it_shares_a_gpu_between_small_evaluation_jobs_in_disjoint_ranges():
    n1_t4_shareable_nodes(1)
    jobs = [
        JobFactory(family=Family.EVALUATION, gpus=0, gpu_milli=500, gpu_types=["T4"])
        for _ in range(2)
    ]

    cycle.run_cycle()

    ranges = sorted(
        Allocation.objects.filter(attempt__job__in=jobs).values_list("gpu_milli_start", "gpu_milli")
    )
    assert ranges == [(0, 500), (500, 500)]


def test_it_skips_a_placement_whose_gpus_were_taken_after_the_snapshot():
    (node,) = n8_a100_nodes(1)
    job = training(gpus=8)
    now = time.time()
    decision = place(snapshot.load(now).snapshot)
    other = AttemptFactory(cluster=node.cluster)
    Allocation.objects.create(attempt=other, node=node, gpu_index=5, gpu_milli=1000)
    result = cycle.CycleResult()

    cycle.commit(decision, now, result)

    job.refresh_from_db()
    assert (result.placed, result.skipped) == ([], [job.pk])
    assert job.state == State.QUEUED
    assert Allocation.objects.filter(attempt__job=job).count() == 0


def test_it_skips_a_placement_whose_cpu_was_taken_after_the_snapshot():
    (node,) = n8_a100_nodes(1)
    job = training(gpus=1, cpu_milli=90_000)
    now = time.time()
    decision = place(snapshot.load(now).snapshot)
    Allocation.objects.create(attempt=AttemptFactory(cluster=node.cluster), node=node,
                              cpu_milli=10_000)  # fmt: skip
    result = cycle.CycleResult()

    cycle.commit(decision, now, result)

    assert result.skipped == [job.pk]


def test_it_does_not_place_a_job_canceled_after_the_snapshot():
    n8_a100_nodes(1)
    job = training(gpus=8)
    now = time.time()
    decision = place(snapshot.load(now).snapshot)
    actions.cancel(job)
    result = cycle.CycleResult()

    cycle.commit(decision, now, result)

    job.refresh_from_db()
    assert job.state == State.CANCELED
    assert not job.attempts.exists()


def test_it_does_not_place_a_node_cordoned_after_the_snapshot():
    (node,) = n8_a100_nodes(1)
    job = training(gpus=8)
    now = time.time()
    decision = place(snapshot.load(now).snapshot)
    type(node).objects.filter(pk=node.pk).update(schedulable=False)
    result = cycle.CycleResult()

    cycle.commit(decision, now, result)

    assert result.skipped == [job.pk]


def test_a_second_cycle_places_nothing_twice():
    n8_a100_nodes(2)
    jobs = [training(gpus=4) for _ in range(4)]

    first, second = cycle.run_cycle(), cycle.run_cycle()

    assert sorted(first.placed) == sorted(j.pk for j in jobs)
    assert second.placed == []
    assert Attempt.objects.count() == 4


def test_it_ignores_jobs_still_in_retry_backoff():
    n8_a100_nodes(1)
    job = training(gpus=1, not_before=timezone.now() + timedelta(minutes=5))

    result = cycle.run_cycle()

    assert result.considered == 0
    job.refresh_from_db()
    assert job.state == State.QUEUED


def test_it_places_nothing_on_an_unhealthy_cluster():
    cluster = ClusterFactory(health="unhealthy")
    n8_a100_nodes(1, cluster)
    training(gpus=1)

    assert cycle.run_cycle().placed == []


def test_it_respects_a_cluster_selector():
    east = ClusterFactory(labels={"region": "east"})
    west = ClusterFactory(labels={"region": "west"})
    n8_a100_nodes(1, east)
    n8_a100_nodes(1, west)
    job = training(gpus=1, cluster_selector={"region": "west"})

    cycle.run_cycle()

    assert job.attempts.get().cluster == west


def test_a_cluster_no_agent_has_reported_for_takes_no_work():
    n8_a100_nodes(1, ClusterFactory(health=Cluster.Health.UNKNOWN))  # made in the admin
    job = training(gpus=1)

    cycle.run_cycle()

    job.refresh_from_db()
    assert (job.state, job.pending_reason) == (State.QUEUED, "no_healthy_nodes")


def test_a_selector_that_matches_no_cluster_places_nothing():
    n8_a100_nodes(1, ClusterFactory(labels={"region": "east"}))
    job = training(gpus=1, cluster_selector={"region": "mars"})

    cycle.run_cycle()

    job.refresh_from_db()
    assert job.state == State.QUEUED
    assert job.pending_reason == "no_matching_cluster"


def test_it_asks_preempted_victims_to_stop():
    (node,) = n8_a100_nodes(1)
    low = training(
        gpus=8, preemptible=True, priority_class=PriorityClassFactory(name="low", value=-100)
    )
    cycle.run_cycle()
    high = training(
        gpus=8, priority_class=PriorityClassFactory(name="high", value=100, may_preempt=True)
    )

    result = cycle.run_cycle()

    assert result.preempted == [low.pk]
    victim = low.attempts.get()
    assert (victim.stop_reason, victim.stop_requested_at is not None) == ("preempted", True)
    high.refresh_from_db()
    assert (high.state, high.pending_reason) == (State.QUEUED, "waiting_for_preemption")


def test_while_its_victim_is_in_its_grace_period_the_preemptor_evicts_nobody_else():
    n8_a100_nodes(2)
    low = PriorityClassFactory(name="low", value=-100)
    victims = [training(gpus=8, preemptible=True, priority_class=low) for _ in range(2)]
    cycle.run_cycle()
    training(gpus=8, priority_class=PriorityClassFactory(name="high", value=100, may_preempt=True))
    assert len(cycle.run_cycle().preempted) == 1

    later = [cycle.run_cycle() for _ in range(3)]  # the victim has not stopped yet

    assert [r.preempted for r in later] == [[], [], []]
    stopping = Attempt.objects.filter(job__in=victims, stop_requested_at__isnull=False)
    assert stopping.count() == 1


def test_the_room_a_preemptor_made_is_its_own_even_against_a_higher_class():
    n8_a100_nodes(2)
    low = PriorityClassFactory(name="low", value=-100)
    victims = [training(gpus=8, preemptible=True, priority_class=low) for _ in range(2)]
    cycle.run_cycle()
    high = training(
        gpus=8, priority_class=PriorityClassFactory(name="high", value=100, may_preempt=True)
    )
    (victim,) = cycle.run_cycle().preempted
    high.refresh_from_db()
    assert high.preempting_until > timezone.now()
    top = training(gpus=8, priority_class=PriorityClassFactory(name="top", value=200,
                                                               may_preempt=False))  # fmt: skip
    assert cycle.run_cycle().preempted == []  # the victim is in its grace period
    actions.end_attempt(Attempt.objects.get(job_id=victim).pk, Attempt.Outcome.PREEMPTED)

    result = cycle.run_cycle()

    assert (result.placed, result.preempted) == ([high.pk], [])
    high.refresh_from_db()
    top.refresh_from_db()
    assert (high.state, high.preempting_until) == (State.SCHEDULED, None)
    assert top.state == State.QUEUED
    still = [v for v in victims if v.pk != victim]
    assert Attempt.objects.get(job__in=still).stop_requested_at is None


def test_a_job_its_own_quota_blocks_evicts_one_of_its_tenants_lower_jobs_and_starts_there():
    n8_a100_nodes(3)  # a whole node stays idle: the quota, not capacity, blocks the job
    quota = QuotaFactory(guaranteed=16, borrow_limit=0)
    low = PriorityClassFactory(name="low", value=-100)
    lows = [
        training(gpus=8, preemptible=True, priority_class=low, tenant=quota.tenant)
        for _ in range(2)
    ]
    assert len(cycle.run_cycle().placed) == 2
    high = training(
        gpus=8,
        tenant=quota.tenant,
        priority_class=PriorityClassFactory(name="high", value=100, may_preempt=True),
    )
    (victim,) = cycle.run_cycle().preempted
    assert victim in {j.pk for j in lows}
    later = [cycle.run_cycle() for _ in range(3)]  # the victim is in its grace period
    assert [(r.placed, r.preempted) for r in later] == [([], [])] * 3
    high.refresh_from_db()
    assert (high.state, high.pending_reason) == (State.QUEUED, "waiting_for_preemption")
    actions.end_attempt(Attempt.objects.get(job_id=victim).pk, Attempt.Outcome.PREEMPTED)

    assert cycle.run_cycle().placed == [high.pk]
    still = [j for j in lows if j.pk != victim]
    assert Attempt.objects.get(job__in=still).stop_requested_at is None


def test_it_writes_the_explanation_only_when_it_changes():
    n8_a100_nodes(1)
    job = training(workers=2, gpus=8)
    cycle.run_cycle()
    job.refresh_from_db()
    first = (job.pending_reason, job.pending_message)

    cycle.run_cycle()

    job.refresh_from_db()
    assert (job.pending_reason, job.pending_message) == first
    assert JobEvent.objects.filter(job=job).count() == 0


def test_every_live_job_has_at_most_one_live_attempt():
    n8_a100_nodes(4)
    for _ in range(10):
        training(gpus=4)

    cycle.run_cycle()
    cycle.run_cycle()

    per_job = Attempt.objects.filter(outcome="").values("job").annotate(n=Count("id"))
    assert {row["n"] for row in per_job} == {1}
    assert Job.objects.filter(state=State.SCHEDULED).count() == 8


def test_batch_shards_are_placed_independently_as_room_allows(alpha, alice):
    n8_a100_nodes(1)
    first, _ = actions.submit(
        alice, alpha,
        {"name": "embed", "family": Family.BATCH_INFERENCE, "image": "i", "command": ["x"],
         "cpu_milli": 1000, "memory_mb": 1000, "gpus": 3, "max_runtime_s": 60, "shards": 4,
         "priority_class": PriorityClassFactory()},
    )  # fmt: skip

    cycle.run_cycle()

    shards = Job.objects.filter(pk=first.pk) | Job.objects.filter(parent=first)
    states = sorted(shards.values_list("state", flat=True))
    assert states == [State.QUEUED, State.QUEUED, State.SCHEDULED, State.SCHEDULED]


def test_a_priority_class_that_may_not_preempt_leaves_lower_tiers_running():
    n8_a100_nodes(1)
    low = training(gpus=8, preemptible=True,
                   priority_class=PriorityClassFactory(name="low", value=-100))  # fmt: skip
    cycle.run_cycle()
    training(gpus=8, priority_class=PriorityClassFactory(name="high", value=100,
                                                         may_preempt=False))  # fmt: skip

    result = cycle.run_cycle()

    assert result.preempted == []
    assert low.attempts.get().stop_requested_at is None


# -- preemption exempt time (PriorityClass.preempt_exempt_s) ---------------------------------


def started_low_job(minutes_ago: float, exempt_s: int) -> Job:
    """A preemptible 8-GPU job of a class exempt for `exempt_s`, running for `minutes_ago`."""
    low = PriorityClassFactory(name="low", value=-100, preempt_exempt_s=exempt_s)
    job = training(gpus=8, preemptible=True, priority_class=low)
    cycle.run_cycle()
    started = timezone.now() - timedelta(minutes=minutes_ago)
    job.attempts.update(scheduled_at=started, started_at=started)
    return job


def urgent() -> Job:
    return training(
        gpus=8, priority_class=PriorityClassFactory(name="high", value=100, may_preempt=True)
    )


def test_a_job_in_its_classs_exempt_time_is_not_evicted_for_a_higher_class(settings):
    n8_a100_nodes(1)
    low = started_low_job(minutes_ago=5, exempt_s=600)
    high = urgent()

    result = cycle.run_cycle()

    high.refresh_from_db()
    assert result.preempted == []
    assert low.attempts.get().stop_requested_at is None
    # Its nodes held from when it may evict the job, and the job has gone.
    assert (high.state, high.pending_reason) == (State.QUEUED, "waiting_for_exempt_work")
    exempt_ends = low.attempts.get().started_at + timedelta(seconds=600)
    grace = timedelta(seconds=2 * settings.MLSCHED_STOP_GRACE_S)
    assert abs(high.estimated_start - (exempt_ends + grace)) < timedelta(seconds=1)


def test_a_job_past_its_classs_exempt_time_is_evicted_for_a_higher_class():
    n8_a100_nodes(1)
    low = started_low_job(minutes_ago=11, exempt_s=600)
    urgent()

    assert cycle.run_cycle().preempted == [low.pk]


def test_capacity_borrowed_is_reclaimed_even_in_the_exempt_time():
    n8_a100_nodes(1)
    lender, borrower = TenantFactory(slug="lender"), TenantFactory(slug="borrower")
    QuotaFactory(tenant=lender, flavor="gpu:A100", guaranteed=8, borrow_limit=0)
    QuotaFactory(tenant=borrower, flavor="gpu:A100", guaranteed=0, borrow_limit=8)
    low = PriorityClassFactory(name="low", value=-100, preempt_exempt_s=3600)
    lent = training(gpus=8, preemptible=True, priority_class=low, tenant=borrower)
    cycle.run_cycle()
    training(gpus=8, priority_class=low, tenant=lender)

    assert cycle.run_cycle().preempted == [lent.pk]
