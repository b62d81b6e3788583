"""The command line's `submit --max-running N`, `shard-limit ID N|none` and `status`, run in
this process: its HTTP requests are answered by the app itself (no server, no subprocess)."""

import io
import json
import sys
from urllib.parse import urlencode

import pytest
import requests

from jobs.cli.client import Api
from jobs.cli.main import main
from jobs.models import Job
from tests.jobs.test_batch_cancel import api
from tests.jobs.test_batch_shard_limit import BODY, batch, limits

pytestmark = pytest.mark.django_db


@pytest.fixture
def mlsched(alice, monkeypatch, capsys):
    """Runs the command line as Alice: (exit status, standard output, standard error)."""
    client = api(alice)

    def send(_api, method: str, path: str, **kwargs) -> requests.Response:
        query = f"?{urlencode(kwargs['params'])}" if kwargs.get("params") else ""
        body = json.dumps(kwargs["json"]) if "json" in kwargs else ""
        answer = client.generic(method, f"/api/v1/{path}{query}", body, "application/json")
        response = requests.Response()
        response.status_code, response._content = answer.status_code, answer.content
        response.headers.update(dict(answer.items()))
        return response

    monkeypatch.setattr(Api, "send", send)
    monkeypatch.setenv("MLSCHED_TOKEN", "in-process")

    def run(*args: str, stdin: str = "") -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        try:
            status = main(list(args))
        except SystemExit as error:  # an error: its message, or argparse's usage
            status = error.code if isinstance(error.code, int) else 1
            if isinstance(error.code, str):
                print(error.code, file=sys.stderr)
        out = capsys.readouterr()
        return status, out.out, out.err

    return run


def test_submit_sends_max_running_and_status_shows_it(mlsched, normal_priority):
    status, out, err = mlsched(
        "submit", "-", "--max-running", "3", stdin=json.dumps({**BODY, "shards": 8})
    )

    assert status == 0, err
    first = Job.objects.get(pk=int(out.split()[0]))
    assert (first.batch().count(), limits(first)) == (8, {3})
    shown = json.loads(mlsched("status", str(first.pk))[1])
    assert (shown["shards"], shown["max_running_shards"]) == (8, 3)


def test_submit_refuses_max_running_that_is_no_whole_number_above_0(mlsched, normal_priority):
    status, _, err = mlsched("submit", "-", "--max-running", "0", stdin=json.dumps(BODY))

    assert status == 2 and "--max-running" in err
    assert not Job.objects.exists()


def test_submit_with_max_running_for_a_single_job_names_the_field(mlsched, normal_priority):
    status, _, err = mlsched("submit", "-", "--max-running", "2", stdin=json.dumps(BODY))

    assert status == 1 and "error 400" in err and "max_running_shards" in err
    assert not Job.objects.exists()


def test_shard_limit_changes_a_batchs_limit_and_none_removes_it(
    mlsched, alice, alpha, normal_priority
):
    first = batch(alice, alpha, normal_priority, shards=4)

    raised = mlsched("shard-limit", str(first.pk), "5")
    assert raised[0] == 0, raised[2]
    assert raised[1].strip() == (
        f"batch {first.pk}: at most 5 of its shards running at once (4 shards)"
    )
    assert limits(first) == {5}

    removed = mlsched("shard-limit", str(first.pk), "none")
    said = f"batch {first.pk}: no limit on its shards running at once (4 shards)"
    assert removed[1].strip() == said
    assert limits(first) == {None}


def test_shard_limit_refuses_what_is_no_limit_and_a_job_of_no_batch(
    mlsched, alice, alpha, normal_priority
):
    first = batch(alice, alpha, normal_priority, shards=4)
    single = batch(alice, alpha, normal_priority, shards=1, limit=None)

    zero = mlsched("shard-limit", str(first.pk), "0")
    lone = mlsched("shard-limit", str(single.pk), "2")

    assert zero[0] == 2 and "N|none" in zero[2]
    assert lone[0] == 1 and "is not a batch" in lone[2]
    assert limits(first) == {2}


def test_the_help_lists_shard_limit_and_max_running(mlsched):
    status, out, _ = mlsched("--help")

    assert status == 0
    assert "\n    shard-limit ID N|none" in out
    assert "--max-running N" in out
