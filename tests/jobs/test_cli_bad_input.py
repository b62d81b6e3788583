"""The command line given wrong input, argument by argument: every command `build_parser()`
makes, each of its arguments in turn given every kind of wrong value, the others sound, run in
this process against a live server; then each command against servers that refuse it. No run
may end in a traceback: each exits 0, 1 or 2, a refusal with a short message on standard error,
a parser's naming the argument, and the output of --json is JSON."""

import argparse
import contextlib
import functools
import io
import json
import sys
import time
import traceback
from dataclasses import dataclass
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.utils import timezone

from clusters.models import Booking, MaintenanceWindow
from jobs import actions, cycle
from jobs.cli import waiting
from jobs.cli.main import build_parser, main
from jobs.models import Family, Job
from jobs.states import State
from quotas import cli_logins, tenant_secrets
from quotas.tokens import create_token
from tests.factories import JobFactory, NodeFactory, PriorityClassFactory, UserFactory
from tests.jobs.test_cli import Canned, answering

# The live server sees the tests' rows only once committed.
on_the_live_server = pytest.mark.django_db(transaction=True)

# The wrong values each argument is given in turn: nothing, words where numbers are wanted,
# numbers out of every range, times no calendar has, text of 70,000 characters, other scripts
# with a terminal's escape codes, bytes UTF-8 does not decode (as Python reads them from a
# shell: lone surrogates), what a URL's path holds apart, lists and pairs malformed.
WRONG = ["", " ", "x", "-1", "0", "1.5", str(2**63), "9" * 5000, "1e308", "2026-13-45",
         "2026-13-45T25:61:00Z", "now+99999999999d", "now-", "x" * 70_000, "ü名前\x1b[2J",
         "\udcff", "a/b?c#d%ff/../..", ",", "a,,b,", "=", "k=", "=v"]  # fmt: skip
# Of those the command line takes as they are, to send on (a request costs the live server
# ~50 ms), an argument is given one of each kind: text that is empty, a number past 2**63,
# too long for a URL, not ASCII, not UTF-8, or what a URL's path holds apart (naming
# nothing); and, for a time, a day and a time no calendar has, and 1e308. Those the command
# line reads itself (its type refuses them) it is given every one of.
SENT = ["", str(2**63), "x" * 70_000, "ü名前\x1b[2J", "\udcff", "a/b?c#d%ff/../.."]
SENT_AS_TIMES = ["2026-13-45", "2026-13-45T25:61:00Z", "1e308"]
TIME_METAVARS = {"TIME", "YYYY-MM-DD"}

# A sound job description, as `spec` writes one.
SPEC = {"tenant": "alpha", "name": "sweep", "family": "evaluation", "image": "python:3.11",
        "command": ["python", "eval.py"], "cpu_milli": 1000, "memory_mb": 1000, "gpus": 0,
        "max_runtime_s": 600}  # fmt: skip


def laughs(levels: int) -> str:
    """YAML whose aliases name aliases, nine at each level ("billion laughs"): a few hundred
    bytes that are 9**levels strings once expanded."""
    lines = ["a0: &a0 [" + ", ".join(["lol"] * 9) + "]"]
    lines += [f"a{n}: &a{n} [" + ", ".join([f"*a{n - 1}"] * 9) + "]" for n in range(1, levels)]
    return "\n".join(lines) + "\n"


# A job description whose fields are of the wrong kinds.
KINDS_WRONG = {**SPEC, "gpus": "x", "depends_on": "x", "labels": [1], "volumes": {}, "env": None,
               "workers": 2**63}  # fmt: skip

# Job descriptions and teams files that are not what is wanted: no YAML nor JSON, empty, a
# list, a number, nested too deep, holding itself, expanding to billions, bytes no text has,
# numbers JSON has not, values of YAML's own kinds, fields of the wrong kinds.
FILES = {
    "not-yaml.txt": "{: ]\n",
    "empty.json": "",
    "list.json": "[1, 2]",
    "scalar.yaml": "42\n",
    "deep.json": "[" * 5000,
    "deep-closed.json": '{"name": ' + "[" * 900 + "]" * 900 + "}",
    "itself.yaml": "name: &loop [*loop]\n",
    "laughs.yaml": laughs(9),
    "binary": b"\xff\xfe\x00\x01",
    "nan.json": '{"name": NaN}',
    "infinite.json": '{"gpus": 1e400}',
    "bytes.yaml": "name: !!binary aGk=\n",
    "set.yaml": "name: !!set {a, b}\n",
    "date.yaml": "begin: !!timestamp 2026-01-01\n",
    "calendar.yaml": "begin: !!timestamp 2026-13-45\n",
    "python.yaml": "name: !!python/object/apply:os.getcwd []\n",
    "kinds.json": json.dumps(KINDS_WRONG),
}
# Paths no file can be read from: a folder, a file missing, nothing, a name too long for a
# path, and a name of bytes UTF-8 does not decode.
PATHS = ["folder", "missing.json", "", "x" * 70_000, "\udcff"]
# The arguments naming a file to read: `file` (a job description, a teams file) is given
# FILES, and a secret's value's (from_file) bytes no text has, nothing, and PATHS.
FILE_ARGUMENTS = {"file", "from_file"}
# A teams file is sent as written, for the server to read: it is given the files the command
# line reads otherwise (a path, bytes no text has) and one of each kind the server reads.
SENT_FILES = {("apply-teams", "file"): ["not-yaml.txt", "empty.json", "list.json", "deep.json",
                                         "laughs.yaml", "binary", "calendar.yaml"]}  # fmt: skip

# Each required argument's sound value by its name, a command's own first; the fixture adds
# the ids of its jobs and windows, and its files' paths.
SOUND = {"deps": "none", "limit": "2", "seconds": "90m", "tenant": "alpha", "cluster": "east",
         "node": "gpu-a", "user": "bob", "name": "HF_TOKEN", "starts": "now+1d",
         "ends": "now+2d", "reason": "sweep", ("member-add", "user"): "charlie",
         ("member-set", "role"): "viewer"}  # fmt: skip
# The options a command is run with besides its required arguments: what gives a change to
# make, a wait that cannot outlive the test, a teams file checked and not applied, a job to
# cancel (KNOWN: its sound value).
KNOWN = "(sound)"
EXTRAS = {"cancel": {"ids": KNOWN}, "label": {"labels": "team=nlp"}, "notify": {"--start": None},
          "retries": {"--max": "2"}, "priority": {"--value": "5"},
          "resize": {"--cpu-milli": "500"}, "constrain": {"--shared": None},
          "wait": {"--timeout": "1"}, "apply-teams": {"--dry-run": None}}  # fmt: skip
# The commands that, sound, still exit 1 here, and why.
REFUSED_SOUND = {"login": "nobody approves the login in a browser"}

# Commands for platform admins whose help does not say so; they are run as one (the others
# as Alice, alpha's owner).
ADMIN_ALSO = {"history", "sign-ins"}

# A refusal's message: at most this many lines and characters (a parser's usage aside).
MAX_LINES, MAX_CHARS = 3, 2000


@dataclass
class Ran:
    argv: list[str]
    changed: argparse.Action | None
    code: int
    out: str
    err: str
    crashed: bool = False


def commands() -> dict[str, argparse.ArgumentParser]:
    """Every command build_parser() makes, by name."""
    return dict(verbs(build_parser()).choices)


def verbs(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def admin_commands() -> set[str]:
    """The commands whose help says they are for platform admins."""
    helps = {a.dest: a.help or "" for a in verbs(build_parser())._choices_actions}
    said = {name for name, text in helps.items() if text.startswith("platform admins")}
    return said | ADMIN_ALSO


def arguments(command: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in command._actions if not isinstance(a, argparse._HelpAction)]


def required(action: argparse.Action) -> bool:
    return action.required if action.option_strings else action.nargs not in ("*", "?")


def words(action: argparse.Action, value: str | None) -> list[str]:
    """The command line's words giving `action` the value (a flag: None)."""
    if not action.option_strings:
        return [str(value)]
    option = max(action.option_strings, key=len)
    return [option] if value is None else [option, value]


def sound(name: str, action: argparse.Action, known: dict) -> str:
    for key in ((name, action.dest), action.dest):
        if key in known:
            return known[key]
    if action.choices:
        return next(iter(action.choices))
    raise LookupError(f"no sound value for `{name} {action.dest}`: give one in SOUND")


def wrong_values(name: str, action: argparse.Action, folder) -> list[str]:
    if action.dest == "file":
        files = SENT_FILES.get((name, action.dest), FILES)
        return [str(folder / file) for file in [*files, *PATHS[:2]]] + PATHS[2:]
    if action.dest in FILE_ARGUMENTS:
        return [str(folder / file) for file in ("binary", "empty.json", *PATHS[:2])] + PATHS[2:]
    sent = [*SENT, *SENT_AS_TIMES] if action.metavar in TIME_METAVARS else SENT
    return [v for v in WRONG if v in sent or refused_here(action, v)]


def refused_here(action: argparse.Action, value: str) -> bool:
    """Whether the parser refuses the value itself (by its type or its choices)."""
    try:
        taken = action.type(value) if callable(action.type) else value
    except (ValueError, TypeError, argparse.ArgumentTypeError):
        return True
    return action.choices is not None and taken not in action.choices


def tries(name: str, command: argparse.ArgumentParser, known: dict, folder):
    """The command's sound line, then each argument given each wrong value in turn (a flag:
    given, and given a value): (the argument changed, the line)."""
    every = arguments(command)
    base = {a: words(a, sound(name, a, known)) for a in every if required(a)}
    for option, value in EXTRAS.get(name, {}).items():
        action = next(a for a in every if option in (a.dest, *a.option_strings))
        base[action] = words(action, sound(name, action, known) if value is KNOWN else value)

    def line(changed: dict) -> list[str]:
        given = {**base, **changed}
        positionals = [w for a in every if not a.option_strings and a in given for w in given[a]]
        options = [w for a in every if a.option_strings and a in given for w in given[a]]
        return [name, *positionals, *options]

    yield None, line({})
    for action in every:
        if action.nargs == 0:
            flag = words(action, None)
            yield action, line({action: flag})
            yield action, line({action: [f"{flag[0]}=x"]})
            continue
        for value in wrong_values(name, action, folder):
            yield action, line({action: words(action, value)})


class Runner:
    """main() run in this process as `mlsched` runs it: its exit status, what it wrote, and
    whether it ended in an exception Python would print a traceback for."""

    def __init__(self, monkeypatch, url: str):
        self.monkeypatch = monkeypatch
        monkeypatch.setenv("MLSCHED_URL", url)

    def __call__(self, argv, token: str, changed=None, stdin: str = "s3cret\n") -> Ran:
        self.monkeypatch.setenv("MLSCHED_TOKEN", token)
        out, err, crashed = io.StringIO(), io.StringIO(), False
        real_stdin, sys.stdin = sys.stdin, io.StringIO(stdin)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    code = main(argv)
                except SystemExit as exit:
                    code = exit_status(exit, err)
                except Exception:
                    traceback.print_exc(file=err)
                    code, crashed = 1, True
        finally:
            sys.stdin = real_stdin
        return Ran(argv, changed, code, out.getvalue(), err.getvalue(), crashed)


def exit_status(exit: SystemExit, err) -> int:
    """The status Python exits with for `exit`, writing its message as Python does."""
    if exit.code is None:
        return 0
    if isinstance(exit.code, int):
        return exit.code
    print(exit.code, file=err)
    return 1


def message(err: str) -> list[str]:
    """The lines of standard error, a parser's usage before its error left out."""
    lines = err.strip().splitlines()
    if lines and lines[0].startswith("usage:"):
        return [line for line in lines if not line.startswith(("usage:", " "))]
    return lines


def names(action: argparse.Action) -> list[str]:
    """What a parser's error may call an argument: its options, else its metavar or name."""
    return list(action.option_strings) or [str(action.metavar or action.dest)]


def fault(ran: Ran) -> str | None:
    """What is wrong with how a run ended; None if nothing."""
    lines = message(ran.err)
    if ran.crashed or "Traceback" in ran.err:
        return "a traceback"
    if ran.code not in (0, 1, 2):
        return f"exit {ran.code}"
    if ran.code and not lines:
        return "no message"
    if ran.code and (len(lines) > MAX_LINES or len("".join(lines)) > MAX_CHARS):
        return f"a message of {len(lines)} lines, {len(''.join(lines)):,} characters"
    if ran.code == 2 and ran.changed and not any(n in lines[-1] for n in names(ran.changed)):
        return f"a refusal not naming {names(ran.changed)[0]}"
    if ran.code == 0 and wants_json(ran.argv):
        try:
            json.loads(ran.out)
        except ValueError:
            return "output that is not JSON"
    return None


def wants_json(argv: list[str]) -> bool:
    return "--json" in argv or (argv[0] in ("spec", "status") and "--yaml" not in argv)


def shown(argv: list[str]) -> str:
    """A command line as a report gives it, long words cut."""
    return " ".join(repr(w) if len(w) <= 100 else f"{w[:12]!r}...({len(w):,} chars)" for w in argv)


def report(failures: list[tuple[str, Ran]]) -> str:
    """Each run gone wrong: its command line, what went wrong, its exit, its last lines."""
    said = [f"{shown(r.argv)}: {why}, exit {r.code}: {last_lines(r.err)}" for why, r in failures]
    return f"{len(failures)} runs went wrong:\n" + "\n".join(said)


def last_lines(err: str) -> str:
    return " | ".join(err.strip().splitlines()[-3:])[:300]


@pytest.fixture
def cli(live_server, monkeypatch, tmp_path, settings):
    """main() in this process against the live server, quick: the parser made once (making it
    takes longer than most tries), no rate limit, a config folder of the test's own, a
    login's code expired once shown (nobody approves it here), no page opened, and a server
    answering 5xx not asked again for minutes (wait, logs -f)."""
    settings.MLSCHED_API_RATE = "1000000/minute"
    settings.MLSCHED_SUBMIT_RATE = settings.MLSCHED_TENANT_SUBMIT_RATE = "1000000/minute"
    monkeypatch.setattr("quotas.cli_logins_api.START_RATE", "1000000/minute")
    monkeypatch.setattr("jobs.cli.main.build_parser", functools.cache(build_parser))
    monkeypatch.setenv("MLSCHED_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("MLSCHED_NO_UPDATE_NOTIFIER", "1")
    monkeypatch.setattr(cli_logins, "LIFE", timedelta(0))
    monkeypatch.setattr("jobs.cli.logins.webbrowser.open", lambda page: True)
    monkeypatch.setattr(waiting, "PATIENCE_S", 0)
    return Runner(monkeypatch, live_server.url)


@pytest.fixture
def world(cli, monkeypatch, tmp_path, alice, alpha, bob, charlie, east):
    """What the sound arguments name: alpha's jobs (queued, placed, ended, a batch, a gang, one
    to cancel), east's node gpu-a, a maintenance window and a booking, alpha's secret
    HF_TOKEN, a job file and a teams file; and a platform admin, root."""
    normal = PriorityClassFactory(name="normal", value=0)
    NodeFactory(cluster=east, name="gpu-a", gpu_count=8, features=["ib"])
    spec = {k: v for k, v in SPEC.items() if k != "tenant"}
    placed, _ = actions.submit(alice, alpha, {**spec, "priority_class": normal})
    cycle.run_cycle()
    queued = JobFactory(tenant=alpha, owner=alice, name="queued")
    ended = JobFactory(tenant=alpha, owner=alice, name="ended", state=State.SUCCEEDED)
    batch = JobFactory(tenant=alpha, owner=alice, family=Family.BATCH_INFERENCE, shards=3)
    gang = JobFactory(tenant=alpha, owner=alice, family=Family.TRAINING, workers=4, gpus=1)
    victim = JobFactory(tenant=alpha, owner=alice, name="victim")
    soon = timezone.now() + timedelta(days=1)
    window = MaintenanceWindow.objects.create(cluster=east, starts_at=soon,
                                              ends_at=soon + timedelta(hours=1))  # fmt: skip
    booking = Booking.objects.create(cluster=east, tenant=alpha, starts_at=soon,
                                     ends_at=soon + timedelta(hours=1))  # fmt: skip
    tenant_secrets.put(alpha, "HF_TOKEN", "hf_value_1")
    (tmp_path / "job.json").write_text(json.dumps(SPEC))
    (tmp_path / "teams.yaml").write_text("tenants:\n- slug: alpha\n  name: Alpha\n")
    (tmp_path / "folder").mkdir()
    for name, text in FILES.items():
        (tmp_path / name).write_bytes(text if isinstance(text, bytes) else text.encode())

    def ended_meanwhile(seconds: float) -> None:
        # `submit --wait` waits for a job no cycle places here: it is canceled meanwhile.
        for job in Job.objects.filter(pk__gt=victim.pk, state=State.QUEUED):
            actions.cancel(job, "canceled while waited for")

    monkeypatch.setattr(waiting, "time", SimpleNamespace(monotonic=time.monotonic,
                                                         sleep=ended_meanwhile))  # fmt: skip
    known = {**SOUND, "id": queued.pk, ("requeue", "id"): placed.pk,
             ("shard-limit", "id"): batch.pk, ("min-workers", "id"): gang.pk,
             **{(name, "id"): ended.pk for name in ("wait", "logs", "resubmit", "efficiency")},
             ("wait", "ids"): ended.pk, ("cancel", "ids"): victim.pk,
             ("maintenance-delete", "id"): window.pk, ("booking-delete", "id"): booking.pk,
             "file": tmp_path / "job.json",
             ("apply-teams", "file"): tmp_path / "teams.yaml"}  # fmt: skip
    root = UserFactory(username="root", is_superuser=True, is_staff=True)
    return SimpleNamespace(known={k: str(v) for k, v in known.items()}, folder=tmp_path,
                           alice=create_token(alice, "sweep")[1],
                           root=create_token(root, "sweep")[1],
                           charlie=create_token(charlie, "sweep")[1])  # fmt: skip


def swept(cli, world, names) -> tuple[list[tuple[str, Ran]], list[Ran]]:
    """Each command named run with each try: what went wrong, and every run."""
    failures, runs, admins = [], [], admin_commands()
    for name, command in commands().items():
        if name not in names:
            continue
        token = world.root if name in admins else world.alice
        for changed, argv in tries(name, command, world.known, world.folder):
            ran = cli(argv, token, changed)
            runs.append(ran)
            if why := fault(ran) or sound_refused(ran):
                failures.append((why, ran))
    return failures, runs


def sound_refused(ran: Ran) -> str | None:
    if ran.changed is None and ran.code and ran.argv[0] not in REFUSED_SOUND:
        return "its sound arguments refused"
    return None


def on_jobs(name: str, command: argparse.ArgumentParser) -> bool:
    """Whether a command submits, lists or names jobs."""
    ids = any(a.dest in ("id", "ids") and a.type is int for a in arguments(command))
    return name in ("submit", "list", "queue") or (ids and "-delete" not in name)


def assert_swept(failures, runs) -> None:
    """No run went wrong, and the sweep could have seen one: many tries, some refused by the
    parser and some by the server."""
    assert not failures, report(failures)
    codes = [r.code for r in runs]
    assert len(runs) > 400
    assert codes.count(2) > 100 and codes.count(1) > 100
    assert sum(r.err.startswith("error 4") for r in runs) > 50


@on_the_live_server
def test_no_command_on_jobs_ends_in_a_traceback_whatever_it_is_given(cli, world):
    failures, runs = swept(cli, world, {n for n, c in commands().items() if on_jobs(n, c)})

    assert_swept(failures, runs)


@on_the_live_server
def test_no_other_command_ends_in_a_traceback_whatever_it_is_given(cli, world):
    failures, runs = swept(cli, world, {n for n, c in commands().items() if not on_jobs(n, c)})

    assert_swept(failures, runs)


class Refusing(Canned):
    """A server refusing every request with `code` and `body`, of `kind`."""

    code, body, kind = 400, b"", "application/json"

    def do_GET(self):
        # The body read first: a request answered unread may end in a reset connection.
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.reply(self.code, self.body, self.kind)

    do_POST = do_PUT = do_PATCH = do_DELETE = do_GET


# Refusals as the API gives them (a field named, a permission), as the web server gives one
# for an address the API does not serve (an HTML page), and as a proxy gives one (text on
# several lines, 100,000 characters of it).
REFUSALS = [
    (400, b'{"gpus": ["A valid integer is required."]}', "application/json"),
    (403, b'{"detail": "You do not have permission to perform this action."}', "application/json"),
    (404, b"<!doctype html>\n<html>\n<h1>Not Found</h1>\n</html>\n", "text/html"),
    (502, b"upstream connect error\nor disconnect: " + b"x" * 100_000, "text/plain"),
]


@on_the_live_server
def test_every_command_says_a_servers_refusal_in_a_short_line(cli, world):
    failures, runs = [], []
    for code, body, kind in REFUSALS:
        handler = type("Handler", (Refusing,), {"code": code, "body": body, "kind": kind})
        with answering(handler) as url:
            cli.monkeypatch.setenv("MLSCHED_URL", url)
            for name, command in commands().items():
                _, argv = next(tries(name, command, world.known, world.folder))
                runs.append(ran := cli(argv, "t"))
                said = message(ran.err)
                if fault(ran) or (ran.code and not said[-1].startswith(f"error {code}")):
                    failures.append((fault(ran) or "not the server's refusal", ran))

    assert not failures, report(failures)
    assert sum(r.code == 1 for r in runs) > len(REFUSALS) * 50


@on_the_live_server
def test_commands_refused_by_the_live_server_say_so_in_a_short_line(cli, world):
    """Alice running a platform admin's commands (403); Charlie naming alpha's jobs, secrets
    and members (404)."""
    failures, codes = [], []
    admins = admin_commands()
    for name, command in commands().items():
        _, argv = next(tries(name, command, world.known, world.folder))
        ran = cli(argv, world.alice if name in admins else world.charlie)
        codes.append(ran.code)
        if fault(ran):
            failures.append((fault(ran), ran))

    assert not failures, report(failures)
    assert codes.count(1) > 30


def test_the_sweep_reports_a_command_that_ends_in_a_traceback(monkeypatch):
    def broken(api, args):
        raise KeyError("id")

    monkeypatch.setattr("jobs.cli.main.whoami", broken)

    ran = Runner(monkeypatch, "http://127.0.0.1:9")(["whoami"], "t")

    assert fault(ran) == "a traceback"
    assert "KeyError: 'id'" in ran.err
