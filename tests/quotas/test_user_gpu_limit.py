"""A tenant's limit on the GPUs one user may hold in it at once (Tenant.max_gpus_per_user,
Slurm's MaxTRESPerUser), through the real cycle, the admin, the quota API, page and CLI."""

import pytest
from django.contrib.auth.models import Permission
from rest_framework.test import APIClient

from jobs import cycle
from jobs.models import Job
from jobs.states import State
from tests.factories import JobFactory, NodeFactory
from tests.jobs import test_cli
from tests.security.test_admin_scope import GRANTED, tenant_form

pytestmark = pytest.mark.django_db

cli = test_cli.cli  # the command line against a live server, as Alice


@pytest.fixture
def room(east):
    return NodeFactory(cluster=east, name="east-0", gpu_type="A100", gpu_count=8)


def limit(tenant, gpus) -> None:
    tenant.max_gpus_per_user = gpus
    tenant.save(update_fields=["max_gpus_per_user"])


def quota_as(user, client, cli) -> tuple[dict, str, object]:
    """What the quota API (the user's one team), page and CLI (as Alice) say."""
    api = APIClient()
    api.force_authenticate(user)
    client.force_login(user)
    (team,) = api.get("/api/v1/quotas/").json()["tenants"]
    return team, client.get("/quotas/").text, cli("quota")


def states(jobs) -> list[str]:
    return [Job.objects.get(pk=job.pk).state for job in jobs]


def test_a_users_jobs_past_the_limit_wait_while_a_teammates_start(alpha, alice, bob, room):
    limit(alpha, 2)
    mine = [JobFactory(tenant=alpha, owner=alice) for _ in range(3)]
    theirs = JobFactory(tenant=alpha, owner=bob)

    cycle.run_cycle()

    assert states(mine) == [State.SCHEDULED, State.SCHEDULED, State.QUEUED]
    assert states([theirs]) == [State.SCHEDULED]
    waiting = Job.objects.get(pk=mine[2].pk)
    assert waiting.pending_reason == "user_gpu_limit"
    assert waiting.pending_message.endswith(
        "Its submitter holds 2 of the 2 GPUs one user may hold in the tenant; it starts once "
        "enough of their work ends."
    )


def test_a_job_past_the_limit_is_estimated_to_start_when_enough_of_their_work_ends(
    alpha, alice, room
):
    limit(alpha, 4)
    short = JobFactory(tenant=alpha, owner=alice, gpus=2, max_runtime_s=3600)
    long = JobFactory(tenant=alpha, owner=alice, gpus=2, max_runtime_s=7200)
    big = JobFactory(tenant=alpha, owner=alice, gpus=4)
    cycle.run_cycle()
    later = JobFactory(tenant=alpha, owner=alice, gpus=2)

    cycle.run_cycle()

    assert states([short, long, big]) == [State.SCHEDULED, State.SCHEDULED, State.QUEUED]
    for job, hours in ((Job.objects.get(pk=later.pk), 1), (Job.objects.get(pk=big.pk), 2)):
        assert job.pending_reason == "user_gpu_limit"
        ran_from = Job.objects.get(pk=short.pk).attempts.get().scheduled_at
        off = (job.estimated_start - ran_from).total_seconds() - hours * 3600
        assert abs(off) < 60, (job.pk, off)


def test_what_a_user_already_runs_counts_against_a_limit_set_later(alpha, alice, room):
    running = [JobFactory(tenant=alpha, owner=alice, gpus=2) for _ in range(2)]
    cycle.run_cycle()
    limit(alpha, 5)
    later = JobFactory(tenant=alpha, owner=alice, gpus=2)

    cycle.run_cycle()

    assert states(running) == [State.SCHEDULED, State.SCHEDULED]
    assert Job.objects.get(pk=later.pk).pending_reason == "user_gpu_limit"


def test_without_a_limit_one_user_takes_all_that_is_free(alpha, alice, room):
    mine = [JobFactory(tenant=alpha, owner=alice, gpus=2) for _ in range(4)]

    cycle.run_cycle()

    assert states(mine) == [State.SCHEDULED] * 4


def test_a_tenant_admin_sets_the_limit_of_their_tenant(client, alice, alpha):
    alice.is_staff = True  # alice owns alpha: staff without superuser rights, its admin
    alice.save(update_fields=["is_staff"])
    alice.user_permissions.add(*Permission.objects.filter(codename__in=GRANTED))
    client.force_login(alice)

    answer = client.post(
        f"/admin/quotas/tenant/{alpha.pk}/change/", {**tenant_form(alpha), "max_gpus_per_user": "4"}
    )

    alpha.refresh_from_db()
    assert answer.status_code == 302
    assert alpha.max_gpus_per_user == 4


def test_the_quota_api_page_and_cli_show_the_limit_and_what_the_reader_holds(
    alpha, alice, bob, client, cli, room
):
    limit(alpha, 4)
    JobFactory(tenant=alpha, owner=alice, gpus=3)
    JobFactory(tenant=alpha, owner=bob, gpus=1)
    cycle.run_cycle()

    team, page, shown = quota_as(alice, client, cli)

    assert (team["max_gpus_per_user"], team["your_gpus"]) == (4, 3.0)
    assert "Each user may hold at most 4 GPUs of it at once; you hold 3." in page
    assert "at most 4 GPUs per user (you hold 3)" in shown.stdout
