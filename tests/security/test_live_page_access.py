"""An open job page socket stops once its user may no longer see the job.

Permission is checked in connect(), but a socket stays open for hours: a user removed from the
tenant, deactivated or logged out must not go on hearing the job's states and log lines.
"""

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.sessions.models import Session
from django.test import Client

from clusters import agents
from clusters.backends.base import LogLine
from jobs import actions, consumers
from jobs.states import State
from mlsched_site.asgi import application
from quotas.models import Membership
from tests.factories import AttemptFactory, ClusterFactory, JobFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]


@pytest.fixture(autouse=True)
def recheck_at_every_message(monkeypatch):
    monkeypatch.setattr(consumers, "RECHECK_S", 0, raising=False)


def login(user) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


async def open_page(user, job_id):
    session = await sync_to_async(login)(user)
    socket = WebsocketCommunicator(
        application, f"/ws/jobs/{job_id}/",
        headers=[(b"cookie", f"sessionid={session}".encode()), (b"origin", b"http://localhost")],
    )  # fmt: skip
    connected, _ = await socket.connect()
    assert connected
    assert (await socket.receive_json_from())["type"] == "state"
    return socket, session


def leave_the_team(user, session):
    Membership.objects.filter(user=user).delete()


def be_deactivated(user, session):
    user.is_active = False
    user.save(update_fields=["is_active"])


def log_out(user, session):
    Session.objects.filter(session_key=session).delete()


@pytest.mark.parametrize("revoke", [leave_the_team, be_deactivated, log_out])
async def test_it_closes_the_socket_instead_of_pushing_a_state_once_access_is_gone(
    alpha, alice, bob, revoke
):
    job = await sync_to_async(JobFactory)(tenant=alpha, owner=alice)
    socket, session = await open_page(bob, job.pk)

    await sync_to_async(revoke)(bob, session)
    await sync_to_async(actions.transition)(job, State.CANCELED, "secret reason")

    assert await socket.receive_output(timeout=5) == {"type": "websocket.close", "code": 4404}
    await socket.disconnect()


async def test_it_closes_the_socket_instead_of_pushing_log_lines_once_access_is_gone(
    alpha, alice, bob
):
    cluster = await sync_to_async(ClusterFactory)(name="east")
    job = await sync_to_async(JobFactory)(tenant=alpha, owner=alice)
    attempt = await sync_to_async(AttemptFactory)(job=job, cluster=cluster)
    socket, session = await open_page(bob, job.pk)

    await sync_to_async(leave_the_team)(bob, session)
    await sync_to_async(agents.store_logs)(cluster, [LogLine(attempt.pk, 0, 0, "stdout", "key")])

    assert await socket.receive_output(timeout=5) == {"type": "websocket.close", "code": 4404}
    await socket.disconnect()


async def test_a_member_who_keeps_access_keeps_hearing_the_job(alpha, alice, bob):
    job = await sync_to_async(JobFactory)(tenant=alpha, owner=alice)
    socket, _ = await open_page(bob, job.pk)

    await sync_to_async(actions.transition)(job, State.CANCELED, "asked")

    assert await socket.receive_json_from(timeout=5) == {
        "type": "state", "state": "canceled", "reason": "asked"}  # fmt: skip
    await socket.disconnect()
