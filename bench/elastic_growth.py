"""Benchmark the placement cycle's growth pass: running elastic gangs restarted larger.

Usage: python bench/elastic_growth.py [--nodes 2000] [--gangs 200] [--repeat 5] [--rounds 3]

Nodes: 8-GPU A100 nodes over 4 clusters. ``--gangs`` elastic training gangs of 8 workers x 8
GPUs (at least 2) run with 4 workers each, started three hours ago with a 24-hour runtime
limit and a checkpoint ten minutes ago; half the nodes are otherwise free. The queue holds 500
small jobs that all fit (so nothing queued waits for room, and every gang may grow): the worst
case for the pass, which then searches room for every gang. Each round times ``--repeat``
cycles with growth on (``Policy.grow_after_s`` 600) and as many with it off (None),
alternated, and reports the medians and their ratio; the last line is ``growth_ratio: R``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jobs.placement import (  # noqa: E402
    EVALUATION,
    TRAINING,
    Allocation,
    Elastic,
    Node,
    Policy,
    QueuedJob,
    RunningJob,
    Snapshot,
    place,
)

NOW = 1_800_000_000.0
HOUR = 3600.0
CLUSTERS = ("east", "west", "north", "south")


def build(nodes: int, gangs: int, growth: bool) -> Snapshot:
    free = [1000] * 8
    inventory, running, elastic = [], [], []
    held = set()
    for g in range(gangs):
        allocations = []
        for w in range(4):
            index = g * 4 + w
            held.add(index)
            allocations.append(
                Allocation(f"n{index:05d}", tuple((i, 1000) for i in range(8)), 8000, 64_000)
            )
        job_id = f"gang-{g:04d}"
        running.append(
            RunningJob(
                job_id,
                f"t{g % 20}",
                allocations=tuple(allocations),
                started_at=NOW - 3 * HOUR,
                expected_end=NOW + 21 * HOUR,
                last_checkpoint=NOW - 600,
            )
        )
        whole = QueuedJob(
            job_id, f"t{g % 20}", TRAINING, workers=8, cpu_milli=1000, memory_mb=8000, gpus=8,
            max_runtime=24 * HOUR, min_workers=2, submit_time=NOW - 4 * HOUR,
        )  # fmt: skip
        elastic.append(Elastic(whole, 4))
    for i in range(nodes):
        busy = i in held
        inventory.append(
            Node(
                f"n{i:05d}",
                CLUSTERS[i * len(CLUSTERS) // nodes],
                "a100",
                (0,) * 8 if busy else tuple(free),
                96_000 - 8000 * busy,
                1_024_000 - 64_000 * busy,
                False,
                (f"rack={i // 16}",),
            )  # fmt: skip
        )
    queue = [
        QueuedJob(
            f"eval-{k:04d}",
            f"t{k % 20}",
            EVALUATION,
            cpu_milli=1000,
            memory_mb=4000,
            gpus=1,
            max_runtime=HOUR,
            submit_time=NOW - 60,
        )  # fmt: skip
        for k in range(500)
    ]
    policy = Policy(grow_after_s=600.0 if growth else None)
    return Snapshot(
        nodes=tuple(inventory), running=tuple(running), queued=tuple(queue), now=NOW,
        policy=policy, elastic=tuple(elastic),
    )  # fmt: skip


def timed(snapshot: Snapshot) -> tuple[float, int]:
    start = time.process_time()
    decision = place(snapshot)
    return time.process_time() - start, len(decision.grown)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--gangs", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    on, off = build(args.nodes, args.gangs, True), build(args.nodes, args.gangs, False)
    with_growth, without, grown = [], [], 0
    print("| round | growth on, cpu s (median) | growth off, cpu s (median) | gangs grown |")
    print("|---|---|---|---|")
    for r in range(1, args.rounds + 1):
        a, b = [], []
        for _ in range(args.repeat):
            seconds, grown = timed(on)
            a.append(seconds)
            b.append(timed(off)[0])
        with_growth += a
        without += b
        print(f"| {r} | {statistics.median(a):.3f} | {statistics.median(b):.3f} | {grown} |")
    ratio = statistics.median(with_growth) / statistics.median(without)
    print(
        f"| all | {statistics.median(with_growth):.3f} | {statistics.median(without):.3f} | "
        f"{grown} |"
    )
    print(f"growth_ratio: {ratio:.2f}")


if __name__ == "__main__":
    main()
