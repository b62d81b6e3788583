"""Replay job traces under several policies and tabulate waits and GPU use.

Usage:
    python bench/sim_replay.py --traces DIR/cluster01.csv DIR/cluster02.csv ... \
        --policies fifo,mlsched [--load 0.7 | --clusters a:16x8xA100] [--limit N] \
        [--per-job DIR] --out FILE.md

Each trace gets one cluster of 8-GPU nodes sized so that its average GPU demand is ``--load``
of the capacity (and at least its largest job): nodes = max(ceil(demand / load / 8), largest / 8);
or, with ``--clusters``, the same given clusters for every trace.
Writes a markdown table with the command on top; with ``--per-job``, also one CSV per trace and
policy of every job's first start, end and preemptions (``diff`` two of them to compare runs).
"""

from __future__ import annotations

import argparse
import math
import shlex
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jobs.simulator.cli import between  # noqa: E402
from jobs.simulator.replay import Replay, make_policy  # noqa: E402
from jobs.simulator.replay_cli import summarise  # noqa: E402
from jobs.simulator.traces import ClusterSpec, parse_clusters, read_jobs  # noqa: E402

GPUS_PER_NODE = 8


def cluster_for(jobs, load: float) -> ClusterSpec:
    """One cluster of 8-GPU nodes sized for the trace's average demand at the given load."""
    span = max(j.submit + j.duration for j in jobs) - min(j.submit for j in jobs)
    demand = sum(j.duration * j.num_gpu for j in jobs) / span
    nodes = max(math.ceil(demand / load / GPUS_PER_NODE), -(-max(j.num_gpu for j in jobs) // 8))
    return ClusterSpec("a", nodes, GPUS_PER_NODE, "A100")


def one(trace: str, policy: str, load: float, limit: int | None, spec: str | None) -> tuple:
    jobs = read_jobs(trace)[:limit]
    clusters = parse_clusters(spec) if spec else [cluster_for(jobs, load)]
    started, cpu = time.perf_counter(), time.process_time()
    result = Replay(clusters, jobs, make_policy(policy)).run()
    # Wall time, and this process's CPU time: the one a machine shared with other work
    # inflates least.
    timing = (time.perf_counter() - started, time.process_time() - cpu)
    per_job = [(j.trace.id, j.first_start, j.end, j.preempted) for j in result.jobs]
    return Path(trace).stem, clusters, policy, summarise(result), timing, per_job


def write_per_job(directory: Path, results) -> None:
    """One CSV per trace and policy: job id, first start, end, preemptions (repr of floats,
    so equal files mean equal runs)."""
    directory.mkdir(parents=True, exist_ok=True)
    for trace, _, policy, _, _, per_job in results:
        rows = ["job_id,first_start,end,preempted"]
        rows += [f"{i},{start!r},{end!r},{n}" for i, start, end, n in per_job]
        (directory / f"{trace}_{policy}.csv").write_text("\n".join(rows) + "\n")


def ratios(results) -> list[str]:
    """Per trace: how many times lower than fifo's each policy's mean wait is, and max waits."""
    by = {(r[0], r[2]): r[3] for r in results}
    traces = list(dict.fromkeys(r[0] for r in results))
    policies = [p for p in dict.fromkeys(r[2] for r in results) if p != "fifo"]
    out = [
        "Mean wait of fifo / mean wait of each policy (higher is better), and max wait in hours"
        " (fifo / mlsched):",
        "",
        "| trace | " + " | ".join(policies) + " | max wait fifo / mlsched |",
        "|" + "---|" * (len(policies) + 2),
    ]
    for trace in traces:
        fifo = by.get((trace, "fifo"))
        if fifo is None:
            continue
        cells = []
        for policy in policies:
            s = by.get((trace, policy))
            ratio = fifo["mean_wait"] / s["mean_wait"] if s and s["mean_wait"] else float("inf")
            cells.append(f"{ratio:.2f}x" if s else "")
        mine = by.get((trace, "mlsched"))
        worst = f"{fifo['max_wait'] / 3600:.1f} / {mine['max_wait'] / 3600:.1f}" if mine else ""
        out.append(f"| {trace} | " + " | ".join(cells) + f" | {worst} |")
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", nargs="+", required=True)
    parser.add_argument("--policies", default="fifo,priority,fairshare,mlsched")
    parser.add_argument("--load", type=between(0, float("inf")), default=0.7)
    parser.add_argument("--clusters", help="one cluster SPEC for every trace (instead of --load)")
    parser.add_argument("--limit", type=int)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--per-job", type=Path, help="directory for per-job CSVs")
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    policies = args.policies.split(",")
    tasks = [(t, p, args.load, args.limit, args.clusters) for t in args.traces for p in policies]
    with ProcessPoolExecutor(args.jobs) as pool:
        results = list(pool.map(one, *zip(*tasks, strict=True)))
    command = "python bench/sim_replay.py " + shlex.join(argv)
    lines = [
        f"Command: `{command}`",
        "",
        "Waits in hours; GPU util = allocated GPU time / capacity from the first submit to the"
        " last end; util while arriving = the same up to the last submit (a window all"
        " policies share).",
        "",
    ]
    lines += [
        "| trace | cluster | policy | jobs | mean wait | p50 | p95 | p99 | max wait | mean JCT "
        "| GPU util % | util while arriving % | frag % of free | preemptions | replay s "
        "| CPU s |",
        "|" + "---|" * 16,
    ]
    for trace, clusters, policy, s, (secs, cpu), _ in results:
        shape = "+".join(f"{c.nodes}x{c.gpus_per_node}" for c in clusters)
        lines.append(
            f"| {trace} | {shape} | {policy} | {s['done']} "
            f"| {s['mean_wait'] / 3600:.2f} | {s['p50_wait'] / 3600:.2f} "
            f"| {s['p95_wait'] / 3600:.2f} | {s['p99_wait'] / 3600:.2f} "
            f"| {s['max_wait'] / 3600:.1f} | {s['mean_jct'] / 3600:.2f} | {s['util']:.2f} "
            f"| {s['util_arrivals']:.2f} "
            f"| {s['frag']:.2f} | {s['preemptions']} | {secs:.0f} | {cpu:.0f} |"
        )
    lines += ["", *ratios(results)]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    if args.per_job:
        write_per_job(args.per_job, results)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
