"""Job traces (Microsoft ITP 2021, Philly/ElasticFlow) and cluster specs for the replay.

Job families are not in these traces; they are assigned by a fixed rule (``family_of``), and
tenants by a stable hash of the job id (``tenant_of``), so a replay is reproducible. A trace of
one's own may name each job's team in a ``tenant`` column: its tenants are those.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path

from jobs.placement.model import BATCH_INFERENCE, EVALUATION, TRAINING
from jobs.simulator.csvin import read_rows

# Per GPU of a node, and per GPU a job asks for: CPU and memory are generous so that GPUs are
# the contended resource, as in the traces (which record GPUs only).
NODE_CPU_PER_GPU = 12_000
NODE_MEMORY_PER_GPU = 64_000
JOB_CPU_PER_GPU = 4_000
JOB_MEMORY_PER_GPU = 16_000
TENANTS = 4


@dataclass(frozen=True)
class TraceJob:
    """One job of a trace: submitted at ``submit`` (s), runs ``duration`` s on ``num_gpu`` GPUs."""

    id: str
    submit: float
    duration: float
    num_gpu: int
    tenant: str = ""  # the trace's own, where it has a tenant column


@dataclass(frozen=True)
class ClusterSpec:
    """``nodes`` identical nodes of ``gpus_per_node`` GPUs of ``gpu_type``."""

    name: str
    nodes: int
    gpus_per_node: int
    gpu_type: str


def read_jobs(path: str | Path) -> list[TraceJob]:
    """Jobs of an ITP (``submission_time``) or Philly (``submit_time``) CSV, by submit time."""

    def job(r: dict) -> TraceJob:
        submit = r["submission_time"] if "submission_time" in r else r["submit_time"]
        made = TraceJob(r["job_id"], float(submit), float(r["duration"]), int(r["num_gpu"]),
                        (r.get("tenant") or "").strip())  # fmt: skip
        if made.num_gpu < 1 or not made.duration >= 0:
            raise ValueError("a job needs num_gpu of 1 or more and a duration of 0 or more")
        return made

    columns = ("job_id", ("submission_time", "submit_time"), "duration", "num_gpu")
    jobs = read_rows(path, columns, job)
    seen: set[str] = set()
    for j in jobs:
        if j.id in seen:
            raise ValueError(f"{path}: job_id {j.id!r} appears more than once")
        seen.add(j.id)
    return sorted(jobs, key=lambda j: (j.submit, j.id))


def parse_clusters(spec: str) -> list[ClusterSpec]:
    """Clusters from ``name:NODESxGPUSxTYPE`` items separated by commas."""
    clusters = []
    for item in spec.split(","):
        name, _, shape = item.strip().partition(":")
        parts = shape.split("x", 2)
        counted = len(parts) == 3 and all(
            c.isascii() and c.isdigit() and int(c) > 0 for c in parts[:2]
        )
        if not name or not counted:
            raise ValueError(
                f"bad cluster spec {item!r}; want name:NODESxGPUSxTYPE with NODES and GPUS of 1"
                " or more"
            )
        clusters.append(ClusterSpec(name, int(parts[0]), int(parts[1]), parts[2]))
    return clusters


def family_of(job: TraceJob) -> str:
    """The documented family rule.

    Several GPUs, or one GPU for four hours or more: training. One GPU for under 15 minutes:
    evaluation. Other one-GPU jobs: batch inference (one shard).
    """
    if job.num_gpu > 1 or job.duration >= 4 * 3600:
        return TRAINING
    if job.duration < 15 * 60:
        return EVALUATION
    return BATCH_INFERENCE


def tenant_of(job: TraceJob) -> str:
    """The trace's tenant of the job, else one of ``TENANTS`` by a stable hash of its id."""
    return job.tenant or f"t{zlib.crc32(job.id.encode()) % TENANTS}"


def worker_shape(job: TraceJob, max_gpus_per_node: int) -> tuple[int, int]:
    """(workers, GPUs per worker): a job larger than a node becomes a gang of full nodes."""
    per = max(1, min(job.num_gpu, max_gpus_per_node))
    return -(-job.num_gpu // per), per
