"""The portal's pages as a user works with them: a submission sent twice, a cancel that comes
too late, what a job's page says about the job, and the job list's batches and times."""

import re
from datetime import UTC, datetime

import pytest
from guardian.shortcuts import assign_perm

from jobs import actions
from jobs.models import Attempt, Family, Job, JobEvent
from jobs.states import State
from tests.factories import AttemptFactory, JobFactory, PriorityClassFactory
from tests.jobs.test_portal_submit import FORM


@pytest.fixture
def browser(client, alice):
    """Alice's browser, with the "normal" priority class the form picks by default."""
    PriorityClassFactory(name="normal", value=0)
    client.force_login(alice)
    return client


def form_key(page) -> str:
    return re.search(r'name="form_key" value="([0-9a-f]+)"', page.text).group(1)


def test_a_submit_form_sent_twice_queues_one_job(browser):
    key = form_key(browser.get("/jobs/new/"))

    first = browser.post("/jobs/new/", {**FORM, "form_key": key})
    again = browser.post("/jobs/new/", {**FORM, "form_key": key})  # a double click

    job = Job.objects.get()
    assert first.url == again.url == f"/jobs/{job.pk}/"


def test_the_same_form_changed_and_sent_again_queues_a_second_job(browser):
    key = form_key(browser.get("/jobs/new/"))
    browser.post("/jobs/new/", {**FORM, "form_key": key})

    # Back to the page the browser kept, a field changed, sent again: another job.
    browser.post("/jobs/new/", {**FORM, "name": "llama-eval-2", "form_key": key})

    assert sorted(Job.objects.values_list("name", flat=True)) == ["llama-eval", "llama-eval-2"]


def test_each_submit_form_drawn_has_its_own_key_kept_after_an_error(browser):
    keys = {form_key(browser.get("/jobs/new/")) for _ in range(2)}
    refused = browser.post("/jobs/new/", {**FORM, "cpu_milli": "0", "form_key": "ab12"})

    assert len(keys) == 2
    assert form_key(refused) == "ab12"


def test_canceling_a_job_that_has_ended_says_so_on_its_page(client, alpha, alice):
    job = JobFactory(tenant=alpha, owner=alice, state=State.SUCCEEDED)
    client.force_login(alice)

    page = client.post(f"/jobs/{job.pk}/cancel/")

    assert page.status_code == 409
    assert f"Job #{job.pk} has ended already (succeeded)" in page.context["error"]
    assert 'id="cancel"' not in page.text


def test_a_jobs_page_shows_what_it_asked_for_and_when_it_was_submitted(client, alpha, alice):
    job = JobFactory(
        tenant=alpha, owner=alice, gpu_types=["h100", "a100"], cluster_selector={"region": "eu"},
        preemptible=True, max_runtime_s=7200, max_retries=5, retries_used=2,
        created=datetime(2024, 3, 1, 9, 30, tzinfo=UTC),
    )  # fmt: skip
    client.force_login(alice)

    facts = client.get(f"/jobs/{job.pk}/").text

    assert re.search(r"<dt>GPU types</dt><dd>h100, a100</dd>", facts)
    assert "<dt>Cluster selector</dt><dd><code>region=eu</code></dd>" in facts
    assert "<dt>Preemptible</dt><dd>yes</dd>" in facts
    assert '<dt>Runtime limit</dt><dd id="runtime-limit">2 h (7200 s)</dd>' in facts
    assert "<dt>Retries</dt><dd>2 of at most 5</dd>" in facts
    assert "<dt>Submitted</dt><dd>2024-03-01 09:30:00 UTC by alice</dd>" in facts


def test_an_attempts_times_carry_their_day(client, alpha, alice):
    job = JobFactory(tenant=alpha, owner=alice, state=State.FAILED)
    AttemptFactory(job=job, outcome=Attempt.Outcome.USER_ERROR,
                   started_at=datetime(2024, 3, 1, 23, 0, tzinfo=UTC),
                   ended_at=datetime(2024, 3, 3, 1, 0, tzinfo=UTC))  # fmt: skip
    client.force_login(alice)

    page = client.get(f"/jobs/{job.pk}/").text

    assert "<th>Started (UTC)</th>" in page
    assert "<td>2024-03-01 23:00:00</td><td>2024-03-03 01:00:00</td>" in page


def test_the_job_list_says_its_times_are_utc(client, alpha, alice):
    JobFactory(tenant=alpha, owner=alice)
    client.force_login(alice)

    assert "<th>Submitted (UTC)</th>" in client.get("/").text


def test_the_job_list_narrows_to_a_batchs_shards_linked_from_its_page(client, alpha, alice):
    batch = JobFactory(tenant=alpha, owner=alice, family=Family.BATCH_INFERENCE, shards=3)
    shards = [JobFactory(tenant=alpha, owner=alice, family=Family.BATCH_INFERENCE, shards=3,
                         parent=batch, shard_index=i) for i in (1, 2)]  # fmt: skip
    JobFactory(tenant=alpha, owner=alice, name="other")
    client.force_login(alice)

    listed = client.get(f"/?batch={batch.pk}")
    page = client.get(f"/jobs/{batch.pk}/").text

    assert [j.pk for j in listed.context["jobs"]] == [shards[1].pk, shards[0].pk, batch.pk]
    assert f'href="/?batch={batch.pk}"' in page


def test_a_bad_batch_in_the_job_list_is_a_400_naming_it(client, alpha, alice):
    client.force_login(alice)

    page = client.get("/?batch=x")

    assert page.status_code == 400
    assert 'data-field="batch"' in page.text


def test_an_older_page_of_the_job_list_links_back_to_the_newest(client, alpha, alice):
    jobs = JobFactory.create_batch(3, tenant=alpha, owner=alice)
    client.force_login(alice)

    older = client.get(f"/?state=queued&before={jobs[-1].pk}").text
    newest = client.get("/?state=queued").text

    assert '<a id="newest" href="?state=queued">Newest jobs</a>' in older
    assert 'id="newest"' not in newest


def test_the_job_page_lists_its_history_newest_first_without_the_teams_ids_for_an_outsider(
    client, alpha, alice, charlie
):
    job = JobFactory(tenant=alpha, owner=alice)
    actions.hold(job, "alice")
    JobEvent.objects.create(job=job, from_state="queued", to_state="queued",
                            reason="dependencies afterok:9876, set by alice")  # fmt: skip
    assign_perm("jobs.view_job", charlie, job)

    client.force_login(alice)
    own = client.get(f"/jobs/{job.pk}/").text
    client.force_login(charlie)
    outsider = client.get(f"/jobs/{job.pk}/").text

    history = own[own.index('id="history"') :]
    assert history.index("afterok:9876") < history.index("held by alice")
    assert "afterok:..." in outsider and "9876" not in outsider
