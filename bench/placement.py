"""Benchmark one placement cycle at 5,000 nodes / 20,000 queued jobs, then at 2x and 4x.

Usage: python bench/placement.py [--scales 1,2,4] [--seed 7] [--repeat 3] [--waited-hours 0]
                                 [--queue-depth none|N] [--shared-ranges]
                                 [--running-shares 0] [--maintenance 0]
                                 [--lend 1] [--elastic 0] [--topology 0]
                                 [--fair-share-preemption] [--class-gpus 0] [--features 0]
                                 [--exclusive 0] [--pinned 0]

Nodes: 8-, 4-, 2- and 1-GPU nodes over 4 clusters and 4 GPU types (two of them shareable), a
fifth of the GPUs held by running jobs with expected ends. Queue: training gangs, batch
inference shards and evaluation tasks (many of them GPU shares) from 40 tenants with quotas.
With ``--shared-ranges`` the shareable nodes also give their GPUs' free ranges, as the live
snapshot does, and the core keeps those ranges exactly: this measures that bookkeeping (no
share runs at the start, so the decisions are those made without the ranges). With
``--running-shares F`` as well, that share of the shareable GPUs left idle holds one to three
running shares, in ranges apart, so that waiting shares are placed and estimated among
fragments.
With ``--maintenance F`` about that share of the racks has a maintenance window planned from
two hours on, for four hours, and a tenth of those racks are in one now (ending in an hour).
With ``--lend F`` under 1 each tenant lends its cohort only that share of its guarantees (a lend
limit), keeping the rest for itself. ``--fair-share-preemption`` turns on
``Policy.fair_share_preemption``: blocked GPU jobs of tenants under their fair share look for
victims among tenants over it. With ``--class-gpus F`` the top tier's work may hold that share
of all GPUs at once (its class's ``max_gpus``: ``QueuedJob.class_gpu_limit``). With
``--features F`` that share of the nodes offers ``ib`` (whole clusters' racks alike: every
node whose index is under F of each block of 100) and that share of the training gangs
requires it (``Node.features``, ``QueuedJob.features``). With ``--exclusive F`` that share
of the training jobs takes its nodes to itself (``QueuedJob.exclusive``: a node of exactly its
GPUs per worker, idle). With ``--pinned F`` that share of the evaluation jobs runs on two
nodes of its cluster alone (``only_nodes``, as the snapshot gives it: every other node among
the ones it keeps off, ``QueuedJob.exclude_nodes``, one tuple shared by the jobs pinned alike,
``snapshot.off_nodes``).
Each size runs ``--repeat`` cycles on the same snapshot and reports the median. Prints a
table and, as the last line, ``decisions/s: N``: the base size's median rate, over every queued
job (those past ``Policy.queue_depth`` included: the outcomes column counts them apart).
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jobs.placement import (  # noqa: E402
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
    place,
)

NOW = 1_800_000_000.0
CLUSTERS = ("east", "west", "north", "south")
GPU_TYPES = ("h100", "a100", "l4", "t4")
SHAREABLE = {"l4", "t4"}
# (GPUs per node, share of nodes, CPU milli, memory MB)
NODE_SHAPES = (
    (8, 0.4, 96_000, 1_024_000),
    (4, 0.3, 48_000, 512_000),
    (2, 0.2, 32_000, 256_000),
    (1, 0.1, 16_000, 128_000),
)
TENANTS = 40


def build_nodes(
    count: int, rng: random.Random, ranges: bool = False, shares: float = 0.0
) -> tuple[list[Node], list[RunningJob]]:
    """Nodes in racks of 16 of one GPU type and cluster (4 InfiniBand domains of 4 each);
    about a fifth of the GPUs are held by running jobs (one job per busy node). With
    ``ranges``, shareable nodes give their GPUs' free ranges; with ``shares`` too, that share
    of their idle GPUs holds running shares (``_running_shares``)."""
    nodes, running = [], []
    for i in range(count):
        gpus, cpu, mem = _node_shape(rng)
        rack = i // 16
        gpu_type = GPU_TYPES[rack % len(GPU_TYPES)]
        free = [1000] * gpus
        busy = rng.randrange(gpus + 1) if rng.random() < 0.4 else 0
        node_id = f"node-{i:06d}"
        if busy:
            for g in range(busy):
                free[g] = 0
            running.append(_running(f"run-{i:06d}", node_id, busy, rng))
            cpu, mem = cpu - busy * 4000, mem - busy * 32_000
        gaps: dict[int, tuple[tuple[int, int], ...]] = {}
        if shares and ranges and gpu_type in SHAREABLE:
            for g in range(busy, gpus):
                if rng.random() < shares:
                    gaps[g], held = _running_shares(f"run-{i:06d}-{g}", node_id, g, rng)
                    running.extend(held)
                    free[g] = max(milli for _, milli in gaps[g])
                    cpu, mem = cpu - 500 * len(held), mem - 4000 * len(held)
        nodes.append(
            Node(
                node_id,
                CLUSTERS[(rack // len(GPU_TYPES)) % len(CLUSTERS)],
                gpu_type,
                tuple(free),
                cpu,
                mem,
                gpu_type in SHAREABLE,
                (f"ib={i // 4}", f"rack={rack}"),
                gpu_free_ranges=(
                    tuple(gaps.get(g) or (((0, m),) if m else ()) for g, m in enumerate(free))
                    if ranges and gpu_type in SHAREABLE
                    else ()
                ),
            )
        )
    return nodes, running


def _running_shares(
    prefix: str, node_id: str, gpu: int, rng: random.Random
) -> tuple[tuple[tuple[int, int], ...], list[RunningJob]]:
    """One to three running shares of 100 to 250 milli on the GPU, each at the start of one of
    its four quarters, chosen at random (so the free milli lies in several ranges): the free
    (start, milli) ranges left, and the shares."""
    held, free, end = [], [], 0
    for n, quarter in enumerate(sorted(rng.sample(range(4), rng.randint(1, 3)))):
        start, milli = quarter * 250, rng.choice((100, 200, 250))
        if start > end:
            free.append((end, start - end))
        end = start + milli
        alloc = Allocation(node_id, ((gpu, milli),), 500, 4000, gpu_starts=(start,))
        job = _running(f"{prefix}-{n}", node_id, 0, rng)
        held.append(dataclasses.replace(job, allocations=(alloc,)))
    if end < 1000:
        free.append((end, 1000 - end))
    return tuple(free), held


def _node_shape(rng: random.Random) -> tuple[int, int, int]:
    roll = rng.random()
    for gpus, share, cpu, mem in NODE_SHAPES:
        if roll < share:
            return gpus, cpu, mem
        roll -= share
    return NODE_SHAPES[-1][0], NODE_SHAPES[-1][2], NODE_SHAPES[-1][3]


def _running(job_id: str, node_id: str, gpus: int, rng: random.Random) -> RunningJob:
    alloc = Allocation(node_id, tuple((g, 1000) for g in range(gpus)), gpus * 4000, gpus * 32_000)
    return RunningJob(
        job_id,
        f"tenant-{rng.randrange(TENANTS):02d}",
        tier=rng.randrange(3),
        preemptible=rng.random() < 0.5,
        allocations=(alloc,),
        expected_end=NOW + rng.uniform(60, 86_400),
        last_checkpoint=NOW - rng.uniform(0, 3600),
        started_at=NOW - 7200,
    )


def build_queue(
    count: int,
    rng: random.Random,
    waited_s: float = 0.0,
    elastic: float = 0.0,
    topology: float = 0.0,
) -> list[QueuedJob]:
    """A mixed queue: 30% training gangs, 30% batch shards, 40% evaluation tasks, submitted up to
    two hours (plus ``waited_s``) ago; about ``elastic`` of the gangs of several workers may
    start with half of them, and about ``topology`` of them keep their nodes in one rack (each
    drawn from a generator of its own, so the queue is otherwise the same)."""
    jobs = []
    elastic_rng = random.Random(count)
    topology_rng = random.Random(count + 1)
    for i in range(count):
        roll = rng.random()
        common = dict(
            id=f"job-{i:07d}",
            tenant=f"tenant-{rng.randrange(TENANTS):02d}",
            tier=rng.choice((0, 1, 1, 2, 3)),
            priority=rng.randrange(10),
            submit_time=NOW - waited_s - rng.uniform(0, 7200),
            max_runtime=rng.choice((600, 3600, 14_400, None)),
        )
        family = _training if roll < 0.3 else _batch if roll < 0.6 else _evaluation
        job = family(rng, common)
        if job.family == TRAINING and job.workers > 1 and elastic_rng.random() < elastic:
            job = dataclasses.replace(job, min_workers=job.workers // 2)
        if job.family == TRAINING and job.workers > 1 and topology_rng.random() < topology:
            job = dataclasses.replace(job, topology="rack")
        jobs.append(job)
    return jobs


def _training(rng: random.Random, common: dict) -> QueuedJob:
    gpus = rng.choice((1, 2, 4, 8, 8))
    return QueuedJob(
        family=TRAINING,
        workers=rng.choice((1, 1, 2, 4)),
        gpus=gpus,
        cpu_milli=gpus * 4000,
        memory_mb=gpus * 32_000,
        gpu_types=rng.choice((("h100",), ("a100",), ("h100", "a100"))),
        **common,
    )


def _batch(rng: random.Random, common: dict) -> QueuedJob:
    share = rng.random() < 0.5
    return QueuedJob(
        family=BATCH_INFERENCE,
        workers=rng.randrange(1, 9),
        gpus=0 if share else 1,
        gpu_milli=500 if share else 0,
        cpu_milli=2000,
        memory_mb=16_000,
        preemptible=True,
        gpu_types=("l4", "t4") if share else (),
        **common,
    )


def _evaluation(rng: random.Random, common: dict) -> QueuedJob:
    return QueuedJob(
        family=EVALUATION,
        gpu_milli=rng.choice((100, 250, 250, 500)),
        cpu_milli=1000,
        memory_mb=8000,
        preemptible=True,
        gpu_types=rng.choice(((), ("t4",), ("l4",))),
        **common,
    )


def build_tenants(nodes: list[Node], lend: float = 1.0) -> list[Tenant]:
    """Tenants with equal guarantees of each GPU type and a borrow limit of the same size,
    lending ``lend`` of each guarantee (1: all of it, no lend limit)."""
    per_type = {t: sum(len(n.gpu_free_milli) for n in nodes if n.gpu_type == t) for t in GPU_TYPES}
    tenants = []
    for i in range(TENANTS):
        shares = {t: total * 1000 // TENANTS for t, total in per_type.items()}
        lent = {t: None if lend >= 1 else int(share * lend) for t, share in shares.items()}
        quotas = tuple(Quota(gpu_flavor(t), s, s, lent[t]) for t, s in shares.items())
        tenants.append(Tenant(f"tenant-{i:02d}", weight=1.0 + i % 3, quotas=quotas))
    return tenants


def build_snapshot(
    scale: int,
    seed: int,
    waited_s: float = 0.0,
    policy: Policy | None = None,
    ranges: bool = False,
    maintenance: float = 0.0,
    lend: float = 1.0,
    elastic: float = 0.0,
    topology: float = 0.0,
    shares: float = 0.0,
    class_gpus: float = 0.0,
    features: float = 0.0,
    exclusive: float = 0.0,
    pinned: float = 0.0,
) -> Snapshot:
    """The benchmark snapshot at ``scale`` times the base size."""
    rng = random.Random(seed)
    nodes, running = build_nodes(5000 * scale, rng, ranges, shares)
    queue = build_queue(20_000 * scale, rng, waited_s, elastic, topology)
    if class_gpus:
        limit = int(sum(len(node.gpu_free_milli) for node in nodes) * 1000 * class_gpus)
        top = max(job.tier for job in queue)
        queue = [dataclasses.replace(job, class_gpu_limit=limit) if job.tier == top else job
                 for job in queue]  # fmt: skip
    if maintenance:
        nodes = with_windows(nodes, maintenance, random.Random(seed + 1))
    if features:
        nodes, queue = with_features(nodes, queue, features, random.Random(seed + 2))
    if exclusive:
        rng = random.Random(seed + 3)
        queue = [dataclasses.replace(job, exclusive=True)
                 if job.family == "training" and rng.random() < exclusive else job
                 for job in queue]  # fmt: skip
    if pinned:
        queue = with_pins(nodes, queue, pinned, random.Random(seed + 4))
    return Snapshot(
        tuple(nodes),
        tuple(running),
        tuple(queue),
        tuple(build_tenants(nodes, lend)),
        now=NOW,
        seed=seed,
        policy=policy or Policy(),
    )


def with_pins(nodes: list[Node], queue: list, share: float, rng: random.Random) -> list:
    """That share of the evaluation jobs pinned to the first two nodes of one of four sweeps'
    clusters, keeping off every other node as the snapshot says it (one tuple per sweep)."""
    sweeps = []
    for cluster in sorted({node.cluster for node in nodes})[:4]:
        kept = {node.id for node in nodes if node.cluster == cluster}
        kept = set(sorted(kept)[:2])
        sweeps.append(tuple(sorted(node.id for node in nodes if node.id not in kept)))
    return [dataclasses.replace(job, exclude_nodes=rng.choice(sweeps))
            if job.family == "evaluation" and rng.random() < share else job
            for job in queue]  # fmt: skip


def with_features(nodes: list[Node], queue: list, share: float, rng: random.Random):
    """About ``share`` of the nodes offering ``ib`` (the first of every hundred), and of the
    training gangs requiring it."""
    ib = frozenset({"ib"})
    nodes = [dataclasses.replace(node, features=ib) if i % 100 < share * 100 else node
             for i, node in enumerate(nodes)]  # fmt: skip
    queue = [dataclasses.replace(job, features=ib)
             if job.family == "training" and rng.random() < share else job
             for job in queue]  # fmt: skip
    return nodes, queue


def with_windows(nodes: list[Node], share: float, rng: random.Random) -> list[Node]:
    """The nodes with maintenance windows on about ``share`` of their racks of 16."""
    racks: dict[int, tuple[float, float] | None] = {}
    out = []
    for i, node in enumerate(nodes):
        rack = i // 16
        if rack not in racks:
            planned = rng.random() < share
            now = planned and rng.random() < 0.1
            span = (NOW - 3600, NOW + 3600) if now else (NOW + 7200, NOW + 6 * 3600)
            racks[rack] = span if planned else None
        span = racks[rack]
        out.append(node if span is None else dataclasses.replace(node, closes_at=span[0],
                                                                 opens_at=span[1]))  # fmt: skip
    return out


def run(
    scale: int,
    seed: int,
    repeat: int,
    waited_s: float = 0.0,
    policy: Policy | None = None,
    ranges: bool = False,
    maintenance: float = 0.0,
    lend: float = 1.0,
    elastic: float = 0.0,
    topology: float = 0.0,
    shares: float = 0.0,
    class_gpus: float = 0.0,
    features: float = 0.0,
    exclusive: float = 0.0,
    pinned: float = 0.0,
) -> dict:
    """Time ``repeat`` cycles on one snapshot; the median wall time is the result.

    CPU seconds are printed beside it: on a shared machine, wall time well above CPU time
    means other processes took the cores.
    """
    snapshot = build_snapshot(
        scale,
        seed,
        waited_s,
        policy,
        ranges,
        maintenance,
        lend,
        elastic,
        topology,
        shares,
        class_gpus,
        features,
        exclusive,
        pinned,
    )
    walls, cpus = [], []
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        decision = place(snapshot)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    counts: dict[str, int] = {}
    for outcome in decision.outcomes:
        key = "beyond_depth" if outcome.reason == "beyond_queue_depth" else outcome.status
        counts[key] = counts.get(key, 0) + 1
    return {
        "nodes": len(snapshot.nodes),
        "jobs": len(snapshot.queued),
        "wall": statistics.median(walls),
        "cpu": statistics.median(cpus),
        "counts": counts,
    }


def main() -> None:
    """Run the scales and print the table; the last line is the base size's median rate."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scales", default="1,2,4")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=3, help="cycles per size (median)")
    parser.add_argument(
        "--waited-hours",
        type=float,
        default=0.0,
        help="age the whole queue: past the tier wait limit, jobs below the top tier are "
        "decided twice (ahead, then at their own place)",
    )
    parser.add_argument(
        "--queue-depth",
        default="",
        help="Policy.queue_depth: a number, or none to decide every job (default: Policy's)",
    )
    parser.add_argument(
        "--shared-ranges",
        action="store_true",
        help="shareable nodes give their GPUs' free ranges, as the live snapshot does",
    )
    parser.add_argument(
        "--running-shares",
        type=float,
        default=0.0,
        help="with --shared-ranges, the share of shareable idle GPUs holding running shares",
    )
    parser.add_argument(
        "--maintenance",
        type=float,
        default=0.0,
        help="the share of racks with a maintenance window planned (from 2 h on, for 4 h)",
    )
    parser.add_argument(
        "--lend",
        type=float,
        default=1.0,
        help="the share of its guarantees each tenant lends its cohort (1: all, no lend limit)",
    )
    parser.add_argument(
        "--elastic",
        type=float,
        default=0.0,
        help="the share of gangs of several workers that may start with half of them",
    )
    parser.add_argument(
        "--topology",
        type=float,
        default=0.0,
        help="the share of gangs of several workers that keep their nodes in one rack",
    )
    parser.add_argument(
        "--fair-share-preemption",
        action="store_true",
        help="Policy.fair_share_preemption: GPU jobs may evict tenants over their fair share",
    )
    parser.add_argument(
        "--class-gpus",
        type=float,
        default=0.0,
        help="the share of all GPUs the top tier's work may hold at once (its class's max_gpus)",
    )
    parser.add_argument(
        "--features",
        type=float,
        default=0.0,
        help="the share of the nodes offering a feature, and of the training gangs requiring it",
    )
    parser.add_argument(
        "--exclusive",
        type=float,
        default=0.0,
        help="the share of the training jobs taking their nodes to themselves",
    )
    parser.add_argument(
        "--pinned",
        type=float,
        default=0.0,
        help="the share of the evaluation jobs running on two nodes alone (only_nodes)",
    )
    args = parser.parse_args()
    policy = Policy(fair_share_preemption=args.fair_share_preemption)
    if args.queue_depth:
        depth = None if args.queue_depth == "none" else int(args.queue_depth)
        policy = dataclasses.replace(policy, queue_depth=depth)
    print(f"{'nodes':>7} {'jobs':>7} {'seconds':>8} {'cpu s':>6} {'decisions/s':>12}  outcomes")
    rates = []
    for scale in (int(s) for s in args.scales.split(",")):
        r = run(
            scale, args.seed, args.repeat, args.waited_hours * 3600, policy, args.shared_ranges,
            args.maintenance, args.lend, args.elastic, args.topology, args.running_shares,
            args.class_gpus, args.features, args.exclusive, args.pinned,
        )  # fmt: skip
        rates.append(r["jobs"] / r["wall"])
        summary = " ".join(f"{k}={v}" for k, v in sorted(r["counts"].items()))
        print(
            f"{r['nodes']:>7} {r['jobs']:>7} {r['wall']:>8.2f} {r['cpu']:>6.2f} "
            f"{rates[-1]:>12,.0f}  {summary}",
            flush=True,
        )
    print(f"decisions/s: {rates[0]:.0f}")


if __name__ == "__main__":
    main()
