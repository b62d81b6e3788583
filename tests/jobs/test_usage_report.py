"""Usage reports: GPU-hours, CPU core-hours, waste, jobs finished and queue waits per tenant and
GPU type (jobs.reports), through the API, the portal page, its CSV and the CLI; tenant-first."""

import csv
import io
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from clusters.models import Allocation
from jobs import actions, reports, usage_queries
from jobs.models import Attempt
from jobs.states import State
from quotas.models import Membership, Rate, Tenant
from quotas.tokens import create_token
from tests.factories import (
    AttemptFactory,
    JobFactory,
    MembershipFactory,
    NodeFactory,
    TenantFactory,
    UserFactory,
)
from tests.processes import ROOT

pytestmark = pytest.mark.django_db

SINCE = datetime(2025, 3, 1, tzinfo=UTC)
UNTIL = datetime(2025, 3, 2, tzinfo=UTC)
LATER = datetime(2025, 4, 1, tzinfo=UTC)  # "now" in most tests: after the window
WINDOW = {"since": "2025-03-01", "until": "2025-03-02"}
H = timedelta(hours=1)
OK = Attempt.Outcome.SUCCEEDED


def run(tenant, start, end=None, *, gpu_type="A100", outcome=OK, wasted=0.0, **spec) -> Attempt:
    """An attempt of a new job of ``tenant`` (one worker, one whole GPU, 4 cores unless ``spec``
    says otherwise) that ran from ``start`` to ``end`` (None: it still runs), holding rows as
    the commit writes them on a node of ``gpu_type``."""
    job = JobFactory(tenant=tenant, **spec)
    live = end is None
    attempt = AttemptFactory(
        job=job, scheduled_at=start, started_at=start, ended_at=end,
        outcome="" if live else outcome, wasted_gpu_seconds=wasted,
        gpu_type=gpu_type if job.gpus or job.gpu_milli else "",
    )  # fmt: skip
    node = NodeFactory(gpu_type=gpu_type, gpu_count=8)
    for worker in range(job.workers):
        for slot, gpu in enumerate(gpu_rows(job, worker)):
            Allocation.objects.create(
                attempt=attempt, worker=worker, slot=slot, node=node, **gpu,
                cpu_milli=job.cpu_milli if slot == 0 else 0, active=live,
                released=None if live else end,
            )  # fmt: skip
    return attempt


def gpu_rows(job, worker: int) -> list[dict]:
    if job.gpus:
        return [{"gpu_index": worker * job.gpus + n, "gpu_milli": 1000} for n in range(job.gpus)]
    if job.gpu_milli:
        return [{"gpu_index": worker, "gpu_milli": job.gpu_milli}]
    return [{"gpu_index": None, "gpu_milli": 0}]


def report_of(tenant, now=LATER) -> reports.TenantUsage:
    (usage,) = reports.usage([tenant], SINCE, UNTIL, now).tenants
    return usage


def by_type(usage: reports.TenantUsage) -> dict:
    """GPU-hours and CPU core-hours by GPU type (to 6 decimals: float sums)."""
    return {u.gpu_type: (round(u.gpu_hours, 6), round(u.cpu_core_hours, 6)) for u in usage.by_type}


def client_for(user):
    client = APIClient()
    client.force_authenticate(user)
    return client


# 1. The figures, on constructed attempts.


@pytest.mark.parametrize(
    ("start", "end", "want_hours"),
    [
        pytest.param(SINCE + H, SINCE + 3 * H, 2.0, id="inside"),
        pytest.param(SINCE - 2 * H, SINCE + 3 * H, 3.0, id="straddles since"),
        pytest.param(UNTIL - H, UNTIL + 5 * H, 1.0, id="straddles until"),
        pytest.param(SINCE - H, UNTIL + H, 24.0, id="covers the window"),
        pytest.param(SINCE - 5 * H, SINCE - H, 0.0, id="ended before"),
        pytest.param(UNTIL, UNTIL + H, 0.0, id="started at until"),
    ],
)
def test_an_attempt_counts_only_its_hours_inside_the_window(alpha, start, end, want_hours):
    run(alpha, start, end)

    usage = report_of(alpha)

    assert usage.total().gpu_hours == pytest.approx(want_hours)
    assert usage.total().cpu_core_hours == pytest.approx(4 * want_hours)


@pytest.mark.parametrize(
    ("spec", "want"),
    [
        pytest.param({"workers": 2, "gpus": 4}, {"A100": (24.0, 24.0)}, id="2 workers x 4 GPUs"),
        pytest.param({"workers": 2, "gpus": 0, "gpu_milli": 250}, {"A100": (1.5, 24.0)},
                     id="2 workers x a quarter GPU"),
        pytest.param({"gpus": 0, "cpu_milli": 500}, {"": (0.0, 1.5)},
                     id="no GPU, on a GPU node"),
    ],
)  # fmt: skip
def test_gpu_hours_are_run_hours_times_workers_times_gpus_or_their_share(alpha, spec, want):
    run(alpha, SINCE + H, SINCE + 4 * H, **spec)  # 3 hours, 4 cores a worker by default

    usage = report_of(alpha)

    assert by_type(usage) == want


def test_a_running_attempt_counts_up_to_the_databases_now(alpha, monkeypatch):
    monkeypatch.setattr(reports, "database_now", lambda: SINCE + 10 * H)
    run(alpha, SINCE + 4 * H, end=None, gpus=2)

    report = reports.requested(WINDOW, Tenant.objects.filter(pk=alpha.pk))

    assert report.now == SINCE + 10 * H
    assert report.tenants[0].total().gpu_hours == pytest.approx(12.0)  # 6 h x 2 GPUs


def test_a_running_attempt_counts_up_to_until_once_now_is_past_it(alpha):
    run(alpha, UNTIL - 3 * H, end=None)

    usage = report_of(alpha, now=LATER)

    assert usage.total().gpu_hours == pytest.approx(3.0)


def test_a_placed_attempt_that_never_started_uses_nothing_and_its_wait_is_waste(alpha):
    attempt = run(alpha, SINCE + H, SINCE + 2 * H, outcome=Attempt.Outcome.LOST, wasted=3600)
    Attempt.objects.filter(pk=attempt.pk).update(started_at=None)

    usage = report_of(alpha)

    assert (usage.total().gpu_hours, usage.total().wasted_gpu_hours) == (0.0, 1.0)


def test_two_gpu_types_are_reported_apart_and_summed_in_the_total(alpha):
    run(alpha, SINCE + H, SINCE + 3 * H, gpu_type="A100")
    run(alpha, SINCE + H, SINCE + 4 * H, gpu_type="T4")
    run(alpha, SINCE + H, SINCE + 2 * H, gpu_type="T4", gpus=2)

    usage = report_of(alpha)

    assert by_type(usage) == {"A100": (2.0, 8.0), "T4": (5.0, 16.0)}
    assert usage.total().gpu_hours == pytest.approx(7.0)


def test_an_attempts_gpu_type_outlives_its_allocation_rows(alpha):
    attempt = run(alpha, SINCE + H, SINCE + 2 * H)
    Allocation.objects.filter(attempt=attempt).delete()  # as retention does, 30 days on

    assert by_type(report_of(alpha)) == {"A100": (1.0, 4.0)}


def test_an_attempt_whose_gpu_type_was_never_recorded_counts_under_an_unknown_type(alpha):
    attempt = run(alpha, SINCE + H, SINCE + 2 * H)
    Attempt.objects.filter(pk=attempt.pk).update(gpu_type=None)  # placed before it was kept

    usage = report_of(alpha)

    assert by_type(usage) == {None: (1.0, 4.0)}
    assert ["alpha", "unknown", "1.00", "4.00"] == usage_rows(alpha)[1][:4]


def usage_rows(tenant) -> list[list[str]]:
    return reports.usage([tenant], SINCE, UNTIL, LATER).rows()


def test_preemption_waste_counts_in_the_window_of_the_attempts_end(alpha):
    # Checkpointed an hour in, preempted half an hour later: 0.5 h x 2 GPUs lost.
    attempt = run(alpha, SINCE + H, end=None, gpus=2, state=State.RUNNING)
    Attempt.objects.filter(pk=attempt.pk).update(last_checkpoint_at=SINCE + 2 * H)
    actions.end_attempt(attempt.pk, Attempt.Outcome.PREEMPTED, now=SINCE + 2.5 * H)
    run(alpha, SINCE, SINCE + H, outcome=Attempt.Outcome.LOST, wasted=1800)
    run(alpha, UNTIL, UNTIL + H, outcome=Attempt.Outcome.PREEMPTED, wasted=7200)  # ends after

    total = report_of(alpha).total()

    assert total.preempted_gpu_hours == pytest.approx(1.0)
    assert total.wasted_gpu_hours == pytest.approx(1.5)  # and the lost attempt's half hour
    assert total.gpu_hours == pytest.approx(3.0 + 1.0)  # both ran inside the window


def test_jobs_finished_in_the_window_are_counted_by_state(alpha):
    for state, finished in [(State.SUCCEEDED, SINCE + H), (State.SUCCEEDED, UNTIL - H),
                            (State.FAILED, SINCE + 2 * H), (State.CANCELED, SINCE),
                            (State.SUCCEEDED, SINCE - H), (State.FAILED, UNTIL)]:  # fmt: skip
        JobFactory(tenant=alpha, state=state, finished_at=finished)

    usage = report_of(alpha)

    assert usage.finished == {State.SUCCEEDED: 2, State.FAILED: 1, State.CANCELED: 1}


def test_queue_wait_is_the_mean_and_p95_of_jobs_started_in_the_window(alpha):
    for wait in (10, 20, 30, 40, 100):
        started = SINCE + H
        JobFactory(tenant=alpha, created=started - timedelta(seconds=wait), started_at=started)
    JobFactory(tenant=alpha, created=SINCE - 3 * H, started_at=SINCE - H)  # started before

    usage = report_of(alpha)

    assert usage.started == 5
    assert usage.mean_wait_s == pytest.approx(40.0)
    # percentile_cont: position 0.95 x 4 = 3.8, between 40 and 100.
    assert usage.p95_wait_s == pytest.approx(88.0)


def test_the_sqlite_fallback_gives_the_figures_postgresql_gives(alpha, gamma):
    for n, tenant in enumerate([alpha] * 7 + [gamma] * 3):
        started = SINCE + H
        wait = timedelta(seconds=n * n + 0.25)
        JobFactory(tenant=tenant, created=started - wait, started_at=started)
    ids = [alpha.pk, gamma.pk]

    in_database = usage_queries.queue_waits(ids, SINCE, UNTIL)
    in_python = usage_queries.waits_in_python(usage_queries.started_waits(ids, SINCE, UNTIL))

    assert connection.vendor == "postgresql"
    assert in_python.keys() == in_database.keys()
    for tenant, (n, mean, p95) in in_database.items():
        assert in_python[tenant] == (n, pytest.approx(mean), pytest.approx(p95))


def test_a_tenant_without_work_in_the_window_is_reported_with_zeros(alpha):
    usage = report_of(alpha)

    assert (usage.by_type, usage.started, usage.mean_wait_s) == ([], 0, None)
    zeros = ["0.00"] * 4
    costs = ["0.00", "0.00", "USD"]
    jobs = ["0", "0", "0", "0", "", ""]
    sizing = ["0.00", "0.00", "", "0.00", "0.00", "0.00", "", "0.00", "0.00", ""]
    assert usage_rows(alpha) == [["alpha", "all", *zeros, *costs, *jobs, *sizing]]


def test_the_report_takes_the_same_queries_for_one_job_as_for_forty(alpha, gamma):
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            reports.requested(WINDOW, Tenant.objects.all())
        return len(captured)

    run(alpha, SINCE + H, SINCE + 2 * H)
    one = queries()
    for n in range(20):
        run(alpha, SINCE + H, SINCE + 2 * H, gpu_type="T4" if n % 2 else "A100")
        run(gamma, SINCE + H, end=None, gpus=0, gpu_milli=500)

    # clock, tenants, how far the roll-up has gone, attempts, finished jobs, started jobs, and
    # the rate card its costs are priced at (one read, jobs.costs)
    assert queries() == one == 7


# 2. The API: tenant-first, 400s naming the field.


@pytest.fixture
def two_teams_usage(alpha, gamma):
    run(alpha, SINCE + H, SINCE + 3 * H, gpu_type="A100")
    run(gamma, SINCE + H, SINCE + 9 * H, gpu_type="H100")


def test_the_api_reports_the_callers_tenants_and_no_other(two_teams_usage, alice, charlie):
    answer = client_for(alice).get("/api/v1/usage/", WINDOW)

    assert answer.status_code == 200
    (alpha,) = answer.json()["tenants"]
    assert (alpha["tenant"], alpha["gpu_hours"], alpha["cpu_core_hours"]) == ("alpha", 2.0, 8.0)
    assert alpha["by_gpu_type"] == [
        {"gpu_type": "A100", "gpu_hours": 2.0, "cpu_core_hours": 8.0, "wasted_gpu_hours": 0.0,
         "preempted_gpu_hours": 0.0, "cpu_core_hours_measured": 0.0, "cpu_core_hours_busy": 0.0,
         "memory_gib_hours_unused": 0.0, "succeeded_run_hours": 2.0,
         "succeeded_limit_hours": 1.0, "gpu_hours_measured": 0.0, "gpu_hours_busy": 0.0,
         "cpu_efficiency": None, "runtime_efficiency": 2.0, "gpu_efficiency": None,
         "cost": "0.00", "wasted_cost": "0.00"},  # no rate card: nothing priced
    ]  # fmt: skip
    assert "H100" not in answer.text and "gamma" not in answer.text


def test_a_viewer_reads_the_tenants_usage(two_teams_usage, alpha):
    viewer = UserFactory(username="vera")
    MembershipFactory(tenant=alpha, user=viewer, role=Membership.Role.VIEWER)

    answer = client_for(viewer).get("/api/v1/usage/", WINDOW)

    assert [t["tenant"] for t in answer.json()["tenants"]] == ["alpha"]


def test_a_platform_admin_reads_every_tenants_usage(two_teams_usage):
    root = UserFactory(username="root", is_staff=True, is_superuser=True)

    answer = client_for(root).get("/api/v1/usage/", WINDOW)

    hours = {t["tenant"]: t["gpu_hours"] for t in answer.json()["tenants"]}
    assert hours == {"alpha": 2.0, "gamma": 8.0}


def test_a_tenant_admin_reads_the_tenants_they_own_only(two_teams_usage, alpha):
    tadmin = UserFactory(username="tadmin", is_staff=True)
    MembershipFactory(tenant=alpha, user=tadmin, role=Membership.Role.OWNER)

    answer = client_for(tadmin).get("/api/v1/usage/", {**WINDOW, "tenant": "gamma"})
    theirs = client_for(tadmin).get("/api/v1/usage/", WINDOW)

    assert answer.status_code == 400
    assert [t["tenant"] for t in theirs.json()["tenants"]] == ["alpha"]


def test_another_tenants_slug_is_refused_exactly_as_an_unknown_one(two_teams_usage, charlie):
    foreign = client_for(charlie).get("/api/v1/usage/", {**WINDOW, "tenant": "alpha"})
    unknown = client_for(charlie).get("/api/v1/usage/", {**WINDOW, "tenant": "no-such-team"})

    assert foreign.status_code == unknown.status_code == 400
    assert foreign.json() == unknown.json() == {"tenant": ["None of your tenants has this slug."]}


def test_a_tenant_parameter_narrows_the_report_to_that_tenant(two_teams_usage, alice, gamma):
    MembershipFactory(tenant=gamma, user=alice)

    both = client_for(alice).get("/api/v1/usage/", WINDOW)
    one = client_for(alice).get("/api/v1/usage/", {**WINDOW, "tenant": "gamma"})

    assert [t["tenant"] for t in both.json()["tenants"]] == ["alpha", "gamma"]
    assert [t["tenant"] for t in one.json()["tenants"]] == ["gamma"]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"since": "2025-13-01"}, "since"),
        ({"since": "01/03/2025"}, "since"),
        ({"since": "2025-03-01T00:00"}, "since"),
        ({"until": "tomorrow"}, "until"),
        ({"until": "0001-01-05"}, "until"),  # 30 days before it is no date
        ({"since": "2025-03-02", "until": "2025-03-02"}, "until"),
        ({"since": "2025-03-05", "until": "2025-03-02"}, "until"),
        ({"since": "2024-01-01", "until": "2025-01-02"}, "until"),  # 367 days
        ({**WINDOW, "tenant": "no-such-team"}, "tenant"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(alice, params, field):
    answer = client_for(alice).get("/api/v1/usage/", params)

    assert answer.status_code == 400
    assert list(answer.json()) == [field]


def test_a_window_of_366_days_is_allowed(alice):
    answer = client_for(alice).get("/api/v1/usage/", {"since": "2024-01-01", "until": "2025-01-01"})

    assert answer.status_code == 200
    assert answer.json()["since"].startswith("2024-01-01T00:00:00")


def test_the_default_window_is_the_30_days_up_to_now(alice):
    answer = client_for(alice).get("/api/v1/usage/").json()

    since = datetime.fromisoformat(answer["since"].replace("Z", "+00:00"))
    until = datetime.fromisoformat(answer["until"].replace("Z", "+00:00"))
    assert until - since == timedelta(days=30)
    assert abs(until - datetime.now(UTC)) < timedelta(minutes=1)


def test_a_window_reaching_back_past_job_retention_is_flagged_incomplete(alice, settings):
    settings.MLSCHED_JOB_RETENTION_DAYS = 90
    old = client_for(alice).get("/api/v1/usage/", WINDOW).json()
    recent = client_for(alice).get("/api/v1/usage/").json()
    settings.MLSCHED_JOB_RETENTION_DAYS = 0  # kept forever
    forever = client_for(alice).get("/api/v1/usage/", WINDOW).json()

    assert (old["incomplete"], recent["incomplete"], forever["incomplete"]) == (True, False, False)
    assert forever["pruned_before"] is None


def test_the_api_refuses_anonymous_callers(db):
    answer = APIClient().get("/api/v1/usage/")

    assert answer.status_code in (401, 403)


def test_the_api_is_rate_limited_as_the_other_user_endpoints(alice, settings):
    settings.MLSCHED_API_RATE = "2/minute"
    client = client_for(alice)

    codes = [client.get("/api/v1/usage/").status_code for _ in range(3)]

    assert codes == [200, 200, 429]


# 3. The portal page and its CSV.


def table_rows(html: str) -> list[list[str]]:
    body = html[html.index('<table class="jobs" id="usage">') :]
    body = body[body.index("<tbody>") : body.index("</tbody>")]
    return [re.findall(r"<td>(.*?)</td>", row) for row in re.findall(r"<tr.*?</tr>", body, re.S)]


def test_the_usage_page_shows_the_users_tenants_rows_only(client, two_teams_usage, alice):
    client.force_login(alice)

    page = client.get("/usage/", WINDOW)

    assert page.status_code == 200
    used, sizing = ["2.00", "8.00", "0.00", "0.00"], ["0.00", "0.00", "", "0.00", "2.00", "1.00"]
    gpus = ["0.00", "0.00", ""]  # GPU time not measured
    # No rate card: no cost columns (tests/jobs/test_usage_cost.py prices them).
    assert table_rows(page.text) == [
        ["alpha", "all", *used, "0", "0", "0", "0", "", "", *sizing, "2.00", *gpus],
        ["alpha", "A100", *used, *[""] * 6, *sizing, "2.00", *gpus],
    ]
    assert "gamma" not in page.text and "H100" not in page.text


def test_the_csv_holds_the_pages_rows_for_the_same_parameters(
    client, two_teams_usage, alice, settings
):
    settings.MLSCHED_JOB_RETENTION_DAYS = 0  # kept for ever: the window is whole
    run(alice.memberships.get().tenant, SINCE, end=SINCE + H, gpu_type="T4", gpu_milli=500,
        gpus=0)  # fmt: skip
    Rate.objects.create(flavor="gpu:A100", price=Decimal("2.50"))  # the page shows costs
    client.force_login(alice)

    page = client.get("/usage/", WINDOW)
    download = client.get("/usage.csv", WINDOW)

    rows = list(csv.reader(io.StringIO(download.content.decode())))
    assert download["Content-Type"].startswith("text/csv")
    assert 'filename="usage-2025-03-01-2025-03-02.csv"' in download["Content-Disposition"]
    # The costs last, after the window: the columns before them keep their places.
    before = [c for c in reports.COLUMNS if c not in reports.COST_COLUMNS]
    assert rows[0] == [*before, "since", "until", "incomplete", *reports.COST_COLUMNS]
    assert [as_shown(row) for row in rows[1:]] == table_rows(page.text) and len(rows) == 4
    window = ["2025-03-01T00:00:00Z", "2025-03-02T00:00:00Z", "false"]
    assert all(row[-6:-3] == window for row in rows[1:])  # all, A100, T4


def as_shown(row: list[str]) -> list[str]:
    """A CSV row as the page draws it: each cost with its currency beside the hours, no
    currency column, no window."""
    used, wasted, currency = row[-3:]
    cost = reports.COLUMNS.index("cost")
    return [*row[:cost], f"{used} {currency}", f"{wasted} {currency}", *row[cost:-6]]


def test_each_csv_row_says_its_window_reaches_into_what_retention_deleted(client, alice, settings):
    settings.MLSCHED_JOB_RETENTION_DAYS = 30
    client.force_login(alice)

    download = client.get("/usage.csv", WINDOW)  # a year and more ago

    rows = list(csv.reader(io.StringIO(download.content.decode())))
    incomplete = rows[0].index("incomplete")
    assert rows[1:] and all(row[incomplete] == "true" for row in rows[1:])


def test_the_page_links_the_csv_with_its_own_parameters(client, alice):
    client.force_login(alice)

    page = client.get("/usage/", {**WINDOW, "tenant": "alpha"})

    assert 'href="/usage.csv?since=2025-03-01&amp;until=2025-03-02&amp;tenant=alpha"' in page.text


def test_the_usage_page_shows_bad_input_as_a_form_error_with_a_400(client, alice):
    client.force_login(alice)

    page = client.get("/usage/", {"since": "2025-03-05", "until": "2025-03-02"})

    assert page.status_code == 400
    assert '<p class="error" data-field="until">until: Must be after since' in page.text
    assert 'id="usage"' not in page.text


def test_the_usage_page_refuses_another_tenants_slug_as_an_unknown_one(client, charlie):
    client.force_login(charlie)

    foreign = client.get("/usage/", {**WINDOW, "tenant": "alpha"})
    unknown = client.get("/usage/", {**WINDOW, "tenant": "no-such-team"})

    assert foreign.status_code == unknown.status_code == 400
    assert 'data-field="tenant">tenant: None of your tenants has this slug.' in foreign.text
    assert without_csrf(foreign.text).replace("alpha", "no-such-team") == without_csrf(unknown.text)


def without_csrf(html: str) -> str:
    return re.sub(r'name="csrfmiddlewaretoken" value="[^"]*"', "", html)


def test_the_csv_refuses_bad_input_with_a_400_naming_the_field(client, alice):
    client.force_login(alice)

    download = client.get("/usage.csv", {"since": "2025-02-30"})

    assert download.status_code == 400
    assert download.content.decode() == "since: A date: YYYY-MM-DD.\n"


def test_a_gpu_type_written_as_a_formula_is_not_one_in_the_csv(client, alpha, alice):
    run(alpha, SINCE + H, SINCE + 2 * H, gpu_type="=HYPERLINK(1)")
    client.force_login(alice)

    rows = list(csv.reader(io.StringIO(client.get("/usage.csv", WINDOW).content.decode())))

    assert rows[2][:2] == ["alpha", "'=HYPERLINK(1)"]


def test_the_usage_pages_ask_anonymous_visitors_to_log_in(client, db):
    for url in ("/usage/", "/usage.csv"):
        answer = client.get(url)

        assert answer.status_code == 302 and "/accounts/login/" in answer["Location"]


def test_the_portal_nav_links_the_usage_page(client, alice):
    client.force_login(alice)

    assert '<a href="/usage/">Usage</a>' in client.get("/").text


# 4. The command line, against a live server.


@pytest.mark.django_db(transaction=True)
def test_the_cli_prints_the_usage_table_with_server_text_made_safe(live_server, settings):
    settings.MLSCHED_JOB_RETENTION_DAYS = 1  # jobs of the window may have been deleted since
    alpha = TenantFactory(name="Alpha", slug="alpha")
    alice = UserFactory(username="alice")
    MembershipFactory(tenant=alpha, user=alice)
    run(alpha, SINCE + H, SINCE + 3 * H, gpu_type="A100\x1b[2J")
    _, token = create_token(alice, "cli")
    env = {"MLSCHED_URL": live_server.url, "MLSCHED_TOKEN": token, "PATH": "/usr/bin:/bin"}

    done = subprocess.run(
        [sys.executable, "-m", "jobs.cli", "usage", "--since", "2025-03-01", "--until",
         "2025-03-02"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip

    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("from 2025-03-01T00:00:00Z to 2025-03-02T00:00:00Z")
    assert lines[1].startswith("note: jobs finished before ")
    assert lines[2].split()[:4] == ["tenant", "gpu", "type", "GPU-h"]
    assert lines[3].split() == ["alpha", "all", "2.00", "8.00", "0.00", "0.00", "0.00",
                                "0", "0", "0", "0", "-", "-", "-", "0.00", "2.00", "-"]  # fmt: skip
    assert lines[4].split() == ["alpha", "A100\\x1b[2J", "2.00", "8.00", "0.00", "0.00", "0.00",
                                "-", "0.00", "2.00", "-"]  # fmt: skip
    assert "\x1b" not in done.stdout
