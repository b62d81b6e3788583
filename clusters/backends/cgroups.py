"""CPU and memory limits for one local worker's whole process tree, through Linux cgroups.

The kernel enforces them: the worker's processes together get at most its CPU request in CPU
time per scheduling period, so a busy worker cannot slow its neighbours down, and at most its
memory request, past which the kernel kills inside the group (``oom_kills`` counts it). cgroup
v2 is used where the host has the unified hierarchy with the cpu and memory controllers, else
cgroup v1's cpu and memory hierarchies, each under the shim's own group. Where neither can be
written (no root, a read-only /sys/fs/cgroup) ``create`` returns None and the shim keeps to
rlimits.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
PERIOD_US = 100_000
PARENT = "mlsched"
V2_CONTROLLERS = "+cpu +memory"


@dataclass(frozen=True)
class Group:
    """The worker's leaf groups (one on v2, one per controller on v1)."""

    cpu: Path
    memory: Path
    # File with the kernel's "oom_kill N" count for the memory group.
    events: Path

    def join(self, pid: int) -> None:
        for directory in dict.fromkeys((self.cpu, self.memory)):
            (directory / "cgroup.procs").write_text(str(pid))

    def oom_kills(self) -> int:
        with contextlib.suppress(OSError):
            for line in self.events.read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        return 0

    def memory_peak_mb(self) -> int | None:
        """The group's memory high-water mark in MiB (``memory_peak_mb``)."""
        return memory_peak_mb(self.memory)

    def kill(self, wait_s: float = 0.0) -> None:
        """SIGKILL every process in the groups; wait up to ``wait_s`` until they are gone."""
        kill(dict.fromkeys((self.cpu, self.memory)), wait_s)

    def remove(self) -> None:
        """Delete the leaf groups; one still holding a process stays (the kernel refuses)."""
        for directory in dict.fromkeys((self.cpu, self.memory)):
            with contextlib.suppress(OSError):
                directory.rmdir()


# Where a memory group keeps its high-water mark: v2 (Linux 5.19+), then v1.
PEAK_FILES = ("memory.peak", "memory.max_usage_in_bytes")


def memory_peak_mb(directory) -> int | None:
    """The most memory the group's processes together have held since it was made, in MiB
    (rounded up): page cache included, as the kernel counts it against the group's limit.
    None where the kernel keeps no such mark (v2 before 5.19) or the group is gone."""
    for name in PEAK_FILES:
        with contextlib.suppress(OSError, ValueError):
            return -(-int((Path(directory) / name).read_text()) // (1024 * 1024))
    return None


def kill(directories, wait_s: float = 0.0) -> None:
    """SIGKILL every process in these groups, also those that left the worker's process group
    (``setsid``): v2's ``cgroup.kill`` where the kernel has it (5.14+; it catches a process that
    forks meanwhile), else each pid in ``cgroup.procs``, again until none is left or ``wait_s``
    has passed (0: one round, no waiting)."""
    deadline = time.monotonic() + wait_s
    for directory in directories:
        directory = Path(directory)
        if (directory / "cgroup.kill").exists():
            with contextlib.suppress(OSError):
                (directory / "cgroup.kill").write_text("1")
        while True:
            try:
                pids = [int(pid) for pid in (directory / "cgroup.procs").read_text().split()]
            except (OSError, ValueError):
                break  # no such group (any more)
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if not pids or time.monotonic() >= deadline:
                break
            time.sleep(0.02)


def worker_groups(worker_dir: Path) -> list[Path]:
    """A local worker's groups, as its shim recorded them in its ``cgroup`` file (the CPU
    group, then the memory group; only paths shaped like a worker's leaf)."""
    try:
        paths = [Path(line) for line in (worker_dir / "cgroup").read_text().split()]
    except OSError:
        return []
    return [p for p in paths if p.parent.name == PARENT and p.name.startswith("w")]


def leaf_name(key: str) -> str:
    """A short, stable group name for a worker (its state directory is the key)."""
    return "w" + hashlib.sha256(key.encode()).hexdigest()[:16]


def create(key: str, cpu_milli: int, memory_mb: int, root: Path = ROOT) -> Group | None:
    """A fresh leaf group limited to the request, or None where cgroups cannot be used."""
    quota = max(1000, cpu_milli * PERIOD_US // 1000)
    memory = memory_mb * 1024 * 1024
    try:
        if _has_v2(root):
            return _create_v2(root, leaf_name(key), quota, memory)
        if (root / "cpu" / "cpu.cfs_quota_us").exists() and (
            root / "memory" / "memory.limit_in_bytes"
        ).exists():
            return _create_v1(root, leaf_name(key), quota, memory)
    except OSError:
        return None
    return None


def _has_v2(root: Path) -> bool:
    try:
        controllers = (root / "cgroup.controllers").read_text().split()
    except OSError:
        return False
    return "cpu" in controllers and "memory" in controllers


def _create_v2(root: Path, name: str, quota: int, memory: int) -> Group:
    parent = root / PARENT
    # Controllers reach a group only if every ancestor hands them down; the root may do so
    # while holding processes, and the parent holds none.
    (root / "cgroup.subtree_control").write_text(V2_CONTROLLERS)
    parent.mkdir(exist_ok=True)
    (parent / "cgroup.subtree_control").write_text(V2_CONTROLLERS)
    leaf = parent / name
    leaf.mkdir(exist_ok=True)
    (leaf / "cpu.max").write_text(f"{quota} {PERIOD_US}")
    (leaf / "memory.max").write_text(str(memory))
    with contextlib.suppress(OSError):  # no swap accounting: nothing to turn off
        (leaf / "memory.swap.max").write_text("0")
    return Group(leaf, leaf, leaf / "memory.events")


def _create_v1(root: Path, name: str, quota: int, memory: int) -> Group:
    cpu = _own_v1(root, "cpu") / PARENT / name
    mem = _own_v1(root, "memory") / PARENT / name
    cpu.mkdir(parents=True, exist_ok=True)
    mem.mkdir(parents=True, exist_ok=True)
    (cpu / "cpu.cfs_period_us").write_text(str(PERIOD_US))
    (cpu / "cpu.cfs_quota_us").write_text(str(quota))
    (mem / "memory.limit_in_bytes").write_text(str(memory))
    return Group(cpu, mem, mem / "memory.oom_control")


def _own_v1(root: Path, controller: str) -> Path:
    """This process's group in a v1 hierarchy: workers nest inside it, within its limits."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return root / controller / path.lstrip("/")
    return root / controller
