"""The command line shows what the server sends (log lines, job names, errors) without letting
control characters in it act on the reader's terminal: they come out written as \\xNN."""

import pytest

from jobs.models import LogChunk
from quotas.tokens import create_token
from tests.factories import AttemptFactory, JobFactory
from tests.jobs.test_cli import Canned, answering, run_cli

pytestmark = pytest.mark.django_db(transaction=True)

# Clear the screen, set the window title, start a colour with the 8-bit CSI, a DEL; and a
# carriage return, kept (a progress bar redraws its line with it).
HOSTILE = "\x1b[2J\x1b]0;owned\x07\x9b31m\x7fdone\rok"
SHOWN = r"\x1b[2J\x1b]0;owned\x07\x9b31m\x7fdone" + "\rok"


@pytest.fixture
def token(alice):
    return create_token(alice, "terminal tests")[1]


def test_the_cli_shows_control_characters_in_log_lines_escaped(live_server, token, alpha):
    attempt = AttemptFactory(job=JobFactory(tenant=alpha))
    LogChunk.objects.create(attempt=attempt, seq=0, text=f"accuracy\t0.91 ✓ {HOSTILE}")
    LogChunk.objects.create(attempt=attempt, seq=1, stream="stderr", text=HOSTILE)

    out = run_cli(live_server.url, token, "logs", str(attempt.job_id))

    assert out.returncode == 0, out.stderr
    assert out.stdout == f"[1.0] accuracy\t0.91 ✓ {SHOWN}\n"  # tab and Unicode as they were
    assert out.stderr == f"[1.0] {SHOWN}\n"


def test_the_cli_shows_control_characters_in_job_names_escaped(live_server, token, alpha):
    JobFactory(tenant=alpha, name=f"eval {HOSTILE}", pending_reason="quota")

    out = run_cli(live_server.url, token, "list")

    assert out.returncode == 0, out.stderr
    assert out.stdout.endswith(f" eval {SHOWN}  (quota)\n")


class Refuses(Canned):
    """A server (or a proxy in front of it) whose error page holds control characters."""

    def do_GET(self):
        self.reply(502, f"bad gateway {HOSTILE}".encode(), "text/plain; charset=utf-8")


def test_the_cli_shows_control_characters_in_an_error_escaped():
    with answering(Refuses) as url:
        out = run_cli(url, "t", "list")

    assert out.returncode != 0
    assert out.stderr == f"error 502: bad gateway {SHOWN}\n"
