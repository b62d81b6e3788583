"""Narrowing a tenant's allowed images holds its queued jobs of images no longer allowed (a
platform admin's hold: only a platform admin releases one), so no queued job starts an image
its team may no longer run; running work and other teams' jobs are left alone. A pattern's `*`
is its only wildcard."""

import pytest

from jobs import actions, cycle
from jobs.models import Job, JobEvent
from jobs.states import State
from quotas.models import image_pattern
from tests.factories import JobFactory, NodeFactory, UserFactory
from tests.security.test_admin_scope import tenant_form

pytestmark = pytest.mark.django_db

ONLY = "registry.example.com/ml/*"
ALLOWED, OTHER = "registry.example.com/ml/train:1", "docker.io/someone/train:1"


@pytest.fixture
def root(client):
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    return client


def narrow(client, tenant, patterns: str = ONLY):
    form = {**tenant_form(tenant), "allowed_images": patterns}
    return client.post(f"/admin/quotas/tenant/{tenant.pk}/change/", form, follow=True)


def test_narrowing_the_patterns_holds_the_queued_jobs_of_other_images(root, alpha, gamma):
    kept = JobFactory(tenant=alpha, image=ALLOWED)
    other = JobFactory(tenant=alpha, image=OTHER)
    elsewhere = JobFactory(tenant=gamma, image=OTHER)

    page = narrow(root, alpha)

    assert "Held 1 queued job of" in page.text
    held = {j.pk: j for j in Job.objects.all()}
    assert (held[kept.pk].held, held[elsewhere.pk].held) == ("", "")
    assert held[other.pk].held == Job.Hold.ADMIN
    assert held[other.pk].pending_reason == "held"
    assert (
        "its image is no longer among its team's allowed images" in held[other.pk].pending_message
    )
    event = JobEvent.objects.get(job=other)
    assert event.reason == "held by root: its image is no longer allowed"


def test_a_held_job_is_not_placed_and_only_a_platform_admin_releases_it(root, alpha):
    NodeFactory(gpu_type="A100", gpu_count=8)
    other = JobFactory(tenant=alpha, image=OTHER)
    narrow(root, alpha)

    assert cycle.run_cycle().placed == []
    with pytest.raises(actions.AdminHold):
        actions.release_hold(Job.objects.get(pk=other.pk), "alice")
    assert actions.release_hold(Job.objects.get(pk=other.pk), "root", admin=True) == 1


def test_patterns_narrowed_outside_the_admin_hold_the_queued_jobs_at_the_next_cycle(alpha):
    NodeFactory(gpu_type="A100", gpu_count=8)
    kept = JobFactory(tenant=alpha, image=ALLOWED, gpus=1)
    other = JobFactory(tenant=alpha, image=OTHER, gpus=1)
    alpha.allowed_images = ONLY  # as the shell or a data migration writes it: nothing held
    alpha.save()

    assert cycle.run_cycle().placed == [kept.pk]

    held = Job.objects.get(pk=other.pk)
    assert (held.state, held.held, held.pending_reason) == (State.QUEUED, Job.Hold.ADMIN, "held")
    assert held.pending_message.startswith(
        "Held by the scheduler: its image is no longer among its team's allowed images."
    )
    event = JobEvent.objects.get(job=other)
    assert event.reason == "held by the scheduler: its image is no longer allowed"
    with pytest.raises(actions.AdminHold):
        actions.release_hold(held, "alice")


def test_running_work_and_a_save_that_leaves_the_patterns_alone_hold_nothing(root, alpha):
    running = JobFactory(tenant=alpha, image=OTHER, state=State.RUNNING)
    alpha.allowed_images = ONLY
    alpha.save()
    queued = JobFactory(tenant=alpha, image=OTHER)  # queued before an admin looks again

    page = narrow(root, alpha)  # the same patterns: no change

    assert "Held" not in page.text
    assert Job.objects.get(pk=queued.pk).held == ""
    assert Job.objects.get(pk=running.pk).state == State.RUNNING


def test_emptying_the_patterns_holds_nothing(root, alpha):
    alpha.allowed_images = ONLY
    alpha.save()
    JobFactory(tenant=alpha, image=OTHER)

    narrow(root, alpha, "")

    assert not Job.objects.exclude(held="").exists()


def test_the_verb_counts_the_jobs_it_holds_and_holds_each_once(alpha):
    JobFactory.create_batch(3, tenant=alpha, image=OTHER)
    JobFactory(tenant=alpha, image=ALLOWED)
    alpha.allowed_images = ONLY
    alpha.save()

    assert actions.hold_disallowed_images(alpha, "root") == 3
    assert actions.hold_disallowed_images(alpha, "root") == 0  # held already


@pytest.mark.parametrize(
    ("pattern", "image", "matches"),
    [
        ("python:3.1?", "python:3.12", False),  # `?` is itself
        ("python:3.1?", "python:3.1?", True),
        ("reg/[ab]:1", "reg/a:1", False),  # so is `[`
        ("reg/*:1", "reg/a/b:1", True),
        ("reg/*", "reg/a\nb", True),  # `*` is any run of characters
        ("reg.io/x", "regXio/x", False),  # `.` is itself
    ],
)
def test_a_pattern_has_star_as_its_only_wildcard(pattern, image, matches):
    assert bool(image_pattern(pattern).fullmatch(image)) is matches
