"""The lines of a job's log that hold a text, in any case: `?grep=` on the logs endpoint and the
download, beside `worker` and `attempt`, and the CLI's `logs --grep` (the job page's box:
tests/e2e/test_log_filters_page.py)."""

import pytest

from jobs import api as api_module
from jobs.models import LogChunk
from tests.factories import AttemptFactory, JobFactory
from tests.jobs.test_batch_cancel import api
from tests.jobs.test_cli import run_cli
from tests.jobs.test_cli_batch_logs import token  # noqa: F401 (a fixture)
from tests.jobs.test_log_filters import gang, read, texts  # noqa: F401 (gang: a fixture)

pytestmark = pytest.mark.django_db


def test_grep_keeps_the_lines_holding_the_text_in_any_case(gang, alice):  # noqa: F811
    assert texts(read(alice, gang, "grep=LOSS")) == [(2, 1, "loss 1"), (2, 1, "loss 2")]


def test_grep_narrows_a_worker_an_attempt_and_the_tail_and_its_earlier(gang, alice):  # noqa: F811
    ranked = texts(read(alice, gang, "grep=up&worker=2"))
    tail = read(alice, gang, "grep=loss&attempt=2&last=1").json()
    whole = read(alice, gang, "grep=loss&attempt=2&last=2").json()

    assert ranked == [(1, 2, "up")]
    assert [line["text"] for line in tail["lines"]] == ["loss 2"] and tail["earlier"] is True
    assert [line["text"] for line in whole["lines"]] == ["loss 1", "loss 2"]
    assert whole["earlier"] is False  # the lines without it do not count


def test_paging_on_from_the_last_match_keeps_the_text(gang, alice):  # noqa: F811
    first = read(alice, gang, "grep=loss").json()["lines"][0]["id"]

    assert texts(read(alice, gang, f"grep=loss&after={first}")) == [(2, 1, "loss 2")]


def last_line(job) -> int:
    return LogChunk.objects.filter(attempt__job=job).latest("pk").pk


@pytest.mark.parametrize("query", ["grep=nothing holds this", "grep=up", "worker=0",
                                   "grep=loss&last=5"])  # fmt: skip
def test_a_narrowed_read_goes_on_from_the_last_line_stored_not_the_last_match(gang, alice, query):  # noqa: F811
    """A poll for a text nothing new holds does not read the log again from the last match."""
    stored = last_line(gang)

    assert read(alice, gang, query).json()["next"] == stored
    attempt = gang.attempts.get(number=2)
    LogChunk.objects.create(attempt=attempt, worker=0, seq=1, text="up and nothing holds this")
    follow = read(alice, gang, f"{query}&after={stored}").json()
    assert follow["next"] == last_line(gang)
    assert [line["text"] for line in follow["lines"]] == (
        [] if query == "grep=loss&last=5" else ["up and nothing holds this"]
    )


def test_a_narrowed_page_that_is_full_goes_on_from_its_last_line(gang, alice, monkeypatch):  # noqa: F811
    monkeypatch.setattr(api_module, "PAGE_LINES", 1)
    first = read(alice, gang, "grep=again").json()  # two lines of the second attempt hold it
    second = read(alice, gang, f"grep=again&after={first['next']}").json()
    third = read(alice, gang, f"grep=again&after={second['next']}").json()

    assert [line["text"] for line in first["lines"] + second["lines"]] == ["again", "again"]
    assert first["next"] == first["lines"][0]["id"] < second["next"] == second["lines"][0]["id"]
    assert (third["lines"], third["next"]) == ([], last_line(gang))


def test_the_texts_like_wildcards_are_read_as_written(alpha, alice):
    attempt = AttemptFactory(job=JobFactory(tenant=alpha, owner=alice))
    for seq, text in enumerate(["100% done", "10 done", "a_b", "axb"]):
        LogChunk.objects.create(attempt=attempt, seq=seq, text=text)

    assert [t for *_, t in texts(read(alice, attempt.job, "grep=0%25"))] == ["100% done"]
    assert [t for *_, t in texts(read(alice, attempt.job, "grep=a_b"))] == ["a_b"]


def test_an_empty_grep_keeps_every_line(gang, alice):  # noqa: F811
    assert len(texts(read(alice, gang, "grep="))) == 7


def test_the_download_holds_the_matching_lines_alone_and_says_so_in_its_name(alpha, alice):
    job = JobFactory(tenant=alpha, owner=alice, workers=2)
    attempt = AttemptFactory(job=job)
    LogChunk.objects.create(attempt=attempt, worker=0, seq=0, text="step 1\nloss 3\nstep 2")
    LogChunk.objects.create(attempt=attempt, worker=1, seq=0, text="Loss 4")

    response = read(alice, job, "grep=loss", "logs.txt")

    # A stored chunk of several lines gives the lines of it that hold the text.
    assert b"".join(response.streaming_content) == b"[rank 0] loss 3\n[rank 1] Loss 4\n"
    assert response["Content-Disposition"] == f'attachment; filename="job-{job.pk}-grep.log"'


@pytest.mark.parametrize("path", ["logs/", "logs.txt"])
def test_a_text_over_200_characters_is_a_400_naming_grep(gang, alice, path):  # noqa: F811
    response = read(alice, gang, "grep=" + "x" * 201, path)

    assert response.status_code == 400
    assert response.json() == {"grep": ["At most 200 characters."]}


def test_a_nul_is_a_400_naming_grep(gang, alice):  # noqa: F811
    response = api(alice).get(f"/api/v1/jobs/{gang.pk}/logs/?grep=a%00b")

    assert response.status_code == 400 and "grep" in response.json()


@pytest.mark.django_db(transaction=True)
def test_the_cli_prints_the_lines_holding_the_text(live_server, token, gang):  # noqa: F811
    out = run_cli(live_server.url, token, "logs", str(gang.pk), "--grep", "Loss", "--tail", "1")
    every = run_cli(live_server.url, token, "logs", str(gang.pk), "--grep", "loss")

    assert out.stdout == "[2.1] loss 2\n"
    assert every.stdout == "[2.1] loss 1\n[2.1] loss 2\n"
