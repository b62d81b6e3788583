"""The local backend's workers report a checkpoint by printing MLSCHED_CHECKPOINT_LINE, alone
on its line, to stdout or stderr: real processes, no database."""

import sys

import pytest

from clusters.backends import base
from clusters.backends.local import LocalBackend
from tests.clusters.test_local_backend import ended, phases, spec
from tests.processes import wait_until

LINE = base.CHECKPOINT_LINE
# Prints the time, then the checkpoint line it is told, to the stream named by argv[1].
SAVES = """
import os, sys, time
out = getattr(sys, sys.argv[1])
print(time.time(), flush=True)
print(os.environ["MLSCHED_CHECKPOINT_LINE"], file=out, flush=True)
time.sleep(int(sys.argv[2]))
"""


def python(script, *args):
    return [sys.executable, "-c", script, *map(str, args)]


def reported_checkpoint(backend):
    """The checkpoint time the worker of attempt 1 reports, once it reports one."""
    return wait_until(lambda: phases(backend).get(0) and phases(backend)[0].checkpoint_at,
                      timeout=15)  # fmt: skip


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_a_worker_that_prints_the_checkpoint_line_reports_when_it_did(backend, stream):
    backend.start(spec(python(SAVES, stream, 30)))

    checkpoint_at = reported_checkpoint(backend)

    assert phases(backend)[0].phase == base.RUNNING
    lines = {line.text: line.stream for line in backend.logs()}
    assert lines.pop(LINE) == stream  # a line of its log too
    printed = float(*lines)
    assert printed <= checkpoint_at < printed + 2
    backend.stop(1, grace_s=1)
    assert ended(backend)


LOOKALIKES = """
import time
line = "%s"
print(line, flush=True)
time.sleep(1.5)
print(time.time(), flush=True)
for text in ["INFO " + line, line + ".", " " + line, line + " ", "MLSCHED_CHECKPOINT_LINE=" + line,
             "+ echo '" + line + "'", line.upper()]:
    print(text, flush=True)
print("done", flush=True)
time.sleep(30)
"""


def test_a_line_that_holds_the_checkpoint_line_among_other_text_does_not_count(backend):
    backend.start(spec(python(LOOKALIKES % LINE)))
    lines = wait_until(lambda: [line.text for line in backend.logs()], timeout=15)
    while lines[-1] != "done":
        lines += wait_until(lambda: [line.text for line in backend.logs()], timeout=15)

    lookalikes_from = float(lines[1])
    assert phases(backend)[0].checkpoint_at < lookalikes_from
    backend.stop(1, grace_s=1)
    assert ended(backend)


# Saves a checkpoint when it is stopped, in its grace period, and says so.
SAVES_ON_STOP = """
import signal, sys, time
def save(signum, frame):
    print("%s", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, save)
print("ready", flush=True)
time.sleep(30)
"""


def test_a_checkpoint_printed_in_the_stop_grace_period_is_reported_with_the_stop(backend):
    backend.start(spec(python(SAVES_ON_STOP % LINE)))
    assert wait_until(lambda: backend.logs(), timeout=15)

    backend.stop(1, grace_s=5)

    assert ended(backend)
    status = phases(backend)[0]
    assert status.phase == base.STOPPED
    assert status.checkpoint_at is not None


def test_a_restarted_backend_reports_the_same_checkpoint_time(backend):
    backend.start(spec(python(SAVES, "stdout", 0)))
    assert ended(backend)
    before = phases(backend)[0].checkpoint_at

    restarted = LocalBackend(backend.state_dir, backend.nodes, backend.checkpoint_root)

    assert before is not None
    assert phases(restarted)[0].checkpoint_at == before
