"""The ``replay`` subcommand: dynamic replay of job traces (arrivals, durations, departures)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from jobs.simulator.cli import bad_input, between
from jobs.simulator.replay import REPLAY_POLICIES, Replay, Result, make_policy
from jobs.simulator.traces import parse_clusters, read_jobs


def add_parser(sub) -> None:
    """Register ``replay`` and its options."""
    r = sub.add_parser("replay", help="replay a job trace with arrivals and departures")
    r.add_argument("--trace", required=True, type=Path, help="ITP 2021 or Philly job CSV")
    r.add_argument("--clusters", required=True, help="e.g. a:16x8xA100,b:32x4xV100")
    r.add_argument("--policy", required=True, help="comma-separated: " + ", ".join(REPLAY_POLICIES))
    r.add_argument(
        "--limit",
        type=between(0, float("inf"), int),
        help="replay only the first N jobs by submit time",
    )
    r.add_argument(
        "--half-life-h",
        type=hours,
        default=24.0,
        help="mlsched: hours in which a tenant's recent use halves, as the live "
        "MLSCHED_FAIR_SHARE_HALF_LIFE_H (default 24; 0: fair share on what tenants hold now)",
    )
    r.add_argument(
        "--fair-share-preemption",
        action="store_true",
        help="mlsched: GPU jobs of tenants under their fair share may evict preemptible work "
        "of tenants over it, as the live MLSCHED_FAIR_SHARE_PREEMPTION=1",
    )
    r.add_argument(
        "--elastic",
        type=between(0, 1),
        default=1.0,
        help="mlsched: training gangs may start with this share of their workers (rounded "
        "up), running slower in proportion, as jobs with min_workers (default 1: whole gangs)",
    )
    r.add_argument(
        "--grow",
        action="store_true",
        help="mlsched, with --elastic below 1: a gang that started smaller restarts larger "
        "where no queued job waits for the room, after 600 s as the live "
        "MLSCHED_ELASTIC_GROW_AFTER_S (it keeps its work and stops for the grace period)",
    )
    r.add_argument("--out", type=Path, help="directory for the report and the GPU use PNG")


def hours(text: str) -> float:
    """An argparse type: hours, 0 or more."""
    value = float(text)
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError("want 0 or more hours")
    return value


def run(args: argparse.Namespace, command: str) -> int:
    """Replay the trace under each policy, print the reports; the last line is the summary."""
    policies = args.policy.split(",")
    unknown = [p for p in policies if p not in REPLAY_POLICIES]
    if unknown:
        print(f"unknown policy: {', '.join(unknown)}", file=sys.stderr)
        return 2
    try:
        jobs = read_jobs(args.trace)[: args.limit]
        clusters = parse_clusters(args.clusters)
    except (OSError, ValueError) as error:
        return bad_input(error)
    log, results, last = [f"# {command}"], {}, ""
    for policy in policies:
        started = time.perf_counter()
        engine = make_policy(policy, args.half_life_h, args.fair_share_preemption, args.grow)
        elastic = args.elastic if policy == "mlsched" else 1.0
        result = Replay(clusters, jobs, engine, elastic).run(_progress(policy, started))
        stats = summarise(result)
        results[policy] = result
        grows = args.grow and policy == "mlsched"
        lines = report_lines(policy, stats, time.perf_counter() - started, grows)
        last = (
            f"mean_wait_s: {stats['mean_wait']:.1f} p95_wait_s: {stats['p95_wait']:.1f} "
            f"max_wait_s: {stats['max_wait']:.1f} gpu_util_pct: {stats['util']:.2f}"
        )
        for line in [*lines, f"{policy} {last}"]:
            print(line, flush=True)
            log.append(line)
    if args.out:
        write_outputs(args.out, args.trace.stem, results, log + [last])
    print(last)
    return 0


def _progress(policy: str, started: float):
    def say(done: int, total: int) -> None:
        elapsed = time.perf_counter() - started
        print(
            f"{policy}: {done}/{total} jobs started, {elapsed:.0f} s", file=sys.stderr, flush=True
        )

    return say


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


def summarise(result: Result) -> dict[str, float]:
    """Wait, completion time, GPU use, fragmentation and preemption figures of one replay."""
    # (submit, first start, end) of every job that finished
    done = [(j.trace.submit, j.first_start, j.end) for j in result.jobs
            if j.first_start is not None and j.end is not None]  # fmt: skip
    waits = [first - submit for submit, first, _ in done]
    jcts = [end - submit for submit, _, end in done]
    begin = min((j.trace.submit for j in result.jobs), default=0.0)
    finish = max((end for _, _, end in done), default=begin)
    last_submit = max((j.trace.submit for j in result.jobs), default=begin)
    stats = {
        "jobs": len(result.jobs),
        "done": len(done),
        "never_fit": result.never_fit,
        "mean_wait": sum(waits) / len(waits) if waits else 0.0,
        "p50_wait": percentile(waits, 50),
        "p95_wait": percentile(waits, 95),
        "p99_wait": percentile(waits, 99),
        "max_wait": max(waits, default=0.0),
        "mean_jct": sum(jcts) / len(jcts) if jcts else 0.0,
        "p95_jct": percentile(jcts, 95),
        "util": 100 * _time_mean(result.timeline, begin, finish) / result.total_gpus,
        # The same over the arrival window only, which every policy shares: a policy that
        # leaves one long job for the end is not charged for the otherwise empty tail.
        "util_arrivals": 100 * _time_mean(result.timeline, begin, last_submit) / result.total_gpus,
        "frag": _time_mean(result.frag_samples, begin, finish),
        "preemptions": result.preemptions,
        "grows": result.grows,
    }
    return stats


def _time_mean(samples: Sequence[tuple[float, float]], begin: float, finish: float) -> float:
    """Time-weighted mean of a step function given as (time, value from then on)."""
    if finish <= begin or not samples:
        return 0.0
    total = 0.0
    for (t, v), (t_next, _) in zip(samples, [*samples[1:], (finish, 0)], strict=True):
        total += v * max(min(t_next, finish) - max(t, begin), 0.0)
    return total / (finish - begin)


def report_lines(
    policy: str, s: dict[str, float], seconds: float, grows: bool = False
) -> list[str]:
    """The report of one replay; with ``grows``, how many elastic gangs restarted larger."""
    return [
        f"{policy}: jobs={s['jobs']} finished={s['done']} never_fit={s['never_fit']} "
        f"replay_seconds={seconds:.1f}",
        f"{policy}: wait_s mean={s['mean_wait']:.1f} p50={s['p50_wait']:.1f} "
        f"p95={s['p95_wait']:.1f} p99={s['p99_wait']:.1f} max={s['max_wait']:.1f}",
        f"{policy}: jct_s mean={s['mean_jct']:.1f} p95={s['p95_jct']:.1f}",
        f"{policy}: gpu_util_pct={s['util']:.2f} "
        f"gpu_util_pct_while_arriving={s['util_arrivals']:.2f} "
        f"fragmentation_pct_of_free={s['frag']:.2f} preemptions={s['preemptions']}"
        + (f" grows={s['grows']}" if grows else ""),
    ]


def write_outputs(out: Path, stem: str, results: dict[str, Result], log: list[str]) -> None:
    """The printed report and a PNG of GPU allocation over time, one line per policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    name = f"replay_{stem}_{'-'.join(results)}"
    (out / f"{name}.txt").write_text("\n".join(log) + "\n")
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for policy, result in results.items():
        times = [t / 86400 for t, _ in result.timeline]
        used = [100 * a / result.total_gpus for _, a in result.timeline]
        ax.step(times, used, where="post", lw=0.8, label=policy)
    ax.set(xlabel="days since first submit", ylabel="GPUs allocated (%)", title=stem)
    ax.set_ylim(0, 105)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / f"{name}.png", dpi=120)
    plt.close(fig)
    print(f"wrote {out / name}.txt and .png")
