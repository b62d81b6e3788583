"""Usage over time (jobs.daily_usage): each tenant's GPU-hours and CPU core-hours per UTC day,
by GPU type, adding up to the usage report's totals; read from the roll-up's days and the
attempts; tenant-first through GET /api/v1/usage/daily/, the usage page's chart, its CSV and
CLI `usage --daily`."""

import csv
import io
import json
import re
from datetime import UTC, date, datetime, timedelta
from urllib.parse import urlencode

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from jobs import daily_usage, reports, rollup
from jobs.models import Job
from quotas.models import Membership, Tenant
from tests.clusters.test_node_service_api import cli_of
from tests.factories import MembershipFactory, TenantFactory, UserFactory
from tests.jobs.test_usage_report import H, client_for, run
from tests.jobs.test_usage_rollup import history
from tests.test_openapi import call

pytestmark = pytest.mark.django_db

SINCE = datetime(2025, 3, 1, tzinfo=UTC)
UNTIL = datetime(2025, 3, 4, tzinfo=UTC)  # three days
LATER = datetime(2025, 4, 1, tzinfo=UTC)
WINDOW = {"since": "2025-03-01", "until": "2025-03-04"}
DAY = timedelta(days=1)
NOW = datetime(2025, 6, 30, 12, tzinfo=UTC)  # the roll-up's tests' now: not at midnight


def per_day(series: daily_usage.DailyUsage, tenant) -> dict:
    """A tenant's GPU-hours and core-hours by day and GPU type, the days it used something (to
    6 decimals: float sums)."""
    return {(day, u.gpu_type): (round(u.gpu_hours, 6), round(u.cpu_core_hours, 6))
            for day in series.days for u in series.by_type(day, tenant)}  # fmt: skip


def summed_days(series: daily_usage.DailyUsage, tenant) -> dict:
    """A tenant's days summed, by GPU type."""
    found: dict = {}
    for day in series.days:
        for u in series.by_type(day, tenant):
            gpu, cpu = found.get(u.gpu_type, (0.0, 0.0))
            found[u.gpu_type] = (gpu + u.gpu_hours, cpu + u.cpu_core_hours)
    return found


# 1. The figures.


def test_the_days_add_up_to_the_reports_totals_over_rolled_up_and_live_days(alpha, gamma):
    history([alpha, gamma], NOW - 12 * DAY, 12)
    rollup.roll_up(NOW - 4 * DAY)  # the days to NOW - 6 days rolled up, the later ones not
    since, until = NOW - 10 * DAY, NOW  # at noon: the first and last days partial

    series = daily_usage.daily([alpha, gamma], since, until, NOW)
    report = reports.usage([alpha, gamma], since, until, NOW)

    assert series.rolled_up == ((since + DAY).date(), (NOW - 5 * DAY).date())
    assert len(series.days) == 11
    for tenant, totals in zip([alpha, gamma], report.tenants, strict=True):
        days = summed_days(series, tenant)
        assert days.keys() == {u.gpu_type for u in totals.by_type} == {"A100", "T4", ""}
        for u in totals.by_type:
            assert days[u.gpu_type] == (pytest.approx(u.gpu_hours), pytest.approx(u.cpu_core_hours))


def test_a_run_across_midnight_is_split_between_its_days(alpha):
    run(alpha, SINCE + 20 * H, SINCE + DAY + 3 * H, gpus=2)  # 4 h, then 3 h, of 2 GPUs
    run(alpha, SINCE + 2 * DAY + 22 * H, end=None, gpu_type="T4")  # runs on past until

    series = daily_usage.daily([alpha], SINCE, UNTIL, LATER)

    assert per_day(series, alpha) == {
        (date(2025, 3, 1), "A100"): (8.0, 16.0),
        (date(2025, 3, 2), "A100"): (6.0, 12.0),
        (date(2025, 3, 3), "T4"): (2.0, 8.0),
    }


def test_a_run_across_days_not_rolled_up_gives_each_whole_day_its_hours(alpha):
    run(alpha, SINCE - DAY, SINCE + 2 * DAY + 6 * H, gpus=0, gpu_milli=500)  # half a GPU

    series = daily_usage.daily([alpha], SINCE, UNTIL, LATER)

    days = [(day, u.gpu_hours) for day in series.days for u in series.by_type(day, alpha)]
    assert days == [(date(2025, 3, 1), 12.0), (date(2025, 3, 2), 12.0), (date(2025, 3, 3), 3.0)]


def test_a_running_attempt_counts_up_to_now(alpha):
    run(alpha, SINCE + DAY + 20 * H, end=None)

    series = daily_usage.daily([alpha], SINCE, UNTIL, SINCE + 2 * DAY + 2 * H)

    assert per_day(series, alpha) == {
        (date(2025, 3, 2), "A100"): (4.0, 16.0),
        (date(2025, 3, 3), "A100"): (2.0, 8.0),
    }


def test_rolled_up_days_are_read_from_the_roll_up_and_the_rest_from_the_attempts(alpha):
    old = rollup.midnight((NOW - 10 * DAY).date())
    run(alpha, old + 22 * H, old + DAY + 2 * H, created=old)  # rolled up: 2 h and 2 h
    run(alpha, NOW - DAY - 3 * H, NOW - DAY - H, gpu_type="T4")  # yesterday: not settled
    assert rollup.roll_up(NOW) > 0
    Job.objects.filter(attempts__gpu_type="A100").delete()  # as retention deletes them

    series = daily_usage.daily([alpha], old, NOW, NOW)

    assert series.rolled_up == (old.date(), (NOW - DAY).date())
    assert per_day(series, alpha) == {
        (old.date(), "A100"): (2.0, 8.0),
        (old.date() + DAY, "A100"): (2.0, 8.0),
        ((NOW - DAY).date(), "T4"): (2.0, 8.0),
    }


def test_its_queries_do_not_grow_with_the_window(alpha, gamma):
    history([alpha], NOW - 40 * DAY, 3)
    rollup.roll_up(NOW - 20 * DAY)  # from 40 days ago to 21

    def queries(days: int) -> int:
        until = NOW.date()
        asked = {"since": f"{until - days * DAY}", "until": f"{until}"}
        with CaptureQueriesContext(connection) as captured:
            daily_usage.requested(asked, Tenant.objects.all())
        return len(captured)

    # clock, tenants, how far the roll-up has gone, its days, and the attempts of the days
    # before its first and after its last
    assert queries(60) == queries(300) == 6


# 2. The API: tenant-first, 400s naming the field.


@pytest.fixture
def two_teams_daily(alpha, gamma):
    run(alpha, SINCE + 20 * H, SINCE + DAY + 2 * H, gpu_type="A100")  # 4 h, then 2 h
    run(gamma, SINCE + H, SINCE + 9 * H, gpu_type="H100")


def test_the_api_gives_each_day_each_tenant_and_its_gpu_types(two_teams_daily, alice):
    url = f"/api/v1/usage/daily/?{urlencode(WINDOW)}"

    answer = call(client_for(alice), "get", url, 200)  # as docs/openapi.yaml says, strictly

    assert answer["tenants"] == [{"tenant": "alpha", "name": "Alpha"}]
    assert answer["since"] == "2025-03-01T00:00:00Z" and answer["rolled_up"] is None
    assert answer["days"] == [
        {"day": "2025-03-01", "tenants": [
            {"tenant": "alpha", "gpu_hours": 4.0, "cpu_core_hours": 16.0, "by_gpu_type": [
                {"gpu_type": "A100", "gpu_hours": 4.0, "cpu_core_hours": 16.0}]}]},
        {"day": "2025-03-02", "tenants": [
            {"tenant": "alpha", "gpu_hours": 2.0, "cpu_core_hours": 8.0, "by_gpu_type": [
                {"gpu_type": "A100", "gpu_hours": 2.0, "cpu_core_hours": 8.0}]}]},
        {"day": "2025-03-03", "tenants": [
            {"tenant": "alpha", "gpu_hours": 0.0, "cpu_core_hours": 0.0, "by_gpu_type": []}]},
    ]  # fmt: skip
    assert "gamma" not in json.dumps(answer) and "H100" not in json.dumps(answer)


def test_a_platform_admin_reads_every_tenants_days(two_teams_daily):
    root = UserFactory(username="root", is_superuser=True)

    answer = client_for(root).get("/api/v1/usage/daily/", WINDOW).json()

    assert [t["tenant"] for t in answer["tenants"]] == ["alpha", "gamma"]
    first = answer["days"][0]["tenants"]
    assert [(t["tenant"], t["gpu_hours"]) for t in first] == [("alpha", 4.0), ("gamma", 8.0)]


def test_a_viewer_reads_the_tenants_days_and_a_tenant_narrows_them(two_teams_daily, alpha, gamma):
    viewer = UserFactory(username="vera")
    MembershipFactory(tenant=alpha, user=viewer, role=Membership.Role.VIEWER)
    MembershipFactory(tenant=gamma, user=viewer, role=Membership.Role.VIEWER)

    both = client_for(viewer).get("/api/v1/usage/daily/", WINDOW).json()
    one = client_for(viewer).get("/api/v1/usage/daily/", {**WINDOW, "tenant": "gamma"}).json()

    assert [t["tenant"] for t in both["tenants"]] == ["alpha", "gamma"]
    assert [t["tenant"] for t in one["tenants"]] == ["gamma"]
    assert [d["tenants"][0]["gpu_hours"] for d in one["days"]] == [8.0, 0.0, 0.0]


def test_another_tenants_slug_is_refused_exactly_as_an_unknown_one(two_teams_daily, charlie):
    foreign = client_for(charlie).get("/api/v1/usage/daily/", {**WINDOW, "tenant": "alpha"})
    unknown = client_for(charlie).get("/api/v1/usage/daily/", {**WINDOW, "tenant": "no-such"})

    assert foreign.status_code == unknown.status_code == 400
    assert foreign.json() == unknown.json() == {"tenant": ["None of your tenants has this slug."]}


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"since": "2025-13-01"}, "since"),
        ({"since": "2025-03-01T00:00"}, "since"),
        ({"until": "tomorrow"}, "until"),
        ({"until": "0001-01-05"}, "until"),
        ({"since": "2025-03-05", "until": "2025-03-02"}, "until"),
        ({"since": "2024-01-01", "until": "2025-01-02"}, "until"),  # 367 days
        ({**WINDOW, "tenant": "no-such-team"}, "tenant"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(alice, params, field):
    answer = call(client_for(alice), "get", f"/api/v1/usage/daily/?{urlencode(params)}", 400)

    assert list(answer) == [field]


def test_the_api_refuses_anonymous_callers_and_is_rate_limited(alice, settings):
    settings.MLSCHED_API_RATE = "2/minute"
    client = client_for(alice)

    codes = [client.get("/api/v1/usage/daily/").status_code for _ in range(3)]

    assert codes == [200, 200, 429]
    assert APIClient().get("/api/v1/usage/daily/").status_code in (401, 403)


def test_the_default_window_is_the_30_days_up_to_now_its_ends_partial(alice):
    answer = client_for(alice).get("/api/v1/usage/daily/").json()

    until = datetime.fromisoformat(answer["until"])
    assert len(answer["days"]) == 31  # 30 days from a time that is not a midnight
    assert answer["days"][-1]["day"] == f"{until.date()}"


# 3. The usage page's chart and the CSV.


def between(html: str, start: str, end: str) -> str:
    """The part of `html` from `start` to the first `end` after it."""
    begins = html.index(start)
    return html[begins : html.index(end, begins)]


def svg_of(html: str) -> str:
    return between(html, '<svg class="chart"', "</svg>")


def test_the_page_draws_a_bar_per_team_and_day_used_stacked_by_team(client, two_teams_daily):
    client.force_login(UserFactory(username="root", is_superuser=True))

    page = client.get("/usage/", WINDOW)

    svg = svg_of(page.text)
    assert page.status_code == 200
    assert '<title id="per-day-title">GPU-hours per day, by team</title>' in svg
    titles = re.findall(r'<rect class="bar" [^>]*><title>(.*?)</title></rect>', svg)
    assert titles == ["2025-03-01, alpha: 4.00 GPU-hours", "2025-03-01, gamma: 8.00 GPU-hours",
                      "2025-03-02, alpha: 2.00 GPU-hours"]  # fmt: skip
    assert "style=" not in svg and "<script" not in svg  # the portal's policy allows neither
    assert ">GPU-hours</text>" in svg and ">Day (UTC)</text>" in svg
    legend = between(page.text, '<ul class="legend"', "</ul>")
    assert re.findall(r"</svg>(\w+)</li>", legend) == ["alpha", "gamma"]
    table = page.text[page.text.index('id="per-day-table"') :]
    assert re.findall(r"<tr>(.*?)</tr>", table)[1] == (
        "<td>2025-03-01</td><td>4.00</td><td>8.00</td><td>12.00</td>"
    )


def test_one_team_shown_is_stacked_by_gpu_type(client, alpha, alice):
    run(alpha, SINCE + H, SINCE + 3 * H, gpu_type="A100")
    run(alpha, SINCE + H, SINCE + 2 * H, gpu_type="T4")
    run(alpha, SINCE + DAY + H, SINCE + DAY + 2 * H, gpu_type="T4")
    run(alpha, SINCE + H, SINCE + 2 * H, gpus=0)  # no GPU: nothing drawn
    client.force_login(alice)

    svg = svg_of(client.get("/usage/", WINDOW).text)

    assert "GPU-hours per day, by GPU type" in svg
    assert re.findall(r"<title>([^<]*)</title></rect>", svg) == [
        "2025-03-01, A100: 2.00 GPU-hours", "2025-03-01, T4: 1.00 GPU-hours",
        "2025-03-02, T4: 1.00 GPU-hours",
    ]  # fmt: skip


def test_a_window_without_gpu_hours_says_so_instead_of_a_chart(client, alice):
    client.force_login(alice)

    page = client.get("/usage/", WINDOW)

    assert '<svg class="chart"' not in page.text
    assert '<p id="per-day-none">No GPU-hours used in this window.</p>' in page.text
    assert 'href="/usage-daily.csv?since=2025-03-01&amp;until=2025-03-04"' in page.text


def test_the_csv_gives_a_row_per_day_tenant_and_gpu_type(client, two_teams_daily, alice, settings):
    settings.MLSCHED_JOB_RETENTION_DAYS = 0  # kept for ever: the window is whole
    run(alice.memberships.get().tenant, SINCE + H, SINCE + 2 * H, gpu_type="=HYPERLINK(1)")
    client.force_login(alice)

    download = client.get("/usage-daily.csv", WINDOW)

    rows = list(csv.reader(io.StringIO(download.content.decode())))
    assert 'filename="usage-daily-2025-03-01-2025-03-04.csv"' in download["Content-Disposition"]
    window = ["2025-03-01T00:00:00Z", "2025-03-04T00:00:00Z", "false"]
    assert rows == [
        [*daily_usage.COLUMNS, "since", "until", "incomplete"],
        ["2025-03-01", "alpha", "all", "5.00", "20.00", *window],
        ["2025-03-01", "alpha", "'=HYPERLINK(1)", "1.00", "4.00", *window],  # not a formula
        ["2025-03-01", "alpha", "A100", "4.00", "16.00", *window],
        ["2025-03-02", "alpha", "all", "2.00", "8.00", *window],
        ["2025-03-02", "alpha", "A100", "2.00", "8.00", *window],
        ["2025-03-03", "alpha", "all", "0.00", "0.00", *window],
    ]  # fmt: skip


def test_the_csv_refuses_bad_input_with_a_400_naming_the_field(client, charlie):
    client.force_login(charlie)

    bad_date = client.get("/usage-daily.csv", {"since": "2025-02-30"})
    foreign = client.get("/usage-daily.csv", {**WINDOW, "tenant": "alpha"})

    assert (bad_date.status_code, bad_date.content) == (400, b"since: A date: YYYY-MM-DD.\n")
    assert (foreign.status_code, foreign.content) == (
        400, b"tenant: None of your tenants has this slug.\n")  # fmt: skip
    assert client.get("/usage-daily.csv", {"until": "0001-01-05"}).status_code == 400


# 4. The command line, against a live server.


@pytest.mark.django_db(transaction=True)
def test_the_cli_prints_a_line_per_day_tenant_and_gpu_type_and_the_apis_json(live_server):
    alpha = TenantFactory(name="Alpha", slug="alpha")
    alice = UserFactory(username="alice")
    MembershipFactory(tenant=alpha, user=alice)
    run(alpha, SINCE + 20 * H, SINCE + DAY + 2 * H, gpu_type="A100\x1b[2J")
    cli = cli_of(live_server, alice)

    done = cli("usage", "--daily", "--since", "2025-03-01", "--until", "2025-03-03")
    as_json = cli("usage", "--daily", "--json", "--since", "2025-03-01", "--until", "2025-03-03")

    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("from 2025-03-01T00:00:00Z to 2025-03-03T00:00:00Z")
    assert [line.split() for line in lines[-5:]] == [
        ["day", "tenant", "gpu", "type", "GPU-h", "CPU", "core-h"],
        ["2025-03-01", "alpha", "all", "4.00", "16.00"],
        ["2025-03-01", "alpha", "A100\\x1b[2J", "4.00", "16.00"],  # made safe
        ["2025-03-02", "alpha", "all", "2.00", "8.00"],
        ["2025-03-02", "alpha", "A100\\x1b[2J", "2.00", "8.00"],
    ]
    answer = json.loads(as_json.stdout)
    assert [d["tenants"][0]["gpu_hours"] for d in answer["days"]] == [4.0, 2.0]
    assert list(answer) == ["since", "until", "counted_to", "pruned_before", "incomplete",
                            "rolled_up", "tenants", "days"]  # fmt: skip


@pytest.mark.django_db(transaction=True)
def test_the_cli_refuses_daily_with_a_split_and_says_a_bad_date(live_server):
    alice = UserFactory(username="alice")
    MembershipFactory(tenant=TenantFactory(slug="alpha"), user=alice)
    cli = cli_of(live_server, alice)

    split = cli("usage", "--daily", "--by-user")
    bad = cli("usage", "--daily", "--since", "2025-02-30")

    assert split.returncode == 2 and "--daily gives the use per day" in split.stderr
    assert (bad.returncode, bad.stderr) == (1, 'error 400: {"since":["A date: YYYY-MM-DD."]}\n')
