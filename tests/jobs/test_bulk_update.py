"""jobs.bulk.update: many rows' fields set in one statement, each row its own values."""

from datetime import UTC, datetime

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from jobs import bulk
from jobs.models import Attempt, Job
from tests.factories import AttemptFactory, JobFactory

pytestmark = pytest.mark.django_db


def test_each_row_gets_its_own_values_and_the_others_are_left_alone(alpha):
    attempts = [AttemptFactory(job=JobFactory(tenant=alpha)) for _ in range(3)]
    at = datetime(2026, 12, 1, 12, 30, tzinfo=UTC)
    rows = [(attempts[0].pk, 1.5, 100, at), (attempts[1].pk, None, 7, None)]

    with CaptureQueriesContext(connection) as queries:
        bulk.update(Attempt, ["cpu_seconds", "memory_peak_mb", "last_checkpoint_at"], rows)

    found = {a.pk: (a.cpu_seconds, a.memory_peak_mb, a.last_checkpoint_at)
             for a in Attempt.objects.all()}  # fmt: skip
    assert found == {attempts[0].pk: (1.5, 100, at), attempts[1].pk: (None, 7, None),
                     attempts[2].pk: (None, None, None)}  # fmt: skip
    assert len([q for q in queries if q["sql"].startswith("UPDATE")]) == 1


def test_text_fields_take_any_text_and_nothing_is_a_no_op(alpha):
    job = JobFactory(tenant=alpha)

    bulk.update(Job, ["pending_reason", "pending_message"], [(job.pk, "x", "it's 'quoted' %s")])
    bulk.update(Job, ["pending_reason"], [])

    job.refresh_from_db()
    assert (job.pending_reason, job.pending_message) == ("x", "it's 'quoted' %s")
