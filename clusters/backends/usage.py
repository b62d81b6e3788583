"""What workers use, as a backend samples it while they run (Slurm's sstat): the last sample
of each worker, added to its status. A worker that has ended reports its last sample, unless
its backend knows its totals (the local backend's exit record)."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

from clusters.backends import base

# How often a running worker is sampled at most.
SAMPLE_EVERY_S = 30.0
MIB = 1024 * 1024


@dataclass(frozen=True)
class Sample:
    taken: float  # time.monotonic()
    cpu_seconds: float
    memory_peak_mb: int | None
    gpu_busy_seconds: float | None = None
    gpu_idle_since: float | None = None  # seconds since the epoch


def mib(count: int) -> int:
    """Bytes in MiB, rounded up."""
    return -(-count // MIB)


class Samples:
    """The last sample of each worker, (attempt, rank) keyed."""

    def __init__(self):
        self._last: dict[tuple[int, int], Sample] = {}

    def last(self, key: tuple[int, int]) -> Sample | None:
        return self._last.get(key)

    def keep(
        self,
        key: tuple[int, int],
        now: float,
        cpu_seconds: float,
        memory_mb: int,
        *,
        mark: bool,
        gpu_busy_seconds: float | None = None,
        gpu_idle_since: float | None = None,
    ) -> None:
        """A new sample: the CPU seconds so far and either the memory high-water mark
        (``mark``) or the memory held now, of which the most any sample saw is kept. What was
        counted stays counted: processes that ended without being reaped inside the worker take
        their CPU time out of the next count. A sample whose GPUs were not read keeps the GPU
        count (the interval it missed is not counted) and says nothing of idleness."""
        last = self._last.get(key)
        if last is not None:
            cpu_seconds = max(cpu_seconds, last.cpu_seconds)
            if not mark and last.memory_peak_mb is not None:
                memory_mb = max(memory_mb, last.memory_peak_mb)
            if gpu_busy_seconds is None:  # GPUs not read this time: counted stays counted
                gpu_busy_seconds = last.gpu_busy_seconds
        self._last[key] = Sample(now, cpu_seconds, memory_mb, gpu_busy_seconds, gpu_idle_since)

    def gpu_figures(
        self,
        key: tuple[int, int],
        readings: list[float],
        now: float,
        start: float = 0.0,
        held: list[float] | None = None,
    ) -> tuple[float, float | None]:
        """(GPU-seconds busy so far, idle since) of a worker whose GPUs read ``readings`` now
        (each 0 to 1 of a whole GPU): its last sample's count plus their utilization times the
        time since that sample (an estimate from one reading a sample), or ``start`` at its
        first sample (counting begins then); and since when every one of them has read idle
        (below base.GPU_IDLE of what the worker ``held`` of it: whole GPUs by default, a
        share's fraction), kept from the first such sample, None while one is busy. Taken
        before `keep` stores the sample."""
        last = self._last.get(key)
        idle = None
        parts = held or [1.0] * len(readings)
        if all(read < base.GPU_IDLE * part for read, part in zip(readings, parts, strict=True)):
            idle = last.gpu_idle_since if last and last.gpu_idle_since else time.time()
        if last is not None and last.gpu_busy_seconds is not None:
            return last.gpu_busy_seconds + sum(readings) * (now - last.taken), idle
        return max(0.0, start), idle

    def with_usage(self, status: base.WorkerStatus) -> base.WorkerStatus:
        """The status with its last sample's figures, where it carries none of its own (an
        ended local worker carries its exit record's CPU time and memory peak)."""
        sample = self._last.get((status.attempt_id, status.rank))
        if sample is None:
            return status
        figures = {
            "cpu_seconds": round(sample.cpu_seconds, 3),
            "memory_peak_mb": sample.memory_peak_mb,
            "gpu_busy_seconds": None
            if sample.gpu_busy_seconds is None
            else round(sample.gpu_busy_seconds, 3),
            "gpu_idle_since": sample.gpu_idle_since,
        }
        missing = {k: v for k, v in figures.items() if getattr(status, k) is None}
        return dataclasses.replace(status, **missing) if missing else status

    def forget(self, attempt_id: int) -> None:
        for key in [k for k in self._last if k[0] == attempt_id]:
            del self._last[key]
