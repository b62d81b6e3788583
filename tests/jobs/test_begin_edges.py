"""Deferred starts (`begin`) beside the other reasons a queued job waits: a job both deferred
and waiting for another job says one thing, and keeps saying it, cycle after cycle."""

from datetime import datetime, timedelta

import pytest

from jobs import actions, cycle, dependencies
from jobs.clock import database_now
from jobs.models import Job
from tests.jobs.conftest import STEP

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("room", "normal_priority")]


def ahead() -> datetime:
    """A whole minute an hour or more from now, on the database's clock."""
    return (database_now() + timedelta(hours=1, minutes=1)).replace(second=0, microsecond=0)


def submitted(owner, tenant, normal_priority, **spec) -> Job:
    return actions.submit(owner, tenant, {**STEP, "priority_class": normal_priority, **spec})[0]


def reasons_over_cycles(job: Job, cycles: int) -> list[str]:
    said = []
    for _ in range(cycles):
        cycle.run_cycle()
        said.append(Job.objects.get(pk=job.pk).pending_reason)
    return said


def test_a_deferred_job_waiting_for_a_dependency_keeps_one_reason_from_cycle_to_cycle(
    alice, alpha, normal_priority
):
    held = submitted(alice, alpha, normal_priority)
    actions.hold(held, "alice")  # never placed: the dependency stays unmet
    waits = [dependencies.Wait(held.pk, "afterok")]
    job = submitted(alice, alpha, normal_priority, begin=ahead(), depends_on=waits)

    said = reasons_over_cycles(job, 4)

    assert len(set(said)) == 1, said


def test_a_deferred_singleton_behind_an_earlier_job_keeps_one_reason_from_cycle_to_cycle(
    alice, alpha, normal_priority
):
    earlier = submitted(alice, alpha, normal_priority)
    actions.hold(earlier, "alice")
    job = submitted(alice, alpha, normal_priority, begin=ahead(), singleton=True)

    said = reasons_over_cycles(job, 4)

    assert len(set(said)) == 1, said
