"""Readers for the Alibaba 2023 "openb" node and pod lists (any file of the same columns)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from jobs.placement.fragmentation import MILLI, TaskShape
from jobs.simulator.csvin import read_rows


@dataclass(frozen=True)
class Node:
    """One GPU node of the node list."""

    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str


@dataclass(frozen=True)
class Pod:
    """One pod of the pod list; timestamps are not read (the FGD protocol ignores them)."""

    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    gpu_spec: str = ""

    @property
    def gpu_request(self) -> int:
        """Total GPU milli requested (what the arrived load counts)."""
        return self.num_gpu * self.gpu_milli

    @property
    def shape(self) -> TaskShape:
        """The pod as a task shape; a multi-GPU pod always takes whole GPUs."""
        if self.num_gpu == 0:
            gpu = 0
        elif self.num_gpu == 1 and self.gpu_milli < MILLI:
            gpu = self.gpu_milli
        else:
            gpu = self.num_gpu * MILLI
        types = frozenset(t for t in self.gpu_spec.split("|") if t)
        return TaskShape(self.cpu_milli, gpu, types)


def read_nodes(path: str | Path, gpu_only: bool = True) -> list[Node]:
    """Nodes of a node list (``sn,cpu_milli,memory_mib,gpu,model``); GPU nodes only by default."""
    nodes = read_rows(
        path,
        ("sn", "cpu_milli", "memory_mib", "gpu", "model"),
        lambda r: Node(
            r["sn"], int(r["cpu_milli"]), int(r["memory_mib"]), int(r["gpu"]), r["model"]
        ),
    )
    return [n for n in nodes if n.gpus > 0] if gpu_only else nodes


def read_pods(path: str | Path) -> list[Pod]:
    """Pods of a pod list; ``gpu_spec`` is optional (the multigpu lists do not have it)."""

    def pod(r: dict) -> Pod:
        made = Pod(
            r["name"],
            int(r["cpu_milli"]),
            int(r["memory_mib"]),
            int(r["num_gpu"]),
            int(r["gpu_milli"]),
            (r.get("gpu_spec") or "").strip(),
        )
        if min(made.cpu_milli, made.memory_mib, made.num_gpu, made.gpu_milli) < 0:
            raise ValueError("cpu_milli, memory_mib, num_gpu and gpu_milli must be 0 or more")
        if made.gpu_milli > MILLI:
            raise ValueError(f"gpu_milli is per GPU: at most {MILLI}")
        return made

    return read_rows(path, ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"), pod)
