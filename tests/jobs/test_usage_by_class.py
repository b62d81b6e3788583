"""The usage report split by the priority classes the jobs ran at (as Slurm's sreport splits by
QOS): `?by_class=1` in the API, `usage --by-class` in the CLI, the usage page's "Split by
priority class" and its CSV; read from the attempts over the whole window, as the split by
user is (tests/jobs/test_usage_by_user.py), beside which it may be asked."""

import csv
import io

import pytest
from rest_framework.test import APIClient

from jobs import platform_views, reports
from tests.factories import PriorityClassFactory
from tests.jobs.test_batch_shard_limit_cli import mlsched  # noqa: F401 (a fixture)
from tests.jobs.test_usage_report import LATER, SINCE, UNTIL, WINDOW, H, run

pytestmark = pytest.mark.django_db


@pytest.fixture
def alpha_usage(alpha, alice):
    """alpha's attempts on 2025-03-01: 3 GPU-hours at urgent (two jobs), 1 at normal."""
    urgent = PriorityClassFactory(name="urgent", value=100)
    normal = PriorityClassFactory(name="normal", value=0)
    run(alpha, SINCE, SINCE + 2 * H, owner=alice, priority_class=urgent)
    run(alpha, SINCE, SINCE + H, owner=alice, priority_class=urgent)
    run(alpha, SINCE, SINCE + H, owner=alice, priority_class=normal, wasted=1800.0)
    return alpha, alice


def test_a_tenants_usage_is_split_by_its_jobs_classes(alpha_usage):
    alpha, _ = alpha_usage

    (usage,) = reports.usage([alpha], SINCE, UNTIL, LATER, splits=("class",)).tenants

    assert {u.gpu_type: (u.gpu_hours, u.wasted_gpu_hours) for u in usage.by_split["class"]} == {
        "urgent": (3.0, 0.0), "normal": (1.0, 0.5)}  # fmt: skip


def test_the_api_gives_it_beside_the_split_by_user_and_names_a_bad_value(alpha_usage, settings):
    settings.MLSCHED_JOB_RETENTION_DAYS = 0  # kept forever: nothing of 2025 was deleted
    _, alice = alpha_usage
    client = APIClient()
    client.force_authenticate(alice)

    answer = client.get("/api/v1/usage/", {**WINDOW, "by_class": "1", "by_user": "1"}).json()
    refused = client.get("/api/v1/usage/", {**WINDOW, "by_class": "maybe"})

    assert (answer["by_class_incomplete"], answer["by_user_incomplete"]) == (False, False)
    (tenant,) = answer["tenants"]
    assert sorted((u["class"], u["gpu_hours"]) for u in tenant["by_class"]) == [
        ("normal", 1.0), ("urgent", 3.0)]  # fmt: skip
    assert [(u["user"], u["gpu_hours"]) for u in tenant["by_user"]] == [("alice", 4.0)]
    assert refused.status_code == 400
    assert refused.json() == {"by_class": ["1 or 0 (or true or false)."]}


def test_the_cli_prints_the_split_after_the_table(alpha_usage, mlsched, settings):  # noqa: F811
    settings.MLSCHED_JOB_RETENTION_DAYS = 0

    status, out, err = mlsched("usage", "--since", "2025-03-01", "--until", "2025-03-02",
                               "--by-class")  # fmt: skip

    assert status == 0, err
    split = out.split("\n\n")[1].splitlines()
    assert split[0].split()[:3] == ["tenant", "class", "GPU-h"]
    assert sorted(line.split()[:3] for line in split[1:]) == [
        ["alpha", "normal", "1.00"], ["alpha", "urgent", "3.00"]]  # fmt: skip


def test_the_portal_page_draws_the_split_and_downloads_it(alpha_usage, client, settings):
    settings.MLSCHED_JOB_RETENTION_DAYS = 0
    _, alice = alpha_usage
    client.force_login(alice)

    page = client.get("/usage/", {**WINDOW, "by_class": "1"}).content.decode()
    download = client.get("/usage-by-class.csv", {**WINDOW, "by_class": "1"})
    unknown = client.get("/usage-by-shoe.csv", WINDOW)

    split = page[page.index('id="usage-by-class"') :]
    assert "<tr><td>alpha</td><td>urgent</td><td>3.00</td>" in split
    assert 'name="by_class" value="1" checked' in page and 'id="usage-by-user"' not in page
    rows = list(csv.reader(io.StringIO(download.content.decode())))
    assert rows[0] == platform_views.csv_header(reports.split_columns("class"))
    assert {r[1]: r[4] for r in rows[1:]} == {"urgent": "0.00", "normal": "0.50"}  # wasted
    assert unknown.status_code == 404
