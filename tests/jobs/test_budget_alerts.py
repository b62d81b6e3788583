"""GPU-hour budget alerts (jobs.budget_alerts): a budgeted tenant's webhook hears once a month
of each threshold (80 %, then 100 %) its attempts' use reaches, signed and delivered as job ends
are; a tenant without both a budget and a URL costs one query a minute. The receiver is the
real HTTP server of the job-end tests."""

import threading
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest
from django.conf import settings as django_settings
from django.contrib.auth.models import Permission
from django.db import InterfaceError, OperationalError, connection

from jobs import budget_alerts, notify, scheduler, tasks
from jobs.models import BudgetAlert
from quotas.models import Tenant
from tests.factories import UserFactory
from tests.jobs.test_notify import hooked, receiver, run_when_sent, verifies  # noqa: F401
from tests.jobs.test_retention import Once
from tests.jobs.test_usage_report import run
from tests.processes import wait_until

H = timedelta(hours=1)
NOW = datetime(2026, 12, 20, 12, tzinfo=UTC)
NEXT_MONTH = datetime(2027, 1, 20, 12, tzinfo=UTC)


def budget(tenant, hours) -> None:
    Tenant.objects.filter(pk=tenant.pk).update(gpu_hours_per_month=hours)


def used(tenant, gpu_hours: float, ending=NOW) -> None:
    """An attempt of the tenant (one GPU) that ended at `ending`, having used `gpu_hours`."""
    run(tenant, ending - gpu_hours * H, ending)


@pytest.fixture
def webhook(hooked, receiver):  # noqa: F811 - the fixtures
    """The receiver of alpha's notifications."""
    return receiver


@pytest.fixture
def sent(monkeypatch):
    """The BudgetAlert ids whose notification was queued; each runs at once."""
    return run_when_sent(monkeypatch, tasks.notify_budget)


@pytest.fixture
def checked(django_capture_on_commit_callbacks, sent):
    """Run a check at `now`, its commit's hooks included: how many notifications it claimed."""

    def check(now=NOW) -> int:
        with django_capture_on_commit_callbacks(execute=True):
            return budget_alerts.check(now)

    return check


def told(webhook) -> list[tuple[str, int]]:
    return [(post.document["month"], post.document["percent"]) for post in webhook.received]


def claims() -> set[tuple[str, int]]:
    return {(f"{month:%Y-%m}", percent) for month, percent
            in BudgetAlert.objects.values_list("month", "percent")}  # fmt: skip


# -- what is sent -----------------------------------------------------------------------------


@pytest.mark.django_db
def test_it_posts_the_threshold_reached_signed_with_the_tenants_secret(
    alpha, webhook, checked, settings
):
    settings.MLSCHED_PUBLIC_URL = "https://mlsched.example.com/"
    budget(alpha, 100)
    used(alpha, 81.24)

    assert checked() == 1

    (post,) = webhook.received
    assert (post.method, post.path) == ("POST", "/hooks/T0KEN-IN-PATH")
    assert post.headers["User-Agent"] == "mlsched"
    assert post.headers["Content-Type"] == "application/json"
    assert post.headers["X-Mlsched-Delivery"] == "budget.threshold:alpha:2026-12:80"
    assert verifies(post, alpha.notify_secret)
    assert post.document == {
        "event": "budget.threshold", "tenant": "alpha", "month": "2026-12", "percent": 80,
        "budget_gpu_hours": 100, "spent_gpu_hours": 81.24,
        "url": "https://mlsched.example.com/quotas/#team-alpha",
        "text": "Team alpha has used 80 % of its GPU-hour budget for 2026-12 "
                "https://mlsched.example.com/quotas/#team-alpha",
    }  # fmt: skip


@pytest.mark.django_db
def test_without_a_public_url_the_document_has_no_link(alpha, webhook, checked):
    budget(alpha, 10)
    used(alpha, 9)

    checked()

    (post,) = webhook.received
    assert post.document["url"] is None


@pytest.mark.django_db
def test_80_then_100_are_each_sent_once(alpha, webhook, checked):
    budget(alpha, 100)
    used(alpha, 70)
    assert checked() == 0
    used(alpha, 15, ending=NOW - 10 * H)  # 85 %

    assert (checked(), checked()) == (1, 0)
    used(alpha, 20, ending=NOW - 40 * H)  # 105 %
    assert (checked(), checked()) == (1, 0)

    assert told(webhook) == [("2026-12", 80), ("2026-12", 100)]


@pytest.mark.django_db
def test_both_reached_at_once_sends_only_100_and_records_both(alpha, webhook, checked):
    budget(alpha, 100)
    used(alpha, 120)

    assert (checked(), checked()) == (1, 0)

    assert told(webhook) == [("2026-12", 100)]
    assert claims() == {("2026-12", 80), ("2026-12", 100)}


@pytest.mark.django_db
def test_what_running_jobs_may_still_use_does_not_count(alpha, webhook, checked):
    budget(alpha, 100)
    run(alpha, NOW - 10 * H, None, max_runtime_s=500 * 3600)  # 10 used of 500 it may use

    assert checked() == 0

    assert webhook.received == []


@pytest.mark.django_db
def test_a_budget_raised_below_a_sent_threshold_does_not_send_it_again_that_month(
    alpha, webhook, checked
):
    budget(alpha, 100)
    used(alpha, 85)
    checked()
    budget(alpha, 200)  # 42 %
    used(alpha, 85, ending=NOW - 90 * H)  # 85 % again

    assert checked() == 0
    used(alpha, 40, ending=NOW - 180 * H)  # 105 %
    assert checked() == 1

    assert told(webhook) == [("2026-12", 80), ("2026-12", 100)]


@pytest.mark.django_db
def test_a_new_month_starts_fresh(alpha, webhook, checked):
    budget(alpha, 100)
    used(alpha, 120)
    checked()

    assert checked(NEXT_MONTH) == 0  # December's use does not count in January
    used(alpha, 90, ending=NEXT_MONTH)

    assert checked(NEXT_MONTH) == 1
    assert told(webhook) == [("2026-12", 100), ("2027-01", 80)]
    assert webhook.received[-1].headers["X-Mlsched-Delivery"] == (
        "budget.threshold:alpha:2027-01:80"
    )


@pytest.mark.parametrize(
    ("spent", "budget_hours", "want"),
    [(0.0, 100, []), (79.99, 100, []), (80.0, 100, [80]), (99.9, 100, [80]),
     (100.0, 100, [80, 100]), (0.0, 0, []), (0.5, 0, [80, 100])],
)  # fmt: skip
def test_thresholds_reached(spent, budget_hours, want):
    assert budget_alerts.thresholds(spent, budget_hours) == want


# -- who is sent nothing, and what it costs ---------------------------------------------------


@pytest.mark.django_db
def test_no_url_or_no_budget_sends_nothing_for_one_query(
    alpha, gamma, webhook, checked, django_assert_num_queries
):
    budget(gamma, 10)  # a budget, no URL
    used(gamma, 50)
    used(alpha, 50)  # a URL, no budget

    with django_assert_num_queries(1):
        assert checked() == 0

    assert (webhook.received, claims()) == ([], set())


@pytest.mark.django_db
def test_a_tenant_told_both_thresholds_is_not_counted_again(
    alpha, webhook, checked, django_assert_num_queries
):
    budget(alpha, 10)
    used(alpha, 50)
    checked()

    with django_assert_num_queries(2):  # the tenants watched, the thresholds told
        assert checked() == 0


@pytest.mark.django_db
def test_a_url_removed_before_the_task_runs_sends_nothing(alpha, webhook, monkeypatch):
    monkeypatch.setattr(tasks.notify_budget, "delay", lambda alert_id: None)  # not run yet
    budget(alpha, 10)
    used(alpha, 9)
    budget_alerts.check(NOW)
    Tenant.objects.filter(pk=alpha.pk).update(notify_url="")

    tasks.notify_budget.apply(args=(BudgetAlert.objects.get().pk,))

    assert webhook.received == []


# -- claims -----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_two_checkers_that_read_before_either_claims_send_once(
    alpha, webhook, sent, django_capture_on_commit_callbacks
):
    budget(alpha, 100)
    used(alpha, 85)
    first, second = budget_alerts.untold(NOW), budget_alerts.untold(NOW)

    with django_capture_on_commit_callbacks(execute=True):
        claimed = [budget_alerts.claim(reached, NOW) for reached in [*first, *second]]

    assert claimed == [1, 0]
    assert told(webhook) == [("2026-12", 80)]
    assert claims() == {("2026-12", 80)}


@pytest.mark.django_db(transaction=True)
def test_two_checkers_racing_in_their_own_transactions_send_once(alpha, webhook, sent, monkeypatch):
    budget(alpha, 100)
    used(alpha, 120)
    both_read = threading.Barrier(2, timeout=10)
    claim = budget_alerts.claim

    def claim_once_both_have_read(reached, now):
        both_read.wait()
        return claim(reached, now)

    monkeypatch.setattr(budget_alerts, "claim", claim_once_both_have_read)
    queued: list[int] = []

    def checker():
        try:
            queued.append(budget_alerts.check(NOW))
        finally:
            connection.close()

    threads = [threading.Thread(target=checker) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    assert sorted(queued) == [0, 1]
    assert told(webhook) == [("2026-12", 100)]
    assert claims() == {("2026-12", 80), ("2026-12", 100)}


@pytest.mark.django_db
def test_a_broker_that_refuses_the_task_gives_the_claims_back(
    alpha, webhook, checked, monkeypatch, caplog
):
    budget(alpha, 100)
    used(alpha, 120)

    def refused(alert_id):
        raise ConnectionError("broker down")

    with monkeypatch.context() as broker_down:
        broker_down.setattr(tasks.notify_budget, "delay", refused)
        assert checked() == 1
    assert claims() == set()
    assert "the next check tells it" in caplog.text

    assert checked() == 1
    assert told(webhook) == [("2026-12", 100)]


# -- delivery ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_every_try_carries_the_same_delivery_id_and_document(alpha, webhook, monkeypatch):
    monkeypatch.setattr(tasks.notify_budget, "delay", lambda alert_id: None)
    budget(alpha, 10)
    used(alpha, 9)
    budget_alerts.check(NOW)
    used(alpha, 5)  # used since: the tries still tell what was reached
    webhook.status = 503

    result = tasks.notify_budget.apply(args=(BudgetAlert.objects.get().pk,))

    assert isinstance(result.result, notify.Unreachable)
    assert len(webhook.received) == 1 + tasks.notify_budget.max_retries
    assert {post.headers["X-Mlsched-Delivery"] for post in webhook.received} == {
        "budget.threshold:alpha:2026-12:80"
    }
    assert {post.body for post in webhook.received} == {webhook.received[0].body}


def test_job_ends_and_budget_alerts_share_one_retry_policy():
    policy = ("autoretry_for", "max_retries", "retry_backoff", "retry_backoff_max",
              "retry_jitter")  # fmt: skip

    def of(task):
        return [getattr(task, name) for name in policy]

    assert of(tasks.notify_budget) == of(tasks.notify_job_end)
    assert of(tasks.notify_budget) == [
        (notify.Unreachable, OperationalError, InterfaceError),
        5,
        10,
        600,
        True,
    ]


# -- when the check runs ----------------------------------------------------------------------


def test_beat_sends_the_check_every_minute_and_a_check_not_run_in_its_minute_expires():
    entry = django_settings.CELERY_BEAT_SCHEDULE["budget-alerts"]

    assert entry == {"task": "jobs.tasks.alert_budgets", "schedule": 60.0}
    assert tasks.alert_budgets.name == entry["task"]
    assert tasks.alert_budgets.expires == 60


@pytest.mark.django_db(transaction=True)
def test_the_embedded_mode_checks_at_start_and_posts_from_a_thread(alpha, webhook, monkeypatch):
    monkeypatch.setitem(tasks.notify_budget.app.conf, "task_always_eager", True)
    monkeypatch.setattr(budget_alerts, "timezone", SimpleNamespace(now=lambda: NOW))
    budget(alpha, 10)
    used(alpha, 9)

    scheduler.alerts_forever(Once())

    assert wait_until(lambda: webhook.received, timeout=10)
    assert [post.document["percent"] for post in webhook.received] == [80]


# -- the admin --------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_admin_lists_the_alerts_sent_read_only_and_a_tenant_admin_only_their_own(
    client, alpha, gamma, alice
):
    for tenant in (alpha, gamma):
        BudgetAlert.objects.create(tenant=tenant, month=NOW.date().replace(day=1), percent=80,
                                   budget_gpu_hours=100, spent_gpu_hours=81.5)  # fmt: skip
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    listed = client.get("/admin/jobs/budgetalert/").text
    assert "81.5" in listed and gamma.name in listed
    assert client.get("/admin/jobs/budgetalert/add/").status_code == 403

    alice.is_staff = True  # alice owns alpha: its tenant admin
    alice.save(update_fields=["is_staff"])
    alice.user_permissions.add(Permission.objects.get(codename="view_budgetalert"))
    client.force_login(alice)
    listed = client.get("/admin/jobs/budgetalert/").text
    assert alpha.name in listed and gamma.name not in listed
