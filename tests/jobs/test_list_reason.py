"""The job lists narrowed to the queued jobs waiting for a reason (`?reason=`, Slurm's squeue
REASON column turned into a filter): the API's, the portal's and the CLI's."""

# ruff: noqa: F811 (the CLI tests' fixture, imported, is a test's argument)

import pytest
from rest_framework.test import APIClient

from jobs import reasons
from jobs.states import State
from tests.factories import JobFactory
from tests.jobs.test_cli import cli  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db


@pytest.fixture
def waiting(alpha, alice):
    """Alpha's jobs: two over quota, one past its user's GPU limit, one held, one running."""
    jobs = {
        "quota1": JobFactory(tenant=alpha, owner=alice, pending_reason="quota_exceeded"),
        "quota2": JobFactory(tenant=alpha, owner=alice, pending_reason="quota_exceeded"),
        "limit": JobFactory(tenant=alpha, owner=alice, pending_reason="user_gpu_limit"),
        "held": JobFactory(tenant=alpha, owner=alice, pending_reason="held", held="user"),
        "ran": JobFactory(tenant=alpha, owner=alice, state=State.RUNNING,
                          pending_reason="quota_exceeded"),  # what it waited for once
    }  # fmt: skip
    return {name: job.pk for name, job in jobs.items()}


def listed(user, **params) -> tuple[int, object]:
    client = APIClient()
    client.force_authenticate(user)
    answer = client.get("/api/v1/jobs/", params)
    return answer.status_code, answer.json()


def test_the_api_lists_the_queued_jobs_waiting_for_a_reason_or_several(alice, waiting):
    _, quota = listed(alice, reason="quota_exceeded")
    _, either = listed(alice, reason="quota_exceeded,user_gpu_limit")
    _, held = listed(alice, reason="held")

    assert {j["id"] for j in quota["jobs"]} == {waiting["quota1"], waiting["quota2"]}
    assert {j["id"] for j in either["jobs"]} == {waiting["quota1"], waiting["quota2"],
                                                 waiting["limit"]}  # fmt: skip
    assert [j["id"] for j in held["jobs"]] == [waiting["held"]]


def test_a_code_no_job_waits_for_is_a_400_naming_reason(alice, waiting):
    status, answer = listed(alice, reason="quota_exceeded,lunch")

    assert status == 400 and list(answer) == ["reason"]


def test_the_portal_narrows_its_list_and_keeps_the_reason_in_its_form(client, alice, waiting):
    client.force_login(alice)

    page = client.get("/", {"reason": "user_gpu_limit"}).content.decode()

    assert f'href="/jobs/{waiting["limit"]}/"' in page
    assert f'href="/jobs/{waiting["quota1"]}/"' not in page
    assert 'name="reason" value="user_gpu_limit"' in page


@pytest.mark.django_db(transaction=True)
def test_the_cli_lists_them(cli, waiting):
    done = cli("list", "--reason", "user_gpu_limit")

    assert done.returncode == 0, done.stderr
    assert [int(line.split()[0]) for line in done.stdout.splitlines()] == [waiting["limit"]]


def test_every_code_the_cycle_stores_outside_the_core_says_what_it_means():
    from jobs import reasons

    assert all(reasons.meaning(code) for code in reasons.CODES)
    assert reasons.meaning("team_paused") == (
        "Its team's placements are paused by a platform admin."
    )


def test_a_job_whose_placement_was_skipped_at_its_commit_is_found_by_its_code(alice, alpha):
    skipped = JobFactory(tenant=alpha, owner=alice, pending_reason="changed_underneath")

    status, answer = listed(alice, reason="changed_underneath")

    assert status == 200 and [j["id"] for j in answer["jobs"]] == [skipped.pk]
    assert "the next cycle decides again" in reasons.meaning("changed_underneath")
