"""Whether a tenant's jobs may take nodes whole (`Tenant.exclusive_allowed`, Slurm's partition
OverSubscribe) is a platform admin's: with it off, an exclusive submission and a change making
a job exclusive are refused (400 naming `exclusive`), its exclusive jobs queued before wait as
`exclusive_not_allowed` until made shared (the cycle leaves them out, the commit checks it
again), its shared jobs and running work go on, and the quotas API, page and CLI say it."""

import time
from datetime import UTC, datetime

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from jobs import cycle, snapshot
from jobs.commit import commit_batch
from jobs.models import Attempt, Job, JobEvent
from jobs.placement import PLACED, place
from jobs.states import State
from quotas.models import Tenant
from tests.factories import JobFactory, NodeFactory, UserFactory
from tests.jobs.test_batch_shard_limit_cli import mlsched  # noqa: F401 (a fixture)
from tests.jobs.test_constraints_edit import change
from tests.jobs.test_elastic_growth_cycle import started_gang
from tests.jobs.test_exclusive_api import api, eights, normal, submit  # noqa: F401 (fixtures)
from tests.quotas.test_notify_admin import change_page, tenant_form

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("eights")]

REFUSED = (
    "Tenant 'alpha' may not take nodes whole: its jobs share nodes (ask a platform admin to "
    "allow exclusive jobs)."
)
WAITS = (
    "Its team may no longer take nodes whole (a platform admin's setting): make it shared "
    "(exclusive false, CLI constrain ID --shared) or cancel it."
)


def share_nodes(tenant, allowed: bool = False) -> None:
    Tenant.objects.filter(pk=tenant.pk).update(exclusive_allowed=allowed)


def state(job: Job) -> tuple[str, str, str]:
    row = Job.objects.get(pk=job.pk)
    return row.state, row.pending_reason, row.pending_message


def test_a_tenant_may_take_nodes_whole_until_a_platform_admin_says_otherwise(alpha):
    assert Tenant.objects.get(pk=alpha.pk).exclusive_allowed is True


def test_an_exclusive_submission_is_a_400_naming_exclusive_and_nothing_is_written(
    alice, alpha, gamma
):
    share_nodes(alpha)

    refused = submit(alice, exclusive=True)
    test_only = submit(alice, "/api/v1/jobs/test/", exclusive=True)
    shared = submit(alice)

    assert (refused.status_code, refused.json()) == (400, {"exclusive": [REFUSED]})
    assert (test_only.status_code, test_only.json()) == (400, {"exclusive": [REFUSED]})
    assert shared.status_code == 201, shared.content
    assert list(Job.objects.values_list("exclusive", flat=True)) == [False]
    assert JobEvent.objects.filter(job__exclusive=True).count() == 0


def test_a_resubmission_of_an_exclusive_job_is_refused_once_the_tenant_may_not(alice, alpha):
    job = Job.objects.get(pk=submit(alice, exclusive=True).json()["id"])
    Job.objects.filter(pk=job.pk).update(state=State.CANCELED)
    share_nodes(alpha)

    again = api(alice).post(f"/api/v1/jobs/{job.pk}/resubmit/", {}, format="json")

    assert again.status_code == 400
    assert again.json()["exclusive"] == [REFUSED]
    assert Job.objects.count() == 1


def test_a_queued_job_is_not_made_exclusive_and_one_that_is_may_only_be_made_shared(alice, alpha):
    shared = JobFactory(tenant=alpha, owner=alice, gpus=8)
    whole = JobFactory(tenant=alpha, owner=alice, gpus=8, exclusive=True)
    share_nodes(alpha)

    made = change(alice, shared, {"exclusive": True})
    kept = change(alice, whole, {"gpu_types": ["A100"]})
    unmade = change(alice, whole, {"exclusive": False})

    assert (made.status_code, made.json()) == (400, {"exclusive": [REFUSED]})
    assert (kept.status_code, kept.json()) == (
        400, {"exclusive": [REFUSED + " It is exclusive: give exclusive false to make it shared."]}
    )  # fmt: skip
    assert unmade.status_code == 200, unmade.content
    rows = {j.pk: j for j in Job.objects.all()}
    assert (rows[shared.pk].exclusive, rows[whole.pk].exclusive) == (False, False)
    assert rows[whole.pk].gpu_types == []


def test_its_queued_exclusive_jobs_wait_saying_why_and_start_once_shared(alice, alpha):
    whole = JobFactory(tenant=alpha, owner=alice, gpus=8, exclusive=True)
    shared = JobFactory(tenant=alpha, owner=alice, gpus=8)
    share_nodes(alpha)

    cycle.run_cycle()

    assert state(whole) == (State.QUEUED, "exclusive_not_allowed", WAITS)
    assert Job.objects.get(pk=shared.pk).state == State.SCHEDULED
    assert change(alice, whole, {"exclusive": False}).status_code == 200
    cycle.run_cycle()
    assert Job.objects.get(pk=whole.pk).state == State.SCHEDULED


def test_its_exclusive_jobs_start_again_once_it_may_take_nodes_whole(alice, alpha):
    whole = JobFactory(tenant=alpha, owner=alice, gpus=8, exclusive=True)
    share_nodes(alpha)
    cycle.run_cycle()

    share_nodes(alpha, allowed=True)
    cycle.run_cycle()

    row = Job.objects.get(pk=whole.pk)
    assert (row.state, row.exclusive) == (State.SCHEDULED, True)


def test_the_reason_filter_knows_the_code(alice, alpha):
    whole = JobFactory(tenant=alpha, owner=alice, gpus=8, exclusive=True)
    share_nodes(alpha)
    cycle.run_cycle()

    listed = api(alice).get("/api/v1/jobs/?reason=exclusive_not_allowed")

    assert listed.status_code == 200, listed.content
    assert [job["id"] for job in listed.json()["jobs"]] == [whole.pk]


def test_a_refusal_after_the_snapshot_holds_at_the_commit(alice, alpha):
    whole = JobFactory(tenant=alpha, owner=alice, gpus=8, exclusive=True)
    shared = JobFactory(tenant=alpha, owner=alice, gpus=8)
    placed = [o for o in place(snapshot.load(time.time()).snapshot).outcomes
              if o.status == PLACED]  # fmt: skip
    assert len(placed) == 2

    share_nodes(alpha)

    assert commit_batch(placed, datetime.now(tz=UTC)) == {shared.pk}
    assert Job.objects.get(pk=whole.pk).state == State.QUEUED


def test_a_running_exclusive_job_runs_on(alice, alpha):
    whole = JobFactory(tenant=alpha, owner=alice, gpus=8, exclusive=True)
    cycle.run_cycle()

    share_nodes(alpha)
    cycle.run_cycle()

    assert Job.objects.get(pk=whole.pk).state == State.SCHEDULED


def test_a_platform_admin_sets_it_in_the_admin_told_what_waits_and_a_tenant_admin_may_not(
    alpha, alice
):
    JobFactory(tenant=alpha, owner=alice, gpus=8, exclusive=True)
    root, owner = Client(), Client()
    root.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    User.objects.filter(pk=alice.pk).update(is_staff=True)
    alice.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_tenant", "change_tenant"])
    )
    owner.force_login(alice)

    page = root.post(change_page(alpha), tenant_form(alpha, exclusive_allowed=""), follow=True)
    lifted = owner.post(change_page(alpha), tenant_form(alpha, exclusive_allowed="on"))

    assert "1 queued exclusive job of Alpha wait until made shared" in page.text
    alpha.refresh_from_db()
    assert (lifted.status_code, alpha.exclusive_allowed) == (302, False)
    assert 'name="exclusive_allowed"' not in owner.get(change_page(alpha)).text


def test_the_quotas_api_page_and_cli_say_it(alpha, gamma, alice, mlsched):  # noqa: F811
    share_nodes(alpha)
    client = api(alice)

    (team,) = client.get("/api/v1/quotas/").json()["tenants"]
    page = Client()
    page.force_login(alice)
    html = page.get("/quotas/").content.decode()
    status, out, err = mlsched("quota")

    assert team["exclusive_allowed"] is False
    assert "a platform admin does not let them take nodes whole (exclusive)" in html
    assert status == 0, err
    assert ", nodes shared (no exclusive jobs)" in out


def test_another_teams_exclusive_jobs_are_not_touched(alice, alpha, gamma):
    other = JobFactory(tenant=gamma, gpus=8, exclusive=True)
    share_nodes(alpha)

    cycle.run_cycle()

    assert Job.objects.get(pk=other.pk).state == State.SCHEDULED


def test_its_running_exclusive_elastic_gang_does_not_grow(alpha):
    gang, attempt, cluster = started_gang(nodes=3, workers=4, tenant=alpha, exclusive=True)
    NodeFactory(cluster=cluster)  # room for its fourth worker
    share_nodes(alpha)

    assert cycle.run_cycle(time.time() + 700).grown == []
    assert Attempt.objects.get(pk=attempt.pk).stop_requested_at is None
    share_nodes(alpha, allowed=True)
    assert cycle.run_cycle(time.time() + 700).grown == [gang.pk]


def test_its_exclusive_jobs_queue_wait_stops_while_set_aside_and_starts_again_once_shared(
    alice, alpha
):
    busy = JobFactory(tenant=alpha, owner=alice, gpus=8, workers=2)  # both nodes taken
    cycle.run_cycle()
    assert Job.objects.get(pk=busy.pk).state == State.SCHEDULED
    whole = JobFactory(tenant=alpha, owner=alice, gpus=8, exclusive=True)
    Job.objects.filter(pk=whole.pk).update(eligible_at=datetime(2026, 1, 1, tzinfo=UTC))
    share_nodes(alpha)

    cycle.run_cycle()
    set_aside = Job.objects.get(pk=whole.pk).eligible_at
    before = datetime.now(tz=UTC)
    change(alice, whole, {"exclusive": False})
    cycle.run_cycle()

    assert set_aside is None
    assert Job.objects.get(pk=whole.pk).eligible_at >= before
