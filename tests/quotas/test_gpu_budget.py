"""A tenant's GPU-hour budget a calendar month (Tenant.gpu_hours_per_month, Slurm's
GrpTRESMins), through the real cycle: what its attempts used this month, what its running jobs
may still use and what a job asks for its whole runtime limit; the admin, and the quota API,
page and CLI."""

import math
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import Permission
from django.db import connection
from django.test.utils import CaptureQueriesContext

from jobs import actions, budgets, cycle, rollup, snapshot, tenant_limits
from jobs.commit import commit_batch
from jobs.models import Attempt, Job
from jobs.placement import PLACED, place
from jobs.states import State
from quotas.models import Tenant
from tests.factories import JobFactory, NodeFactory, UserFactory
from tests.jobs import test_cli
from tests.jobs.test_usage_report import run
from tests.quotas.test_user_gpu_limit import quota_as, room  # noqa: F401 (the fixture)
from tests.security.test_admin_scope import GRANTED, tenant_form

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("room")]  # an 8-GPU node

cli = test_cli.cli  # the command line against a live server, as Alice
H = timedelta(hours=1)


def budget(tenant, hours) -> None:
    tenant.gpu_hours_per_month = hours
    tenant.save(update_fields=["gpu_hours_per_month"])


def used_this_month(tenant, gpu_hours: float) -> None:
    """An attempt of the tenant that ended this month having used ``gpu_hours`` (one GPU)."""
    now = datetime.now(UTC)
    start = max(budgets.month_start(now), now - 5 * 24 * H)
    ended(run(tenant, start, start + gpu_hours * H))


def ended(attempt) -> None:
    Job.objects.filter(pk=attempt.job_id).update(state=State.SUCCEEDED)


def test_a_gpu_job_waits_once_the_months_use_leaves_too_little_and_a_cpu_job_runs(alpha, alice):
    budget(alpha, 20)
    used_this_month(alpha, 15)  # 5 GPU-hours left
    long = JobFactory(tenant=alpha, owner=alice, gpus=2, max_runtime_s=3 * 3600)  # 6
    short = JobFactory(tenant=alpha, owner=alice, gpus=2, max_runtime_s=2 * 3600)  # 4
    cpu = JobFactory(tenant=alpha, owner=alice, gpus=0, max_runtime_s=100 * 3600)

    cycle.run_cycle()

    long.refresh_from_db()
    assert (long.state, long.pending_reason) == (State.QUEUED, "gpu_budget")
    assert long.estimated_start == budgets.renews(datetime.now(UTC))
    assert "1.0 of its 20.0 GPU-hours left" in long.pending_message  # the short one took 4
    assert Job.objects.get(pk=short.pk).state == State.SCHEDULED
    assert Job.objects.get(pk=cpu.pk).state == State.SCHEDULED


def test_last_months_use_does_not_count(alpha, alice):
    budget(alpha, 10)
    start = budgets.month_start(datetime.now(UTC)) - 48 * H
    ended(run(alpha, start, start + 40 * H))  # before this month began
    job = JobFactory(tenant=alpha, owner=alice, gpus=1, max_runtime_s=8 * 3600)

    cycle.run_cycle()

    assert Job.objects.get(pk=job.pk).state == State.SCHEDULED


def test_running_jobs_hold_what_they_may_still_use(alpha, alice):
    budget(alpha, 10)
    first = JobFactory(tenant=alpha, owner=alice, gpus=1, max_runtime_s=8 * 3600)
    cycle.run_cycle()
    second = JobFactory(tenant=alpha, owner=alice, gpus=1, max_runtime_s=3 * 3600)

    cycle.run_cycle()  # the first may still use 8 of the 10

    assert Job.objects.get(pk=first.pk).state == State.SCHEDULED
    assert Job.objects.get(pk=second.pk).pending_reason == "gpu_budget"


def test_a_running_job_holds_only_what_it_may_use_before_the_month_ends(alpha, alice):
    hours_left = (budgets.renews(datetime.now(UTC)) - datetime.now(UTC)) / H
    budget(alpha, math.ceil(hours_left) + 6)
    # It may run 5 hours into next month: those count against next month's budget.
    first = JobFactory(
        tenant=alpha, owner=alice, gpus=1, max_runtime_s=int((hours_left + 5) * 3600)
    )
    cycle.run_cycle()
    second = JobFactory(tenant=alpha, owner=alice, gpus=1, max_runtime_s=3 * 3600)

    cycle.run_cycle()  # 6 to 7 GPU-hours of this month left beside the first job

    assert Job.objects.get(pk=first.pk).state == State.SCHEDULED
    assert Job.objects.get(pk=second.pk).state == State.SCHEDULED


def test_two_schedulers_deciding_at_once_cannot_both_spend_the_same_hours(alpha, alice, east):
    NodeFactory(cluster=east, name="east-1", gpu_type="A100", gpu_count=8)
    budget(alpha, 10)
    jobs = [JobFactory(tenant=alpha, owner=alice, gpus=1, max_runtime_s=6 * 3600) for _ in "ab"]

    def decided_alone(job, other):
        """A snapshot that does not see the other job queued: 10 GPU-hours left for this one."""
        Job.objects.filter(pk=other.pk).update(not_before=datetime(2999, 1, 1, tzinfo=UTC))
        loaded = snapshot.load(time.time())
        Job.objects.filter(pk=other.pk).update(not_before=None)
        placed = [o for o in place(loaded.snapshot).outcomes if o.status == PLACED]
        assert [int(o.job_id) for o in placed] == [job.pk]
        return placed, tenant_limits.BudgetCheck(loaded.snapshot)

    first, second = decided_alone(*jobs), decided_alone(*reversed(jobs))
    moment = datetime.now(UTC)

    assert commit_batch(first[0], moment, budget=first[1]) == {jobs[0].pk}
    assert commit_batch(second[0], moment, budget=second[1]) == set()  # 4 left of the 10

    assert Job.objects.get(pk=jobs[1].pk).state == State.QUEUED


def test_work_ended_since_the_snapshot_gives_back_what_it_would_have_used(alpha, alice, east):
    NodeFactory(cluster=east, name="east-1", gpu_type="A100", gpu_count=8)
    budget(alpha, 10)
    ending = JobFactory(tenant=alpha, owner=alice, gpus=1, max_runtime_s=3 * 3600)
    assert cycle.run_cycle().placed == [ending.pk]
    job = JobFactory(tenant=alpha, owner=alice, gpus=1, max_runtime_s=4 * 3600)
    loaded = snapshot.load(time.time())  # 7 GPU-hours left beside the running one's 3
    placed = [o for o in place(loaded.snapshot).outcomes if o.status == PLACED]
    assert [int(o.job_id) for o in placed] == [job.pk]
    check = tenant_limits.BudgetCheck(loaded.snapshot)
    # Since the snapshot: the running job ends, and another scheduler places 4 GPU-hours.
    actions.end_attempt(ending.attempts.get().pk, Attempt.Outcome.SUCCEEDED)
    Job.objects.filter(pk=job.pk).update(not_before=datetime(2999, 1, 1, tzinfo=UTC))
    other = JobFactory(tenant=alpha, owner=alice, gpus=1, max_runtime_s=4 * 3600)
    assert cycle.run_cycle().placed == [other.pk]
    Job.objects.filter(pk=job.pk).update(not_before=None)

    # 7 - 4 left by the snapshot's count and the other's; 6 with the ended job's 3 back.
    assert commit_batch(placed, datetime.now(UTC), budget=check) == {job.pk}


def test_the_months_use_reads_rolled_up_days_as_it_reads_the_attempts(alpha, gamma):
    now = datetime(2026, 11, 20, 12, tzinfo=UTC)
    for tenant, day, hours in [(alpha, 2, 5), (alpha, 9, 30), (gamma, 15, 2), (alpha, 19, 3)]:
        start = datetime(2026, 11, day, 22, tzinfo=UTC)  # across midnight
        ended(run(tenant, start, start + hours * H))
    ended(run(alpha, datetime(2026, 10, 31, 20, tzinfo=UTC), datetime(2026, 11, 1, 2, tzinfo=UTC)))
    Job.objects.update(created=datetime(2026, 10, 31, tzinfo=UTC))
    from_attempts = budgets.spent_gpu_seconds([alpha.pk, gamma.pk], now)

    assert rollup.roll_up(now) > 0
    with CaptureQueriesContext(connection) as seen:
        from_days = budgets.spent_gpu_seconds([alpha.pk, gamma.pk], now)

    assert from_attempts == {alpha.pk: 40 * 3600.0, gamma.pk: 2 * 3600.0}  # two hours in Nov
    assert from_days == pytest.approx(from_attempts)
    assert len(seen) == 3  # how far the roll-up has gone, its days, the attempts since


def test_the_month_ends_and_the_next_begins_in_utc():
    assert budgets.renews(datetime(2026, 12, 31, 23, 59, tzinfo=UTC)) == datetime(
        2027, 1, 1, tzinfo=UTC
    )
    assert budgets.month_start(datetime(2026, 3, 1, 0, 30, tzinfo=UTC)) == datetime(
        2026, 3, 1, tzinfo=UTC
    )


def test_the_quota_api_page_and_cli_show_the_budget_and_this_months_use(alpha, alice, client, cli):
    budget(alpha, 100)
    used_this_month(alpha, 12.5)

    team, page, shown = quota_as(alice, client, cli)

    assert (team["gpu_hours_per_month"], team["gpu_hours_spent"]) == (100, 12.5)
    assert team["gpu_budget_renews"].startswith(f"{budgets.renews(datetime.now(UTC)):%Y-%m-%d}")
    assert "It has used 12.5 of its 100 GPU-hours this month" in page
    assert "12.5 of 100 GPU-hours used this month" in shown.stdout


def test_metrics_give_each_budget_and_this_months_use(alpha, gamma, scrape):
    budget(alpha, 100)
    used_this_month(alpha, 12.5)
    used_this_month(gamma, 3)  # no budget: not listed

    lines = scrape()

    assert 'mlsched_gpu_budget_hours{tenant="alpha"} 100' in lines
    assert 'mlsched_gpu_budget_spent_hours{tenant="alpha"} 12.5' in lines
    assert not [line for line in lines if 'tenant="gamma"' in line and "budget" in line]


def test_only_a_platform_admin_sets_the_budget(client, alice, alpha):
    alice.is_staff = True  # alice owns alpha: staff without superuser rights, its admin
    alice.save(update_fields=["is_staff"])
    alice.user_permissions.add(*Permission.objects.filter(codename__in=GRANTED))
    page = f"/admin/quotas/tenant/{alpha.pk}/change/"

    client.force_login(alice)
    client.post(page, {**tenant_form(alpha), "gpu_hours_per_month": "5000"})
    assert Tenant.objects.get(pk=alpha.pk).gpu_hours_per_month is None

    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    saved = client.post(page, {**tenant_form(alpha), "gpu_hours_per_month": "5000"})
    assert saved.status_code == 302
    assert Tenant.objects.get(pk=alpha.pk).gpu_hours_per_month == 5000
