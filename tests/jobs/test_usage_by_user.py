"""The usage report split by the users who submitted the jobs (Slurm's sreport user top):
`?by_user=1` in the API, `usage --by-user` in the CLI, the usage page's "Split by user" and its
CSV; read from the attempts over the whole window, as the split by label is."""

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
    """alpha's attempts on 2025-03-01: alice's 3 GPU-hours (two jobs), bob's 1 (half of it
    wasted); beta's job of alice's, which alpha's report never shows."""
    alpha, beta = TenantFactory(slug="alpha"), TenantFactory(slug="beta")
    alice, bob = UserFactory(username="alice"), UserFactory(username="bob")
    for user in (alice, bob):
        MembershipFactory(tenant=alpha, user=user)
    run(alpha, SINCE, SINCE + 2 * H, owner=alice)
    run(alpha, SINCE, SINCE + H, owner=alice)
    run(alpha, SINCE, SINCE + H, owner=bob, wasted=1800.0)
    run(beta, SINCE, SINCE + 5 * H, owner=alice)
    return alpha, alice


def test_a_tenants_usage_is_split_by_its_users(alpha_usage):
    alpha, _ = alpha_usage

    (usage,) = reports.usage([alpha], SINCE, UNTIL, LATER, splits=("user",)).tenants

    assert {u.gpu_type: (u.gpu_hours, u.wasted_gpu_hours) for u in usage.by_split["user"]} == {
        "alice": (3.0, 0.0), "bob": (1.0, 0.5)}  # fmt: skip
    assert reports.usage([alpha], SINCE, UNTIL, LATER).tenants[0].by_split == {}


def test_the_api_gives_the_split_and_names_a_bad_value(alpha_usage, settings):
    settings.MLSCHED_JOB_RETENTION_DAYS = 0  # kept forever: nothing of 2025 was deleted
    _, alice = alpha_usage
    client = APIClient()
    client.force_authenticate(alice)

    answer = client.get("/api/v1/usage/", {**WINDOW, "by_user": "1"}).json()
    plain = client.get("/api/v1/usage/", WINDOW).json()
    refused = client.get("/api/v1/usage/", {**WINDOW, "by_user": "yes"})

    assert answer["by_user_incomplete"] is False
    (tenant,) = answer["tenants"]
    assert [(u["user"], u["gpu_hours"]) for u in tenant["by_user"]] == [
        ("alice", 3.0), ("bob", 1.0)]  # fmt: skip
    assert "by_user" not in plain["tenants"][0] and "by_user_incomplete" not in plain
    assert refused.status_code == 400
    assert refused.json() == {"by_user": ["1 or 0 (or true or false)."]}


def test_the_cli_prints_the_split_after_the_table(alpha_usage, live_server, settings):
    settings.MLSCHED_JOB_RETENTION_DAYS = 0
    _, alice = alpha_usage
    _, token = create_token(alice, "cli")
    env = {"MLSCHED_URL": live_server.url, "MLSCHED_TOKEN": token, "PATH": "/usr/bin:/bin"}

    done = subprocess.run(
        [sys.executable, "-m", "jobs.cli", "usage", "--since", "2025-03-01", "--until",
         "2025-03-02", "--by-user"], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip

    assert done.returncode == 0, done.stderr
    split = done.stdout.split("\n\n")[1].splitlines()
    assert split[0].split()[:3] == ["tenant", "user", "GPU-h"]
    assert [line.split()[:3] for line in split[1:]] == [
        ["alpha", "alice", "3.00"], ["alpha", "bob", "1.00"]]  # fmt: skip


def test_the_portal_page_draws_the_split_and_downloads_it(alpha_usage, client, settings):
    settings.MLSCHED_JOB_RETENTION_DAYS = 0
    _, alice = alpha_usage
    client.force_login(alice)

    page = client.get("/usage/", {**WINDOW, "by_user": "1"}).content.decode()
    download = client.get("/usage-by-user.csv", {**WINDOW, "by_user": "1"})

    split = page[page.index('id="usage-by-user"') :]
    assert "<tr><td>alpha</td><td>alice</td><td>3.00</td>" in split
    assert "<tr><td>alpha</td><td>bob</td><td>1.00</td>" in split and "beta" not in split
    assert 'name="by_user" value="1" checked' in page
    rows = list(csv.reader(io.StringIO(download.content.decode())))
    assert rows[0] == platform_views.csv_header(reports.USER_COLUMNS)
    found = {r[1]: dict(zip(rows[0], r, strict=True)) for r in rows[1:]}
    assert set(found) == {"alice", "bob"}
    assert found["bob"]["wasted_gpu_hours"] == "0.50" and found["bob"]["incomplete"] == "false"
