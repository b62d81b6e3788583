"""The command line as scripts use it: an error exits non-zero with one line on stderr, a
success exits 0, whatever reads its output; `--help` says what each command does."""

import json
import subprocess
import sys

import pytest
import requests

from jobs.cli.client import MAX_UNAVAILABLE_RETRIES, asked_again, retry_after
from jobs.models import Job
from quotas.tokens import create_token, revoke_token
from tests.factories import JobFactory
from tests.jobs.test_cli import Canned, answering, run_cli
from tests.processes import ROOT

pytestmark = pytest.mark.django_db(transaction=True)

COMMANDS = ["submit", "depend", "list", "status", "queue", "spec", "wait", "cancel", "hold",
            "release", "resubmit", "logs", "usage", "quota", "priority", "shard-limit"]  # fmt: skip


@pytest.mark.parametrize("url", ["http://[::1", "mlsched.example.com:8000", "ftp://mlsched"])
def test_an_mlsched_url_that_is_no_http_address_is_named_in_one_line(url):
    out = run_cli(url, "t", "list")

    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert "travels unencrypted" not in out.stderr
    assert f"MLSCHED_URL {url!r} is not an http:// or https:// address" in out.stderr


def test_a_revoked_token_exits_non_zero_naming_mlsched_token(live_server, alice):
    token, key = create_token(alice, "laptop")
    revoke_token(token, by=alice)

    out = run_cli(live_server.url, key, "list")

    assert out.returncode == 1
    assert out.stdout == ""
    assert "error 401" in out.stderr and "MLSCHED_TOKEN" in out.stderr


def test_list_piped_into_a_reader_that_stops_early_ends_quietly(live_server, alice, alpha):
    JobFactory.create_batch(120, tenant=alpha, owner=alice)  # more than a pipe's buffer holds
    _, key = create_token(alice, "cli tests")
    env = {"MLSCHED_URL": live_server.url, "MLSCHED_TOKEN": key, "PATH": "/usr/bin:/bin"}
    # As `mlsched list | head -1`: the reader goes away after one line.
    listing = subprocess.Popen([sys.executable, "-m", "jobs.cli", "list"], cwd=ROOT, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    listing.stdout.readline()
    listing.stdout.close()

    assert listing.wait(60) == 141  # as a Unix tool ended by SIGPIPE: 128 + 13
    assert listing.stderr.read() == b""


class ThrottledOnce(Canned):
    """An API that refuses the first request with 429 and Retry-After: 1, then answers."""

    answered = 0

    def do_GET(self):
        type(self).answered += 1
        if type(self).answered == 1:
            body = b'{"detail": "Request was throttled. Expected available in 1 second."}'
            self.reply(429, body, **{"Retry-After": "1"})
        else:
            body = b'{"jobs": [{"id": 7, "state": "queued", "family": "evaluation", ' \
                   b'"owner": "alice", "workers": 1, "gpus": 0, "gpu_milli": 250, ' \
                   b'"name": "eval", "pending_reason": ""}], "next": null}'  # fmt: skip
            self.reply(200, body)


@pytest.fixture
def throttled_once():
    handler = type("Handler", (ThrottledOnce,), {"answered": 0})
    with answering(handler) as url:
        yield url, handler


def test_a_429_is_waited_out_as_retry_after_says_and_the_command_goes_on(throttled_once):
    url, handler = throttled_once

    out = run_cli(url, "t", "list")

    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[:2] == ["7", "queued"]
    assert "rate limited: asking again in 1 s" in out.stderr
    assert handler.answered == 2


def test_a_429_with_a_long_retry_after_exits_at_once_saying_when(live_server, alice, settings):
    settings.MLSCHED_API_RATE = "1/hour"
    _, key = create_token(alice, "cli tests")
    run_cli(live_server.url, key, "list")

    out = run_cli(live_server.url, key, "list")

    assert out.returncode == 1
    assert "error 429" in out.stderr and "3600 seconds" in out.stderr
    assert "asking again" not in out.stderr


class LostItsDatabaseOnce(Canned):
    """An API whose first answer is a 503 with Retry-After: 1 (its database lost partway), then
    answers; it keeps the bodies it is sent."""

    bodies: list = []

    def do_POST(self):
        self.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        if len(self.bodies) == 1:
            body = b'{"detail": "The database did not answer: try again in a few seconds."}'
            self.reply(503, body, **{"Retry-After": "1"})
        else:
            self.reply(201, b'{"id": 8, "state": "queued"}')


def test_a_503_is_asked_again_after_retry_after_and_a_submission_is_not_made_twice(tmp_path):
    handler = type("Handler", (LostItsDatabaseOnce,), {"bodies": []})
    spec = tmp_path / "job.json"
    spec.write_text(json.dumps({"tenant": "alpha", "name": "eval", "image": "python:3.11"}))
    with answering(handler) as url:
        out = run_cli(url, "t", "submit", str(spec))

    assert (out.returncode, out.stdout) == (0, "8 queued\n"), out.stderr
    assert "the server is unavailable: asking again in 1 s" in out.stderr
    first, second = handler.bodies
    assert first == second and first["idempotency_key"].startswith("cli-")


@pytest.mark.parametrize(("code", "header", "in_a_row", "again"), [
    (503, "5", 0, True), (503, "5", MAX_UNAVAILABLE_RETRIES - 1, True),
    (503, "5", MAX_UNAVAILABLE_RETRIES, False),  # then an error
    (503, None, 0, False),  # a proxy's, saying nothing of when: an error at once
    (429, "5", MAX_UNAVAILABLE_RETRIES, True), (500, "5", 0, False),
])  # fmt: skip
def test_a_503_is_asked_again_a_few_times_in_a_row_at_most(code, header, in_a_row, again):
    response = requests.Response()
    response.status_code = code
    if header:
        response.headers["Retry-After"] = header

    assert (asked_again(response, in_a_row) is not None) == again


def test_help_names_every_command_with_what_it_does():
    out = subprocess.run([sys.executable, "-m", "jobs.cli", "--help"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)  # fmt: skip

    assert out.returncode == 0
    for command in COMMANDS:
        assert f"\n    {command}" in out.stdout, command
    assert "MLSCHED_URL" in out.stdout and "MLSCHED_TOKEN" in out.stdout


@pytest.mark.parametrize("command", ["list", "cancel"])
def test_a_commands_help_says_what_state_takes(command):
    out = subprocess.run([sys.executable, "-m", "jobs.cli", command, "--help"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)  # fmt: skip

    assert out.returncode == 0
    assert "queued" in out.stdout.split("--state", 1)[1]


def test_an_unknown_state_in_list_exits_non_zero_naming_it(live_server, alice):
    _, key = create_token(alice, "cli tests")

    out = run_cli(live_server.url, key, "list", "--state", "sleeping")

    assert out.returncode != 0 and out.stdout == ""
    assert "state" in out.stderr and "Traceback" not in out.stderr


def test_status_of_a_job_that_is_not_there_exits_non_zero(live_server, alice):
    _, key = create_token(alice, "cli tests")

    out = run_cli(live_server.url, key, "status", "999999")

    assert out.returncode == 1 and out.stdout == ""
    assert "error 404" in out.stderr
    assert not Job.objects.exists()


def test_list_batch_lists_the_shards_of_one_batch(live_server, alice, alpha):
    batch = JobFactory(tenant=alpha, owner=alice, family="batch_inference", shards=3)
    shards = [JobFactory(tenant=alpha, owner=alice, parent=batch, shards=3, shard_index=i)
              for i in (1, 2)]  # fmt: skip
    JobFactory(tenant=alpha, owner=alice, name="other")
    _, key = create_token(alice, "cli tests")

    out = run_cli(live_server.url, key, "list", "--batch", str(batch.pk))

    assert out.returncode == 0, out.stderr
    listed = [int(row.split()[0]) for row in out.stdout.splitlines()]
    assert listed == [shards[1].pk, shards[0].pk, batch.pk]


@pytest.mark.parametrize(
    ("header", "want"), [("7", 7), ("0", 1), ("99999", None), ("9" * 5000, None), ("1e3", None)]
)
def test_retry_after_is_read_as_a_short_whole_number_of_seconds_only(header, want):
    response = requests.Response()
    response.headers["Retry-After"] = header

    assert retry_after(response) == want


def test_the_cli_runs_without_django_installed():
    # Any import of django fails, as on a laptop with the CLI's requirements alone.
    script = ("import sys; sys.modules['django'] = None; sys.argv = ['mlsched', '--help']; "
              "from jobs.cli.main import main; main()")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)  # fmt: skip

    assert out.returncode == 0, out.stderr
    assert "status ID [--json]" in out.stdout
