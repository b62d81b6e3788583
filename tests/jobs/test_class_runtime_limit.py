"""A priority class's longest runtime limit (Slurm's QOS MaxWall): a submission at the class
asking for more is refused on max_runtime_s, and so is a queued job's move into the class;
jobs queued already keep theirs when a platform admin lowers it."""

import pytest
from django.test import Client

from jobs.models import Job
from quotas.models import PriorityClass
from tests.factories import JobFactory, PriorityClassFactory
from tests.jobs.test_api import SPEC, submit
from tests.jobs.test_reprioritize import change

pytestmark = pytest.mark.django_db
FOUR_HOURS = 4 * 3600


@pytest.fixture
def urgent(alpha):
    """A preempting class open to alpha, for runs of four hours at most."""
    urgent = PriorityClassFactory(name="urgent", value=100, may_preempt=True,
                                  max_runtime_s=FOUR_HOURS)  # fmt: skip
    urgent.tenants.add(alpha)
    return urgent


def test_a_submission_asking_for_more_than_the_classs_limit_is_a_400_naming_it(alice, urgent):
    response = submit(alice, priority_class="urgent", max_runtime_s=FOUR_HOURS + 1)

    assert response.status_code == 400
    assert response.json() == {
        "max_runtime_s": ["At most 14400 s at 'urgent' (the class's longest runtime limit)."]
    }
    assert not Job.objects.exists()


def test_a_submission_within_it_is_queued(alice, urgent):
    assert submit(alice, priority_class="urgent", max_runtime_s=FOUR_HOURS).status_code == 201


def test_a_queued_job_asking_for_more_cannot_move_into_the_class(alice, alpha, urgent):
    job = JobFactory(tenant=alpha, owner=alice, max_runtime_s=FOUR_HOURS * 2)
    was = job.priority_class_id

    response = change(alice, job, priority_class="urgent")

    assert response.status_code == 400
    assert list(response.json()) == ["priority_class"]
    assert f"Job #{job.pk} asks for 28800 s." in response.json()["priority_class"][0]
    assert Job.objects.get(pk=job.pk).priority_class_id == was


def test_jobs_queued_already_keep_theirs_when_the_limit_is_lowered(alice, alpha, urgent):
    job = JobFactory(tenant=alpha, owner=alice, priority_class=urgent, max_runtime_s=FOUR_HOURS)
    urgent.max_runtime_s = 3600
    urgent.save()

    assert change(alice, job, priority=5).status_code == 200  # the same class: no move


def test_the_submit_form_shows_the_refusal_on_the_runtime_field(alice, urgent):
    portal = Client()
    portal.force_login(alice)
    form = {**SPEC, "command": "python train.py", "env": "", "priority_class": "urgent",
            "max_runtime_s": FOUR_HOURS + 60}  # fmt: skip

    page = portal.post("/jobs/new/", form)

    assert page.status_code == 400
    assert "At most 14400 s at &#x27;urgent&#x27;" in page.text
    assert not Job.objects.exists()


def test_the_forms_say_a_classs_limit_beside_its_name(alice, alpha, urgent):
    portal = Client()
    portal.force_login(alice)
    job = JobFactory(tenant=alpha, owner=alice)

    submit_page = portal.get("/jobs/new/").text
    job_page = portal.get(f"/jobs/{job.pk}/").text

    assert ">urgent (runtime limit at most 14400 s)</option>" in submit_page
    assert ">urgent (100; runtime limit at most 14400 s)</option>" in job_page


def test_the_forms_say_a_classs_gpu_limits_beside_its_name(alice, alpha, urgent):
    PriorityClass.objects.filter(pk=urgent.pk).update(max_gpus_per_user=4, max_gpus=16)
    portal = Client()
    portal.force_login(alice)
    job = JobFactory(tenant=alpha, owner=alice)

    submit_page = portal.get("/jobs/new/").text
    job_page = portal.get(f"/jobs/{job.pk}/").text

    said = "runtime limit at most 14400 s; at most 4 GPUs a user, 16 in all"
    assert f">urgent ({said})</option>" in submit_page
    assert f">urgent (100; {said})</option>" in job_page
    PriorityClass.objects.filter(pk=urgent.pk).update(max_runtime_s=None, max_gpus_per_user=None)
    assert ">urgent (at most 16 GPUs in all)</option>" in portal.get("/jobs/new/").text
