"""Benchmark: the platform-wide figures of /metrics and the overview, recomputed, with and
without each cluster's nodes by state (`mlsched_nodes`).

    python bench/platform_figures.py [--clusters 20] [--nodes 100] [--repeat 9]

In a fresh database (`mlsched_bench_platform` on BENCH_SERVER_URL's server, default local
PostgreSQL): `--clusters` healthy clusters of `--nodes` 8-GPU nodes each, no jobs. Times
`metrics.compute_platform` (what a scrape or an overview view computes once the shared copy
is older than MLSCHED_METRICS_CACHE_S) alternately with the node states and without them (as
before they were counted), and `metrics.node_states` alone; prints the medians in
milliseconds, one line each.
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import fresh_db  # noqa: E402

DATABASE = "mlsched_bench_platform"
fresh_db.use(DATABASE)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clusters", type=int, default=20)
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    fresh_db.create(DATABASE)
    from django.db import connection
    from django.utils import timezone

    from clusters.models import Cluster, Node
    from jobs import metrics

    for c in range(args.clusters):
        cluster = Cluster.objects.create(name=f"c{c:02d}", health="healthy")
        Node.objects.bulk_create(
            Node(cluster=cluster, name=f"n{i:03d}", cpu_milli=64_000, memory_mb=512_000,
                 gpu_type="A100", gpu_count=8)
            for i in range(args.nodes)
        )  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    counted = metrics.node_states

    def timed(call) -> float:
        started = time.perf_counter()
        call()
        return (time.perf_counter() - started) * 1000

    with_states, without, alone = [], [], []
    metrics.compute_platform(timezone.now())  # warm-up
    for turn in range(args.repeat):
        # Each first every other turn: neither pays alone for what the one before left.
        for states in (counted, list) if turn % 2 else (list, counted):
            metrics.node_states = states
            took = timed(lambda: metrics.compute_platform(timezone.now()))
            (with_states if states is counted else without).append(took)
        alone.append(timed(counted))
    metrics.node_states = counted
    nodes = args.clusters * args.nodes
    print(f"platform figures, {nodes} nodes, with node states: "
          f"{statistics.median(with_states):.1f} ms")  # fmt: skip
    print(f"platform figures, without: {statistics.median(without):.1f} ms")
    print(f"node states alone: {statistics.median(alone):.1f} ms")


if __name__ == "__main__":
    main()
