"""Two schedulers that decide from snapshots taken before either evicted (MLSCHED_SINGLE_FLIGHT=0)
evict once for a preemptor: the second finds the preemptor's claim changed since its snapshot,
and its victims, the same or others, keep running."""

import time

import pytest

from jobs import actions, cycle, snapshot
from jobs.models import Attempt, Family, Job
from jobs.placement import place
from jobs.states import State
from tests.factories import ClusterFactory, JobFactory, NodeFactory, PriorityClassFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def crowded():
    """One 8-GPU node full of two preemptible 4-GPU jobs, and a 4-GPU job that may preempt."""
    NodeFactory(cluster=ClusterFactory(name="east"), gpu_type="A100", gpu_count=8)
    low = PriorityClassFactory(name="low", value=-100)
    lows = [
        JobFactory(family=Family.TRAINING, gpus=4, preemptible=True, priority_class=low)
        for _ in range(2)
    ]
    cycle.run_cycle()
    high = PriorityClassFactory(name="high", value=100, may_preempt=True)
    return JobFactory(family=Family.TRAINING, gpus=4, priority_class=high), lows


def stopping() -> list[int]:
    asked = Attempt.objects.filter(stop_requested_at__isnull=False)
    return sorted(asked.values_list("job_id", flat=True))


def test_the_second_scheduler_evicts_nothing_for_a_preemptor_the_first_evicted_for(crowded):
    now = time.time()
    first, second = snapshot.load(now), snapshot.load(now)  # both before any eviction

    asked = cycle.preempt(place(first.snapshot), now, first)
    again = cycle.preempt(place(second.snapshot), now, second)

    assert len(asked) == 1 and again == []
    assert stopping() == asked


def test_a_stale_decision_naming_other_victims_stops_none_of_them(crowded):
    high, (low1, low2) = crowded
    seen = {high.pk: None}  # the snapshot before any eviction
    assert actions.preempt({high.pk: [low1.pk]}, claims_seen=seen) == [low1.pk]

    assert actions.preempt({high.pk: [low2.pk]}, claims_seen=seen) == []
    assert stopping() == [low1.pk]


def test_a_later_decision_that_saw_the_claim_may_evict_more(crowded):
    high, (low1, low2) = crowded
    actions.preempt({high.pk: [low1.pk]}, claims_seen={high.pk: None})
    claim = Job.objects.get(pk=high.pk).preempting_until

    assert actions.preempt({high.pk: [low2.pk]}, claims_seen={high.pk: claim}) == [low2.pk]
    assert stopping() == [low1.pk, low2.pk]
    assert Job.objects.get(pk=high.pk).state == State.QUEUED


def test_a_victim_placed_again_since_the_snapshot_runs_on_in_its_new_place(crowded):
    high, (low1, low2) = crowded
    seen = snapshot.load(time.time())
    # Meanwhile low1's attempt ends (its node drained, say) and it is placed again (high is
    # held for that moment, or it would take the room).
    first = low1.attempts.get()
    actions.end_attempt(first.pk, Attempt.Outcome.PREEMPTED, reason="node drained")
    actions.hold(high, "someone")
    cycle.run_cycle()
    actions.release_hold(high, "someone")
    again = Attempt.objects.get(job=low1, number=2)

    asked = actions.preempt({high.pk: [low1.pk]}, claims_seen={high.pk: None},
                            attempts_seen=seen.attempts)  # fmt: skip

    assert seen.attempts[low1.pk] == first.pk
    assert asked == []
    again.refresh_from_db()
    assert again.stop_requested_at is None
