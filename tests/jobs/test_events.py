"""Job transitions reach the tenant's live group, after commit, batched per tenant."""

import asyncio

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import get_channel_layer
from django.db import transaction

from jobs import actions, cycle
from jobs.events import tenant_group
from jobs.states import State
from tests.factories import JobFactory, NodeFactory

pytestmark = pytest.mark.django_db(transaction=True)


def heard(tenant_id: int, action, wait: float = 1.0) -> list[dict]:
    """Run `action` while listening to the tenant's group; return the messages heard."""
    layer = get_channel_layer()

    async def scenario():
        channel = await layer.new_channel()
        await layer.group_add(tenant_group(tenant_id), channel)
        await sync_to_async(action)()
        messages = []
        while True:
            try:
                messages.append(await asyncio.wait_for(layer.receive(channel), wait))
            except TimeoutError:
                return messages

    return async_to_sync(scenario)()


def test_a_committed_transition_is_published():
    job = JobFactory()

    (message,) = heard(job.tenant_id, lambda: actions.transition(job, State.CANCELED, "asked"))

    assert message["type"] == "job.changes"
    (change,) = message["changes"]
    assert (change["job"], change["from_state"], change["to_state"], change["reason"]) == (
        job.pk, "queued", "canceled", "asked")  # fmt: skip


def test_a_rolled_back_transition_is_not_published():
    job = JobFactory()

    def roll_back():
        with pytest.raises(RuntimeError), transaction.atomic():
            actions.transition(job, State.CANCELED)
            raise RuntimeError("the caller fails after the transition")

    assert heard(job.tenant_id, roll_back) == []


def test_a_cycle_sends_one_message_per_tenant_with_all_its_changes():
    NodeFactory(gpu_count=8)
    first = JobFactory(gpus=1)
    jobs = [first] + [JobFactory(gpus=1, tenant=first.tenant) for _ in range(2)]

    (message,) = heard(first.tenant_id, cycle.run_cycle)

    assert sorted(c["job"] for c in message["changes"]) == sorted(j.pk for j in jobs)


def test_another_tenants_group_hears_nothing(gamma):
    job = JobFactory()

    assert heard(gamma.pk, lambda: actions.transition(job, State.CANCELED), wait=0.5) == []
