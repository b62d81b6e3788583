"""The portal, its live pages and the users' API against a hostile user of the browser: what a
user or a job controls is shown as text on every page that shows it, every state-changing post
needs the CSRF token, no page may be framed or sniffed, the log-in never sends the user to
another site, and the job page's socket answers only pages of this site.

(The browser's own view of the same payloads: tests/e2e/test_security.py.)
"""

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client

from jobs import cycle
from jobs.models import Dependency
from mlsched_site.asgi import application
from tests.factories import AttemptFactory, JobFactory, PriorityClassFactory

pytestmark = pytest.mark.django_db

PAYLOAD = '<img src=x onerror="window.pwned=1">'
ESCAPED = "&lt;img src=x onerror=&quot;window.pwned=1&quot;&gt;"
# As JSON quotes it in the browsable API: the quotes backslashed, then the whole escaped.
ESCAPED_IN_JSON = "&lt;img src=x onerror=\\&quot;window.pwned=1\\&quot;&gt;"


@pytest.fixture
def hostile(alpha, alice):
    """A job of Alice's team whose every free-text field is markup, with an attempt and a log
    line that are too, and a job that depends on it."""
    job = JobFactory(
        tenant=alpha, owner=alice, name=PAYLOAD, image=PAYLOAD, command=["echo", PAYLOAD],
        env={"NOTE": PAYLOAD}, pending_message=PAYLOAD,
    )  # fmt: skip
    AttemptFactory(job=job, reason=PAYLOAD).log_chunks.create(seq=0, text=PAYLOAD)
    Dependency.objects.create(job=JobFactory(tenant=alpha, owner=alice, name="report"), on=job)
    return job


@pytest.fixture
def browser(client, alice):
    client.force_login(alice)
    return client


def text_of(response) -> str:
    if response.streaming:
        return b"".join(response.streaming_content).decode()
    return response.content.decode()


@pytest.mark.parametrize(
    "url",
    [
        "/",
        "/?q=<img",
        "/jobs/{job}/",
        "/jobs/{dependent}/",
        "/api/v1/jobs/",
        "/api/v1/jobs/{job}/",
        "/api/v1/jobs/{job}/logs/",
        "/api/v1/jobs/{job}/spec/",
        "/jobs/new/?copy={job}",
    ],
)
def test_it_shows_what_a_job_controls_as_text_on_every_page(browser, hostile, url):
    dependent = hostile.dependent_links.get().job_id
    # A browser asks for HTML: the API answers with its browsable pages.
    response = browser.get(url.format(job=hostile.pk, dependent=dependent), HTTP_ACCEPT="text/html")

    page = text_of(response)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")
    assert PAYLOAD not in page
    assert ESCAPED in page or ESCAPED_IN_JSON in page


@pytest.mark.parametrize(
    ("url", "in_line"),
    [("/queue/", "<tr><td>1</td><td>1</td>"), ("/jobs/{job}/", "1st in line"),
     ("/api/v1/queue/", "&quot;position&quot;: 1,")],
)  # fmt: skip
def test_it_shows_a_waiting_jobs_name_as_text_in_the_line(browser, hostile, url, in_line):
    cycle.run_cycle()  # no node: it waits in line

    response = browser.get(url.format(job=hostile.pk), HTTP_ACCEPT="text/html")

    page = text_of(response)
    assert response.status_code == 200
    assert in_line in page
    assert PAYLOAD not in page
    assert ESCAPED in page or ESCAPED_IN_JSON in page


def test_it_serves_the_log_download_as_a_plain_text_attachment_never_sniffed(browser, hostile):
    response = browser.get(f"/api/v1/jobs/{hostile.pk}/logs.txt", HTTP_ACCEPT="text/html")

    assert text_of(response) == f"{PAYLOAD}\n"
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    assert response["Content-Disposition"].startswith("attachment;")
    assert response["X-Content-Type-Options"] == "nosniff"


def test_it_shows_a_refused_change_of_dependencies_as_typed_as_text(browser, hostile):
    typed = f"afterok:{PAYLOAD}"

    response = browser.post(f"/jobs/{hostile.pk}/dependencies/", {"dependencies": typed})

    assert response.status_code == 400
    assert PAYLOAD not in response.content.decode()
    assert 'id="error"' in response.content.decode()


def test_it_shows_a_refused_submission_as_typed_as_text(browser, alpha):
    PriorityClassFactory(name="normal")
    form = {"tenant": "alpha", "name": PAYLOAD, "family": "training", "image": PAYLOAD,
            "command": "echo hi", "env": f"NOTE={PAYLOAD}", "cpu_milli": "lots"}  # fmt: skip

    response = browser.post("/jobs/new/", form)

    assert response.status_code == 400
    assert PAYLOAD not in response.content.decode()
    assert response.content.decode().count(ESCAPED) == 3


def test_it_shows_a_token_name_as_text(browser):
    created = browser.post("/tokens/", {"name": PAYLOAD, "expires": ""})

    listed = browser.get("/tokens/")

    for page in (created, listed):
        assert PAYLOAD not in page.content.decode()
        assert ESCAPED in page.content.decode()


# -- CSRF -------------------------------------------------------------------------------------


POSTS = [
    "/jobs/new/",
    "/jobs/{job}/cancel/",
    "/jobs/{job}/hold/",
    "/jobs/{job}/release/",
    "/jobs/{job}/requeue/",
    "/jobs/{job}/resubmit/",
    "/jobs/{job}/dependencies/",
    "/jobs/{job}/priority/",
    "/jobs/{job}/min-workers/",
    "/jobs/{job}/runtime-limit/",
    "/jobs/{job}/request/",
    "/jobs/{job}/constraints/",
    "/tokens/",
    "/tokens/{token}/revoke/",
    "/accounts/logout/",
    # The users' API, called with the browser's session (job.js reads it; a page of another
    # site could post to it with the same cookie).
    "/api/v1/jobs/",
    "/api/v1/jobs/{job}/cancel/",
    "/api/v1/jobs/{job}/hold/",
    "/api/v1/jobs/{job}/release/",
    "/api/v1/jobs/{job}/requeue/",
    "/api/v1/jobs/{job}/resubmit/",
    "/api/v1/jobs/{job}/dependencies/",
    "/api/v1/jobs/{job}/priority/",
    "/api/v1/jobs/{job}/min-workers/",
    "/api/v1/jobs/{job}/runtime-limit/",
    "/api/v1/jobs/{job}/request/",
    "/api/v1/jobs/{job}/constraints/",
]


@pytest.mark.parametrize("url", POSTS)
def test_a_post_from_a_logged_in_browser_without_the_csrf_token_is_refused(alpha, alice, url):
    job = JobFactory(tenant=alpha, owner=alice)
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(alice)
    token = alice.api_tokens.create(name="laptop", prefix="mls_x", key_hash="0" * 64)
    before = browser.get(f"/jobs/{job.pk}/")  # the page as drawn: the CSRF cookie is set

    response = browser.post(url.format(job=job.pk, token=token.pk), {"dependencies": "none"})

    assert before.status_code == 200
    assert response.status_code == 403
    job.refresh_from_db()
    assert (job.state, job.held) == ("queued", "")
    assert alice.api_tokens.count() == 1


# -- headers, cookies, redirects --------------------------------------------------------------


@pytest.mark.parametrize("url", ["/", "/jobs/{job}/", "/tokens/", "/quotas/", "/admin/"])
def test_no_page_may_be_framed_by_another_site_or_sniffed(browser, hostile, url):
    response = browser.get(url.format(job=hostile.pk))

    assert response["X-Frame-Options"] == "DENY"
    assert response["X-Content-Type-Options"] == "nosniff"


def test_the_session_cookie_is_out_of_reach_of_scripts_and_of_other_sites_posts(alice):
    alice.set_password("password")
    alice.save()
    browser = Client()

    browser.post("/accounts/login/", {"username": "alice", "password": "password"})

    cookie = browser.cookies["sessionid"]
    assert cookie["httponly"] is True
    assert cookie["samesite"] == "Lax"


@pytest.mark.parametrize(
    "elsewhere",
    ["https://evil.example/", "//evil.example/", "/\\evil.example/", "javascript:alert(1)"],
)
def test_logging_in_or_out_never_sends_the_user_to_another_site(alice, elsewhere):
    alice.set_password("password")
    alice.save()
    browser = Client()
    form = {"username": "alice", "password": "password", "next": elsewhere}

    logged_in = browser.post("/accounts/login/", form)
    logged_out = browser.post("/accounts/logout/", {"next": elsewhere})

    assert logged_in.status_code == logged_out.status_code == 302
    assert logged_in["Location"] == logged_out["Location"] == "/"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("origin", [b"http://evil.example", None])
async def test_the_job_pages_socket_refuses_pages_of_another_site(alpha, alice, origin):
    # Another site's page would open it with the user's cookie: only this site's may.
    job = await sync_to_async(JobFactory)(tenant=alpha, owner=alice)
    session = await sync_to_async(logged_in_session)(alice)
    headers = [(b"cookie", f"sessionid={session}".encode())]
    if origin:
        headers.append((b"origin", origin))
    socket = WebsocketCommunicator(application, f"/ws/jobs/{job.pk}/", headers=headers)

    connected, _ = await socket.connect()

    assert not connected
    await socket.disconnect()


def logged_in_session(user) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value
