"""Elastic training gangs in the portal and the admin: the submit form's "Min workers" field,
checked by the API's serializer; the job page saying a gang is elastic and the workers each
attempt started with; the admin's job page and attempts showing them."""

import re

import pytest
from django.test import Client

from jobs.models import Attempt, Job
from tests.factories import (
    AttemptFactory,
    ClusterFactory,
    JobFactory,
    NodeFactory,
    UserFactory,
)
from tests.jobs.test_batch_shard_limit_portal import portal_of
from tests.jobs.test_portal_submit import FORM

pytestmark = pytest.mark.django_db

GANG_FORM = {**FORM, "family": "training", "gpus": "8", "workers": "4"}


# -- the submit form ----------------------------------------------------------------------------


def test_the_submit_form_offers_min_workers_after_the_workers_with_its_help(alice, normal_priority):
    page = portal_of(alice).get("/jobs/new/").text

    workers, least = page.index('name="workers"'), page.index('name="min_workers"')
    assert workers < least < page.index('name="shards"')
    assert "Min workers (elastic training)" in page
    assert 'name="min_workers" value=""' in page
    assert 'aria-describedby="min-workers-help"' in page


def test_the_submit_form_queues_an_elastic_gang_with_its_min_workers(alice, normal_priority):
    response = portal_of(alice).post("/jobs/new/", {**GANG_FORM, "min_workers": "2"})

    job = Job.objects.get()
    assert response.status_code == 302 and response.url == f"/jobs/{job.pk}/"
    assert (job.workers, job.min_workers) == (4, 2)


def test_checking_an_elastic_gang_says_how_many_workers_it_would_start_with(alice, normal_priority):
    NodeFactory.create_batch(3, cluster=ClusterFactory(name="east"), gpu_type="A100", gpu_count=8)
    checked = {**GANG_FORM, "min_workers": "2", "max_runtime_s": "3600", "test_only": "1"}

    page = portal_of(alice).post("/jobs/new/", checked).text

    assert "starts now with 3 workers on 3 nodes in east" in page
    assert not Job.objects.exists()


def test_the_submit_form_takes_an_empty_min_workers_as_rigid(alice, normal_priority):
    portal_of(alice).post("/jobs/new/", {**GANG_FORM, "min_workers": ""})

    assert Job.objects.get().min_workers is None


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"min_workers": "0"}, "At least 1"),
        ({"min_workers": "two"}, "valid integer"),
        ({"min_workers": "5"}, "5 is more than its 4 workers"),
        ({"family": "evaluation", "workers": "1", "min_workers": "1"}, "Only a training job"),
    ],
)
def test_a_refused_min_workers_is_an_error_on_its_field_and_writes_nothing(
    alice, normal_priority, changes, says
):
    response = portal_of(alice).post("/jobs/new/", {**GANG_FORM, **changes})

    assert response.status_code == 400
    assert '<span class="error" data-field="min_workers">' in response.text
    assert says in response.text
    assert f'name="min_workers" value="{changes["min_workers"]}"' in response.text
    assert not Job.objects.exists()


# -- the job page -------------------------------------------------------------------------------


def test_an_elastic_jobs_page_says_the_fewest_workers_it_may_start_with(alpha, alice):
    job = JobFactory(tenant=alpha, owner=alice, workers=8, min_workers=2)

    page = portal_of(alice).get(f"/jobs/{job.pk}/").text

    assert '<dd id="workers">8 (elastic: at least 2; when all 8 do not fit' in page


def test_the_job_list_gives_an_elastic_gangs_range_of_workers(alpha, alice):
    JobFactory(tenant=alpha, owner=alice, workers=8, min_workers=2, gpus=8)
    JobFactory(tenant=alpha, owner=alice, workers=4, gpus=8)

    page = portal_of(alice).get("/").text

    assert '<td class="gpus">2–8 × 8</td>' in page
    assert '<td class="gpus">4 × 8</td>' in page


def test_the_job_list_gives_a_placed_elastic_gangs_workers_its_attempt_started_with(alpha, alice):
    smaller = JobFactory(tenant=alpha, owner=alice, workers=8, min_workers=2, gpus=8,
                         state="running")  # fmt: skip
    AttemptFactory(job=smaller, number=1, workers=4, outcome=Attempt.Outcome.PREEMPTED)
    AttemptFactory(job=smaller, number=2, workers=3)
    rigid = JobFactory(tenant=alpha, owner=alice, workers=4, gpus=8, state="running")
    AttemptFactory(job=rigid, workers=4)
    queued = JobFactory(tenant=alpha, owner=alice, workers=8, min_workers=2, gpus=8)
    AttemptFactory(job=queued, workers=2, outcome=Attempt.Outcome.PREEMPTED)

    page = portal_of(alice).get("/").text

    started = '<span class="started" title="The workers its attempt started with">'
    assert f'<td class="gpus">2–8 × 8 {started}started with 3</span></td>' in page
    assert page.count(started) == 1  # neither the rigid gang nor the queued elastic one


def test_a_rigid_jobs_page_says_its_workers_alone_and_has_no_workers_column(alpha, alice):
    job = JobFactory(tenant=alpha, owner=alice, workers=8)
    AttemptFactory(job=job, workers=8)

    page = portal_of(alice).get(f"/jobs/{job.pk}/").text

    assert '<dd id="workers">8</dd>' in page
    assert 'id="attempt-workers"' not in page and "started with" not in page


def test_an_elastic_jobs_attempts_say_the_workers_each_started_with(alpha, alice):
    job = JobFactory(tenant=alpha, owner=alice, workers=8, min_workers=2)
    east = ClusterFactory(name="east")
    AttemptFactory(job=job, cluster=east, number=1, workers=4, outcome=Attempt.Outcome.PREEMPTED)
    AttemptFactory(job=job, cluster=east, number=2, workers=8)

    page = portal_of(alice).get(f"/jobs/{job.pk}/").text

    assert '<th id="attempt-workers">Workers</th>' in page
    assert "<tr><td>1</td><td>east</td><td>started with 4 of 8 workers</td>" in page
    assert "<tr><td>2</td><td>east</td><td>all 8</td>" in page


def test_an_elastic_job_not_placed_yet_spans_its_extra_column(alpha, alice):
    job = JobFactory(tenant=alpha, owner=alice, workers=8, min_workers=2)

    page = portal_of(alice).get(f"/jobs/{job.pk}/").text

    assert '<td colspan="13">Not placed yet.</td>' in page


# -- the admin ----------------------------------------------------------------------------------


def tight(page: str) -> str:
    """The admin's page without the whitespace its templates put between tags."""
    return re.sub(r">\s+<", "><", page)


@pytest.fixture
def admin_portal(db) -> Client:
    return portal_of(UserFactory(username="root", is_staff=True, is_superuser=True))


def test_the_admins_job_page_shows_min_workers_after_workers_and_the_attempts_workers(
    admin_portal,
):
    job = JobFactory(workers=8, min_workers=2)
    AttemptFactory(job=job, workers=3)

    page = tight(admin_portal.get(f"/admin/jobs/job/{job.pk}/change/").text)

    shown = re.findall(r'field-(min_workers|workers)">.*?<div class="readonly">(.*?)</div>', page)
    assert shown[:2] == [("workers", "8"), ("min_workers", "2")]
    assert '<td class="field-workers"><p>3</p></td>' in page


def test_the_admins_attempt_list_shows_the_workers_each_started_with(admin_portal):
    AttemptFactory(job=JobFactory(workers=8, min_workers=2), workers=5)

    page = tight(admin_portal.get("/admin/jobs/attempt/").text)

    assert '<td class="field-workers">5</td>' in page
