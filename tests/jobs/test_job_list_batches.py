"""The portal's job list folds each batch into one row (its first shard, which stands for it),
its shards counted by state, as Slurm's squeue folds an array's pending tasks; `?batch=` lists
them one by one."""

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from guardian.shortcuts import assign_perm

from jobs import views
from jobs.models import Job
from jobs.states import State
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


def batch(tenant, owner, *states: str, name: str = "embed") -> Job:
    """A batch whose shards are in `states`, shard 0 first."""
    first = JobFactory(tenant=tenant, owner=owner, name=name, family="batch_inference",
                       shards=len(states), shard_index=0, state=states[0])  # fmt: skip
    for index, state in enumerate(states[1:], start=1):
        JobFactory(tenant=tenant, owner=owner, name=name, family="batch_inference",
                   shards=len(states), shard_index=index, parent=first, state=state)  # fmt: skip
    return first


def listed(client, query: str = "") -> dict[int, str]:
    """The list's rows: each job's id and its state cell's text."""
    page = client.get(f"/{query}")
    assert page.status_code == 200
    rows = page.text.split("<tr class=")[1:]
    return {int(re.search(r"<td>(\d+)</td>", row).group(1)): state_text(row) for row in rows}


def state_text(row: str) -> str:
    """The state cell's text, without how long the job has been in it."""
    cell = re.search(r'<span class="state">.*?</td>', row, re.S).group(0)
    cell = re.sub(r'<small class="for".*?</small>', "", cell)
    return " ".join(re.sub(r"<[^>]+>", "", cell.replace("<br>", " ")).split())


def test_a_batch_is_one_row_its_state_the_batchs_and_its_shards_counted(client, alpha, alice):
    single = JobFactory(tenant=alpha, owner=alice, state=State.QUEUED)
    first = batch(alpha, alice, State.SUCCEEDED, State.SUCCEEDED, State.RUNNING, State.QUEUED,
                  State.QUEUED)  # fmt: skip
    client.force_login(alice)

    rows = listed(client)

    assert rows == {
        first.pk: "running 5 shards: 2 queued, 1 running, 2 succeeded",
        single.pk: "queued",
    }
    assert f'href="/?batch={first.pk}"' in client.get("/").text


def test_the_batchs_link_lists_its_shards_one_by_one(client, alpha, alice):
    first = batch(alpha, alice, State.SUCCEEDED, State.FAILED, State.QUEUED)
    client.force_login(alice)

    rows = listed(client, f"?batch={first.pk}")

    assert sorted(rows.values()) == ["failed", "queued", "succeeded"]
    assert set(rows) == set(first.batch().values_list("pk", flat=True))


def test_a_state_asked_lists_the_batches_one_of_whose_shards_is_in_it(client, alpha, alice):
    failed_later = batch(alpha, alice, State.SUCCEEDED, State.FAILED, name="a")
    all_done = batch(alpha, alice, State.SUCCEEDED, State.SUCCEEDED, name="b")
    failed_first = batch(alpha, alice, State.FAILED, State.SUCCEEDED, name="c")
    client.force_login(alice)

    assert set(listed(client, "?state=failed")) == {failed_later.pk, failed_first.pk}
    assert set(listed(client, "?state=succeeded")) == {
        failed_later.pk, all_done.pk, failed_first.pk}  # fmt: skip
    assert listed(client, "?state=running") == {}


def test_held_asked_lists_the_batches_one_of_whose_shards_is_held(client, alpha, alice):
    first = batch(alpha, alice, State.RUNNING, State.QUEUED, State.QUEUED)
    client.force_login(alice)
    assert listed(client, "?held=1") == {}

    Job.objects.filter(parent=first, shard_index=2).update(held="user")

    assert set(listed(client, "?held=1")) == {first.pk}
    assert set(listed(client, "?held=0")) == {first.pk}


def test_a_shard_shared_alone_is_listed_to_whoever_cannot_see_its_batch(
    client, alpha, alice, charlie
):
    first = batch(alpha, alice, State.SUCCEEDED, State.FAILED, State.SUCCEEDED)
    shard = first.batch().get(shard_index=1)
    assign_perm("jobs.view_job", charlie, shard)
    client.force_login(charlie)

    assert listed(client) == {shard.pk: "failed"}

    assign_perm("jobs.view_job", charlie, first)  # the batch too: folded into its row again

    assert set(listed(client)) == {first.pk}


def test_the_shards_of_a_page_of_batches_are_counted_in_one_query(client, alpha, alice):
    batch(alpha, alice, State.RUNNING, State.QUEUED)
    client.force_login(alice)
    client.get("/")  # the session's first reads
    with CaptureQueriesContext(connection) as one:
        client.get("/")
    for n in range(5):
        batch(alpha, alice, State.SUCCEEDED, State.RUNNING, State.QUEUED, name=f"b{n}")

    with CaptureQueriesContext(connection) as six:
        client.get("/")

    assert len(six.captured_queries) == len(one.captured_queries)


def test_older_pages_page_on_by_the_batches_rows(client, alpha, alice, monkeypatch):
    monkeypatch.setattr(views, "PAGE", 2)
    firsts = [batch(alpha, alice, State.SUCCEEDED, State.SUCCEEDED, name=f"b{n}")
              for n in range(3)]  # fmt: skip
    client.force_login(alice)

    newest = listed(client)
    older = listed(client, f"?before={min(newest)}")

    assert set(newest) == {firsts[2].pk, firsts[1].pk}
    assert set(older) == {firsts[0].pk}


def test_a_batch_row_says_why_its_queued_shards_wait(client, alpha, alice):
    first = batch(alpha, alice, State.RUNNING, State.QUEUED, State.QUEUED, State.QUEUED)
    shards = Job.objects.filter(parent=first)
    shards.filter(shard_index__in=(1, 2)).update(pending_reason="batch_shard_limit")
    shards.filter(shard_index=3).update(pending_reason="quota_exceeded")
    client.force_login(alice)

    row = client.get("/").text.split("<tr class=")[1]
    said = " ".join(re.sub(r"<[^>]+>", "", row.split('<span class="shards-waiting">')[1]
                           .split("</span>")[0]).split())  # fmt: skip

    assert said == "Queued shards wait as batch_shard_limit (2), quota_exceeded (1)."
    assert 'title="As many of its batch&#x27;s shards run as the batch lets run at once."' in row


def test_a_shards_page_links_its_batch(client, alpha, alice):
    first = batch(alpha, alice, State.SUCCEEDED, State.FAILED, State.SUCCEEDED)
    shard = first.batch().get(shard_index=1)
    client.force_login(alice)

    page = client.get(f"/jobs/{shard.pk}/").text

    said = re.search(r'<dd id="shard-of">(.*?)</dd>', page).group(1)
    assert said.startswith(f'1 of 3, of batch <a href="/jobs/{first.pk}/">#{first.pk}</a>')
    assert f'href="/?batch={first.pk}"' in said


def test_a_shard_shared_alone_does_not_link_the_batch_its_reader_cannot_see(
    client, alpha, alice, charlie
):
    first = batch(alpha, alice, State.SUCCEEDED, State.FAILED)
    shard = first.batch().get(shard_index=1)
    assign_perm("jobs.view_job", charlie, shard)
    client.force_login(charlie)

    page = client.get(f"/jobs/{shard.pk}/").text

    assert re.search(r'<dd id="shard-of">(.*?)</dd>', page).group(1) == "1 of 2"


def test_a_batchs_row_gives_the_gpus_each_shard_asks(client, alpha, alice):
    first = batch(alpha, alice, State.RUNNING, State.QUEUED)
    Job.objects.filter(pk__in=[first.pk, first.pk + 1]).update(gpus=0, gpu_milli=500)
    single = JobFactory(tenant=alpha, owner=alice, gpus=0, gpu_milli=500)
    client.force_login(alice)

    rows = {int(re.search(r"<td>(\d+)</td>", row).group(1)): row
            for row in client.get("/").text.split("<tr class=")[1:]}  # fmt: skip

    cell = re.compile(r'<td class="gpus">(.*?)</td>', re.S)
    assert re.sub(r"<[^>]+>", "", cell.search(rows[first.pk]).group(1)) == "500m each"
    assert re.sub(r"<[^>]+>", "", cell.search(rows[single.pk]).group(1)) == "500m"


def test_a_live_jobs_row_says_how_long_it_has_been_where_it_is(client, alpha, alice):
    now = timezone.now()
    queued = JobFactory(tenant=alpha, owner=alice, state=State.QUEUED)
    Job.objects.filter(pk=queued.pk).update(created=now - timedelta(minutes=12))
    running = JobFactory(tenant=alpha, owner=alice, state=State.RUNNING,
                         started_at=now - timedelta(hours=3))  # fmt: skip
    ended = JobFactory(tenant=alpha, owner=alice, state=State.SUCCEEDED,
                       started_at=now - timedelta(hours=1))  # fmt: skip
    client.force_login(alice)

    page = client.get("/").text
    rows = {int(re.search(r"<td>(\d+)</td>", row).group(1)): row
            for row in page.split("<tr class=")[1:]}  # fmt: skip

    assert (
        '<small class="for" title="Waited since its submission">for 12 min</small>'
        in rows[queued.pk]
    )
    assert '<small class="for" title="Run since it started">for 3 h</small>' in rows[running.pk]
    assert 'class="for"' not in rows[ended.pk]
