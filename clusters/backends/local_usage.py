"""What the local backend's workers use: CPU time, memory and GPU time, as Slurm's sstat and
seff show.

A worker that has ended reports what its shim recorded as it reaped the command (its exit
record's ``cpu_seconds`` and ``memory_peak_mb``, `local_shim.used`). The running ones are
sampled together every `usage.SAMPLE_EVERY_S` (one just started waits for the next pass), in
one pass over /proc: the CPU time of the
processes of the command's process group (each one's own and that of the children it has
reaped), and the memory high-water mark of its cgroup or, without one, the largest resident
size of the group's processes together that a sample has seen.

GPU time, on a host whose GPUs nvidia-smi reports (the agent's detected inventory, not a
virtual one): each pass reads every GPU's utilization once (``nvidia-smi --query-gpu``, the
share of the last moment a kernel ran), and a worker holding whole GPUs is counted busy for
their utilization times the time since its last sample: an estimate from a reading every
SAMPLE_EVERY_S, kept in its state directory (``gpu_busy``) so that a restarted agent counts on
from it. A worker holding a share of a GPU is not counted: the GPU's utilization is its
sharers' together.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import subprocess
import time
from pathlib import Path

from clusters.backends import base, cgroups, usage
from clusters.backends.state_files import read_number, write_state

NVIDIA_SMI = ("nvidia-smi", "--query-gpu=index,utilization.gpu", "--format=csv,noheader,nounits")
GPU_BUSY = "gpu_busy"  # a worker's GPU-seconds busy so far, as its last sample counted them

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


def gpu_utilization(command=NVIDIA_SMI) -> dict[int, float]:
    """Each GPU's utilization now (0 to 1) by its nvidia-smi index; empty where nvidia-smi
    cannot be run or does not answer within 5 s. A GPU it cannot read ([N/A]) is left out."""
    try:
        answer = subprocess.run(command, capture_output=True, text=True, timeout=5, check=True)
    except (OSError, subprocess.SubprocessError):
        return {}
    found = {}
    for line in answer.stdout.splitlines():
        index, _, percent = line.partition(",")
        with contextlib.suppress(ValueError):
            found[int(index)] = min(max(float(percent) / 100, 0.0), 1.0)
    return found


def whole_gpus(worker_dir: Path) -> list[int]:
    """The whole GPUs the worker holds, by index, as its spec says (none for a share)."""
    try:
        spec = json.loads((worker_dir / "spec.json").read_text())
        if spec.get("gpu_milli") != 1000:
            return []
        return [int(index) for index in spec.get("gpu_indices") or []]
    except (OSError, ValueError, TypeError, AttributeError):
        return []


class Sampler:
    """Samples the running workers of a local backend; their GPUs too with ``measure_gpus``."""

    def __init__(self, proc: Path = Path("/proc"), measure_gpus: bool = False):
        self.proc = proc
        self.measure_gpus = measure_gpus
        self.samples = usage.Samples()
        self._pass_at = -math.inf  # when the last pass sampled the running workers

    def add(self, found: list[tuple[Path, base.WorkerStatus]]) -> list[base.WorkerStatus]:
        """The statuses with what each worker has used, where it is known. Every running
        worker is sampled in one pass, at most every SAMPLE_EVERY_S: one pass over /proc and
        one nvidia-smi, however many workers run."""
        now = time.monotonic()
        running = [(d, s) for d, s in found if s.phase == base.RUNNING]
        if running and now - self._pass_at >= usage.SAMPLE_EVERY_S:
            self._pass_at = now
            groups = process_groups(self.proc)
            gpus = self.measure_gpus and any(whole_gpus(d) for d, _ in running)
            busy = gpu_utilization() if gpus else {}
            for d, s in running:
                self._sample(d, (s.attempt_id, s.rank), groups, busy, now)
        return [self.samples.with_usage(s) for _, s in found]

    def forget(self, attempt_id: int) -> None:
        self.samples.forget(attempt_id)

    def _sample(self, d: Path, key: tuple[int, int], groups: dict, busy: dict, now: float) -> None:
        try:
            pgid = int((d / "child.pid").read_text())
        except (OSError, ValueError):
            return  # not started yet
        cpu, resident = groups.get(pgid, (0.0, 0))
        gpu, idle = self._gpu_busy(d, key, busy, now)
        mine = cgroups.worker_groups(d)
        peak = cgroups.memory_peak_mb(mine[-1]) if mine else None  # the memory group is last
        memory, mark = (peak, True) if peak is not None else (usage.mib(resident), False)
        self.samples.keep(
            key, now, cpu, memory, mark=mark, gpu_busy_seconds=gpu, gpu_idle_since=idle
        )

    def _gpu_busy(self, d: Path, key: tuple[int, int], busy: dict, now: float):
        """(GPU-seconds busy so far, idle since) of the worker's whole GPUs
        (`usage.Samples.gpu_figures`), counting on after a restart from its state file (the
        time since then is not counted). (None, None): not measured."""
        indices = whole_gpus(d) if busy else []
        if not indices or any(i not in busy for i in indices):
            return None, None
        last = self.samples.last(key)
        counting = last is not None and last.gpu_busy_seconds is not None
        start = 0.0 if counting else read_number(d / GPU_BUSY, float) or 0.0
        counted, idle = self.samples.gpu_figures(key, [busy[i] for i in indices], now, start)
        with contextlib.suppress(OSError):
            write_state(d / GPU_BUSY, repr(counted))
        return counted, idle
