"""The log download: a job's whole output as one text file, streamed batch by batch."""

import re

import pytest
from django.db import connection
from django.test import AsyncClient
from django.test.utils import CaptureQueriesContext
from guardian.shortcuts import assign_perm
from rest_framework.test import APIClient

from jobs.models import LogChunk
from quotas.tokens import create_token
from tests.factories import AttemptFactory, JobFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def job(alpha, alice):
    return JobFactory(tenant=alpha, owner=alice)


def write(attempt, *texts, worker=0):
    start = LogChunk.objects.filter(attempt=attempt, worker=worker).count()
    for seq, text in enumerate(texts, start):
        LogChunk.objects.create(attempt=attempt, worker=worker, seq=seq, text=text)


def download(user, job, **headers):
    client = APIClient()
    client.force_authenticate(user)
    return client.get(f"/api/v1/jobs/{job.pk}/logs.txt", headers=headers)


def test_it_streams_the_whole_log_as_a_text_file_named_for_the_job(job, alice):
    first = AttemptFactory(job=job, number=1, outcome="lost")
    second = AttemptFactory(job=job, number=2)
    write(first, "epoch 1", "lost the node")
    write(second, "resuming\nepoch 2")  # a chunk holding two lines

    response = download(alice, job)

    assert response.status_code == 200 and response.streaming
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    assert response["Content-Disposition"] == f'attachment; filename="job-{job.pk}.log"'
    assert b"".join(response.streaming_content) == b"epoch 1\nlost the node\nresuming\nepoch 2\n"


def test_with_several_workers_each_line_starts_with_its_workers_rank(job, alice):
    job.workers = 2
    job.save()
    attempt = AttemptFactory(job=job)
    write(attempt, "rank zero up", worker=0)
    write(attempt, "loss 0.3\nloss 0.2\n", worker=1)

    body = b"".join(download(alice, job).streaming_content).decode()

    assert body == "[rank 0] rank zero up\n[rank 1] loss 0.3\n[rank 1] loss 0.2\n"


def test_it_reads_the_rows_in_id_order_a_batch_at_a_time_as_it_streams(job, alice, monkeypatch):
    monkeypatch.setattr("jobs.api.LOG_BATCH", 2)
    attempt = AttemptFactory(job=job)
    write(attempt, *[f"line {n}" for n in range(5)])

    with CaptureQueriesContext(connection) as queries:
        pieces = iter(download(alice, job).streaming_content)
        first = next(pieces)
        read_for_the_first = len(log_reads(queries))
        rest = list(pieces)

    assert first == b"line 0\nline 1\n"
    assert b"".join(rest) == b"line 2\nline 3\nline 4\n"
    assert read_for_the_first == 1
    ids = list(LogChunk.objects.order_by("pk").values_list("pk", flat=True))
    # Each read starts after the last row of the one before, in id order (column 1: the id).
    reads = [KEYSET.search(sql) for sql in log_reads(queries)]
    assert [int(read[1]) for read in reads] == [0, ids[1], ids[3]]


KEYSET = re.compile(r'"id" > (\d+)\) ORDER BY 1 ASC LIMIT 2$')


def log_reads(queries) -> list[str]:
    return [q["sql"] for q in queries.captured_queries if 'FROM "jobs_logchunk"' in q["sql"]]


def test_other_jobs_lines_are_not_in_the_download(job, alpha, alice):
    write(AttemptFactory(job=job), "mine")
    write(AttemptFactory(job=JobFactory(tenant=alpha, owner=alice)), "not mine")

    assert b"".join(download(alice, job).streaming_content) == b"mine\n"


def test_a_job_without_output_downloads_an_empty_file(job, alice):
    AttemptFactory(job=job)

    response = download(alice, job)

    assert response.status_code == 200
    assert b"".join(response.streaming_content) == b""


def test_another_tenants_job_log_is_a_404(job, charlie):
    write(AttemptFactory(job=job), "secret")

    assert download(charlie, job).status_code == 404


def test_a_view_grant_downloads_the_log_as_it_reads_the_logs_endpoint(job, charlie):
    write(AttemptFactory(job=job), "shared")
    assign_perm("jobs.view_job", charlie, job)

    response = download(charlie, job)

    assert response.status_code == 200
    assert b"".join(response.streaming_content) == b"shared\n"


def test_a_cancel_grant_alone_does_not_download_the_log(job, charlie):
    assign_perm("jobs.cancel_job", charlie, job)

    assert download(charlie, job).status_code == 404


def test_a_client_accepting_only_plain_text_gets_the_log_and_its_errors(job, alice, charlie):
    write(AttemptFactory(job=job), "hello")

    mine = download(alice, job, Accept="text/plain")
    theirs = download(charlie, job, Accept="text/plain")

    assert mine.status_code == 200
    assert b"".join(mine.streaming_content) == b"hello\n"
    assert theirs.status_code == 404


def test_a_personal_api_token_downloads_the_log(job, alice):
    write(AttemptFactory(job=job), "hello")
    _, key = create_token(alice, "scripts")

    response = APIClient().get(
        f"/api/v1/jobs/{job.pk}/logs.txt", headers={"Authorization": f"Token {key}"}
    )

    assert response.status_code == 200


def test_the_job_page_links_to_the_log_download(client, job, alice):
    client.force_login(alice)

    page = client.get(f"/jobs/{job.pk}/")

    assert f'href="/api/v1/jobs/{job.pk}/logs.txt" download>Download log<' in page.text


@pytest.fixture
def logged(job):
    write(AttemptFactory(job=job), "over asgi")
    return job


@pytest.mark.django_db(transaction=True)  # the batches are read in asgiref's own thread
async def test_under_asgi_it_streams_from_an_async_iterator_not_a_list(logged, alice):
    client = AsyncClient()
    await client.aforce_login(alice)

    response = await client.get(f"/api/v1/jobs/{logged.pk}/logs.txt")

    assert response.status_code == 200
    assert response.is_async  # Django would read a sync iterator into a list before sending
    assert b"".join([piece async for piece in response.streaming_content]) == b"over asgi\n"
