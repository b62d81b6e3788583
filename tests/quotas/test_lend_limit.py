"""A quota's lend limit (Quota.lend_limit, Kueue's lendingLimit): how much of a tenant's idle
guarantee its cohort may borrow, through the real cycle, the commit's re-check, the admin, and
the quota API, page and CLI."""

import time

import pytest

from jobs import cycle, snapshot
from jobs.models import Attempt, Job
from jobs.placement import place
from jobs.states import State
from quotas.models import Quota
from tests.factories import JobFactory, NodeFactory, QuotaFactory, UserFactory
from tests.jobs import test_cli
from tests.quotas.test_admin import tenant_form
from tests.quotas.test_user_gpu_limit import quota_as

pytestmark = pytest.mark.django_db

cli = test_cli.cli  # the command line against a live server, as Alice


@pytest.fixture
def cohort(alpha, gamma, east):
    """Two 8-GPU nodes; alpha and gamma in one cohort, each guaranteed 8 A100s, gamma free to
    borrow all alpha lends."""
    for n in range(2):
        NodeFactory(cluster=east, name=f"east-{n}", gpu_type="A100", gpu_count=8)
    gamma.cohort = alpha.cohort
    gamma.save(update_fields=["cohort"])
    lender = QuotaFactory(tenant=alpha, flavor="gpu:A100", guaranteed=8, borrow_limit=0)
    QuotaFactory(tenant=gamma, flavor="gpu:A100", guaranteed=8, borrow_limit=8)
    return lender


def lend(quota: Quota, gpus: int | None) -> None:
    quota.lend_limit = gpus
    quota.save(update_fields=["lend_limit"])


def by_state(tenant) -> dict[str, int]:
    jobs = Job.objects.filter(tenant=tenant)
    return {state: jobs.filter(state=state).count() for state in (State.SCHEDULED, State.QUEUED)}


def test_borrowers_take_only_what_the_owner_lends_and_it_starts_at_once(cohort, alpha, gamma):
    lend(cohort, 2)
    for _ in range(14):
        JobFactory(tenant=gamma, gpus=1)
    cycle.run_cycle()

    assert by_state(gamma) == {State.SCHEDULED: 10, State.QUEUED: 4}
    assert {j.pending_reason for j in Job.objects.filter(state=State.QUEUED)} == {"quota_exceeded"}
    # Its six kept GPUs are free: its job starts now, nobody evicted.
    mine = JobFactory(tenant=alpha, gpus=6)
    cycle.run_cycle()
    mine.refresh_from_db()
    assert mine.state == State.SCHEDULED
    assert not Attempt.objects.filter(job__tenant=gamma, stop_requested_at__isnull=False).exists()


def test_without_a_lend_limit_the_whole_idle_guarantee_is_borrowed(cohort, gamma):
    for _ in range(14):
        JobFactory(tenant=gamma, gpus=1)
    cycle.run_cycle()

    assert by_state(gamma) == {State.SCHEDULED: 14, State.QUEUED: 0}


def test_a_lend_limit_lowered_after_the_snapshot_holds_at_the_commit(cohort, gamma):
    one, two = (JobFactory(tenant=gamma, gpus=8) for _ in range(2))
    decision = place(snapshot.load(time.time()).snapshot)  # alpha lends its 8: both fit
    lend(cohort, 2)

    result = cycle.CycleResult()
    cycle.commit(decision, time.time(), result)

    assert (result.placed, result.skipped) == ([one.pk], [two.pk])


def test_the_admin_refuses_to_lend_more_than_the_guarantee(client, alpha):
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    form = tenant_form(alpha, "gpu:A100", 8, 0) | {"quotas-0-lend_limit": "9"}

    page = client.post(f"/admin/quotas/tenant/{alpha.pk}/change/", form)

    assert page.status_code == 200
    assert "A tenant lends at most its guarantee" in page.text
    assert not alpha.quotas.exists()
    form["quotas-0-lend_limit"] = "3"
    assert client.post(f"/admin/quotas/tenant/{alpha.pk}/change/", form).status_code == 302
    assert alpha.quotas.get().lend_limit == 3


def test_the_quota_api_page_and_cli_say_what_a_team_lends(alice, client, cli, cohort):
    lend(cohort, 2)
    team, page, shown = quota_as(alice, client, cli)

    (a100,) = [f for f in team["flavors"] if f["flavor"] == "gpu:A100"]
    assert (a100["guaranteed"], a100["lend_limit"], a100["may_start"]) == (8, 2, 8)
    assert '<td class="lend-limit">2</td>' in page
    assert shown.returncode == 0, shown.stderr
    (row,) = [line.split() for line in shown.stdout.splitlines() if "gpu:A100" in line]
    assert row[3:6] == ["8", "0", "2"]  # guaranteed, borrow limit, lend limit
    lend(cohort, None)
    team, page, shown = quota_as(alice, client, cli)
    assert '<td class="lend-limit">all of its guarantee</td>' in page
    (row,) = [line.split() for line in shown.stdout.splitlines() if "gpu:A100" in line]
    assert row[5] == "all"
