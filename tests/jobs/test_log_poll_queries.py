"""A log poll (`GET /api/v1/jobs/<id>/logs/`, asked every second while a log is followed)
reads who may see the job, the job's workers, its attempts' ids and the lines: not the
attempts' nodes and dependencies a job's own answer reads."""

import pytest
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from jobs.models import Attempt, Job
from tests.factories import AttemptFactory, JobFactory

pytestmark = pytest.mark.django_db

# Tenants, two guardian reads, the job, its attempts, the last line's id, the lines; the content
# type guardian asks for is read once per process, and a server has it by the first poll.
POLL_QUERIES = 7


def test_a_log_poll_reads_a_few_queries_however_many_attempts_the_job_has(alpha, alice):
    job = JobFactory(tenant=alpha, owner=alice, state="running", workers=2)
    for number in (1, 2, 3):
        outcome = Attempt.Outcome.LOST if number < 3 else ""
        AttemptFactory(job=job, number=number, outcome=outcome)
    client = APIClient()
    client.force_authenticate(alice)
    ContentType.objects.get_for_model(Job)  # read once per process (see POLL_QUERIES)

    with CaptureQueriesContext(connection) as queries:
        answer = client.get(f"/api/v1/jobs/{job.pk}/logs/", {"after": 0, "worker": 1})

    assert answer.status_code == 200
    assert len(queries) <= POLL_QUERIES
    assert not any('FROM "clusters_allocation"' in q["sql"] for q in queries.captured_queries)
