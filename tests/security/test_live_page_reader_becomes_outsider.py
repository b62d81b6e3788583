"""An open job page follows its reader from inside the team to outside it: a member who leaves
the job's tenant but keeps a grant on the job itself goes on hearing it as any outsider does,
without the ids of the team's other jobs."""

import pytest
from asgiref.sync import sync_to_async
from guardian.shortcuts import assign_perm

from jobs import actions, consumers
from jobs.states import State
from quotas.models import Membership
from tests.factories import JobFactory
from tests.jobs.test_stream_access import open_page

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]


@pytest.fixture(autouse=True)
def recheck_at_every_message(monkeypatch):
    monkeypatch.setattr(consumers, "RECHECK_S", 0)


async def test_a_member_who_leaves_the_team_but_keeps_a_grant_hears_reasons_as_an_outsider(
    alpha, alice, bob
):
    job = await sync_to_async(JobFactory)(tenant=alpha, owner=alice)
    await sync_to_async(assign_perm)("jobs.view_job", bob, job)
    socket, connected, _ = await open_page(bob, job.pk)
    assert connected
    await socket.receive_json_from()

    await sync_to_async(Membership.objects.filter(user=bob).delete)()
    await sync_to_async(actions.transition)(job, State.CANCELED, "dependency 4321 failed")

    heard = await socket.receive_json_from(timeout=5)
    assert heard["state"] == State.CANCELED
    assert heard["reason"] == "a dependency failed"
    await socket.disconnect()
