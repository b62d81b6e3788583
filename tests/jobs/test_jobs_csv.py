"""The job list as a CSV file (Slurm's sacct --parsable), `/jobs.csv`: the jobs the list's
filters match, every shard its own row, newest first, streamed; a bad filter is a 400 naming
it; a cell a spreadsheet would run as a formula is written as text."""

import csv
import io

import pytest
from django.test import Client

from jobs import actions
from jobs.states import State
from tests.factories import JobFactory, PriorityClassFactory
from tests.jobs.test_batch_cancel import SPEC

pytestmark = pytest.mark.django_db


def download(user, query: str = ""):
    client = Client()
    client.force_login(user)
    answer = client.get(f"/jobs.csv{query}")
    if answer.status_code != 200:
        return answer, []
    text = b"".join(answer.streaming_content).decode()
    return answer, list(csv.DictReader(io.StringIO(text)))


def test_it_lists_the_filtered_jobs_shards_and_all_newest_first(alice, alpha, charlie, gamma):
    PriorityClassFactory(name="normal", value=0)
    failed = JobFactory(tenant=alpha, owner=alice, name="=HYPERLINK(1)", state=State.FAILED,
                        labels={"project": "llm"})  # fmt: skip
    first, _ = actions.submit(alice, alpha, {**SPEC, "shards": 2,
                                             "priority_class": PriorityClassFactory()})  # fmt: skip
    JobFactory(tenant=gamma, owner=charlie)  # another team's

    answer, rows = download(alice)
    _, queued = download(alice, "?state=queued")

    assert answer["Content-Disposition"].startswith('attachment; filename="jobs-')
    assert [int(r["id"]) for r in rows] == sorted([failed.pk, *first.batch().values_list(
        "pk", flat=True)], reverse=True)  # fmt: skip
    assert [(r["batch"], r["shard"]) for r in rows[:2]] == [
        (str(first.pk), "1"), (str(first.pk), "0")]  # fmt: skip
    last = rows[-1]
    assert (last["name"], last["tenant"], last["owner"], last["state"]) == (
        "'=HYPERLINK(1)", "alpha", "alice", "failed"
    )  # fmt: skip
    assert last["labels"] == '{"project": "llm"}' and last["shard"] == ""
    assert {r["state"] for r in queued} == {"queued"} and len(queued) == 2


def test_a_bad_filter_is_a_400_naming_it(alice, alpha):
    answer, _ = download(alice, "?state=sleeping&held=maybe")

    assert answer.status_code == 400
    assert answer.content.decode().splitlines()[0].startswith("state: One of")
    assert "held:" in answer.content.decode()


def test_the_list_links_it_with_its_filters(alice, alpha):
    client = Client()
    client.force_login(alice)

    page = client.get("/?state=queued&mine=1").content.decode()

    assert 'href="/jobs.csv?state=queued&amp;mine=1"' in page
