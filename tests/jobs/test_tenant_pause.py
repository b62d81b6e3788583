"""A tenant's placements paused by a platform admin (Kueue's ClusterQueue stopPolicy Hold):
while `Tenant.placements_paused` says why, none of its queued jobs starts (they wait as
`team_paused`, saying it), its running jobs run on, and the commit checks it again under the
tenant's lock; the quotas API, page and CLI, and a test-only submission, say it."""

import time
from datetime import UTC, datetime

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from rest_framework.test import APIClient

from jobs import cycle, snapshot
from jobs.commit import commit_batch
from jobs.models import Attempt, Job
from jobs.placement import PLACED, place
from jobs.states import State
from quotas.models import Tenant
from tests.clusters.test_node_service_api import cli_of
from tests.factories import JobFactory, NodeFactory, PriorityClassFactory, UserFactory
from tests.jobs.test_batch_shard_limit_cli import mlsched  # noqa: F401 (a fixture)
from tests.jobs.test_elastic_growth_cycle import started_gang
from tests.quotas.test_notify_admin import change_page, tenant_form

pytestmark = pytest.mark.django_db
WHY = "an incident: its jobs flood the shared storage"
SAID = f"Its team's placements are paused by a platform admin: {WHY}."


@pytest.fixture
def room(east):
    PriorityClassFactory(name="normal", value=0)
    return NodeFactory(cluster=east, gpu_count=8)


def pause(tenant, why: str = WHY) -> None:
    Tenant.objects.filter(pk=tenant.pk).update(placements_paused=why)


def test_a_paused_teams_jobs_wait_saying_why_while_others_start(room, alpha, gamma):
    running = JobFactory(tenant=alpha, gpus=2)
    cycle.run_cycle()
    pause(alpha)
    waiting = JobFactory(tenant=alpha, gpus=2)
    other = JobFactory(tenant=gamma, gpus=2)

    cycle.run_cycle()

    states = {job.pk: job for job in Job.objects.all()}
    assert (states[waiting.pk].state, states[waiting.pk].pending_reason) == (
        State.QUEUED, "team_paused"
    )  # fmt: skip
    assert states[waiting.pk].pending_message == SAID
    assert states[other.pk].state == State.SCHEDULED
    assert states[running.pk].state == State.SCHEDULED  # runs on


def test_its_jobs_start_once_the_pause_is_lifted(room, alpha):
    pause(alpha)
    job = JobFactory(tenant=alpha, gpus=2)
    cycle.run_cycle()

    pause(alpha, "")
    cycle.run_cycle()

    assert Job.objects.get(pk=job.pk).state == State.SCHEDULED


def test_a_pause_after_the_snapshot_holds_at_the_commit(room, alpha):
    job = JobFactory(tenant=alpha, gpus=2)
    placed = [o for o in place(snapshot.load(time.time()).snapshot).outcomes
              if o.status == PLACED]  # fmt: skip

    pause(alpha)

    assert commit_batch(placed, datetime.now(tz=UTC)) == set()
    assert Job.objects.get(pk=job.pk).state == State.QUEUED


def test_a_test_only_submission_says_it_would_not_start(room, alpha, alice):
    pause(alpha)
    client = APIClient()
    client.force_authenticate(alice)
    body = {"tenant": "alpha", "name": "x", "family": "training", "image": "i",
            "command": ["x"], "cpu_milli": 1000, "memory_mb": 1000, "gpus": 1,
            "max_runtime_s": 60}  # fmt: skip

    answer = client.post("/api/v1/jobs/test/", body, format="json").json()

    assert (answer["starts_now"], answer["estimated_start"], answer["notes"]) == (
        False, None, [SAID]
    )  # fmt: skip


def test_the_quotas_api_page_and_cli_say_it(room, alpha, alice, mlsched):  # noqa: F811
    pause(alpha)
    client = APIClient()
    client.force_authenticate(alice)

    (team,) = client.get("/api/v1/quotas/").json()["tenants"]
    client.force_login(alice)
    page = client.get("/quotas/").content.decode()
    status, out, err = mlsched("quota")

    assert team["placements_paused"] == WHY
    assert f"Its placements are paused by a platform admin ({WHY})" in page
    assert status == 0, err
    assert f"  placements paused by a platform admin: {WHY}" in out.splitlines()


def test_a_platform_admin_pauses_it_in_the_admin_and_a_tenant_admin_may_not_lift_it(alpha, alice):
    root, owner = Client(), Client()
    root.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    User.objects.filter(pk=alice.pk).update(is_staff=True)
    alice.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_tenant", "change_tenant"])
    )
    owner.force_login(alice)

    paused = root.post(change_page(alpha), tenant_form(alpha, placements_paused=WHY))
    lifted = owner.post(change_page(alpha), tenant_form(alpha, placements_paused=""))

    alpha.refresh_from_db()
    assert (paused.status_code, lifted.status_code, alpha.placements_paused) == (302, 302, WHY)
    assert 'name="placements_paused"' not in owner.get(change_page(alpha)).text


def test_a_paused_teams_running_elastic_gang_does_not_grow(alpha):
    gang, attempt, cluster = started_gang(nodes=3, workers=4, tenant=alpha)
    NodeFactory(cluster=cluster)  # room for its fourth worker
    pause(alpha)

    assert cycle.run_cycle(time.time() + 700).grown == []
    assert Attempt.objects.get(pk=attempt.pk).stop_requested_at is None


def test_its_queue_wait_stops_while_paused_and_starts_again_once_lifted(room, alpha):
    job = JobFactory(tenant=alpha, gpus=2, held="user")  # kept from placement meanwhile
    Job.objects.filter(pk=job.pk).update(held="", eligible_at=datetime(2026, 1, 1, tzinfo=UTC))
    root = Client()
    root.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))

    root.post(change_page(alpha), tenant_form(alpha, placements_paused=WHY))
    paused = Job.objects.get(pk=job.pk).eligible_at
    before = datetime.now(tz=UTC)
    alpha.refresh_from_db()
    root.post(change_page(alpha), tenant_form(alpha, placements_paused=""))

    assert paused is None
    assert Job.objects.get(pk=job.pk).eligible_at >= before


# -- through the API and the CLI (a platform admin's) --------------------------------------------


def as_user(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_a_platform_admin_pauses_and_resumes_a_team_through_the_api(room, alpha):
    root = UserFactory(username="root", is_superuser=True)
    job = JobFactory(tenant=alpha, gpus=2)

    paused = as_user(root).post(f"/api/v1/tenants/{alpha.slug}/pause/", {"reason": WHY},
                                format="json")  # fmt: skip
    again = as_user(root).post(f"/api/v1/tenants/{alpha.slug}/pause/", {"reason": WHY},
                               format="json")  # fmt: skip
    cycle.run_cycle()
    waiting = Job.objects.get(pk=job.pk)
    resumed = as_user(root).post(f"/api/v1/tenants/{alpha.slug}/resume/", format="json")
    cycle.run_cycle()

    assert paused.status_code == 200, paused.content
    assert (paused.json()["slug"], paused.json()["placements_paused"]) == (alpha.slug, WHY)
    assert (paused.json()["changed"], paused.json()["queued"]) == (True, 1)
    assert again.json()["changed"] is False
    assert (waiting.state, waiting.pending_message, waiting.eligible_at) == (
        State.QUEUED,
        SAID,
        None,
    )  # its queue wait stopped, as the admin's save stops it
    assert (resumed.json()["placements_paused"], resumed.json()["changed"]) == ("", True)
    assert Job.objects.get(pk=job.pk).state == State.SCHEDULED


def test_only_a_platform_admin_pauses_and_a_pause_says_why(alpha, alice):
    root = UserFactory(username="root", is_superuser=True)

    owner = as_user(alice).post(f"/api/v1/tenants/{alpha.slug}/pause/", {"reason": WHY},
                                format="json")  # fmt: skip
    lifted = as_user(alice).post(f"/api/v1/tenants/{alpha.slug}/resume/", format="json")
    silent = as_user(root).post(f"/api/v1/tenants/{alpha.slug}/pause/", {"reason": " "},
                                format="json")  # fmt: skip
    long = as_user(root).post(f"/api/v1/tenants/{alpha.slug}/pause/", {"reason": "x" * 201},
                              format="json")  # fmt: skip
    unknown = as_user(root).post("/api/v1/tenants/nobody/pause/", {"reason": WHY}, format="json")

    assert (owner.status_code, lifted.status_code) == (403, 403)
    assert owner.json()["detail"] == "Only a platform admin pauses a team's placements."
    assert (silent.status_code, list(silent.json())) == (400, ["reason"])
    assert (long.status_code, list(long.json())) == (400, ["reason"])
    assert unknown.status_code == 404
    assert Tenant.objects.get(pk=alpha.pk).placements_paused == ""


@pytest.mark.django_db(transaction=True)
def test_the_cli_pauses_and_resumes_a_team(live_server, alpha):
    root = UserFactory(username="root", is_superuser=True)
    cli = cli_of(live_server, root)

    paused = cli("pause", alpha.slug, "--reason", "storage incident")
    resumed = cli("resume", alpha.slug)
    unsaid = cli("pause", alpha.slug)

    assert paused.returncode == 0, paused.stderr
    assert paused.stdout == f"{alpha.slug}: placements paused (storage incident); 0 jobs queued\n"
    assert resumed.stdout == f"{alpha.slug}: placements resumed; 0 jobs queued\n"
    assert unsaid.returncode == 2 and "--reason" in unsaid.stderr


def test_a_pause_set_outside_the_admin_stops_the_queue_wait_until_the_cycle_after_it_ends(
    alpha,
):
    # No node: the job stays queued, its wait counting, all along.
    job = JobFactory(tenant=alpha, gpus=2, held="user")
    Job.objects.filter(pk=job.pk).update(held="", eligible_at=datetime(2026, 1, 1, tzinfo=UTC))
    pause(alpha)  # as the shell or a data migration writes it: nothing else changes

    cycle.run_cycle()
    paused = Job.objects.get(pk=job.pk).eligible_at
    before = datetime.now(tz=UTC)
    pause(alpha, "")
    cycle.run_cycle()

    assert paused is None
    assert Job.objects.get(pk=job.pk).eligible_at >= before
