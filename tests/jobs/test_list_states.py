"""A job list asked for several states at once (`?state=queued,running`, Slurm's squeue -t
PD,R): the API's, the portal's (its "not ended" choice) and the CLI's `list --state`."""

import pytest
from rest_framework.test import APIClient

from jobs.cli.written import states_written
from jobs.states import State
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def jobs(alpha, alice):
    return {state: JobFactory(tenant=alpha, owner=alice, state=state) for state in State.values}


def listed(user, query: str) -> list[str]:
    client = APIClient()
    client.force_authenticate(user)
    answer = client.get(f"/api/v1/jobs/{query}")
    assert answer.status_code == 200, answer.json()
    return sorted(job["state"] for job in answer.json()["jobs"])


def test_the_api_lists_the_jobs_in_any_of_the_states_asked(jobs, alice):
    assert listed(alice, "?state=queued,running") == ["queued", "running"]
    assert listed(alice, "?state=failed") == ["failed"]
    assert listed(alice, "?state=queued,,queued") == ["queued"]


@pytest.mark.parametrize("asked", ["queued,runing", ",", "queued;running"])
def test_a_state_that_is_none_is_a_400_naming_state(jobs, alice, asked):
    client = APIClient()
    client.force_authenticate(alice)

    answer = client.get("/api/v1/jobs/", {"state": asked})

    assert answer.status_code == 400
    assert "several with commas" in answer.json()["state"][0]


def test_the_portals_not_ended_choice_lists_queued_scheduled_and_running_jobs(client, jobs, alice):
    client.force_login(alice)

    page = client.get("/", {"state": "queued,scheduled,running"}).text

    assert '<option value="queued,scheduled,running" selected>not ended</option>' in page
    shown = {state for state, job in jobs.items() if f"/jobs/{job.pk}/" in page}
    assert shown == {"queued", "scheduled", "running"}


def test_the_cli_takes_states_with_commas_and_names_one_that_is_none():
    assert states_written("queued, running") == "queued,running"
    with pytest.raises(Exception, match="not a state: runing"):
        states_written("queued,runing")
