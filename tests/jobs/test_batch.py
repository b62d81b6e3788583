"""A batch inference submission is M shard jobs; its first shard stands for the whole batch."""

import re

import pytest
from django.test import Client
from rest_framework.test import APIClient

from jobs import actions
from jobs.models import Attempt, Family, Job
from jobs.states import State
from tests.factories import AttemptFactory, PriorityClassFactory

pytestmark = pytest.mark.django_db

SPEC = {
    "name": "embed", "family": Family.BATCH_INFERENCE, "image": "i", "command": ["x"],
    "cpu_milli": 1000, "memory_mb": 1000, "gpus": 1, "max_runtime_s": 60, "shards": 4,
}  # fmt: skip


@pytest.fixture
def batch(alice, alpha):
    first, _ = actions.submit(alice, alpha, {**SPEC, "priority_class": PriorityClassFactory()})
    return first


def shards(batch) -> list[Job]:
    return list(batch.batch())


def api(user):
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_canceling_the_batch_cancels_every_shard_and_stops_a_running_one(alice, batch):
    running = shards(batch)[2]
    Job.objects.filter(pk=running.pk).update(state=State.RUNNING)
    attempt = AttemptFactory(job=running)

    response = api(alice).post(f"/api/v1/jobs/{batch.pk}/cancel/")

    assert response.status_code == 202
    assert {job.state for job in shards(batch)} == {State.CANCELED}
    attempt.refresh_from_db()
    assert attempt.stop_reason == Attempt.Outcome.CANCELED


def test_canceling_one_other_shard_cancels_only_it(alice, batch):
    one = shards(batch)[3]

    api(alice).post(f"/api/v1/jobs/{one.pk}/cancel/")

    assert [job.state for job in shards(batch)] == [State.QUEUED] * 3 + [State.CANCELED]


def test_a_batch_whose_first_shard_ended_still_cancels_the_rest(alice, batch):
    Job.objects.filter(pk=batch.pk).update(state=State.SUCCEEDED)

    response = api(alice).post(f"/api/v1/jobs/{batch.pk}/cancel/")

    assert response.status_code == 202
    assert [job.state for job in shards(batch)] == [State.SUCCEEDED] + [State.CANCELED] * 3


def test_the_batch_answers_with_its_shards_counted_by_state(alice, batch):
    Job.objects.filter(pk=shards(batch)[1].pk).update(state=State.RUNNING)

    body = api(alice).get(f"/api/v1/jobs/{batch.pk}/").json()

    assert body["shard_states"] == {State.QUEUED: 3, State.RUNNING: 1}
    assert "shard_states" not in api(alice).get(f"/api/v1/jobs/{shards(batch)[1].pk}/").json()


def test_the_listing_filters_one_batchs_shards(alice, alpha, batch):
    other, _ = actions.submit(alice, alpha, {**SPEC, "shards": 1,
                                             "priority_class": batch.priority_class})  # fmt: skip

    listed = api(alice).get("/api/v1/jobs/", {"batch": batch.pk}).json()["jobs"]

    assert sorted(job["id"] for job in listed) == [job.pk for job in shards(batch)]
    assert other.pk not in [job["id"] for job in listed]
    assert api(alice).get("/api/v1/jobs/", {"batch": "x"}).status_code == 400


def test_the_batch_page_counts_its_shards(alice, batch):
    client = Client()
    client.force_login(alice)

    page = client.get(f"/jobs/{batch.pk}/").content.decode()

    shards = re.search(r'<span id="shards">(.*?)</span>', page).group(1)
    assert re.sub(r"<[^>]+>", "", shards) == "4: 4 queued (cancel stops them all)"


def test_the_batch_page_says_its_attempts_and_log_are_its_first_shards(alice, batch):
    client = Client()
    client.force_login(alice)

    page = client.get(f"/jobs/{batch.pk}/").content.decode()
    shard = client.get(f"/jobs/{shards(batch)[1].pk}/").content.decode()

    assert page.count('<small class="of-shard">of shard 0</small>') == 2  # attempts, log
    assert f'each shard\'s page has its own (<a href="/?batch={batch.pk}">' in page
    assert "of-shard" not in shard


def test_the_batch_page_offers_cancel_while_a_shard_lives(alice, batch):
    client = Client()
    client.force_login(alice)
    Job.objects.filter(pk=batch.pk).update(state=State.SUCCEEDED)

    live = client.get(f"/jobs/{batch.pk}/").content.decode()
    Job.objects.filter(parent=batch).update(state=State.CANCELED)
    done = client.get(f"/jobs/{batch.pk}/").content.decode()

    assert 'id="cancel"' in live
    assert 'id="cancel"' not in done
