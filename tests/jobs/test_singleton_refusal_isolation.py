"""A refused change of a job's dependencies, as an outsider reads it (a guardian grant on that job
alone): it names the jobs the outsider named and those they may see, and no other job of the
team's."""

import pytest
from guardian.shortcuts import assign_perm

from tests.jobs.test_dependency_kinds import ANY, OK, submit
from tests.jobs.test_dependency_update import change, written

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("normal_priority", "room")]
NAME = "nightly-eval"
REFUSED = (
    "An earlier job of the same name waits for job #{later}, directly or through other jobs: "
    "a singleton waits for it, so neither would ever run."
)
NAMED = (
    "Job #{earlier}, an earlier job of the same name, waits for job #{later}, directly or "
    "through other jobs: a singleton waits for it, so neither would ever run."
)


@pytest.fixture
def group(alice, alpha):
    """Two jobs of one name, the earlier waiting for the later through a third: the later job
    cannot be made a singleton."""
    earlier, later = submit(alice, alpha, name=NAME), submit(alice, alpha, name=NAME)
    report = submit(alice, alpha, (later, OK))
    assert change(alice, earlier, [report.pk]).status_code == 200
    return earlier, later


def said(sentence: str, earlier, later) -> dict:
    return {"singleton": [sentence.format(earlier=earlier.pk, later=later.pk)]}


def test_an_outsider_with_a_cancel_grant_is_refused_a_singleton_without_the_earlier_jobs_id(
    charlie, group
):
    earlier, later = group
    assign_perm("jobs.cancel_job", charlie, later)
    before = written()

    response = change(charlie, later, [], singleton=True)

    assert response.status_code == 400
    assert response.json() == said(REFUSED, earlier, later)
    assert f"#{earlier.pk}" not in response.text
    assert written() == before


def test_an_outsider_shown_the_earlier_job_too_is_refused_naming_it(charlie, group):
    earlier, later = group
    assign_perm("jobs.cancel_job", charlie, later)
    assign_perm("jobs.view_job", charlie, earlier)

    response = change(charlie, later, [], singleton=True)

    assert response.json() == said(NAMED, earlier, later)


def test_a_team_member_is_refused_naming_the_earlier_job(bob, group):
    earlier, later = group

    response = change(bob, later, [], singleton=True)

    assert response.json() == said(NAMED, earlier, later)


def test_an_outsiders_refused_cycle_names_only_the_jobs_they_named(alice, alpha, charlie):
    a = submit(alice, alpha)
    b = submit(alice, alpha, (a, OK))  # hidden from charlie
    c = submit(alice, alpha, (b, ANY))
    assign_perm("jobs.cancel_job", charlie, a)
    assign_perm("jobs.view_job", charlie, c)

    response = change(charlie, a, [c.pk])

    assert response.status_code == 400
    assert f"#{b.pk}" not in response.text
    assert response.json()["depends_on"][0].startswith(f"Job #{c.pk} waits for job #{a.pk}")


def test_the_portal_refuses_an_outsider_a_singleton_without_the_earlier_jobs_id(
    client, charlie, group
):
    earlier, later = group
    assign_perm("jobs.cancel_job", charlie, later)
    client.force_login(charlie)

    response = client.post(f"/jobs/{later.pk}/dependencies/", {"dependencies": "singleton"})

    assert response.status_code == 400
    assert f"#{earlier.pk}" not in response.content.decode()
    assert "An earlier job of the same name waits for job" in response.content.decode()
