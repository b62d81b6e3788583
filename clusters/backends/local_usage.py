"""What the local backend's workers use: CPU time and memory, as Slurm's sstat and seff show.

A worker that has ended reports what its shim recorded as it reaped the command (its exit
record's ``cpu_seconds`` and ``memory_peak_mb``, `local_shim.used`). A running one is sampled
at most every `usage.SAMPLE_EVERY_S`, all of them in one pass over /proc: the CPU time of the
processes of the command's process group (each one's own and that of the children it has
reaped), and the memory high-water mark of its cgroup or, without one, the largest resident
size of the group's processes together that a sample has seen.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from clusters.backends import base, cgroups, usage

TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def process_groups(proc: Path = Path("/proc")) -> dict[int, tuple[float, int]]:
    """Per process group: the CPU seconds of its live processes (user and system, their own
    and their reaped children's) and their resident memory in bytes, from one pass over
    /proc. A process that ends during the pass is left out."""
    groups: dict[int, tuple[float, int]] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Fields after the command's name, which may hold spaces and parentheses: state is 3.
        fields = stat[stat.rfind(")") + 2 :].split()
        try:
            pgrp = int(fields[2])
            ticks = sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
            rss = int(fields[21]) * PAGE
        except (IndexError, ValueError):
            continue
        cpu, memory = groups.get(pgrp, (0.0, 0))
        groups[pgrp] = (cpu + ticks / TICKS, memory + rss)
    return groups


def recorded(record: dict) -> dict:
    """The usage fields of a worker's exit record: those a shim wrote, as numbers."""
    found = {}
    for name, kind in (("cpu_seconds", float), ("memory_peak_mb", int)):
        value = record.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
            found[name] = kind(value)
    return found


class Sampler:
    """Samples the running workers of a local backend."""

    def __init__(self, proc: Path = Path("/proc")):
        self.proc = proc
        self.samples = usage.Samples()

    def add(self, found: list[tuple[Path, base.WorkerStatus]]) -> list[base.WorkerStatus]:
        """The statuses with what each worker has used, where it is known."""
        now = time.monotonic()
        due = [
            (d, s)
            for d, s in found
            if s.phase == base.RUNNING and self.samples.due((s.attempt_id, s.rank), now)
        ]
        if due:
            groups = process_groups(self.proc)
            for d, s in due:
                self._sample(d, (s.attempt_id, s.rank), groups, now)
        return [self.samples.with_usage(s) for _, s in found]

    def forget(self, attempt_id: int) -> None:
        self.samples.forget(attempt_id)

    def _sample(self, d: Path, key: tuple[int, int], groups: dict, now: float) -> None:
        try:
            pgid = int((d / "child.pid").read_text())
        except (OSError, ValueError):
            return  # not started yet
        cpu, resident = groups.get(pgid, (0.0, 0))
        mine = cgroups.worker_groups(d)
        peak = cgroups.memory_peak_mb(mine[-1]) if mine else None  # the memory group is last
        if peak is not None:
            self.samples.keep(key, now, cpu, peak, mark=True)
        else:
            self.samples.keep(key, now, cpu, usage.mib(resident), mark=False)
