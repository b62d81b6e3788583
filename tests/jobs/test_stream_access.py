"""Who may open the job page's socket and keep it: the page's own site, with a session that may
see the job, for as long as it may."""

import importlib
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import Group
from django.contrib.sessions.models import Session
from django.test import Client
from django.utils import timezone
from guardian.shortcuts import assign_perm, remove_perm

from jobs import actions, consumers
from jobs.states import State
from mlsched_site import asgi
from quotas import tokens
from tests.factories import JobFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]


@pytest.fixture(autouse=True)
def recheck_at_every_message(monkeypatch):
    monkeypatch.setattr(consumers, "RECHECK_S", 0)


@pytest.fixture
def served_as(settings, monkeypatch):
    """The ASGI application as started with these ALLOWED_HOSTS (its origin check reads them
    at start)."""
    monkeypatch.setattr(asgi, "application", asgi.application)  # put back afterwards

    def start(*hosts):
        settings.ALLOWED_HOSTS = list(hosts)
        return importlib.reload(asgi).application

    return start


def login(user) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


async def open_page(
    user, job_id, origin=b"http://localhost", host=None, session=None, app=asgi.application
):
    session = session or await sync_to_async(login)(user)
    headers = [(b"cookie", f"sessionid={session}".encode()), (b"origin", origin)]
    if host:
        headers.append((b"host", host))
    socket = WebsocketCommunicator(app, f"/ws/jobs/{job_id}/", headers=headers)
    connected, code = await socket.connect()
    return socket, connected, code


async def closed_on_next_change(socket, job) -> bool:
    assert (await socket.receive_json_from())["type"] == "state"
    await sync_to_async(actions.transition)(job, State.CANCELED, "secret reason")
    output = await socket.receive_output(timeout=5)
    await socket.disconnect()
    return output == {"type": "websocket.close", "code": consumers.NOT_FOUND}


@pytest.mark.parametrize(
    ("hosts", "origin"),
    [
        ((".example.com",), b"https://notebooks.example.com"),
        (("*",), b"https://evil.example"),
        (("mlsched.example.com",), b"http://mlsched.example.com:8080"),
    ],
)
async def test_it_refuses_a_page_of_another_origin_the_allowed_hosts_match(
    alpha, alice, served_as, hosts, origin
):
    # A sibling subdomain's page sends the session cookie with the socket (same site, so
    # SameSite=Lax does not hold it back): only the origin tells it from the portal's page.
    app = served_as(*hosts)
    job = await sync_to_async(JobFactory)(tenant=alpha, owner=alice)

    socket, connected, _ = await open_page(
        alice, job.pk, origin, host=b"mlsched.example.com", app=app
    )
    await socket.disconnect()

    assert not connected


async def test_it_accepts_the_portals_own_page(alpha, alice, served_as):
    app = served_as(".example.com")
    job = await sync_to_async(JobFactory)(tenant=alpha, owner=alice)

    socket, connected, _ = await open_page(
        alice, job.pk, b"https://mlsched.example.com", host=b"mlsched.example.com", app=app
    )
    await socket.disconnect()

    assert connected


async def test_it_accepts_a_csrf_trusted_origin_behind_a_proxy_that_renames_the_host(
    alpha, alice, served_as, settings
):
    app = served_as("web", "mlsched.example.com")
    settings.CSRF_TRUSTED_ORIGINS = ["https://*.example.com"]
    job = await sync_to_async(JobFactory)(tenant=alpha, owner=alice)

    socket, connected, _ = await open_page(
        alice, job.pk, b"https://mlsched.example.com", host=b"web", app=app
    )
    await socket.disconnect()

    assert connected


async def test_an_api_token_alone_does_not_open_it(alpha, alice):
    job = await sync_to_async(JobFactory)(tenant=alpha, owner=alice)
    _, key = await sync_to_async(tokens.create_token)(alice, "laptop")
    socket = WebsocketCommunicator(
        asgi.application, f"/ws/jobs/{job.pk}/",
        headers=[(b"authorization", f"Token {key}".encode()), (b"origin", b"http://localhost")],
    )  # fmt: skip

    connected, code = await socket.connect()
    await socket.disconnect()

    assert not connected
    assert code == consumers.NOT_FOUND


async def test_a_job_id_past_the_databases_integers_is_refused_as_not_found(alice):
    socket, connected, code = await open_page(alice, 2**80)
    await socket.disconnect()

    assert not connected
    assert code == consumers.NOT_FOUND


async def test_a_message_naming_another_job_does_not_subscribe_to_it(alpha, alice, charlie):
    job = await sync_to_async(JobFactory)(tenant=alpha, owner=alice)
    theirs = await sync_to_async(JobFactory)(tenant=alpha, owner=alice)
    shared = await sync_to_async(JobFactory)(tenant=alpha, owner=alice)
    await sync_to_async(assign_perm)("jobs.view_job", charlie, shared)
    socket, _, _ = await open_page(charlie, shared.pk)
    await socket.receive_json_from()

    await socket.send_json_to({"type": "job.changes", "job": theirs.pk, "changes": []})
    await socket.send_json_to({"subscribe": theirs.pk, "job": job.pk})
    await sync_to_async(actions.transition)(theirs, State.CANCELED, "the team's secret")

    assert await socket.receive_nothing(timeout=1)
    await sync_to_async(actions.transition)(shared, State.CANCELED, "its own change")
    heard = await socket.receive_json_from(timeout=5)  # its own job's changes still come
    assert "its own change" in str(heard) and "secret" not in str(heard)
    await socket.disconnect()


async def test_it_closes_once_a_users_grant_on_the_job_is_removed(alpha, alice, charlie):
    job = await sync_to_async(JobFactory)(tenant=alpha, owner=alice)
    await sync_to_async(assign_perm)("jobs.view_job", charlie, job)
    socket, connected, _ = await open_page(charlie, job.pk)
    assert connected

    await sync_to_async(remove_perm)("jobs.view_job", charlie, job)

    assert await closed_on_next_change(socket, job)


async def test_it_closes_once_the_user_leaves_the_group_holding_the_grant(alpha, alice, charlie):
    job = await sync_to_async(JobFactory)(tenant=alpha, owner=alice)

    def grant_through_a_group():
        reviewers = Group.objects.create(name="reviewers")
        reviewers.user_set.add(charlie)
        assign_perm("jobs.view_job", reviewers, job)
        return reviewers

    reviewers = await sync_to_async(grant_through_a_group)()
    socket, connected, _ = await open_page(charlie, job.pk)
    assert connected

    await sync_to_async(reviewers.user_set.remove)(charlie)

    assert await closed_on_next_change(socket, job)


async def test_it_closes_once_the_session_expires(alpha, alice, bob):
    job = await sync_to_async(JobFactory)(tenant=alpha, owner=alice)
    session = await sync_to_async(login)(bob)
    socket, connected, _ = await open_page(bob, job.pk, session=session)
    assert connected

    await sync_to_async(Session.objects.filter(session_key=session).update)(
        expire_date=timezone.now() - timedelta(seconds=1)
    )

    assert await closed_on_next_change(socket, job)


async def test_it_closes_once_the_users_password_changes(alpha, alice, bob):
    job = await sync_to_async(JobFactory)(tenant=alpha, owner=alice)
    socket, connected, _ = await open_page(bob, job.pk)
    assert connected

    def change_password():
        bob.set_password("a new one")
        bob.save()

    await sync_to_async(change_password)()

    assert await closed_on_next_change(socket, job)


async def test_an_outsider_hears_a_shared_jobs_changes_without_the_ids_of_its_teams_jobs(
    alpha, alice, charlie
):
    job = await sync_to_async(JobFactory)(tenant=alpha, owner=alice)
    await sync_to_async(assign_perm)("jobs.view_job", charlie, job)
    outsider, _, _ = await open_page(charlie, job.pk)
    member, _, _ = await open_page(alice, job.pk)
    for socket in (outsider, member):
        await socket.receive_json_from()

    await sync_to_async(actions.transition)(job, State.CANCELED, "dependency 4321 failed")

    assert (await outsider.receive_json_from(timeout=5))["reason"] == "a dependency failed"
    assert (await member.receive_json_from(timeout=5))["reason"] == "dependency 4321 failed"
    for socket in (outsider, member):
        await socket.disconnect()
