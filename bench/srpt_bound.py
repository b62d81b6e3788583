"""A lower bound on mean wait for one-GPU traces: preemptive shortest-remaining-time-first.

Usage:
    python bench/srpt_bound.py --trace JOBS.csv --gpus N [--out FILE.md]

With every job on one GPU, preemptive SRPT with the real durations (free, instant preemption)
minimises the mean time a job spends not running, over every policy that could exist, up to
the multi-server effects that make SRPT near-optimal rather than optimal. Next to fifo's mean
wait it says how far any scheduler could cut the mean wait on this capacity. "Wait" here is
the whole time a job is not running (completion - submit - duration), which for fifo is its
queue wait.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jobs.simulator.traces import read_jobs  # noqa: E402


def waits(durations_by_submit: list[tuple[float, float]], gpus: int, srpt: bool) -> list[float]:
    """Time each job spends not running, under preemptive SRPT or under FIFO."""
    jobs = sorted(durations_by_submit)
    remaining: dict[int, float] = {}
    done: dict[int, float] = {}
    now, i = 0.0, 0
    while i < len(jobs) or remaining:
        order = sorted(remaining, key=lambda k: (remaining[k], k) if srpt else (jobs[k][0], k))
        running = order[:gpus]
        arrival = jobs[i][0] if i < len(jobs) else float("inf")
        end = now + min((remaining[k] for k in running), default=float("inf"))
        step = min(arrival, end)
        for k in running:
            remaining[k] -= step - now
        now = step
        for k in running:
            if remaining[k] <= 1e-9:
                del remaining[k]
                done[k] = now
        while i < len(jobs) and jobs[i][0] <= now:
            remaining[i] = jobs[i][1]
            i += 1
    return [done[k] - jobs[k][0] - jobs[k][1] for k in done]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", required=True)
    parser.add_argument("--gpus", type=int, required=True)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    jobs = read_jobs(args.trace)
    if any(j.num_gpu != 1 for j in jobs):
        parser.error("--trace: every job must use one GPU")
    pairs = [(j.submit, j.duration) for j in jobs]
    fifo = waits(pairs, args.gpus, srpt=False)
    srpt = waits(pairs, args.gpus, srpt=True)
    lines = [
        f"Command: `python bench/srpt_bound.py {shlex.join(argv)}`",
        "",
        f"{len(jobs)} one-GPU jobs on {args.gpus} GPUs; wait = time not running, in hours.",
        "",
        "| order | mean wait | max wait |",
        "|---|---|---|",
        f"| fifo | {statistics.mean(fifo) / 3600:.2f} | {max(fifo) / 3600:.1f} |",
        f"| preemptive SRPT, real durations | {statistics.mean(srpt) / 3600:.2f} "
        f"| {max(srpt) / 3600:.1f} |",
        "",
        f"fifo / SRPT mean wait: {statistics.mean(fifo) / statistics.mean(srpt):.2f}x",
    ]
    text = "\n".join(lines) + "\n"
    if args.out:
        args.out.write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
