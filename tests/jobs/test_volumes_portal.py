"""Data volumes in the portal: the submit form's "Data volumes" field (NAME:PATH or
NAME:PATH:rw, one a line), offering the team's volumes and checked by the API's serializer,
its errors at the field; and the job page listing a job's volumes with their paths."""

import pytest

from jobs.models import Job
from tests.factories import JobFactory, TenantVolumeFactory
from tests.jobs.test_batch_shard_limit_portal import portal_of
from tests.jobs.test_portal_submit import FORM

pytestmark = pytest.mark.django_db


def field_of(page: str, name: str) -> str:
    """The opening tag of the form's control `name`."""
    return page.split(f'name="{name}"')[1].split(">")[0]


def test_the_submit_form_offers_the_teams_volumes_and_no_other_teams(
    alice, alpha, gamma, normal_priority
):
    TenantVolumeFactory(tenant=alpha, name="imagenet")
    TenantVolumeFactory(tenant=alpha, name="scratch", writable=True)
    TenantVolumeFactory(tenant=gamma, name="their-weights")

    page = portal_of(alice).get("/jobs/new/").text

    assert '<textarea name="volumes"' in page and 'aria-describedby="volumes-help"' in page
    hint = page.split('id="volumes-help">')[1].split("</small>")[0]
    assert "<code>imagenet</code> (alpha; read only)" in hint
    assert "<code>scratch</code> (alpha; may be written)" in hint
    assert "their-weights" not in page


def test_the_submit_form_says_so_when_the_team_has_no_volumes(alice, normal_priority):
    page = portal_of(alice).get("/jobs/new/").text

    assert "Your teams have none: a platform admin adds them." in page


def test_the_submit_form_queues_a_job_mounting_volumes_read_only_or_to_write(
    alice, alpha, normal_priority
):
    TenantVolumeFactory(tenant=alpha, name="imagenet")
    TenantVolumeFactory(tenant=alpha, name="scratch", writable=True)
    typed = "imagenet:/data\r\n\r\nscratch:/out:rw\r\n"

    response = portal_of(alice).post("/jobs/new/", {**FORM, "volumes": typed})

    job = Job.objects.get()
    assert response.status_code == 302 and response.url == f"/jobs/{job.pk}/"
    assert job.volumes == [
        {"name": "imagenet", "path": "/data", "read_only": True},
        {"name": "scratch", "path": "/out", "read_only": False},
    ]


@pytest.mark.parametrize(
    ("typed", "says"),
    [
        ("imagenet", "Line 1 is not NAME:PATH or NAME:PATH:rw"),
        ("imagenet:/data\n:/x", "Line 2 is not NAME:PATH or NAME:PATH:rw"),
        ("other:/data", "has no volume &#x27;other&#x27;"),
        ("imagenet:/data:rw", "read only"),
        ("imagenet:data", "not an absolute path"),
        ("imagenet:/checkpoints", "the platform keeps"),
    ],
)
def test_a_volume_that_cannot_be_mounted_is_refused_at_its_field_and_nothing_is_written(
    alice, alpha, normal_priority, typed, says
):
    TenantVolumeFactory(tenant=alpha, name="imagenet")

    response = portal_of(alice).post("/jobs/new/", {**FORM, "volumes": typed})

    page = response.text
    assert response.status_code == 400
    assert says in page.split('id="id_volumes_error"')[1].split("</")[0]
    assert 'aria-invalid="true"' in field_of(page, "volumes")
    assert typed.split("\n")[0] in page.split('name="volumes"')[1].split("</textarea>")[0]
    assert not Job.objects.exists()


def test_the_job_page_lists_its_volumes_with_path_and_access(alice, alpha):
    job = JobFactory(tenant=alpha, owner=alice, volumes=[
        {"name": "imagenet", "path": "/data", "read_only": True},
        {"name": "scratch", "path": "/out", "read_only": False},
    ])  # fmt: skip
    plain = JobFactory(tenant=alpha, owner=alice)
    portal = portal_of(alice)

    page = portal.get(f"/jobs/{job.pk}/").text

    listed = page.split('<dd id="volumes">')[1].split("</dd>")[0]
    assert "<li><code>imagenet</code> at <code>/data</code> (ro: read only)</li>" in listed
    assert "<li><code>scratch</code> at <code>/out</code> (rw: read and write)</li>" in listed
    assert 'id="volumes"' not in portal.get(f"/jobs/{plain.pk}/").text
