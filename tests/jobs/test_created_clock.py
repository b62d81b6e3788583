"""A job's creation time is the database's, as every time one host writes and another compares.

The queue ages jobs and the 24 h tier wait runs from `Job.created`, against the scheduler's
now (the database's clock): a web host whose clock is off would otherwise move its jobs up or
down the queue. The web host's clock is skewed here around the submission only.
"""

from contextlib import contextmanager
from datetime import datetime, timedelta
from unittest import mock

import pytest
from rest_framework.test import APIClient

from jobs.clock import database_now
from jobs.models import Job
from tests.factories import PriorityClassFactory

pytestmark = pytest.mark.django_db

SKEW = timedelta(minutes=10)
SPEC = {"tenant": "alpha", "name": "eval", "family": "batch_inference", "image": "python:3.11",
        "command": ["python", "infer.py"], "cpu_milli": 1000, "memory_mb": 1000, "gpus": 1,
        "max_runtime_s": 600}  # fmt: skip


@pytest.fixture(autouse=True)
def normal_priority():
    return PriorityClassFactory(name="normal", value=0)


@contextmanager
def web_host_clock(skew: timedelta):
    """This process's clock `skew` off for every reader of `timezone.now`. Patched one level
    down, at the `datetime` it asks: a field's `default=timezone.now` holds the function itself
    and would not see a patched module attribute."""

    class Skewed(datetime):
        @classmethod
        def now(cls, tz=None):
            return datetime.now(tz) + skew

    with mock.patch("django.utils.timezone.datetime", Skewed):
        yield


def submit_through_skewed_web_host(user, skew: timedelta, **changes) -> tuple[dict, tuple]:
    """The submission's answer, and the database's time just before and just after it."""
    client = APIClient()
    client.force_authenticate(user)
    before = database_now()
    with web_host_clock(skew):
        response = client.post("/api/v1/jobs/", {**SPEC, **changes}, format="json")
    after = database_now()
    assert response.status_code == 201, response.content
    return response.json(), (before, after)


@pytest.mark.parametrize("skew", [SKEW, -SKEW], ids=["ahead", "behind"])
def test_a_job_submitted_through_a_skewed_web_host_is_created_on_the_database_clock(alice, skew):
    answer, (before, after) = submit_through_skewed_web_host(alice, skew)

    job = Job.objects.get(pk=answer["id"])
    assert before <= job.created <= after
    assert datetime.fromisoformat(answer["created"]) == job.created  # as the INSERT returned it


def test_a_batchs_shards_submitted_through_a_skewed_web_host_are_created_on_the_database_clock(
    alice,
):
    answer, (before, after) = submit_through_skewed_web_host(alice, SKEW, shards=3)

    shards = Job.objects.get(pk=answer["id"]).batch()
    assert len(shards) == 3
    assert all(before <= shard.created <= after for shard in shards)
