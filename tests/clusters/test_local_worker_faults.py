"""Local workers that misbehave in ways a real training job does: output that never ends its
line, processes left behind. Real processes, no database."""

import os
import signal
import sys
from pathlib import Path

from clusters.backends import base
from clusters.backends.local import LocalBackend, parse_inventory
from tests.clusters.test_local_backend import (
    LEAVES_A_CHILD,
    ended,
    kill,
    phases,
    printed_pid,
    spec,
)
from tests.processes import gone, wait_until

MAX_LINE = base.MAX_LINE  # the characters of a line the control plane keeps

# A progress bar redrawn with \r and never ended: 100 MiB of it, then a line of its own.
ENDLESS_BAR = """
import sys, time
for i in range(100 * 1024):
    sys.stdout.write(("\\r%5d" % i).ljust(1024, "#"))
sys.stdout.flush()
sys.stderr.write("drawn\\n"); sys.stderr.flush()
time.sleep(60)
"""


def shim_memory_kib(backend) -> int:
    """The shim's resident memory at its highest (VmHWM), in KiB."""
    shim = int((backend.worker_dir(1, 0) / "pid").read_text())
    for line in Path(f"/proc/{shim}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def test_a_line_that_never_ends_costs_the_shim_no_memory_and_is_handed_over_cut(backend):
    backend.start(spec([sys.executable, "-c", ENDLESS_BAR]))
    lines = []

    def drawn():
        lines.extend(backend.logs())
        return any(line.text == "drawn" for line in lines)

    try:
        assert wait_until(drawn, timeout=30)
        memory = shim_memory_kib(backend)
    finally:
        backend.stop(1, grace_s=0)
    assert memory < 64 * 1024  # the line is 100 MiB
    # The line's head, at once, as the control plane keeps it; not the rest of it.
    (bar,) = [line for line in lines if line.stream == "stdout"]
    assert len(bar.text) == MAX_LINE and bar.text.startswith("\r    0#")
    assert (backend.worker_dir(1, 0) / "log").stat().st_size < 1024 * 1024


def test_the_line_after_a_cut_one_is_whole(backend):
    command = "import sys; sys.stdout.write('x' * 300_000 + '\\nnext\\n' + 'y' * 10 + '\\n')"
    backend.start(spec([sys.executable, "-c", command]))

    assert ended(backend)
    assert phases(backend)[0].phase == base.EXITED
    assert [line.text for line in backend.logs()] == ["x" * MAX_LINE, "next", "y" * 10]


def test_forgetting_a_worker_whose_shim_was_killed_kills_what_is_left_of_its_group(tmp_path):
    # Without cgroups: the process group is all that holds the worker's processes together.
    backend = LocalBackend(tmp_path / "state", parse_inventory("1x8xA100", "local"),
                           tmp_path / "ckpt", default_grace_s=2, cgroups=False)  # fmt: skip
    backend.start(spec([sys.executable, "-c", LEAVES_A_CHILD]))
    directory = backend.worker_dir(1, 0)
    left = printed_pid(backend)
    worker = int((directory / "child.pid").read_text())
    try:
        # The shim dies alone (an operator's kill, a machine's OOM killer): its main process
        # dies with it, what that started runs on, holding the worker's GPUs.
        os.kill(int((directory / "pid").read_text()), signal.SIGKILL)
        assert ended(backend)
        assert phases(backend)[0].phase == base.LOST
        assert wait_until(lambda: gone(worker), timeout=10)

        backend.forget(1)

        assert wait_until(lambda: gone(left), timeout=10)
    finally:
        kill(left)
