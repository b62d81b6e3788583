"""The images a tenant's jobs may run (Tenant.allowed_images, set by platform admins): a
submission of another image is a 400 naming `image` that writes nothing, through the API, the
test-only check, the portal's form and a resubmission; the quota API, page and CLI say them."""

import pytest
from django.contrib.auth.models import Permission

from jobs.models import Job
from jobs.states import State
from tests.factories import JobFactory, PriorityClassFactory, UserFactory
from tests.jobs import test_cli
from tests.jobs.test_api import SPEC, client_for, submit
from tests.jobs.test_portal import FORM
from tests.quotas.test_user_gpu_limit import quota_as
from tests.security.test_admin_scope import GRANTED, tenant_form

pytestmark = pytest.mark.django_db

cli = test_cli.cli  # the command line against a live server, as Alice
ONLY = "registry.example.com/ml/*\npython:3.11-slim\n"


@pytest.fixture(autouse=True)
def normal_priority():
    return PriorityClassFactory(name="normal", value=0)


def allow(tenant, patterns: str) -> None:
    tenant.allowed_images = patterns
    tenant.save(update_fields=["allowed_images"])


def test_an_image_no_pattern_matches_is_a_400_naming_image_and_writes_nothing(alice, alpha):
    allow(alpha, ONLY)

    refused = submit(alice, image="docker.io/someone/miner:latest")

    assert refused.status_code == 400
    assert refused.json()["image"] == [
        "Tenant 'alpha' runs only images matching registry.example.com/ml/*, python:3.11-slim: "
        "ask a platform admin to allow another."
    ]
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    "image",
    ["registry.example.com/ml/train:1.2", "registry.example.com/ml/a/b@sha256:abc",
     "python:3.11-slim"],
)  # fmt: skip
def test_an_image_a_pattern_matches_is_queued(alice, alpha, image):
    allow(alpha, ONLY)

    assert submit(alice, image=image).status_code == 201


@pytest.mark.parametrize(
    "image",
    ["registry.example.com.evil.io/ml/x", "registry.example.com/other/x", "python:3.11",
     "Registry.example.com/ml/x"],
)  # fmt: skip
def test_near_misses_are_refused(alice, alpha, image):
    allow(alpha, ONLY)

    assert submit(alice, image=image).status_code == 400


def test_without_patterns_any_image_is_queued(alice):
    assert submit(alice, image="docker.io/anyone/anything:latest").status_code == 201


def test_the_test_only_check_and_the_portal_form_refuse_it_too(client, alice, alpha):
    allow(alpha, ONLY)
    checked = client_for(alice).post("/api/v1/jobs/test/", {**SPEC, "image": "x:1"}, "json")
    assert checked.status_code == 400 and "image" in checked.json()

    client.force_login(alice)
    page = client.post("/jobs/new/", {**FORM, "image": "x:1"})
    assert page.status_code == 400 and 'data-field="image"' in page.text
    assert not Job.objects.exists()


def test_a_resubmission_of_an_image_no_longer_allowed_is_refused(alice, alpha):
    ended = JobFactory(tenant=alpha, owner=alice, image="old/image:1", state=State.FAILED)
    allow(alpha, ONLY)

    refused = client_for(alice).post(f"/api/v1/jobs/{ended.pk}/resubmit/", {}, format="json")

    assert refused.status_code == 400 and "image" in refused.json()
    assert Job.objects.count() == 1


def test_a_platform_admin_sets_them_and_a_pattern_letting_all_through_is_refused(client, alpha):
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    form = {**tenant_form(alpha), "allowed_images": "*"}

    page = client.post(f"/admin/quotas/tenant/{alpha.pk}/change/", form)
    assert page.status_code == 200 and "lets any image through" in page.text
    form["allowed_images"] = ONLY
    assert client.post(f"/admin/quotas/tenant/{alpha.pk}/change/", form).status_code == 302
    alpha.refresh_from_db()
    assert alpha.image_patterns() == ["registry.example.com/ml/*", "python:3.11-slim"]


def test_a_tenant_admin_cannot_change_them(client, alice, alpha):
    alice.is_staff = True  # alice owns alpha: staff without superuser rights, its admin
    alice.save(update_fields=["is_staff"])
    alice.user_permissions.add(*Permission.objects.filter(codename__in=GRANTED))
    client.force_login(alice)
    form = {**tenant_form(alpha), "allowed_images": "anything/*", "max_gpus_per_user": "4"}

    answer = client.post(f"/admin/quotas/tenant/{alpha.pk}/change/", form)

    alpha.refresh_from_db()
    assert answer.status_code == 302 and alpha.max_gpus_per_user == 4  # the form was saved
    assert alpha.allowed_images == ""


def test_the_quota_api_page_and_cli_say_them(alice, alpha, client, cli):
    allow(alpha, ONLY)

    team, page, shown = quota_as(alice, client, cli)

    assert team["allowed_images"] == ["registry.example.com/ml/*", "python:3.11-slim"]
    assert "<code>registry.example.com/ml/*</code>, <code>python:3.11-slim</code>" in page
    assert shown.stdout.splitlines()[-1].endswith(
        ", images only registry.example.com/ml/* python:3.11-slim"
    )
