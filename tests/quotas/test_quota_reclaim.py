"""A platform admin lowers a borrower's limits while it runs on the cohort's idle guarantee:
nothing is evicted for that alone, and the owner's next job takes its guarantee back, from as
little of the borrower's work as gives it room."""

import pytest

from clusters.models import Allocation
from jobs import cycle
from jobs.models import Attempt, Job
from jobs.states import State
from tests.factories import JobFactory, NodeFactory, QuotaFactory

pytestmark = pytest.mark.django_db


def stop_requested(tenant) -> list[int]:
    live = Attempt.objects.filter(job__tenant=tenant, stop_requested_at__isnull=False)
    return sorted(live.values_list("job__gpus", flat=True))


def test_an_owner_takes_back_what_a_borrower_kept_after_its_limit_was_lowered(alpha, gamma, east):
    for n in range(2):
        NodeFactory(cluster=east, name=f"east-{n}", gpu_type="A100", gpu_count=8)
    QuotaFactory(tenant=alpha, flavor="gpu:A100", guaranteed=8, borrow_limit=0)
    lent = QuotaFactory(tenant=gamma, flavor="gpu:A100", guaranteed=8, borrow_limit=8)
    for gpus in (8, 4, 4):
        JobFactory(tenant=gamma, gpus=gpus, cpu_milli=1000, memory_mb=1000)
    cycle.run_cycle()
    assert Allocation.objects.active().count() == 16
    lent.borrow_limit = 0  # the platform admin, in the admin
    lent.save()

    cycle.run_cycle()
    assert stop_requested(gamma) == []  # over its limit now, but nobody is waiting for it

    JobFactory(tenant=alpha, gpus=4, cpu_milli=1000, memory_mb=1000)
    cycle.run_cycle()
    assert stop_requested(gamma) == [4]
    assert Job.objects.get(tenant=alpha).state == State.QUEUED  # until the victim has gone
    (victim,) = Attempt.objects.filter(job__tenant=gamma, stop_requested_at__isnull=False)
    assert victim.reason == (
        "preempted: its team ran on another team's idle guarantee, which that team needed back"
    )
