"""Bulk changes reach the live views as few messages: channels_redis keeps at most 100 messages
per channel and drops the rest, so a message per job would leave an open page with nothing."""

from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.db import transaction
from django.utils import timezone

from clusters import agents
from clusters.models import Cluster
from jobs import actions, events
from jobs.models import Attempt, Family, Job
from jobs.states import State
from tests.factories import AttemptFactory, ClusterFactory, JobFactory, PriorityClassFactory
from tests.jobs.test_batch_cancel import api
from tests.jobs.test_consumers import connect
from tests.jobs.test_events import heard

pytestmark = pytest.mark.django_db(transaction=True)

SPEC = {
    "name": "embed", "family": Family.BATCH_INFERENCE, "image": "i", "command": ["x"],
    "cpu_milli": 1000, "memory_mb": 1000, "gpus": 1, "max_runtime_s": 60, "shards": 300,
}  # fmt: skip


def batch_of_300(owner, tenant) -> list[Job]:
    first, _ = actions.submit(owner, tenant, {**SPEC, "priority_class": PriorityClassFactory()})
    return list(first.batch())


async def test_open_pages_of_a_300_shard_batch_hear_its_cancel(alpha, alice):
    shards = await sync_to_async(batch_of_300)(alice, alpha)
    first, last = shards[0], shards[-1]
    pages = [(await connect(alice, job.pk))[0] for job in (first, last)]
    for page in pages:
        await page.receive_json_from()  # the state on connect

    response = await sync_to_async(api(alice).post)(f"/api/v1/jobs/{first.pk}/cancel/")

    assert response.status_code == 202
    for page in pages:
        assert await page.receive_json_from(timeout=5) == {
            "type": "state", "state": "canceled", "reason": "canceled by alice"}  # fmt: skip
        assert await page.receive_nothing(timeout=0.5)
        await page.disconnect()


def test_the_tenant_hears_a_300_shard_cancel_as_one_message(alpha, alice):
    shards = batch_of_300(alice, alpha)

    (message,) = heard(alpha.pk, lambda: actions.cancel(shards[0], "asked"))

    assert sorted(change["job"] for change in message["changes"]) == [job.pk for job in shards]
    assert {change["to_state"] for change in message["changes"]} == {State.CANCELED}


def test_an_attempt_ending_its_scheduled_job_sends_both_moves_in_one_message():
    job = JobFactory(state=State.SCHEDULED)
    attempt = AttemptFactory(job=job)

    (message,) = heard(
        job.tenant_id, lambda: actions.end_attempt(attempt.pk, Attempt.Outcome.SUCCEEDED)
    )

    moves = [(change["from_state"], change["to_state"]) for change in message["changes"]]
    assert moves == [("scheduled", "running"), ("running", "succeeded")]


def test_changes_committed_inside_coalesced_reach_the_tenant_as_one_message_in_order():
    first = JobFactory()
    jobs = [first] + [JobFactory(tenant=first.tenant) for _ in range(2)]

    def one_transaction_each():
        with events.coalesced():
            for job in jobs:
                actions.transition(job, State.CANCELED, f"asked {job.pk}")

    (message,) = heard(first.tenant_id, one_transaction_each)

    assert [change["job"] for change in message["changes"]] == [job.pk for job in jobs]


def test_a_savepoint_rolled_back_inside_coalesced_is_not_published():
    kept, undone = JobFactory(), JobFactory()

    def keep_one_undo_one():
        with events.coalesced(), transaction.atomic():
            actions.transition(kept, State.CANCELED)
            with pytest.raises(RuntimeError), transaction.atomic():
                actions.transition(undone, State.CANCELED)
                raise RuntimeError("the caller fails after the transition")

    messages = heard(kept.tenant_id, keep_one_undo_one) + heard(undone.tenant_id, lambda: None)

    assert [change["job"] for m in messages for change in m["changes"]] == [kept.pk]


async def test_a_page_hears_its_jobs_latest_state_once_from_a_merged_message(alpha, alice):
    job, neighbour = [await sync_to_async(JobFactory)(tenant=alpha, owner=alice) for _ in "ab"]
    page, _, _ = await connect(alice, job.pk)
    await page.receive_json_from()

    def placed_and_started():
        with events.coalesced():
            actions.transition(job, State.SCHEDULED, "placed")
            actions.transition(neighbour, State.CANCELED, "asked")
            actions.transition(job, State.RUNNING, "attempt 1 running")

    await sync_to_async(placed_and_started)()

    assert await page.receive_json_from(timeout=5) == {
        "type": "state", "state": "running", "reason": "attempt 1 running"}  # fmt: skip
    assert await page.receive_nothing(timeout=0.5)
    await page.disconnect()


def test_a_lost_cluster_ending_many_attempts_is_one_message_per_tenant(east, settings):
    jobs = [JobFactory(state=State.RUNNING)]
    jobs += [JobFactory(tenant=jobs[0].tenant, state=State.RUNNING) for _ in range(149)]
    for job in jobs:
        AttemptFactory(job=job, cluster=east)
    long_ago = timezone.now() - timedelta(seconds=settings.MLSCHED_AGENT_LOST_GRACE_S + 60)
    ClusterFactory(name="west", last_heartbeat=timezone.now())  # another agent still reports
    Cluster.objects.filter(pk=east.pk).update(health=Cluster.Health.UNHEALTHY,
                                              last_heartbeat=long_ago)  # fmt: skip

    (message,) = heard(jobs[0].tenant_id, agents.sweep_silent_clusters)

    assert len(message["changes"]) == 150
