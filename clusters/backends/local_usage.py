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
from it. A worker holding a share of a GPU is counted busy for what its own processes use of
it: the pass reads, once, each process's share of the streaming multiprocessors' time on each
GPU (``nvidia-smi pmon``, which takes about a second to sample, only on a pass where a share
runs), and the worker's is the sum of its process group's on its GPU (in
fractions of the whole GPU, as its share is asked); it reads idle below base.GPU_IDLE of its
share. A host whose nvidia-smi gives no per-process figures (pmon unsupported, as on MIG
instances) leaves shares unmeasured.
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
# One sample of each process's utilization per GPU: "gpu pid type sm mem ... command" a line.
NVIDIA_PMON = ("nvidia-smi", "pmon", "--count", "1", "--select", "u")
GPU_BUSY = "gpu_busy"  # a worker's GPU-seconds busy so far, as its last sample counted them

TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def process_groups(
    proc: Path = Path("/proc"), members: dict[int, list[int]] | None = None
) -> dict[int, tuple[float, int]]:
    """Per process group: the CPU seconds of its live processes (user and system, their own
    and their reaped children's) and their resident memory in bytes, from one pass over
    /proc; with ``members``, each group's process ids put there too. A process that ends
    during the pass is left out."""
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
        if members is not None:
            members.setdefault(pgrp, []).append(int(entry.name))
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


def process_utilization(command=NVIDIA_PMON) -> dict[int, dict[int, float]]:
    """Per GPU index, each process's utilization now (its share of the streaming
    multiprocessors' time, 0 to 1) by process id; empty where nvidia-smi cannot be run, does
    not answer within 5 s, or has no per-process figures. A process it cannot read ("-") is
    left out."""
    try:
        answer = subprocess.run(command, capture_output=True, text=True, timeout=5, check=True)
    except (OSError, subprocess.SubprocessError):
        return {}
    found: dict[int, dict[int, float]] = {}
    for line in answer.stdout.splitlines():
        fields = line.split()
        if not fields or fields[0].startswith("#") or len(fields) < 4:
            continue
        with contextlib.suppress(ValueError):
            index, pid, percent = int(fields[0]), int(fields[1]), float(fields[3])
            found.setdefault(index, {})[pid] = min(max(percent / 100, 0.0), 1.0)
    return found


def held_gpus(worker_dir: Path) -> tuple[list[int], float]:
    """The GPUs the worker holds, by index, and how much of each (1.0: whole GPUs; a share's
    fraction), as its spec says; ([], 0.0) for none."""
    try:
        spec = json.loads((worker_dir / "spec.json").read_text())
        milli = int(spec.get("gpu_milli") or 0)
        indices = [int(index) for index in spec.get("gpu_indices") or []]
    except (OSError, ValueError, TypeError, AttributeError):
        return [], 0.0
    return (indices, milli / 1000) if milli > 0 else ([], 0.0)


class Readings:
    """One pass's GPU figures: each GPU's utilization (for whole GPUs), each process's (for
    shares), and each process group's members; read only as the running workers need."""

    def __init__(self, running: list[Path], members: dict[int, list[int]]):
        held = [held_gpus(d) for d in running]
        whole = any(indices and part == 1.0 for indices, part in held)
        shared = any(indices and part < 1.0 for indices, part in held)
        self.gpus = gpu_utilization() if whole else {}
        self.processes = process_utilization() if shared else {}
        self.members = members

    def of(self, d: Path, pgid: int) -> tuple[list[float], list[float]] | None:
        """(the readings of the worker's GPUs, how much of each it holds), or None where they
        are not measured."""
        indices, part = held_gpus(d)
        if not indices:
            return None
        if part == 1.0:
            if any(i not in self.gpus for i in indices):
                return None
            return [self.gpus[i] for i in indices], [1.0] * len(indices)
        if indices[0] not in self.processes:  # a share is of one GPU
            return None
        on_gpu = self.processes[indices[0]]
        mine = sum(on_gpu.get(pid, 0.0) for pid in self.members.get(pgid, ()))
        return [min(mine, 1.0)], [part]


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
        at most one nvidia-smi for whole GPUs and one for shares, however many workers run."""
        now = time.monotonic()
        running = [(d, s) for d, s in found if s.phase == base.RUNNING]
        if running and now - self._pass_at >= usage.SAMPLE_EVERY_S:
            self._pass_at = now
            members: dict[int, list[int]] = {}
            groups = process_groups(self.proc, members)
            readings = Readings([d for d, _ in running], members) if self.measure_gpus else None
            for d, s in running:
                self._sample(d, (s.attempt_id, s.rank), groups, readings, now)
        return [self.samples.with_usage(s) for _, s in found]

    def forget(self, attempt_id: int) -> None:
        self.samples.forget(attempt_id)

    def _sample(
        self, d: Path, key: tuple[int, int], groups: dict, readings: Readings | None, now: float
    ) -> None:
        try:
            pgid = int((d / "child.pid").read_text())
        except (OSError, ValueError):
            return  # not started yet
        cpu, resident = groups.get(pgid, (0.0, 0))
        read = readings.of(d, pgid) if readings is not None else None
        gpu, idle = self._gpu_busy(d, key, read, now) if read else (None, None)
        mine = cgroups.worker_groups(d)
        peak = cgroups.memory_peak_mb(mine[-1]) if mine else None  # the memory group is last
        memory, mark = (peak, True) if peak is not None else (usage.mib(resident), False)
        self.samples.keep(
            key, now, cpu, memory, mark=mark, gpu_busy_seconds=gpu, gpu_idle_since=idle
        )

    def _gpu_busy(self, d: Path, key: tuple[int, int], read: tuple, now: float):
        """(GPU-seconds busy so far, idle since) of the worker's GPUs, from their readings and
        how much of each it holds (`usage.Samples.gpu_figures`), counting on after a restart
        from its state file (the time since then is not counted)."""
        readings, held = read
        last = self.samples.last(key)
        counting = last is not None and last.gpu_busy_seconds is not None
        start = 0.0 if counting else read_number(d / GPU_BUSY, float) or 0.0
        counted, idle = self.samples.gpu_figures(key, readings, now, start, held)
        with contextlib.suppress(OSError):
            write_state(d / GPU_BUSY, repr(counted))
        return counted, idle
