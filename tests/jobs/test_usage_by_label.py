"""The usage report split by a label's values (chargeback by project): `?by_label=KEY` in the
API, `usage --by-label KEY` in the CLI; read from the attempts over the whole window, since the
daily roll-up keeps no labels, and said to be incomplete where retention has deleted jobs."""

import csv
import io
import subprocess
import sys

import pytest
from rest_framework.test import APIClient

from jobs import platform_views, reports
from quotas.tokens import create_token
from tests.factories import MembershipFactory, TenantFactory, UserFactory
from tests.jobs.test_usage_report import LATER, SINCE, UNTIL, WINDOW, H, run
from tests.processes import ROOT

pytestmark = pytest.mark.django_db


@pytest.fixture
def alpha_usage():
    """alpha's attempts on 2025-03-01: project llm 3 GPU-hours (two jobs), vision 1, none 2;
    beta's llm job, which alpha's report never shows."""
    alpha, beta = TenantFactory(slug="alpha"), TenantFactory(slug="beta")
    run(alpha, SINCE, SINCE + 2 * H, labels={"project": "llm", "sweep": "a"})
    run(alpha, SINCE, SINCE + H, labels={"project": "llm"})
    run(alpha, SINCE, SINCE + H, labels={"project": "vision"}, wasted=1800.0)
    run(alpha, SINCE, SINCE + 2 * H)
    run(beta, SINCE, SINCE + 5 * H, labels={"project": "llm"})
    return alpha, beta


def split(usage: reports.TenantUsage) -> dict:
    return {u.gpu_type: (round(u.gpu_hours, 6), round(u.wasted_gpu_hours, 6))
            for u in usage.by_label}  # fmt: skip


def test_a_tenants_usage_is_split_by_its_jobs_values_of_the_label(alpha_usage):
    alpha, _ = alpha_usage

    (usage,) = reports.usage([alpha], SINCE, UNTIL, LATER, "project").tenants

    assert split(usage) == {"llm": (3.0, 0.0), "vision": (1.0, 0.5), None: (2.0, 0.0)}
    assert sum(u.gpu_hours for u in usage.by_label) == usage.total().gpu_hours


def test_without_a_label_asked_there_is_no_split(alpha_usage):
    alpha, _ = alpha_usage

    (usage,) = reports.usage([alpha], SINCE, UNTIL, LATER).tenants

    assert usage.by_label == []


def test_the_api_gives_the_split_and_names_a_bad_key(alpha_usage, settings):
    settings.MLSCHED_JOB_RETENTION_DAYS = 0  # kept forever: nothing of 2025 was deleted
    alpha, _ = alpha_usage
    alice = UserFactory(username="alice")
    MembershipFactory(tenant=alpha, user=alice)
    client = APIClient()
    client.force_authenticate(alice)

    answer = client.get("/api/v1/usage/", {**WINDOW, "by_label": "project"}).json()
    refused = client.get("/api/v1/usage/", {**WINDOW, "by_label": "has space"})

    assert (answer["by_label"], answer["by_label_incomplete"]) == ("project", False)
    (tenant,) = answer["tenants"]
    assert [(u["value"], u["gpu_hours"]) for u in tenant["by_label"]] == [
        ("llm", 3.0), ("vision", 1.0), (None, 2.0)]  # fmt: skip
    assert refused.status_code == 400 and list(refused.json()) == ["by_label"]


def test_the_split_says_it_is_incomplete_where_retention_has_deleted_jobs(alpha_usage, settings):
    settings.MLSCHED_JOB_RETENTION_DAYS = 90
    alpha, _ = alpha_usage

    report = reports.usage([alpha], SINCE, UNTIL, SINCE + 100 * 24 * H, "project")

    assert report.as_json()["by_label_incomplete"] is True


def test_the_cli_prints_the_split_after_the_table(alpha_usage, live_server, settings):
    settings.MLSCHED_JOB_RETENTION_DAYS = 0
    alpha, _ = alpha_usage
    alice = UserFactory(username="alice")
    MembershipFactory(tenant=alpha, user=alice)
    _, token = create_token(alice, "cli")
    env = {"MLSCHED_URL": live_server.url, "MLSCHED_TOKEN": token, "PATH": "/usr/bin:/bin"}

    done = subprocess.run(
        [sys.executable, "-m", "jobs.cli", "usage", "--since", "2025-03-01", "--until",
         "2025-03-02", "--by-label", "project"], cwd=ROOT, env=env, capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip

    assert done.returncode == 0, done.stderr
    split_ = done.stdout.split("\n\n")[1].splitlines()
    assert split_[0].split()[:3] == ["tenant", "project", "GPU-h"]
    assert [line.split()[:3] for line in split_[1:]] == [
        ["alpha", "llm", "3.00"],
        ["alpha", "vision", "1.00"],
        ["alpha", "(none)", "2.00"],
    ]


def test_the_portal_page_draws_the_split_under_the_table(alpha_usage, client, settings):
    settings.MLSCHED_JOB_RETENTION_DAYS = 0
    alpha, _ = alpha_usage
    alice = UserFactory(username="alice")
    MembershipFactory(tenant=alpha, user=alice)
    client.force_login(alice)

    page = client.get("/usage/", {**WINDOW, "by_label": "project"}).content.decode()
    refused = client.get("/usage/", {**WINDOW, "by_label": "has space"})

    split_ = page[page.index('id="usage-by-label"') :]
    assert "<tr><td>alpha</td><td>llm</td><td>3.00</td><td>12.00</td><td>0.00</td>" in split_
    assert "<td>(none)</td><td>2.00</td>" in split_ and "beta" not in split_
    assert refused.status_code == 400 and 'data-field="by_label"' in refused.content.decode()


def test_the_split_downloads_as_csv_with_every_figure_and_whether_it_is_whole(
    alpha_usage, client, settings
):
    settings.MLSCHED_JOB_RETENTION_DAYS = 0  # kept forever: the split is whole
    alpha, _ = alpha_usage
    alice = UserFactory(username="alice")
    MembershipFactory(tenant=alpha, user=alice)
    client.force_login(alice)

    download = client.get("/usage-by-label.csv", {**WINDOW, "by_label": "project"})
    unnamed = client.get("/usage-by-label.csv", WINDOW)
    page = client.get("/usage/", {**WINDOW, "by_label": "project"}).content.decode()

    assert download.status_code == 200
    assert 'filename="usage-by-label-2025-03-01-2025-03-02.csv"' in download["Content-Disposition"]
    rows = list(csv.reader(io.StringIO(download.content.decode())))
    assert rows[0] == platform_views.csv_header(reports.LABEL_COLUMNS)
    found = {(r[2], r[3]): dict(zip(rows[0], r, strict=True)) for r in rows[1:]}
    assert set(found) == {("llm", "true"), ("vision", "true"), ("", "false")}  # not beta's
    assert found["vision", "true"]["wasted_gpu_hours"] == "0.50"
    assert found["llm", "true"]["gpu_hours"] == "3.00"
    assert {r["tenant"] for r in found.values()} == {"alpha"}
    assert {r["incomplete"] for r in found.values()} == {"false"}
    assert unnamed.status_code == 400 and unnamed.content.decode().startswith("by_label:")
    assert (
        'href="/usage-by-label.csv?since=2025-03-01&amp;until=2025-03-02&amp;by_label=project"'
        in page
    )


def test_the_split_as_csv_says_when_retention_has_deleted_jobs_of_its_window(alpha_usage, client):
    alpha, _ = alpha_usage  # 2025: long past the default job retention
    alice = UserFactory(username="alice")
    MembershipFactory(tenant=alpha, user=alice)
    client.force_login(alice)

    download = client.get("/usage-by-label.csv", {**WINDOW, "by_label": "project"})

    rows = list(csv.reader(io.StringIO(download.content.decode())))
    assert {row[rows[0].index("incomplete")] for row in rows[1:]} == {"true"}


@pytest.mark.parametrize("key", ["2024", "-5", "-99999999999999999999"])
def test_a_key_of_digits_is_a_key_not_an_array_index(key):
    # Django's key transforms would read "2024" as the labels' element 2024 (none: an object),
    # and a number past PostgreSQL's integers would fail the query.
    alpha = TenantFactory(slug="alpha")
    run(alpha, SINCE, SINCE + 2 * H, labels={key: "q1"})
    run(alpha, SINCE, SINCE + H, labels={key: "q2"})

    (usage,) = reports.usage([alpha], SINCE, UNTIL, LATER, key).tenants

    assert split(usage) == {"q1": (2.0, 0.0), "q2": (1.0, 0.0)}
