"""Fair-share preemption on a platform one team has filled: a replay through the production
placement engine (jobs.simulator), with and without ``Policy.fair_share_preemption``.

Usage: python bench/fair_share_preemption.py [--seed 7] [--out FILE.md]

The platform: one cluster of 8 nodes of 8 GPUs. Team ``big`` submits 160 one-GPU batch
inference jobs of 2 to 4 hours in its first ten minutes (preemptible, as the replay's family rule
makes them), more than the platform holds; team ``small`` submits 24 one-GPU jobs of 30 to 90
minutes half an hour later. Without fair-share preemption, fair share only orders the queue:
``small`` waits for ``big``'s running jobs to end. With it, ``small``'s jobs evict ``big``'s
until the two hold as many GPUs each. A preempted job resumes its remaining work (the replay's
checkpoint assumption). Prints per team the mean, p95 and longest wait, the preemptions and the
GPU use, and as its last line ``small_mean_wait_s: OFF -> ON``.
"""

from __future__ import annotations

import argparse
import random
import shlex
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jobs.simulator.replay import Replay, make_policy  # noqa: E402
from jobs.simulator.replay_cli import percentile, summarise  # noqa: E402
from jobs.simulator.traces import ClusterSpec, TraceJob  # noqa: E402

CLUSTER = [ClusterSpec("a", 8, 8, "A100")]


def trace(seed: int) -> list[TraceJob]:
    """The two teams' jobs."""
    rng = random.Random(seed)
    big = [
        TraceJob(f"big-{i}", rng.uniform(0, 600), rng.uniform(2, 4) * 3600, 1, "big")
        for i in range(160)
    ]
    small = [
        TraceJob(f"small-{i}", 1800 + rng.uniform(0, 600), rng.uniform(0.5, 1.5) * 3600, 1, "small")
        for i in range(24)
    ]
    return sorted(big + small, key=lambda j: (j.submit, j.id))


def run(jobs: list[TraceJob], fair: bool) -> tuple[dict, dict, float]:
    """One replay: per team (mean, p95, longest wait, preemptions), the whole's figures, and
    the wall seconds it took."""
    started = time.perf_counter()
    result = Replay(CLUSTER, jobs, make_policy("mlsched", fair_share_preemption=fair)).run()
    took = time.perf_counter() - started
    teams = {}
    for team in ("big", "small"):
        mine = [j for j in result.jobs if j.tenant == team and j.first_start is not None]
        waits = [j.first_start - j.trace.submit for j in mine]
        teams[team] = {
            "jobs": len(mine),
            "mean_wait": statistics.fmean(waits),
            "p95_wait": percentile(waits, 95),
            "max_wait": max(waits),
            "preempted": sum(j.preempted for j in mine),
        }
    return teams, summarise(result), took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    jobs = trace(args.seed)
    lines = [f"`{shlex.join(['python', *sys.argv])}`", ""]
    lines.append("| fair-share preemption | team | jobs | mean wait s | p95 wait s | longest "
                 "wait s | times preempted | GPU use % (all) | replay s |")  # fmt: skip
    lines.append("|---|---|---|---|---|---|---|---|---|")
    means = {}
    for fair in (False, True):
        teams, whole, took = run(jobs, fair)
        means[fair] = teams["small"]["mean_wait"]
        for team, t in teams.items():
            lines.append(
                f"| {'on' if fair else 'off'} | {team} | {t['jobs']} | {t['mean_wait']:.0f} | "
                f"{t['p95_wait']:.0f} | {t['max_wait']:.0f} | {t['preempted']} | "
                f"{whole['util']:.1f} | {took:.1f} |"
            )
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    print(f"small_mean_wait_s: {means[False]:.0f} -> {means[True]:.0f}")


if __name__ == "__main__":
    main()
