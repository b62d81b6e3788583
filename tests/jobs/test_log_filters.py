"""One worker's and one attempt's lines of a job's log: `?worker=` (a rank) and `?attempt=`
(an attempt's number) on the logs endpoint and the download, as kubectl logs reads one pod."""

import pytest
from rest_framework.test import APIClient

from jobs.models import LogChunk
from tests.factories import AttemptFactory, JobFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def gang(alpha, alice):
    """A 3-worker job: its first attempt lost after a line from each rank, its second live."""
    job = JobFactory(tenant=alpha, owner=alice, workers=3)
    first = AttemptFactory(job=job, number=1, outcome="lost")
    second = AttemptFactory(job=job, number=2)
    for attempt, texts in ((first, ["up", "up", "up"]), (second, ["again", "loss 1", "again"])):
        for rank, text in enumerate(texts):
            LogChunk.objects.create(attempt=attempt, worker=rank, seq=0, text=text)
    LogChunk.objects.create(attempt=second, worker=1, seq=1, text="loss 2")
    return job


def read(user, job, query: str, path: str = "logs/"):
    client = APIClient()
    client.force_authenticate(user)
    return client.get(f"/api/v1/jobs/{job.pk}/{path}?{query}")


def texts(response) -> list[tuple[int, int, str]]:
    return [(line["attempt"], line["worker"], line["text"]) for line in response.json()["lines"]]


def test_worker_keeps_one_ranks_lines_of_every_attempt(gang, alice):
    assert texts(read(alice, gang, "worker=1")) == [
        (1, 1, "up"), (2, 1, "loss 1"), (2, 1, "loss 2")
    ]  # fmt: skip


def test_attempt_keeps_one_attempts_lines_of_every_worker(gang, alice):
    assert texts(read(alice, gang, "attempt=2")) == [
        (2, 0, "again"), (2, 1, "loss 1"), (2, 2, "again"), (2, 1, "loss 2")
    ]  # fmt: skip


def test_both_narrow_the_tail_and_say_whether_lines_were_left_out(gang, alice):
    tail = read(alice, gang, "attempt=2&worker=1&last=1").json()
    whole = read(alice, gang, "attempt=2&worker=1&last=2").json()

    assert [line["text"] for line in tail["lines"]] == ["loss 2"] and tail["earlier"] is True
    assert [line["text"] for line in whole["lines"]] == ["loss 1", "loss 2"]
    assert whole["earlier"] is False


def test_paging_on_from_the_last_line_seen_keeps_the_worker(gang, alice):
    first = read(alice, gang, "worker=1").json()["lines"][0]["id"]
    rest = texts(read(alice, gang, f"worker=1&after={first}"))

    assert rest == [(2, 1, "loss 1"), (2, 1, "loss 2")]


def test_an_attempt_the_job_never_had_has_no_lines(gang, alice):
    assert read(alice, gang, "attempt=7").json() == {"lines": [], "next": 0}


@pytest.mark.parametrize(
    ("query", "field", "message"),
    [
        ("worker=3", "worker", "A worker's rank: 0 to 2."),
        ("worker=-1", "worker", "A worker's rank: a whole number."),
        ("worker=one", "worker", "A worker's rank: a whole number."),
        ("attempt=2.0", "attempt", "An attempt's number: a whole number."),
    ],
)
@pytest.mark.parametrize("path", ["logs/", "logs.txt"])
def test_a_rank_the_job_has_not_or_no_number_is_a_400_naming_it(
    gang, alice, query, field, message, path
):
    response = read(alice, gang, query, path)

    assert response.status_code == 400
    assert response.json() == {field: [message]}


def test_a_single_workers_job_has_rank_0_alone(alpha, alice):
    job = JobFactory(tenant=alpha, owner=alice)

    response = read(alice, job, "worker=1")

    assert response.status_code == 400 and response.json() == {"worker": ["A worker's rank: 0."]}


def test_the_download_of_one_worker_has_its_lines_alone_without_their_rank(gang, alice):
    response = read(alice, gang, "worker=1", "logs.txt")

    assert b"".join(response.streaming_content) == b"up\nloss 1\nloss 2\n"
    assert response["Content-Disposition"] == f'attachment; filename="job-{gang.pk}-rank-1.log"'


def test_the_download_of_one_attempt_keeps_each_lines_rank(gang, alice):
    response = read(alice, gang, "attempt=1", "logs.txt")

    assert b"".join(response.streaming_content) == b"[rank 0] up\n[rank 1] up\n[rank 2] up\n"
    assert response["Content-Disposition"] == f'attachment; filename="job-{gang.pk}-attempt-1.log"'


def test_another_tenants_job_stays_a_404_whatever_is_asked(gang, charlie):
    assert read(charlie, gang, "worker=9").status_code == 404
