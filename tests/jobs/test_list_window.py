"""The job lists' time window (Slurm's sacct -S and -E): `?since=` keeps the jobs not ended
before it, `?until=` those submitted before it, and together the jobs alive at some moment
between; read alike by the API, the portal and the CLI's `list --since --until`."""

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from jobs.models import Job
from jobs.states import State
from tests.factories import JobFactory, PriorityClassFactory
from tests.jobs.test_batch_shard_limit import batch
from tests.jobs.test_batch_shard_limit_cli import mlsched  # noqa: F401 (a fixture)
from tests.jobs.test_list_filters import api_ids, portal_ids

pytestmark = pytest.mark.django_db
DAY = timedelta(days=1)


def lived(job: Job, submitted: datetime, ended: datetime | None = None, state=None) -> Job:
    """The job as if submitted at `submitted` and, if `ended`, ended then in `state`."""
    fields = {"created": submitted, "finished_at": ended}
    if ended is not None:
        fields["state"] = state or State.SUCCEEDED
    Job.objects.filter(pk=job.pk).update(**fields)
    return Job.objects.get(pk=job.pk)


@pytest.fixture
def week(alpha, alice):
    """Jobs of the last days: one ended three days ago, one failed an hour ago, one running
    since two days ago, one submitted a minute ago."""
    now = timezone.now()
    return {
        "old": lived(JobFactory(tenant=alpha, owner=alice), now - 4 * DAY, now - 3 * DAY),
        "failed": lived(
            JobFactory(tenant=alpha, owner=alice),
            now - 2 * DAY,
            now - timedelta(hours=1),
            State.FAILED,
        ),  # fmt: skip
        "running": lived(
            JobFactory(tenant=alpha, owner=alice, state=State.RUNNING), now - 2 * DAY
        ),  # fmt: skip
        "new": lived(JobFactory(tenant=alpha, owner=alice), now - timedelta(minutes=1)),
    }


def zulu(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def expected(week, *names) -> list[int]:
    return sorted((week[name].pk for name in names), reverse=True)


@pytest.mark.parametrize("read", [api_ids, portal_ids])
@pytest.mark.parametrize(
    ("window", "names"),
    [
        ({"since": -DAY}, ["failed", "running", "new"]),  # the old one ended before
        ({"until": -DAY}, ["old", "failed", "running"]),  # the new one came after
        ({"since": -DAY, "until": -timedelta(hours=2)}, ["failed", "running"]),
        ({"since": -5 * DAY, "until": -3.5 * DAY}, ["old"]),
        ({"since": timedelta(hours=1)}, ["running", "new"]),  # those not ended yet
    ],
)
def test_a_window_keeps_the_jobs_alive_in_it(week, alice, read, window, names):
    now = timezone.now()
    query = "&".join(f"{k}={zulu(now + offset)}" for k, offset in window.items())

    assert read(alice, query) == expected(week, *names)


@pytest.mark.parametrize("read", [api_ids, portal_ids])
def test_a_time_from_now_is_read_by_the_servers_clock(week, alice, read, monkeypatch):
    # The server's clock a day ahead: its "now-1d" is the caller's now, so the job that failed
    # an hour ago has ended before it (by the caller's clock it would be in).
    later = timezone.now() + DAY
    monkeypatch.setattr("jobs.fields.timezone.now", lambda: later)

    assert read(alice, "since=now-1d") == expected(week, "running", "new")
    assert read(alice, "since=now-2d&until=now-1d") == expected(week, "failed", "running", "new")


def test_a_state_and_a_window_give_what_failed_in_it(week, alice):
    since = zulu(timezone.now() - DAY)

    assert api_ids(alice, f"state=failed&since={since}") == [week["failed"].pk]


def test_a_day_is_read_from_its_midnight_utc(alpha, alice):
    midnight = datetime(2026, 12, 5, tzinfo=UTC)
    before = lived(
        JobFactory(tenant=alpha, owner=alice), midnight - DAY, midnight - timedelta(seconds=1)
    )
    after = lived(JobFactory(tenant=alpha, owner=alice), midnight - DAY, midnight)

    assert api_ids(alice, "since=2026-12-05") == [after.pk]
    assert api_ids(alice, "until=2026-12-05") == [after.pk, before.pk]


def test_a_folded_batch_is_listed_when_one_of_its_shards_lived_in_the_window(alpha, alice):
    first = batch(alice, alpha, PriorityClassFactory(name="normal"), shards=3, limit=None)
    now = timezone.now()
    for shard in Job.objects.filter(pk__gte=first.pk, tenant=alpha):
        lived(shard, now - 3 * DAY, now - 2 * DAY)
    last = Job.objects.filter(tenant=alpha).order_by("pk").last()
    lived(last, now - 3 * DAY, now - timedelta(hours=1))

    assert api_ids(alice, f"fold=1&since={zulu(now - DAY)}") == [first.pk]
    assert api_ids(alice, f"fold=1&since={zulu(now - timedelta(minutes=1))}") == []


@pytest.mark.parametrize(
    ("query", "field", "said"),
    [
        ("since=yesterday", "since", "a day, 2026-12-03, from 00:00 UTC, or a time from now"),
        ("since=2026-13-01", "since", "a day, 2026-12-03, from 00:00 UTC, or a time from now"),
        ("until=2026-12-05T08:00:00", "until", "No time zone"),
        ("since=2026-12-05&until=2026-12-05", "until", "Not after since"),
        ("until=2999-01-01", "until", "More than ten years ahead."),
    ],
)
def test_a_time_it_cannot_read_is_a_400_naming_it(alice, query, field, said):
    client = APIClient()
    client.force_authenticate(alice)

    answer = client.get(f"/api/v1/jobs/?{query}")

    assert answer.status_code == 400
    assert list(answer.json()) == [field] and said in answer.json()[field][0]


def test_the_portal_keeps_the_window_typed_and_marks_one_at_fault(week, alice):
    client = Client()
    client.force_login(alice)

    kept = client.get("/?since=2026-12-05&until=2026-12-06T00:00:00Z").content.decode()
    refused = client.get("/?since=soon")
    none = client.get("/?until=2000-01-01").content.decode()

    assert 'name="since" value="2026-12-05"' in kept
    assert 'name="until" value="2026-12-06T00:00:00Z"' in kept
    assert "No jobs match." in none  # not "No jobs yet."
    assert refused.status_code == 400
    assert re.search(r'name="since" value="soon"[^>]*class="invalid" data-field="since"',
                     refused.content.decode())  # fmt: skip


def test_the_cli_lists_what_failed_in_the_last_day(mlsched, week):  # noqa: F811
    status, out, err = mlsched("list", "--state", "failed", "--since", "now-1d")
    wrong = mlsched("list", "--since", "now-1w")

    assert status == 0, err
    assert [int(line.split()[0]) for line in out.splitlines()] == [week["failed"].pk]
    assert wrong[0] == 2 and "not now+N[s|m|h|d], now-N nor a time: 'now-1w'" in wrong[2]
