"""Read-only API tokens (GitLab's read_api scope): a token made read-only reads what its user
may, through the API and the CLI, and changes nothing, whatever its user may do."""

import pytest
from django.test import Client
from rest_framework.test import APIClient

from jobs.models import Job
from jobs.states import State
from quotas.models import ApiToken
from quotas.tokens import create_token
from tests.clusters.test_node_service_api import cli_of
from tests.factories import JobFactory, PriorityClassFactory
from tests.jobs.test_notify_start import SPEC

pytestmark = pytest.mark.django_db


def with_token(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def test_a_read_only_token_reads_and_changes_nothing(alice, alpha):
    PriorityClassFactory(name="normal")
    job = JobFactory(tenant=alpha, owner=alice)
    _, key = create_token(alice, "dashboard", read_only=True)
    client = with_token(key)

    listed = client.get("/api/v1/jobs/")
    one = client.get(f"/api/v1/jobs/{job.pk}/")
    submitted = client.post("/api/v1/jobs/", SPEC, format="json")
    tried = client.post("/api/v1/jobs/test/", SPEC, format="json")  # writes nothing
    canceled = client.post(f"/api/v1/jobs/{job.pk}/cancel/")
    secret = client.put(f"/api/v1/tenants/{alpha.slug}/secrets/KEY/", {"value": "v"},
                        format="json")  # fmt: skip

    assert (listed.status_code, one.status_code, tried.status_code) == (200, 200, 200)
    assert [r.status_code for r in (submitted, canceled, secret)] == [403, 403, 403]
    assert submitted.json()["detail"].startswith("This API token only reads")
    assert Job.objects.count() == 1 and Job.objects.get(pk=job.pk).state == State.QUEUED


def test_a_token_that_is_not_read_only_changes_what_its_user_may(alice, alpha):
    job = JobFactory(tenant=alpha, owner=alice)
    _, key = create_token(alice, "laptop")

    canceled = with_token(key).post(f"/api/v1/jobs/{job.pk}/cancel/")

    assert canceled.status_code == 202
    assert Job.objects.get(pk=job.pk).state == State.CANCELED


def test_a_session_is_not_narrowed_by_the_users_read_only_tokens(alice, alpha):
    job = JobFactory(tenant=alpha, owner=alice)
    create_token(alice, "dashboard", read_only=True)
    client = APIClient()
    client.force_login(alice)

    assert client.post(f"/api/v1/jobs/{job.pk}/cancel/").status_code == 202


def test_the_tokens_page_makes_a_read_only_token_and_says_which_are(alice):
    portal = Client()
    portal.force_login(alice)

    made = portal.post("/tokens/", {"name": "grafana", "expires": "", "read_only": "on"})
    portal.post("/tokens/", {"name": "laptop", "expires": ""})
    page = portal.get("/tokens/").content.decode()

    assert "Your new read-only token &ldquo;grafana&rdquo;" in made.content.decode()
    assert dict(ApiToken.objects.values_list("name", "read_only")) == {
        "grafana": True, "laptop": False}  # fmt: skip
    rows = page.split("<tbody>")[1].split("<tr>")[1:]
    may = {row.split("<td>")[1].split("</td>")[0]: row.split("<td>")[6].split("</td>")[0]
           for row in rows}  # fmt: skip
    assert may == {"grafana": "read only", "laptop": "read and change"}


@pytest.mark.django_db(transaction=True)
def test_the_cli_with_a_read_only_token_lists_and_cannot_cancel(live_server, alice, alpha):
    job = JobFactory(tenant=alpha, owner=alice)
    cli = cli_of(live_server, alice, read_only=True)

    me = cli("whoami")
    listed = cli("list")
    refused = cli("cancel", str(job.pk))

    assert me.stdout.splitlines()[-1] == "token 'ops', read only"
    assert listed.returncode == 0 and f"{job.pk}" in listed.stdout
    assert refused.returncode == 1
    assert "This API token only reads" in refused.stderr
    assert Job.objects.get(pk=job.pk).state == State.QUEUED
