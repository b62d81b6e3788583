"""What a local worker uses (CPU time, memory high-water mark), measured on real processes."""

import json
import sys
import time

import pytest

from clusters.backends import base, local_usage, usage
from clusters.backends.local import LocalBackend, parse_inventory
from tests.clusters.test_local_backend import ended, needs_cgroups, phases, spec, with_limits
from tests.processes import wait_until

# The worker spins for about a second, a child it waits for spins for another, and it holds
# 200 MiB while doing so.
BUSY_TREE = """
import os, subprocess, sys, time
def spin(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass
held = bytearray(200 << 20)
held[::4096] = b"x" * len(held[::4096])
spin(0.6)
subprocess.run([sys.executable, "-c", "import time\\nend = time.process_time() + 0.6\\n"
                "while time.process_time() < end: pass"], check=True)
print("done")
"""

# Spins for a CPU second, then waits to be stopped.
SPIN_THEN_SLEEP = """
import time
end = time.process_time() + 1.2  # /proc counts whole ticks: 1.0 could read as 0.99
while time.process_time() < end:
    pass
print("spun", flush=True)
time.sleep(60)
"""

# Two processes hold 150 MiB each at the same time.
TWO_HOLDERS = """
import os, time
if os.fork() == 0:
    b = bytearray(150 << 20); b[::4096] = b"x" * len(b[::4096]); time.sleep(1.5); os._exit(0)
b = bytearray(150 << 20); b[::4096] = b"x" * len(b[::4096])
time.sleep(1.5)
os.wait()
"""


@pytest.fixture
def plain(tmp_path):
    """A local backend whose workers run without cgroups."""
    nodes = parse_inventory("1x8xA100", "local")
    return LocalBackend(
        tmp_path / "state", nodes, tmp_path / "ckpt", default_grace_s=2, cgroups=False
    )


def test_an_ended_worker_reports_the_cpu_time_of_its_processes_and_its_memory_peak(plain):
    plain.start(spec([sys.executable, "-c", BUSY_TREE]))

    status = ended(plain)[0]

    assert status.phase == base.EXITED and status.exit_code == 0
    # Its own 0.6 s and its child's 0.6 s, and not much more (start-up is a few tenths).
    assert 1.1 <= status.cpu_seconds < 3.0
    assert 200 <= status.memory_peak_mb < 400


def test_a_running_worker_reports_what_it_has_used_so_far(plain, monkeypatch):
    monkeypatch.setattr(usage, "SAMPLE_EVERY_S", 0.0)
    plain.start(spec([sys.executable, "-c", SPIN_THEN_SLEEP]))

    status = wait_until(
        lambda: (s := phases(plain)[0]).cpu_seconds is not None and s.cpu_seconds >= 1.0 and s,
        timeout=20,
    )

    assert status.phase == base.RUNNING
    assert status.cpu_seconds < 2.0  # it sleeps once it has spun
    assert status.memory_peak_mb >= 1  # the interpreter's resident memory
    plain.stop(1, grace_s=1)
    assert ended(plain)[0].phase == base.STOPPED


def test_a_running_worker_is_sampled_at_most_every_sample_period(plain):
    plain.start(spec([sys.executable, "-c", "print('busy', flush=True)\nwhile True: pass"]))
    wait_until(lambda: any(line.text == "busy" for line in plain.logs()), timeout=20)

    # The first look samples it; the next sample is due SAMPLE_EVERY_S (30 s) later, though
    # it keeps spinning meanwhile.
    first = phases(plain)[0]
    time.sleep(0.5)
    again = phases(plain)[0]

    assert first.cpu_seconds is not None
    assert again.cpu_seconds == first.cpu_seconds
    plain.stop(1, grace_s=1)


@needs_cgroups
def test_with_a_cgroup_the_memory_peak_is_of_all_its_processes_together(backend):
    backend.start(with_limits([sys.executable, "-c", TWO_HOLDERS], memory_mb=1024))

    status = ended(backend)[0]

    assert status.exit_code == 0
    assert status.memory_peak_mb >= 300


def test_without_a_cgroup_the_memory_peak_is_the_largest_process(plain):
    plain.start(spec([sys.executable, "-c", TWO_HOLDERS]))

    status = ended(plain)[0]

    assert status.exit_code == 0
    assert 150 <= status.memory_peak_mb < 300


def test_an_exit_record_without_usage_reports_the_last_sample(plain, monkeypatch):
    monkeypatch.setattr(usage, "SAMPLE_EVERY_S", 0.0)
    plain.start(spec([sys.executable, "-c", SPIN_THEN_SLEEP]))
    wait_until(lambda: (phases(plain)[0].cpu_seconds or 0) >= 1.0, timeout=20)
    plain.stop(1, grace_s=1)
    ended(plain)
    exit_record = plain.worker_dir(1, 0) / "exit.json"
    record = json.loads(exit_record.read_text())
    del record["cpu_seconds"], record["memory_peak_mb"]  # as a shim of an older release writes
    exit_record.write_text(json.dumps(record))

    assert phases(plain)[0].cpu_seconds >= 1.0


@pytest.mark.parametrize(
    "record, kept",
    [
        ({"cpu_seconds": 2.5, "memory_peak_mb": 300}, {"cpu_seconds": 2.5, "memory_peak_mb": 300}),
        ({"cpu_seconds": -1, "memory_peak_mb": "300"}, {}),
        ({"cpu_seconds": True, "memory_peak_mb": None}, {}),
        ({"code": 0}, {}),
    ],
)
def test_only_the_usage_numbers_a_shim_writes_are_read_from_an_exit_record(record, kept):
    assert local_usage.recorded(record) == kept


def test_process_groups_sum_each_groups_cpu_and_memory_from_proc(tmp_path):
    def process(pid, name, pgrp, ticks, rss_pages):
        (tmp_path / str(pid)).mkdir()
        rest = ["S", "1", str(pgrp), *["0"] * 8, *[str(t) for t in ticks], *["0"] * 6]
        rest += [str(rss_pages)]
        (tmp_path / str(pid) / "stat").write_text(f"{pid} ({name}) " + " ".join(rest) + "\n")

    process(10, "python", 10, (100, 50, 20, 30), 256)
    process(11, "odd ) name (x", 10, (10, 0, 0, 0), 256)
    process(12, "other", 12, (1, 0, 0, 0), 1)
    (tmp_path / "self").mkdir()

    groups = local_usage.process_groups(tmp_path)

    ticks = local_usage.TICKS
    assert groups[10] == (pytest.approx(210 / ticks), 512 * local_usage.PAGE)
    assert groups[12] == (pytest.approx(1 / ticks), local_usage.PAGE)
