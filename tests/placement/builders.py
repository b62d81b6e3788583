"""Snapshot builders named by shape: ``n8_a100_nodes(4)`` is four 8-GPU A100 nodes."""

from __future__ import annotations

import dataclasses
import itertools

from jobs.placement import (
    BATCH_INFERENCE,
    EVALUATION,
    TRAINING,
    Allocation,
    Node,
    Policy,
    QueuedJob,
    Quota,
    RunningJob,
    Snapshot,
    Tenant,
    gpu_flavor,
    ranges,
)

NOW = 1_000_000.0
CPU_PER_GPU = 8000
MEM_PER_GPU = 64_000
_ids = itertools.count()


def nodes(
    count: int,
    gpus: int,
    gpu_type: str,
    cluster: str = "c1",
    shareable: bool = False,
    prefix: str = "",
    topology: tuple[str, ...] = (),
    healthy: bool = True,
) -> tuple[Node, ...]:
    """``count`` identical, entirely free nodes."""
    prefix = prefix or f"{cluster}-{gpu_type}-n{gpus}-{next(_ids)}-"
    return tuple(
        Node(
            id=f"{prefix}{i}",
            cluster=cluster,
            gpu_type=gpu_type,
            gpu_free_milli=(1000,) * gpus,
            cpu_free_milli=max(gpus, 1) * CPU_PER_GPU,
            memory_free_mb=max(gpus, 1) * MEM_PER_GPU,
            gpu_shareable=shareable,
            topology=topology,
            healthy=healthy,
        )
        for i in range(count)
    )


def n8_a100_nodes(count: int, **kw) -> tuple[Node, ...]:
    return nodes(count, 8, "a100", **kw)


def n4_a100_nodes(count: int, **kw) -> tuple[Node, ...]:
    return nodes(count, 4, "a100", **kw)


def n8_h100_nodes(count: int, **kw) -> tuple[Node, ...]:
    return nodes(count, 8, "h100", **kw)


def n4_t4_shared_nodes(count: int, **kw) -> tuple[Node, ...]:
    return nodes(count, 4, "t4", shareable=True, **kw)


def n1_t4_shared_nodes(count: int, **kw) -> tuple[Node, ...]:
    return nodes(count, 1, "t4", shareable=True, **kw)


def cpu_nodes(count: int, **kw) -> tuple[Node, ...]:
    return nodes(count, 0, "", **kw)


def with_free(node: Node, gpu_free: tuple[int, ...]) -> Node:
    """The node with some GPUs already (partly) in use."""
    return dataclasses.replace(node, gpu_free_milli=gpu_free)


def j_training(id: str, workers: int = 1, gpus: int = 8, **kw) -> QueuedJob:
    kw.setdefault("submit_time", NOW)
    kw.setdefault("cpu_milli", gpus * 1000)
    kw.setdefault("memory_mb", gpus * 1000)
    return QueuedJob(
        id=id, tenant=kw.pop("tenant", "alpha"), family=TRAINING, workers=workers, gpus=gpus, **kw
    )


def j_batch(id: str, shards: int = 1, gpus: int = 1, gpu_milli: int = 0, **kw) -> QueuedJob:
    kw.setdefault("submit_time", NOW)
    kw.setdefault("cpu_milli", 1000)
    kw.setdefault("memory_mb", 1000)
    return QueuedJob(
        id=id,
        tenant=kw.pop("tenant", "alpha"),
        family=BATCH_INFERENCE,
        workers=shards,
        gpus=0 if gpu_milli else gpus,
        gpu_milli=gpu_milli,
        preemptible=kw.pop("preemptible", True),
        **kw,
    )


def j_eval(id: str, gpu_milli: int = 250, gpus: int = 0, **kw) -> QueuedJob:
    kw.setdefault("submit_time", NOW)
    kw.setdefault("cpu_milli", 500)
    kw.setdefault("memory_mb", 500)
    return QueuedJob(
        id=id,
        tenant=kw.pop("tenant", "alpha"),
        family=EVALUATION,
        workers=1,
        gpus=gpus,
        gpu_milli=0 if gpus else gpu_milli,
        preemptible=kw.pop("preemptible", True),
        **kw,
    )


def running_on(
    node: Node, id: str, gpus: int, tenant: str = "alpha", **kw
) -> tuple[Node, RunningJob]:
    """A running job holding the node's first ``gpus`` GPUs, and the node without them."""
    held = tuple(i for i, m in enumerate(node.gpu_free_milli) if m == 1000)[:gpus]
    assert len(held) == gpus, "the node has too few free GPUs"
    cpu, mem = gpus * 1000, gpus * 1000
    free = tuple(0 if i in held else m for i, m in enumerate(node.gpu_free_milli))
    node = dataclasses.replace(
        node,
        gpu_free_milli=free,
        cpu_free_milli=node.cpu_free_milli - cpu,
        memory_free_mb=node.memory_free_mb - mem,
    )
    allocation = Allocation(node.id, tuple((i, 1000) for i in held), cpu, mem)
    kw.setdefault("started_at", NOW - 3600)
    return node, RunningJob(id=id, tenant=tenant, allocations=(allocation,), **kw)


def with_ranges(node: Node) -> Node:
    """The node giving its GPUs' free ranges, as the live snapshot does for shareable nodes
    (a partly used GPU's free milli as one range at its end)."""
    free = tuple(((1000 - m, m),) if m else () for m in node.gpu_free_milli)
    return dataclasses.replace(node, gpu_free_ranges=free)


def share_running_on(
    node: Node, id: str, start: int, milli: int, gpu: int = 0, tenant: str = "alpha", **kw
) -> tuple[Node, RunningJob]:
    """A running share holding ``[start, start + milli)`` of the node's GPU ``gpu``, and the
    node (which gives its ranges) without it."""
    free = list(node.gpu_free_ranges)
    gpu_free = ranges.take(ranges.of(free[gpu]), start, milli)
    free[gpu] = tuple((s, e - s) for s, e in gpu_free)
    node = dataclasses.replace(
        node,
        gpu_free_ranges=tuple(free),
        gpu_free_milli=tuple(max((m for _, m in r), default=0) for r in free),
        cpu_free_milli=node.cpu_free_milli - 500,
        memory_free_mb=node.memory_free_mb - 500,
    )
    allocation = Allocation(node.id, ((gpu, milli),), 500, 500, gpu_starts=(start,))
    kw.setdefault("started_at", NOW - 3600)
    return node, RunningJob(id=id, tenant=tenant, allocations=(allocation,), **kw)


def gpu_tenant(id: str, gpu_type: str, guaranteed: int, borrow: int | None = 0, **kw) -> Tenant:
    """A tenant with a GPU quota in whole GPUs (stored in milli)."""
    used = kw.pop("used_gpus", 0)
    quota = Quota(
        gpu_flavor(gpu_type), guaranteed * 1000, None if borrow is None else borrow * 1000
    )
    return Tenant(id=id, quotas=(quota,), usage={gpu_flavor(gpu_type): used * 1000}, **kw)


def snapshot(
    nodes=(), queued=(), running=(), tenants=(), policy: Policy | None = None, **kw
) -> Snapshot:
    return Snapshot(
        nodes=tuple(nodes),
        queued=tuple(queued),
        running=tuple(running),
        tenants=tuple(tenants),
        now=kw.pop("now", NOW),
        policy=policy or Policy(),
        **kw,
    )
