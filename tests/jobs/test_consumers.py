"""The job page's websocket, through the real ASGI application and the Redis channel layer."""

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client

from clusters import agents
from clusters.backends.base import LogLine
from jobs import actions
from jobs.states import State
from mlsched_site.asgi import application
from tests.factories import AttemptFactory, ClusterFactory, JobFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]


def session_cookie(user) -> bytes:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


async def connect(user, job_id):
    cookie = await sync_to_async(session_cookie)(user)
    socket = WebsocketCommunicator(
        application, f"/ws/jobs/{job_id}/",
        headers=[(b"cookie", cookie), (b"origin", b"http://localhost")],
    )  # fmt: skip
    connected, code = await socket.connect()
    return socket, connected, code


async def test_a_team_member_gets_the_jobs_state_on_connect(alpha, alice, bob):
    job = await sync_to_async(JobFactory)(tenant=alpha, owner=alice)

    socket, connected, _ = await connect(bob, job.pk)

    assert connected
    assert await socket.receive_json_from() == {"type": "state", "state": "queued", "reason": ""}
    await socket.disconnect()


async def test_another_tenants_user_is_refused(alpha, alice, charlie):
    job = await sync_to_async(JobFactory)(tenant=alpha, owner=alice)

    socket, connected, code = await connect(charlie, job.pk)
    await socket.disconnect()  # ends the refused consumer instead of leaving it to the loop

    assert not connected
    assert code == 4404


async def test_it_pushes_the_jobs_transitions_and_not_its_neighbours(alpha, alice):
    job, other = [await sync_to_async(JobFactory)(tenant=alpha, owner=alice) for _ in range(2)]
    socket, _, _ = await connect(alice, job.pk)
    await socket.receive_json_from()

    await sync_to_async(actions.transition)(other, State.CANCELED, "neighbour")
    await sync_to_async(actions.transition)(job, State.CANCELED, "asked")

    assert await socket.receive_json_from(timeout=5) == {
        "type": "state", "state": "canceled", "reason": "asked"}  # fmt: skip
    assert await socket.receive_nothing(timeout=0.5)
    await socket.disconnect()


async def test_it_pushes_log_lines_as_the_agent_stores_them(alpha, alice):
    cluster = await sync_to_async(ClusterFactory)(name="east")
    job = await sync_to_async(JobFactory)(tenant=alpha, owner=alice)
    attempt = await sync_to_async(AttemptFactory)(job=job, cluster=cluster)
    socket, _, _ = await connect(alice, job.pk)
    await socket.receive_json_from()

    line = LogLine(attempt.pk, 0, 0, "stdout", "epoch 1 loss 0.3")
    await sync_to_async(agents.store_logs)(cluster, [line])

    message = await socket.receive_json_from(timeout=5)
    want = {"attempt": 1, "worker": 0, "seq": 0, "stream": "stdout", "text": "epoch 1 loss 0.3"}
    assert message == {"type": "logs", "lines": [want]}
    await socket.disconnect()


async def test_what_a_client_sends_is_ignored_and_the_stream_goes_on(alpha, alice):
    job = await sync_to_async(JobFactory)(tenant=alpha, owner=alice)
    socket, _, _ = await connect(alice, job.pk)
    await socket.receive_json_from()

    await socket.send_to(text_data="{not json")
    await socket.send_to(bytes_data=b"\x00\xff")
    await sync_to_async(actions.transition)(job, State.CANCELED, "asked")

    assert await socket.receive_json_from(timeout=5) == {
        "type": "state", "state": "canceled", "reason": "asked"}  # fmt: skip
    await socket.disconnect()


async def test_a_batchs_page_hears_that_its_other_shards_moved(alpha, alice):
    first, *_ = await sync_to_async(batch_of_three)(alpha, alice)
    other = await sync_to_async(JobFactory)(tenant=alpha, owner=alice)
    socket, _, _ = await connect(alice, first.pk)
    await socket.receive_json_from()

    await sync_to_async(actions.transition)(other, State.CANCELED, "another job")
    await sync_to_async(actions.cancel_jobs)(
        await sync_to_async(lambda: first.batch().exclude(pk=first.pk))(), "two shards"
    )

    assert await socket.receive_json_from() == {"type": "shards"}
    assert await socket.receive_nothing(timeout=0.5)
    await socket.disconnect()


def batch_of_three(tenant, owner):
    first = JobFactory(tenant=tenant, owner=owner, family="batch_inference", shards=3)
    rest = [JobFactory(tenant=tenant, owner=owner, family="batch_inference", shards=3,
                       parent=first, shard_index=i) for i in (1, 2)]  # fmt: skip
    return [first, *rest]
