"""The command line against a live server, as a user would run it."""

import contextlib
import http.server
import json
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime
from types import SimpleNamespace

import pytest

from jobs import actions, api, cycle
from jobs.cli import commands as cli_module
from jobs.cli import written
from jobs.models import Job, LogChunk
from jobs.states import State
from quotas.tokens import create_token
from tests.factories import AttemptFactory, JobFactory, PriorityClassFactory
from tests.processes import ROOT, on_a_terminal

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def cli(live_server, alice):
    PriorityClassFactory(name="normal", value=0)
    _, token = create_token(alice, "cli tests")

    def run(*args, stdin=None):
        env = {"MLSCHED_URL": live_server.url, "MLSCHED_TOKEN": token, "PATH": "/usr/bin:/bin"}
        done = subprocess.run([sys.executable, "-m", "jobs.cli", *args], cwd=ROOT, env=env,
                              input=stdin, capture_output=True, text=True, timeout=60)  # fmt: skip
        return done

    run.token = token
    return run


SPEC = {"tenant": "alpha", "name": "eval-bert", "family": "evaluation", "image": "python:3.11",
        "command": ["python", "eval.py"], "cpu_milli": 2000, "memory_mb": 4000, "gpus": 0,
        "gpu_milli": 500, "max_runtime_s": 600}  # fmt: skip


def test_the_cli_submits_lists_shows_and_cancels_a_job(cli):
    submitted = cli("submit", "-", stdin=json.dumps(SPEC))
    job_id = int(submitted.stdout.split()[0])

    listed = cli("list")
    shown = json.loads(cli("status", str(job_id)).stdout)
    canceled = cli("cancel", str(job_id))

    assert submitted.returncode == 0, submitted.stderr
    assert f"{job_id}  queued" in listed.stdout and "eval-bert" in listed.stdout
    assert (shown["id"], shown["gpu_milli"]) == (job_id, 500)
    assert canceled.stdout.strip() == State.CANCELED
    assert Job.objects.get(pk=job_id).state == State.CANCELED


def test_the_cli_cancels_jobs_by_ids_and_by_filters_asking_until_none_are_left(
    cli, alpha, alice, monkeypatch
):
    JobFactory.create_batch(3, tenant=alpha, owner=alice, name="sweep")
    others = [JobFactory(tenant=alpha, owner=alice, name="other") for _ in range(2)]
    monkeypatch.setattr("jobs.api.MAX_CANCELED", 2)  # the live server runs in this process

    by_name = cli("cancel", "--name", "sweep", "--state", "queued")
    by_ids = cli("cancel", str(others[0].pk), str(others[1].pk), "--mine")
    again = cli("cancel", "--name", "sweep")

    assert by_name.stdout.strip() == "canceled 3 jobs", by_name.stderr
    assert by_ids.stdout.strip() == "canceled 2 jobs", by_ids.stderr
    assert again.stdout.strip() == "canceled 0 jobs"
    assert {j.state for j in Job.objects.all()} == {State.CANCELED}


def test_the_cli_holds_and_releases_a_queued_job(cli, alpha, alice):
    job = JobFactory(tenant=alpha, owner=alice)

    held = cli("hold", str(job.pk))
    job.refresh_from_db()
    assert (held.returncode, held.stdout.strip(), job.held) == (0, "held 1 job", "user")

    released = cli("release", str(job.pk))
    again = cli("release", str(job.pk))
    job.refresh_from_db()
    assert (released.stdout.strip(), job.held) == ("released 1 job", "")
    assert again.returncode != 0 and "is not held" in again.stderr


def test_the_cli_list_shows_each_jobs_submitter_and_the_gpus_it_asks(cli, alpha, alice, bob):
    gang = JobFactory(tenant=alpha, owner=alice, name="gang", workers=4, gpus=8)
    probe = JobFactory(tenant=alpha, owner=bob, name="probe", gpus=0, gpu_milli=250)
    tokenize = JobFactory(tenant=alpha, owner=bob, name="tokenize", gpus=0)

    listed = cli("list").stdout.splitlines()
    rows = {int(row.split()[0]): [*row.split()[3:5], row.split()[6]] for row in listed}

    assert rows[gang.pk] == ["alice", "4x8", "gang"]
    assert rows[probe.pk] == ["bob", "250m", "probe"]
    assert rows[tokenize.pk] == ["bob", "none", "tokenize"]


def test_the_cli_lists_every_page_of_jobs_newest_first_or_stops_at_the_limit(cli, alpha, alice):
    ids = [job.pk for job in JobFactory.create_batch(250, tenant=alpha, owner=alice)]  # 3 pages

    listed = cli("list")
    limited = cli("list", "--limit", "3")

    assert listed.returncode == 0, listed.stderr
    assert [int(row.split()[0]) for row in listed.stdout.splitlines()] == ids[::-1]
    assert [int(row.split()[0]) for row in limited.stdout.splitlines()] == ids[:-4:-1]


def test_logs_tail_prints_the_last_lines_and_follows_on_from_them(cli, alpha, alice):
    job = JobFactory(tenant=alpha, owner=alice, state=State.FAILED)
    attempt = AttemptFactory(job=job, outcome="user_error")
    for seq in range(10):
        LogChunk.objects.create(attempt=attempt, seq=seq, text=f"line {seq}")

    tail = cli("logs", str(job.pk), "--tail", "3")
    followed = cli("logs", str(job.pk), "--tail", "3", "-f")  # ended: the tail, and no more
    whole = cli("logs", str(job.pk), "--tail", "10")
    refused = cli("logs", str(job.pk), "--tail", "0")

    assert tail.stdout.splitlines() == ["[1.0] line 7", "[1.0] line 8", "[1.0] line 9"]
    assert "earlier ones left out" in tail.stderr
    assert followed.returncode == 0 and followed.stdout == tail.stdout
    assert len(whole.stdout.splitlines()) == 10 and "left out" not in whole.stderr
    assert refused.returncode == 2 and "from 1 to 5000" in refused.stderr


def test_the_cli_and_the_api_take_the_same_longest_tail():
    assert written.MAX_TAIL == api.MAX_TAIL


def test_the_cli_prints_a_jobs_logs(cli, alpha, alice):
    job_id = int(cli("submit", "-", stdin=json.dumps(SPEC)).stdout.split()[0])
    attempt = AttemptFactory(job=Job.objects.get(pk=job_id))
    LogChunk.objects.create(attempt=attempt, seq=0, text="accuracy 0.91")
    LogChunk.objects.create(attempt=attempt, seq=1, stream="stderr", text="warning: slow")

    out = cli("logs", str(job_id))

    assert out.stdout.strip() == "[1.0] accuracy 0.91"
    assert out.stderr.strip() == "[1.0] warning: slow"


def test_the_cli_prints_one_workers_lines_of_one_attempt(cli, alpha, alice):
    job_id = int(cli("submit", "-", stdin=json.dumps(SPEC)).stdout.split()[0])
    job = Job.objects.get(pk=job_id)
    job.workers = 2
    job.save()
    for number in (1, 2):
        attempt = AttemptFactory(job=job, number=number, outcome="lost" if number == 1 else "")
        for rank in (0, 1):
            LogChunk.objects.create(attempt=attempt, worker=rank, seq=0, text=f"{number}/{rank}")

    rank_1 = cli("logs", str(job_id), "--worker", "1")
    second = cli("logs", str(job_id), "--attempt", "2", "--worker", "0")
    refused = cli("logs", str(job_id), "--worker", "2")

    assert rank_1.stdout.splitlines() == ["[1.1] 1/1", "[2.1] 2/1"]
    assert second.stdout.splitlines() == ["[2.0] 2/0"]
    assert refused.returncode == 1 and "worker" in refused.stderr and "0 to 1" in refused.stderr


def test_list_heads_its_columns_on_a_terminal_alone_and_says_why_a_job_failed(
    cli, live_server, alpha, alice
):
    job = JobFactory(tenant=alpha, owner=alice, name="eval")
    for state, reason in (("scheduled", "placed"), ("running", "attempt 1 running"),
                          ("failed", "worker 0 exited with code 3")):  # fmt: skip
        actions.transition(job, state, reason)
    env = {"MLSCHED_URL": live_server.url, "MLSCHED_TOKEN": cli.token, "PATH": "/usr/bin:/bin"}
    status, written, errors = on_a_terminal([sys.executable, "-m", "jobs.cli", "list"], env)
    shown = written.splitlines()
    piped = cli("list").stdout.splitlines()

    assert status == 0, errors
    assert shown[0].split() == ["ID", "STATE", "FAMILY", "OWNER", "GPUS", "TIME", "NAME"]
    assert shown[1:] == piped
    assert piped == [
        f"{job.pk:>8}  failed     training         alice        1             "
        "0:00 eval  (worker 0 exited with code 3)"
    ]  # ran for under a second


def test_list_narrows_to_a_team_a_name_and_ones_own_jobs(cli, alpha, alice, bob):
    mine = JobFactory(tenant=alpha, owner=alice, name="llama-train")
    bobs = JobFactory(tenant=alpha, owner=bob, name="LLAMA-eval")
    JobFactory(tenant=alpha, owner=alice, name="mmlu")

    def listed(*args):
        return [int(row.split()[0]) for row in cli("list", *args).stdout.splitlines()]

    assert listed("--name", "llama") == [bobs.pk, mine.pk]
    assert listed("--name", "llama", "--mine") == [mine.pk]
    assert listed("--tenant", "alpha", "--name", "eval") == [bobs.pk]
    assert listed("--tenant", "nobody") == []


def test_the_cli_resubmits_an_ended_job_as_a_new_one_and_refuses_a_live_one(cli):
    job_id = int(cli("submit", "-", stdin=json.dumps(SPEC)).stdout.split()[0])
    live = cli("resubmit", str(job_id))
    cli("cancel", str(job_id))

    resubmitted = cli("resubmit", str(job_id))

    assert live.returncode != 0 and "error 409" in live.stderr and "still queued" in live.stderr
    assert resubmitted.returncode == 0, resubmitted.stderr
    again_id, state = resubmitted.stdout.split()
    assert state == State.QUEUED
    assert Job.objects.get(pk=int(again_id)).resubmitted_from_id == job_id


def test_the_cli_submits_a_job_that_waits_for_another(cli):
    first = int(cli("submit", "-", stdin=json.dumps(SPEC)).stdout.split()[0])

    submitted = cli("submit", "-", stdin=json.dumps({**SPEC, "depends_on": [first]}))
    refused = cli("submit", "-", stdin=json.dumps({**SPEC, "depends_on": [first, first]}))

    assert submitted.returncode == 0, submitted.stderr
    job_id = int(submitted.stdout.split()[0])
    assert json.loads(cli("status", str(job_id)).stdout)["depends_on"] == [first]
    assert list(Job.objects.get(pk=job_id).depends_on.values_list("pk", flat=True)) == [first]
    assert refused.returncode != 0 and "depends_on" in refused.stderr


def test_the_cli_submits_with_slurms_dependency_option_singleton_included(cli):
    first = int(cli("submit", "-", stdin=json.dumps(SPEC)).stdout.split()[0])

    submitted = cli("submit", "-", "--dependency", f"afterany:{first},singleton",
                    stdin=json.dumps(SPEC))  # fmt: skip

    assert submitted.returncode == 0, submitted.stderr
    shown = json.loads(cli("status", submitted.stdout.split()[0]).stdout)
    assert (shown["dependencies"], shown["singleton"]) == (
        [{"id": first, "kind": "afterany"}], True
    )  # fmt: skip


def test_the_cli_submits_with_a_begin_two_hours_from_now_and_shows_the_job_deferred(cli):
    before = int(time.time())
    submitted = cli("submit", "-", "--begin", "now+2h", stdin=json.dumps(SPEC))
    after = time.time()
    cycle.run_cycle()

    assert submitted.returncode == 0, submitted.stderr
    job = Job.objects.get(pk=int(submitted.stdout.split()[0]))
    assert before + 7200 <= job.begin.timestamp() <= after + 7200
    shown = json.loads(cli("status", str(job.pk)).stdout)
    assert datetime.fromisoformat(shown["begin"]) == job.begin
    # Seconds are said only when the time has some (a begin can land on a whole minute).
    when = f"{job.begin:%Y-%m-%d %H:%M}" + (f":{job.begin:%S}" if job.begin.second else "")
    assert (shown["pending_reason"], shown["pending_message"]) == (
        "deferred", f"Deferred until {when} UTC (begin)."
    )  # fmt: skip
    assert f"{job.pk}  queued" in (listed := cli("list").stdout) and "(deferred)" in listed


def test_the_cli_refuses_a_begin_it_cannot_read_and_passes_the_rest_to_the_server(cli):
    unreadable = cli("submit", "-", "--begin", "now+2w", stdin=json.dumps(SPEC))
    zoneless = cli("submit", "-", "--begin", "2026-12-03T02:00", stdin=json.dumps(SPEC))

    assert unreadable.returncode == 2 and "--begin" in unreadable.stderr
    assert zoneless.returncode == 1 and "begin" in zoneless.stderr
    assert "UTC is expected" in zoneless.stderr
    assert not Job.objects.exists()


def test_the_cli_replaces_a_queued_jobs_dependencies_then_removes_them(cli):
    first, job = (int(cli("submit", "-", stdin=json.dumps(SPEC)).stdout.split()[0])
                  for _ in range(2))  # fmt: skip

    changed = cli("depend", str(job), f"afternotok:{first},singleton")
    refused = cli("depend", str(job), str(job))
    removed = cli("depend", str(job), "")

    assert changed.returncode == 0, changed.stderr
    assert changed.stdout.strip() == f"{job} afternotok:{first},singleton"
    assert refused.returncode != 0 and "cannot wait for itself" in refused.stderr
    assert removed.stdout.strip() == f"{job} none"
    assert not Job.objects.get(pk=job).depends_on.exists()


def test_the_cli_reports_a_refused_submission(cli):
    out = cli("submit", "-", stdin=json.dumps({**SPEC, "cpu_milli": 0}))

    assert out.returncode != 0
    assert "cpu_milli" in out.stderr


def test_the_cli_says_what_is_wrong_with_a_job_file_in_one_line(cli, tmp_path):
    broken = tmp_path / "job.json"
    broken.write_text('{"name": "unfinished"')

    for path in (str(broken), str(tmp_path / "missing.json")):
        out = cli("submit", path)
        assert out.returncode != 0
        assert out.stderr.strip().startswith(f"{path}: not a readable job description")
        assert len(out.stderr.strip().splitlines()) == 1
        assert "Traceback" not in out.stderr


@pytest.mark.parametrize(("text", "said"), [
    ("[" * 5000, "nested too deep"),
    ("name: train\nenv: " + "[" * 5000, "nested too deep"),
    ("name: &loop [*loop]\n", "its YAML holds itself"),
])  # fmt: skip
def test_a_job_file_nested_too_deep_or_holding_itself_is_refused_in_one_line(
    cli, tmp_path, text, said
):
    path = tmp_path / "job.yaml"
    path.write_text(text)

    out = cli("submit", str(path))

    assert out.returncode != 0
    assert out.stderr.strip() == f"{path}: not a readable job description: {said}" + (
        " (an alias inside what it names)" if "itself" in said else ""
    )


def test_the_cli_says_when_it_cannot_reach_the_server():
    env = {"MLSCHED_URL": "http://127.0.0.1:9", "MLSCHED_TOKEN": "t", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-m", "jobs.cli", "list"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=60)  # fmt: skip

    assert out.returncode != 0
    assert out.stderr.startswith("cannot reach http://127.0.0.1:9/api/v1/ (MLSCHED_URL)")
    assert "Traceback" not in out.stderr


class Canned(http.server.BaseHTTPRequestHandler):
    """A server of the tests' own, answering as each subclass says (`reply`), quietly."""

    def reply(self, code: int, body: bytes, content_type="application/json", **headers) -> None:
        self.send_response(code)
        for header, value in {"Content-Type": content_type, **headers}.items():
            self.send_header(header, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def answering(handler: type[Canned]):
    """The handler's server, running, at its URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


class Answers(Canned):
    """What a wrong MLSCHED_URL answers: a redirect (to https) or a login page."""

    redirect = True

    def do_GET(self):
        if self.redirect:
            self.reply(301, b"", Location="https://mlsched.example/api/v1/jobs/")
        else:
            self.reply(200, b"<html><body>Please log in</body></html>", "text/html")

    do_POST = do_GET


@pytest.fixture(params=[True, False], ids=["redirect", "login page"])
def wrong_server(request):
    with answering(type("Handler", (Answers,), {"redirect": request.param})) as url:
        yield url, request.param


def run_cli(url: str, token: str, *args):
    env = {"MLSCHED_URL": url, "MLSCHED_TOKEN": token, "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-m", "jobs.cli", *args], cwd=ROOT, env=env,
                         capture_output=True, timeout=60)  # fmt: skip
    # Decoded here: text mode would turn a carriage return the CLI wrote into a newline.
    out.stdout, out.stderr = out.stdout.decode(), out.stderr.decode()
    return out


def test_the_cli_says_in_one_line_when_mlsched_url_is_not_the_api(wrong_server, tmp_path):
    url, redirect = wrong_server
    spec = tmp_path / "job.json"
    spec.write_text(json.dumps(SPEC))

    out = run_cli(url, "t", "submit", str(spec))

    assert out.returncode != 0
    assert "Traceback" not in out.stderr
    expected = "redirects to https://mlsched.example" if redirect else "did not answer as"
    assert expected in out.stderr


def test_the_cli_refuses_a_token_with_characters_no_token_has():
    out = run_cli("http://127.0.0.1:9", "t\u00f6ken", "list")

    assert out.returncode != 0
    assert "MLSCHED_TOKEN" in out.stderr
    assert "Traceback" not in out.stderr


def test_logs_follow_prints_the_lines_a_job_wrote_just_before_it_ended(live_server, alice,
                                                                       alpha, capsys):  # fmt: skip
    job = JobFactory(tenant=alpha, owner=alice, state=State.RUNNING)
    attempt = AttemptFactory(job=job)
    _, token = create_token(alice, "cli tests")

    class EndsBetweenTwoReads(cli_module.Api):
        """The server as it is when the job writes its last line and ends just after a read of
        its log found nothing new, before the CLI asks for its state."""

        def call(self, method, path, **kwargs):
            answer = super().call(method, path, **kwargs)
            if path.endswith("/logs/") and not answer["lines"] and not LogChunk.objects.exists():
                LogChunk.objects.create(attempt=attempt, seq=1, text="Traceback: the last line")
                Job.objects.filter(pk=job.pk).update(state=State.FAILED)
            return answer

    api = EndsBetweenTwoReads(live_server.url, token)
    cli_module.logs(api, SimpleNamespace(id=job.pk, follow=True))

    assert "[1.0] Traceback: the last line" in capsys.readouterr().out


def interruptible() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_leaves_logs_follow_without_a_traceback(cli, live_server, alice):
    job = Job.objects.get(pk=int(cli("submit", "-", stdin=json.dumps(SPEC)).stdout.split()[0]))
    Job.objects.filter(pk=job.pk).update(state=State.RUNNING)
    LogChunk.objects.create(attempt=AttemptFactory(job=job), seq=0, text="epoch 1")
    env = {"MLSCHED_URL": live_server.url, "MLSCHED_TOKEN": cli.token, "PATH": "/usr/bin:/bin"}
    # As from a terminal: Ctrl-C not ignored, whatever the suite was started from (a shell
    # starts background jobs with it ignored, and children inherit that).
    follow = subprocess.Popen([sys.executable, "-m", "jobs.cli", "logs", "-f", str(job.pk)],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, preexec_fn=interruptible)  # fmt: skip
    assert follow.stdout.readline().strip() == "[1.0] epoch 1"  # following the running job

    follow.send_signal(signal.SIGINT)

    assert follow.wait(30) == 130
    assert "Traceback" not in follow.stderr.read()


@pytest.mark.parametrize(
    "url, warned",
    [("http://mlsched.invalid:9", True), ("https://mlsched.invalid:9", False),
     ("http://127.0.0.1:9", False), ("http://localhost:9", False)],
)  # fmt: skip
def test_the_cli_warns_before_it_sends_the_token_over_plain_http_to_another_host(url, warned):
    out = run_cli(url, "t", "list")

    assert ("travels unencrypted" in out.stderr) == warned, out.stderr


def test_the_cli_changes_a_queued_jobs_priority(cli, alpha, alice):
    job = JobFactory(tenant=alpha, owner=alice)
    PriorityClassFactory(name="low", value=-10)

    done = cli("priority", str(job.pk), "--class", "low", "--value", "4")
    refused = cli("priority", str(job.pk), "--class", "nope")

    assert done.stdout.strip() == "priority low +4 for 1 job", done.stderr
    assert refused.returncode != 0 and "priority_class" in refused.stderr
    job.refresh_from_db()
    assert (job.priority_class.name, job.priority) == ("low", 4)
