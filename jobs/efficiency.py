"""How much of what an attempt asked for it used (Slurm's seff): CPU, memory, GPUs and time.

Its cluster's agent reports the CPU time of its workers' processes together, the memory
high-water mark of the largest of them and, where it reads its GPUs' utilization, the
GPU-seconds they were busy (`clusters.agents.record_usage`); set against the
request (cores per worker times workers over the run, memory per worker) they say whether a
job asks for what it needs. A job that asks for four times the memory it uses keeps three
quarters of a node's memory from everyone else's work; one that asks for a day and runs an
hour is planned around as if it would hold its GPUs all day (backfill fits work into the gap
before a reservation by runtime limits).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

MIB_PER_GIB = 1024
# GPUs idle for less than this are not said to be: a job loading data or saving a checkpoint
# leaves them idle for minutes.
IDLE_SAID_S = 600


@dataclass(frozen=True)
class Efficiency:
    cpu_seconds: float | None
    memory_peak_mb: int | None
    cores_asked: float  # all workers together
    memory_asked_mb: int  # per worker
    run_s: float | None  # from its first worker's start to its end (or now)
    limit_s: int  # its runtime limit
    gpu_busy_seconds: float | None = None
    gpus_asked: float = 0.0  # all workers together; a share in fractions of a GPU
    gpu_idle_since: datetime | None = None  # a live attempt's: since when its GPUs read idle
    gpu_idle_s: float | None = None  # for how long, up to now
    gpu_idle_limit_s: float | None = None  # its tenant stops it once idle this long

    @property
    def cores_used(self) -> float | None:
        """The cores it kept busy on average over its run."""
        if self.cpu_seconds is None or not self.run_s:
            return None
        return self.cpu_seconds / self.run_s

    @property
    def cpu_efficiency(self) -> float | None:
        """Of the cores asked for, the share kept busy (above 1 where nothing held it to its
        request: a host without cgroups)."""
        used = self.cores_used
        return None if used is None else used / self.cores_asked

    @property
    def memory_efficiency(self) -> float | None:
        """Of one worker's memory request, the share its largest worker reached."""
        if self.memory_peak_mb is None:
            return None
        return self.memory_peak_mb / self.memory_asked_mb

    @property
    def gpus_busy(self) -> float | None:
        """The GPUs it kept busy on average over its run."""
        if self.gpu_busy_seconds is None or not self.run_s or not self.gpus_asked:
            return None
        return self.gpu_busy_seconds / self.run_s

    @property
    def gpu_efficiency(self) -> float | None:
        """Of the GPUs asked for, the share kept busy."""
        busy = self.gpus_busy
        return None if busy is None else busy / self.gpus_asked

    @property
    def runtime_efficiency(self) -> float | None:
        """Of its runtime limit, the share it ran."""
        return None if self.run_s is None else self.run_s / self.limit_s

    def document(self) -> dict:
        """As the job document gives it."""
        return {
            "cpu_seconds": self.cpu_seconds,
            "memory_peak_mb": self.memory_peak_mb,
            "gpu_busy_seconds": self.gpu_busy_seconds,
            "cpu_efficiency": rounded(self.cpu_efficiency),
            "memory_efficiency": rounded(self.memory_efficiency),
            "runtime_efficiency": rounded(self.runtime_efficiency),
            "gpu_efficiency": rounded(self.gpu_efficiency),
            "gpu_idle_since": self.gpu_idle_since,
            # Worded once, here, for the job page and job.js, which redraws it.
            "cpu_used": self.cpu_text(),
            "memory_used": self.memory_text(),
            "runtime_used": self.runtime_text(),
            "gpu_used": self.gpu_text(),
        }

    def cpu_text(self) -> str:
        """For the job page, "1.8 of 4 cores (45 %)"; empty when not measured."""
        used = self.cores_used
        if used is None:
            return ""
        cores = "core" if self.cores_asked == 1 else "cores"
        return f"{used:.1f} of {self.cores_asked:g} {cores} ({percent(self.cpu_efficiency)})"

    def gpu_text(self) -> str:
        """For the job page, "1.4 of 2 GPUs busy (70 %)", and of a live attempt whose GPUs have
        read idle for IDLE_SAID_S or more "; idle for the last 45 min"; under its tenant's limit
        from half of it, if sooner, "; idle for the last 6 min (stopped at 10 min)"; empty when
        not measured."""
        busy = self.gpus_busy
        if busy is None:
            return ""
        gpus = "GPU" if self.gpus_asked <= 1 else "GPUs"
        said = f"{busy:.1f} of {self.gpus_asked:g} {gpus} busy ({percent(self.gpu_efficiency)})"
        limit = self.gpu_idle_limit_s
        said_from = IDLE_SAID_S if limit is None else min(IDLE_SAID_S, limit / 2)
        if self.gpu_idle_s is not None and self.gpu_idle_s >= said_from:
            said += f"; idle for the last {span(self.gpu_idle_s)}"
            if limit is not None:
                said += f" (stopped at {span(limit)})"
        return said

    def memory_text(self) -> str:
        """For the job page, "1.2 of 4.0 GiB (30 %)"; empty when not measured."""
        if self.memory_peak_mb is None:
            return ""
        if self.memory_asked_mb < MIB_PER_GIB:
            amounts = f"{self.memory_peak_mb} of {self.memory_asked_mb} MiB"
        else:
            peak, asked = (m / MIB_PER_GIB for m in (self.memory_peak_mb, self.memory_asked_mb))
            amounts = f"{peak:.1f} of {asked:.1f} GiB"
        return f"{amounts} ({percent(self.memory_efficiency)})"

    def runtime_text(self) -> str:
        """For the job page, "1 h of 24 h (4 %)"; empty before it ran."""
        if self.run_s is None:
            return ""
        ran = f"{span(self.run_s)} of {span(self.limit_s)}"
        return f"{ran} ({percent(self.runtime_efficiency)})"


def span(seconds: float) -> str:
    """A duration for people: "40 s", "12 min", "1.5 h", "2 h", "3.2 d"."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h".replace(".0 ", " ")
    return f"{seconds / 86400:.1f} d".replace(".0 ", " ")


def limit_said(seconds: int) -> str:
    """A runtime limit as the attempts' time used says it ("60 min"), and in the seconds it
    was given in where that says more: "60 min (3600 s)", "40 s"."""
    said = span(seconds)
    return said if said == f"{seconds} s" else f"{said} ({seconds} s)"


def percent(fraction: float | None) -> str:
    return f"{(fraction or 0) * 100:.0f} %"


def rounded(fraction: float | None) -> float | None:
    return None if fraction is None else round(fraction, 3)


def of_attempt(attempt, job, now: datetime) -> Efficiency:
    """The attempt's use against its request (its job's per worker, times the workers it
    started with: an elastic gang's may be fewer than its job's), its run counted to ``now``
    while it runs."""
    began = attempt.worker_ran_at or attempt.started_at
    idle = attempt.gpu_idle_since if attempt.ended_at is None else None
    limit = job.tenant.gpu_idle_limit_min if idle is not None else None
    run_s = None if began is None else max(0.0, ((attempt.ended_at or now) - began).total_seconds())
    return Efficiency(
        cpu_seconds=attempt.cpu_seconds,
        memory_peak_mb=attempt.memory_peak_mb,
        cores_asked=job.cpu_milli * attempt.workers / 1000,
        memory_asked_mb=job.memory_mb,
        run_s=run_s,
        limit_s=job.max_runtime_s,
        gpu_busy_seconds=attempt.gpu_busy_seconds,
        gpus_asked=attempt.workers * (job.gpus + job.gpu_milli / 1000),
        gpu_idle_since=idle,
        gpu_idle_s=None if idle is None else max(0.0, (now - idle).total_seconds()),
        gpu_idle_limit_s=None if limit is None else limit * 60.0,
    )
