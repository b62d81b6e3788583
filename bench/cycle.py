"""Benchmark: placement cycles committed to PostgreSQL.

    python bench/cycle.py [--nodes 1000] [--jobs 10000] [--steady-cycles 20]
                          [--dependent-fraction 0.0]

Builds 1,000 nodes (8/4/2/1-GPU nodes in 4 clusters and 4 GPU types) and 10,000 queued jobs of
mixed families in a fresh database (`mlsched_bench`, or $BENCH_DATABASE, on BENCH_SERVER_URL's
server, default local PostgreSQL); with `--dependent-fraction F`, that fraction of the jobs
(and of those arriving later) depends on one to three of the 1,000 jobs submitted before it
(afterok: it waits until they have succeeded). Then:
  1. drain: cycles until nothing more fits, each placing and committing what it can;
  2. steady: cycles where, before each, 2% of the running attempts end and as many new jobs
     arrive (outside the timing), to measure a cycle's latency on a full cluster.
Prints cycle latency p50/p99, this machine's raw PostgreSQL single-row insert rate (one
transaction per row: the physical reference for "one placement, one commit") and, as its last
line, `committed placements/s: N`: the placements committed by the drain cycles that placed
anything, divided by those cycles' whole time (load + decide + commit + explain).
"""

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import fresh_db  # noqa: E402

DATABASE = os.environ.get("BENCH_DATABASE", "mlsched_bench")
fresh_db.use(DATABASE)

import psycopg  # noqa: E402

NODE_SHAPES = [("A100", 8), ("V100", 4), ("T4", 2), ("L4", 1)]


def build(nodes: int, jobs: int, rng: random.Random, dependent: float) -> None:
    from django.contrib.auth.models import User

    from clusters.models import Cluster, Node
    from quotas.models import PriorityClass, Tenant

    clusters = [Cluster.objects.create(name=f"c{i}", health="healthy") for i in range(4)]
    Node.objects.bulk_create(
        Node(cluster=clusters[i % 4], name=f"n{i}", gpu_type=gpu_type, gpu_count=count,
             gpu_shareable=gpu_type in ("T4", "L4"), cpu_milli=16_000 * count,
             memory_mb=128_000 * count, topology={"rack": f"r{i // 16}"})
        for i in range(nodes)
        for gpu_type, count in [NODE_SHAPES[i % 4]]
    )  # fmt: skip
    tiers = [PriorityClass.objects.create(name=n, value=v) for n, v in
             (("high", 100), ("normal", 0), ("low", -100))]  # fmt: skip
    tenants = [Tenant.objects.create(name=f"t{i}", slug=f"t{i}") for i in range(8)]
    owner = User.objects.create(username="bench")
    queue(jobs, rng, tenants, tiers, owner, dependent)


def queue(count: int, rng: random.Random, tenants, tiers, owner, dependent: float = 0.0) -> None:
    from jobs.models import Dependency, Job

    def job(i):
        kind = rng.random()
        shape = (
            {"family": "training", "workers": rng.choice([1, 2]), "gpus": rng.choice([1, 2, 4])}
            if kind < 0.3
            else {"family": "batch_inference", "gpus": 1}
            if kind < 0.6
            else {"family": "evaluation", "gpu_milli": rng.choice([250, 500]),
                  "gpu_types": ["T4", "L4"]}
            if kind < 0.8
            else {"family": "evaluation", "gpus": 0}
        )  # fmt: skip
        return Job(tenant=rng.choice(tenants), owner=owner, name=f"j{i}", image="python:3.11",
                   command=["python", "-c", "pass"], cpu_milli=rng.choice([1000, 2000, 4000]),
                   memory_mb=rng.choice([4000, 16_000]), priority_class=rng.choice(tiers),
                   max_runtime_s=rng.choice([600, 3600, 14_400]), **shape)  # fmt: skip

    before = list(Job.objects.order_by("-id").values_list("id", flat=True)[:1000])[::-1]
    created = [j.pk for j in Job.objects.bulk_create((job(i) for i in range(count)), 2000)]
    links = []
    for i, job_id in enumerate(created):
        earlier = (before + created[:i])[-1000:]
        if earlier and rng.random() < dependent:
            for on in rng.sample(earlier, min(len(earlier), rng.choice([1, 1, 2, 3]))):
                links.append(Dependency(job_id=job_id, on_id=on))
    Dependency.objects.bulk_create(links, batch_size=5000)


def churn(fraction: float, rng: random.Random, dependent: float) -> int:
    """End a fraction of running attempts and queue as many new jobs (not timed)."""
    from django.contrib.auth.models import User

    from jobs import actions
    from jobs.models import Attempt
    from quotas.models import PriorityClass, Tenant

    live = list(Attempt.objects.filter(outcome="").values_list("id", flat=True))
    ending = rng.sample(live, max(1, int(len(live) * fraction)))
    for attempt_id in ending:
        actions.end_attempt(attempt_id, Attempt.Outcome.SUCCEEDED)
    queue(len(ending), rng, list(Tenant.objects.all()), list(PriorityClass.objects.all()),
          User.objects.get(username="bench"), dependent)  # fmt: skip
    return len(ending)


def insert_rate(rows: int = 3000) -> float:
    """Single-row INSERTs, one transaction each: PostgreSQL's commit rate on this machine."""
    with psycopg.connect(f"{fresh_db.SERVER}/{DATABASE}", autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS bench_insert (id serial primary key, v int)")
        start = time.perf_counter()
        for i in range(rows):
            conn.execute("INSERT INTO bench_insert (v) VALUES (%s)", [i])
        return rows / (time.perf_counter() - start)


def timed_cycle():
    from jobs import cycle

    start = time.perf_counter()
    result = cycle.run_cycle()
    return time.perf_counter() - start, result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--steady-cycles", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--dependent-fraction", type=float, default=0.0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    fresh_db.create(DATABASE)
    dependent = args.dependent_fraction
    build(args.nodes, args.jobs, rng, dependent)
    from django.conf import settings

    print(f"nodes: {args.nodes} queued jobs: {args.jobs} commit batch: "
          f"{settings.MLSCHED_COMMIT_BATCH} dependent fraction: {dependent}")  # fmt: skip
    latencies, placed, total = [], 0, 0.0  # placed and total: drain cycles that placed
    print("phase   cycle  considered  waiting  placed  skipped  load_s  decide_s  commit_s  "
          "explain_s  total_s")  # fmt: skip
    for phase, n in (("drain", 50), ("steady", args.steady_cycles)):
        for i in range(n):
            if phase == "steady":
                churn(0.02, rng, dependent)
            seconds, result = timed_cycle()
            latencies.append(seconds)
            if phase == "drain" and result.placed:
                placed += len(result.placed)
                total += seconds
            s = result.seconds
            print(f"{phase:7} {i:5}  {result.considered:10}  {result.waiting:7}  "
                  f"{len(result.placed):6}  {len(result.skipped):7}  {s['load']:6.3f}  "
                  f"{s['decide']:8.3f}  {s['commit']:8.3f}  {s['explain']:9.3f}  "
                  f"{seconds:7.3f}")  # fmt: skip
            if phase == "drain" and not result.placed:
                break
    p50 = statistics.median(latencies)
    p99 = statistics.quantiles(latencies, n=100)[98] if len(latencies) > 1 else latencies[0]
    print(f"cycle latency p50: {p50:.3f}s p99: {p99:.3f}s over {len(latencies)} cycles")
    print(f"raw PostgreSQL single-row inserts/s (one commit each): {insert_rate():.0f}")
    print(f"committed placements/s: {placed / total:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
