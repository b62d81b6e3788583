"""A tenant's idle-GPU limit (`Tenant.gpu_idle_limit_min`): a running job whose whole GPUs have
all read idle that long is asked to stop by the janitor, with the stop grace, and fails once its
agent reports its workers gone, not retried; the job page warns of it beforehand."""

from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.core.exceptions import ValidationError
from rest_framework.test import APIClient

from clusters.backends.base import RUNNING, STOPPED
from clusters.models import Allocation
from jobs import actions, cycle, janitor
from jobs.clock import database_now
from jobs.models import Attempt, Job
from jobs.states import State
from quotas.models import Tenant
from tests.clusters.test_agent_api import post, report
from tests.factories import JobFactory, NodeFactory, TenantFactory, UserFactory
from tests.jobs import test_cli
from tests.quotas.test_user_gpu_limit import quota_as
from tests.security.test_admin_scope import GRANTED, tenant_form

pytestmark = pytest.mark.django_db
Outcome = Attempt.Outcome
cli = test_cli.cli  # the command line against a live server, as Alice
STOPPED_AT_30 = "its GPUs read idle for 30 min, its team's limit; the control plane stopped it"


def beat(agent, workers: list[dict]) -> dict:
    return post(agent, "east", "heartbeat", {"workers": workers}).json()


@pytest.fixture
def running(east, agent, alice, alpha):
    """Alice's one-GPU job on east, reported running; her team stops jobs idle for 30 min. It
    retries user errors and has retries left: the idle stop must fail it all the same."""
    alpha.gpu_idle_limit_min = 30
    alpha.save()
    NodeFactory(cluster=east, name="east-0", gpu_count=8)
    job = JobFactory(tenant=alpha, owner=alice, gpus=1, retry_user_errors=True, max_retries=3)
    cycle.run_cycle()
    beat(agent, report(job.attempts.get(), RUNNING))
    return Job.objects.get(pk=job.pk)


def idle_for(job: Job, minutes: float) -> Attempt:
    """The job's live attempt, its GPUs read idle since `minutes` before the database's now."""
    attempt = job.attempts.get(outcome="")
    since = database_now() - timedelta(minutes=minutes)
    Attempt.objects.filter(pk=attempt.pk).update(gpu_busy_seconds=60.0, gpu_idle_since=since)
    return attempt


def test_an_attempt_idle_past_its_teams_limit_is_asked_to_stop_as_gpu_idle(running):
    attempt = idle_for(running, 31)

    assert janitor.stop_idle_gpus(database_now()) == 1

    attempt.refresh_from_db()
    assert (attempt.stop_reason, attempt.reason) == (Outcome.GPU_IDLE, STOPPED_AT_30)
    assert attempt.outcome == ""  # its agent ends it, with the grace


def test_an_attempt_idle_for_less_than_the_limit_runs_on(running):
    attempt = idle_for(running, 29)

    assert janitor.stop_idle_gpus(database_now()) == 0
    assert Attempt.objects.get(pk=attempt.pk).stop_requested_at is None


def test_a_team_without_a_limit_is_never_stopped_for_idle_gpus(running, alpha):
    alpha.gpu_idle_limit_min = None
    alpha.save()
    attempt = idle_for(running, 600)

    assert janitor.stop_idle_gpus(database_now()) == 0
    assert Attempt.objects.get(pk=attempt.pk).stop_requested_at is None


def test_each_team_is_held_to_its_own_limit(running, east, agent, bob):
    strict = TenantFactory(name="strict", gpu_idle_limit_min=10)
    other = JobFactory(tenant=strict, owner=bob, gpus=1)
    cycle.run_cycle()
    beat(agent, report(running.attempts.get(), RUNNING) + report(other.attempts.get(), RUNNING))
    mine, theirs = idle_for(running, 20), idle_for(other, 20)

    assert janitor.stop_idle_gpus(database_now()) == 1

    assert Attempt.objects.get(pk=mine.pk).stop_requested_at is None
    assert Attempt.objects.get(pk=theirs.pk).reason.startswith("its GPUs read idle for 10 min")


def test_an_attempt_already_asked_to_stop_keeps_that_stop(running):
    attempt = idle_for(running, 60)
    actions.request_stop([running.pk], Outcome.PREEMPTED, "preempted for a higher-priority job")

    assert janitor.stop_idle_gpus(database_now()) == 0

    attempt.refresh_from_db()
    assert attempt.stop_reason == Outcome.PREEMPTED


def test_busy_gpus_are_never_stopped(running):
    attempt = running.attempts.get()
    Attempt.objects.filter(pk=attempt.pk).update(gpu_busy_seconds=3600.0, gpu_idle_since=None)

    assert janitor.stop_idle_gpus(database_now() + timedelta(days=1)) == 0


def test_once_its_agent_reports_the_workers_gone_the_job_fails_not_retried(
    running, agent, alice, settings
):
    attempt = idle_for(running, 31)
    janitor.sweep()
    answer = beat(agent, report(attempt, RUNNING))
    assert answer["stop"] == [
        {"attempt_id": attempt.pk, "grace_s": settings.MLSCHED_STOP_GRACE_S, "reason": "gpu_idle"}
    ]

    beat(agent, report(attempt, STOPPED, codes=[-15]))

    running.refresh_from_db()
    assert (running.state, running.retries_used) == (State.FAILED, 0)
    assert running.events.last().reason == STOPPED_AT_30
    assert not Allocation.objects.active().filter(attempt=attempt).exists()
    client = APIClient()
    client.force_authenticate(alice)
    shown = client.get(f"/api/v1/jobs/{running.pk}/").json()
    assert (shown["state"], shown["attempts"][0]["outcome"]) == ("failed", "gpu_idle")


def test_the_job_document_warns_of_the_limit_from_half_of_it(running, alice):
    client = APIClient()
    client.force_authenticate(alice)
    idle_for(running, 16)

    said = client.get(f"/api/v1/jobs/{running.pk}/").json()["attempts"][0]["gpu_used"]

    assert said.endswith("; idle for the last 16 min (stopped at 30 min)")


def test_a_limit_under_ten_minutes_is_refused_naming_it(alpha):
    alpha.gpu_idle_limit_min = 5

    with pytest.raises(ValidationError) as refused:
        alpha.full_clean()

    assert "gpu_idle_limit_min" in refused.value.message_dict


def test_a_platform_admin_sets_the_limit_in_the_admin_and_under_ten_is_refused(client, alpha):
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    page = f"/admin/quotas/tenant/{alpha.pk}/change/"

    refused = client.post(page, {**tenant_form(alpha), "gpu_idle_limit_min": "5"})
    assert refused.status_code == 200
    assert "gpu_idle_limit_min" in refused.context["adminform"].form.errors
    assert Tenant.objects.get(pk=alpha.pk).gpu_idle_limit_min is None

    saved = client.post(page, {**tenant_form(alpha), "gpu_idle_limit_min": "45"})
    assert saved.status_code == 302
    assert Tenant.objects.get(pk=alpha.pk).gpu_idle_limit_min == 45


def test_a_tenant_admin_cannot_set_their_teams_limit(client, alice, alpha):
    alice.is_staff = True  # alice owns alpha: staff without superuser rights, its admin
    alice.save(update_fields=["is_staff"])
    alice.user_permissions.add(*Permission.objects.filter(codename__in=GRANTED))
    client.force_login(alice)
    alpha.gpu_idle_limit_min = 30
    alpha.save()

    answer = client.post(
        f"/admin/quotas/tenant/{alpha.pk}/change/",
        {**tenant_form(alpha), "gpu_idle_limit_min": ""},
    )

    assert answer.status_code == 302
    assert Tenant.objects.get(pk=alpha.pk).gpu_idle_limit_min == 30


def test_the_quota_api_page_and_cli_show_the_limit(alpha, alice, client, cli):
    alpha.gpu_idle_limit_min = 30
    alpha.save()

    team, page, shown = quota_as(alice, client, cli)

    assert team["gpu_idle_limit_min"] == 30
    assert "A job whose GPUs all read idle for 30 minutes is stopped and fails." in page
    assert "jobs whose GPUs are idle 30 min are stopped" in shown.stdout
