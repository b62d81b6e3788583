"""The job list narrowed to held jobs, or to the others: `?held=1` / `?held=0` in the API and the
portal's list, `list --held` on the command line."""

import pytest
from rest_framework.test import APIClient

from jobs import actions
from jobs.models import Family, Job
from jobs.states import State
from quotas.tokens import create_token
from tests.factories import JobFactory
from tests.jobs.test_cli import run_cli

pytestmark = pytest.mark.django_db


@pytest.fixture
def jobs(alice, alpha) -> dict[str, Job]:
    """A job held by its team, one held by a platform admin, one queued, one running."""
    held, by_admin = JobFactory(tenant=alpha, owner=alice), JobFactory(tenant=alpha, owner=alice)
    actions.hold(held, "alice")
    actions.hold(by_admin, "root", admin=True)
    return {
        "held": held,
        "by_admin": by_admin,
        "queued": JobFactory(tenant=alpha, owner=alice),
        "running": JobFactory(tenant=alpha, owner=alice, state=State.RUNNING),
    }


def api_ids(user, query: str) -> list[int]:
    client = APIClient()
    client.force_authenticate(user)
    response = client.get(f"/api/v1/jobs/{query}")
    assert response.status_code == 200, response.content
    return [job["id"] for job in response.json()["jobs"]]


@pytest.mark.parametrize(
    ("query", "want"),
    [
        ("?held=1", ["by_admin", "held"]),
        ("?held=true", ["by_admin", "held"]),
        ("?held=TRUE", ["by_admin", "held"]),
        ("?held=0", ["running", "queued"]),
        ("?held=false", ["running", "queued"]),
        ("?held=", ["running", "queued", "by_admin", "held"]),
        ("?held=1&state=running", []),
    ],
)
def test_it_lists_held_jobs_or_the_others_through_the_api(alice, jobs, query, want):
    assert api_ids(alice, query) == [jobs[name].pk for name in want]


@pytest.mark.parametrize("value", ["yes", "2", "on", "%00"])
def test_a_held_that_is_neither_1_nor_0_is_a_400_naming_held(alice, jobs, value):
    client = APIClient()
    client.force_authenticate(alice)

    response = client.get(f"/api/v1/jobs/?held={value}")

    assert response.status_code == 400
    assert list(response.json()) == ["held"]


def test_it_lists_the_held_shards_of_a_batch(alice, alpha):
    first = JobFactory(tenant=alpha, owner=alice, family=Family.BATCH_INFERENCE, shards=3,
                       shard_index=0, state=State.RUNNING)  # fmt: skip
    rest = [JobFactory(tenant=alpha, owner=alice, family=Family.BATCH_INFERENCE, shards=3,
                       parent=first, shard_index=i) for i in (1, 2)]  # fmt: skip
    actions.hold(first, "alice")  # its queued shards: the first has left the queue
    JobFactory(tenant=alpha, owner=alice, held=Job.Hold.USER)  # not of the batch

    assert api_ids(alice, f"?batch={first.pk}&held=1") == [rest[1].pk, rest[0].pk]


def test_another_tenants_held_jobs_are_not_listed(charlie, jobs):
    assert api_ids(charlie, "?held=1") == []


def test_the_portal_lists_held_jobs_with_the_select_beside_the_state(client, alice, jobs):
    client.force_login(alice)

    page = client.get("/?held=1")
    others = client.get("/?held=0")

    assert page.status_code == 200
    assert [job.pk for job in page.context["jobs"]] == [jobs["by_admin"].pk, jobs["held"].pk]
    assert [job.pk for job in others.context["jobs"]] == [jobs["running"].pk, jobs["queued"].pk]
    assert page.text.index('name="state"') < page.text.index('name="held"')
    assert '<option value="1" selected>held</option>' in page.text
    assert '<option value="0" selected>not held</option>' in others.text


def test_the_portal_shows_a_held_given_as_true_as_chosen(client, alice, jobs):
    client.force_login(alice)

    page = client.get("/?held=True")

    assert len(page.context["jobs"]) == 2
    assert '<option value="1" selected>held</option>' in page.text


def test_a_bad_held_in_the_portal_is_a_400_naming_it_and_lists_nothing(client, alice, jobs):
    client.force_login(alice)

    page = client.get("/?held=maybe")

    assert page.status_code == 400
    assert '<p class="error" data-field="held">held: 1 or 0 (or true or false).</p>' in page.text
    assert list(page.context["jobs"]) == []


def test_the_portal_keeps_the_held_filter_on_older_pages(client, alice, alpha):
    for job in JobFactory.create_batch(51, tenant=alpha, owner=alice):
        actions.hold(job, "alice")
    client.force_login(alice)

    page = client.get("/?held=1")

    assert f"?held=1&amp;before={page.context['next']}" in page.text


def test_a_filter_that_finds_no_held_job_says_none_match(client, alice, alpha):
    JobFactory(tenant=alpha, owner=alice)
    client.force_login(alice)

    assert "No jobs match." in client.get("/?held=1").text


@pytest.mark.django_db(transaction=True)
def test_the_cli_lists_only_held_jobs_with_held(live_server, alice, jobs):
    _, token = create_token(alice, "cli tests")

    out = run_cli(live_server.url, token, "list", "--held")

    assert out.returncode == 0, out.stderr
    assert [int(row.split()[0]) for row in out.stdout.splitlines()] == [
        jobs["by_admin"].pk,
        jobs["held"].pk,
    ]
    assert all(row.endswith("(held)") for row in out.stdout.splitlines())


def test_a_running_job_requeued_held_counts_among_the_others_until_it_is_queued(alice, jobs):
    Job.objects.filter(pk=jobs["running"].pk).update(held=Job.Hold.USER)  # (actions.requeue)

    assert jobs["running"].pk in api_ids(alice, "?held=0")
    assert jobs["running"].pk not in api_ids(alice, "?held=1")
