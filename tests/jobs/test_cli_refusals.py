"""What the command line refuses before any request, and how it says a refusal, the server's
or its own: in one short line naming what is wrong, never a traceback nor a wait without end
(tests/jobs/test_cli_bad_input.py sweeps every command for them)."""

import contextlib
import json
import subprocess
import sys

import pytest

from jobs.cli.main import main
from jobs.cli.written import job_description
from tests.jobs.test_cli import Canned, answering, run_cli
from tests.processes import ROOT

NOWHERE = "http://127.0.0.1:9"  # no server: what is refused here is refused before a request


def laughs(levels: int) -> str:
    """YAML whose aliases name aliases, nine at each level: 9**levels strings expanded."""
    lines = ["a0: &a0 [" + ", ".join(["lol"] * 9) + "]"]
    lines += [f"a{n}: &a{n} [" + ", ".join([f"*a{n - 1}"] * 9) + "]" for n in range(1, levels)]
    return "\n".join(lines) + "\n"


def test_a_job_file_whose_yaml_aliases_expand_to_billions_is_refused_at_once(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(laughs(10))

    out = run_cli(NOWHERE, "t", "submit", str(path))

    assert out.returncode == 1
    assert out.stderr == (f"{path}: not a readable job description: over 100,000 values once "
                          "its YAML's aliases are expanded\n")  # fmt: skip


def test_yaml_aliases_naming_a_few_values_again_are_read_as_written():
    text = "name: train\nenv: &env {A: '1'}\nlabels: *env\n"

    assert job_description(text) == {"name": "train", "env": {"A": "1"}, "labels": {"A": "1"}}


@pytest.mark.parametrize(("text", "said"), [
    ("name: !!binary aGk=\n", "a value JSON has no kind for: b'hi'"),
    ("name: !!set {a}\n", "a value JSON has no kind for: {'a'}"),
    ("begin: !!timestamp 2026-01-01\n", "a value JSON has no kind for: datetime.date(2026, 1, 1)"),
    ("? !!timestamp 2026-01-01\n: x\n", "a key JSON has no kind for: datetime.date(2026, 1, 1)"),
    ("gpus: .nan\n", "nan is no number JSON has"),
    ('{"gpus": NaN}', "nan is no number JSON has"),
    ('{"gpus": 1e400}', "inf is no number JSON has"),
    ('{"env": ' + "[" * 101 + "]" * 101 + "}", "nested too deep"),
])  # fmt: skip
def test_a_job_file_value_no_json_body_carries_is_refused_naming_it(text, said):
    with pytest.raises(ValueError) as refused:
        job_description(text)

    assert str(refused.value) == said


def test_submit_refuses_a_yaml_value_json_has_no_kind_for_in_one_line(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("name: train\nenv: !!set {a}\n")

    out = run_cli(NOWHERE, "t", "submit", str(path))

    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert out.stderr == (f"{path}: not a readable job description: a value JSON has no kind "
                          "for: {'a'}\n")  # fmt: skip


def run_bytes(*args: str | bytes) -> subprocess.CompletedProcess:
    """The command line given words as a shell gives them: bytes, whatever they hold."""
    env = {"MLSCHED_URL": NOWHERE, "MLSCHED_TOKEN": "t", "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "jobs.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip


@pytest.mark.parametrize(("args", "named"), [
    (["list", "--name", b"eval-\xff"], "argument --name: not UTF-8 text: 'eval-\\udcff'"),
    (["label", "7", b"team=caf\xe9"], "argument KEY=VALUE: not UTF-8 text: 'caf\\udce9'"),
    (["members", b"\xffalpha"], "argument TENANT: not UTF-8 text: '\\udcffalpha'"),
])  # fmt: skip
def test_text_that_is_not_utf8_is_refused_naming_its_argument(args, named):
    out = run_bytes(*args)

    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.splitlines()[-1].endswith(f"error: {named}")


def test_a_file_named_in_bytes_that_are_not_utf8_is_read_all_the_same(tmp_path):
    out = run_bytes("submit", bytes(tmp_path) + b"/job-\xff.json")  # no such file

    assert out.returncode == 1
    assert "not a readable job description: [Errno 2] No such file" in out.stderr


@pytest.mark.parametrize("option", [["list", "--limit"], ["queue", "--limit"],
                                    ["resize", "7", "--gpus"]])  # fmt: skip
def test_a_number_past_2_63_is_refused_before_any_request(option):
    out = run_cli(NOWHERE, "t", *option, str(2**63))

    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.splitlines()[-1].endswith(
        f"error: argument {option[-1]}: '{2**63}' is past the largest number taken, 2**63-1"
    )


def test_a_parsers_error_quotes_what_it_was_given_cut_short():
    out = run_cli(NOWHERE, "t", "status", "x" * 70_000)

    said = out.stderr.splitlines()[-1]
    assert out.returncode == 2
    assert said.startswith("mlsched status: error: argument id: invalid int value: 'xxx")
    assert said.endswith(" characters more)") and len(said) < 1100


class Answering(Canned):
    """A server answering every request with `code`, `body` of `kind`, keeping the paths
    asked for."""

    code, body, kind, paths = 404, b"", "text/html", []

    def do_GET(self):
        # The body read first: a request answered unread may end in a reset connection.
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.paths.append(self.path)
        self.reply(self.code, self.body, self.kind)

    do_POST = do_GET


@contextlib.contextmanager
def answers(code: int, body: bytes, kind: str):
    """Such a server, running: its URL, and the paths it is asked for."""
    paths: list[str] = []
    handler = type("Handler", (Answering,), {"code": code, "body": body, "kind": kind,
                                             "paths": paths})  # fmt: skip
    with answering(handler) as url:
        yield url, paths


def test_an_html_error_page_is_said_by_its_status_alone():
    page = b"<!doctype html>\n<html>\n<title>Not Found</title>\n<h1>Not Found</h1>\n</html>\n"
    with answers(404, page, "text/html") as (url, _):
        out = run_cli(url, "t", "status", "-1")

    assert (out.returncode, out.stderr) == (1, "error 404: Not Found\n")


def test_a_long_refusal_is_cut_short_saying_how_much_more_there_was():
    body = json.dumps({"tenant": [f"No tenant '{'x' * 70_000}'."]}).encode()
    with answers(400, body, "application/json") as (url, _):
        out = run_cli(url, "t", "quota", "--tenant", "x" * 10)

    assert out.returncode == 1
    assert out.stderr.startswith('error 400: {"tenant": ["No tenant \'xxx')
    assert out.stderr.endswith(" characters more)\n") and len(out.stderr) < 1100


def test_a_refusal_in_text_on_several_lines_is_said_on_one():
    with answers(502, b"upstream connect error\nor disconnect\n", "text/plain") as (url, _):
        out = run_cli(url, "t", "whoami")

    assert (out.returncode, out.stderr) == (1, "error 502: upstream connect error or disconnect\n")


@pytest.mark.parametrize(("args", "path"), [
    (["pause", "../jobs/5/cancel", "--reason", "x"],
     "/api/v1/tenants/..%2Fjobs%2F5%2Fcancel/pause/"),
    (["cordon", "east", "gpu/7?x#y"], "/api/v1/nodes/east/gpu%2F7%3Fx%23y/cordon/"),
])  # fmt: skip
def test_a_team_or_node_name_is_sent_as_one_segment_of_the_path_whatever_it_holds(args, path):
    with answers(404, b'{"detail": "Not found."}', "application/json") as (url, paths):
        out = run_cli(url, "t", *args)

    assert out.returncode == 1
    assert paths == [path]


# Each argument sent as a segment of the API's path, in a command's line: NAME where it goes.
PATH_NAMED = [["members", "NAME"], ["member-add", "NAME", "bob"], ["member-set", "NAME", "bob",
              "owner"], ["member-set", "alpha", "NAME", "owner"], ["member-remove", "NAME", "bob"],
              ["member-remove", "alpha", "NAME"], ["secrets", "NAME"],
              ["secret-set", "NAME", "HF_TOKEN"], ["secret-set", "alpha", "NAME"],
              ["secret-delete", "NAME", "HF_TOKEN"], ["secret-delete", "alpha", "NAME"],
              ["cordon", "NAME", "gpu-a"], ["drain", "east", "NAME"], ["uncordon", "east", "NAME"],
              ["pause", "NAME", "--reason", "x"], ["resume", "NAME"]]  # fmt: skip


@pytest.mark.parametrize("line", PATH_NAMED, ids=" ".join)
@pytest.mark.parametrize("name", ["", ".", "..", "..."])
def test_a_name_sent_in_the_path_that_is_empty_or_dots_alone_is_refused_by_the_parser(
    line, name, capsys
):
    with pytest.raises(SystemExit) as exit:
        main([name if word == "NAME" else word for word in line])

    assert exit.value.code == 2
    assert f"{name!r} cannot be sent as a name: not empty nor dots alone" in capsys.readouterr().err


def test_a_secret_named_dot_dot_is_refused_before_any_request():
    with answers(204, b"", "application/json") as (url, paths):
        out = run_cli(url, "t", "secret-delete", "alpha", "..")

    assert (out.returncode, paths) == (2, [])
    assert "argument NAME: '..' cannot be sent as a name" in out.stderr
