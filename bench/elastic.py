"""Elastic training gangs in the trace replay: the same traces under ``mlsched`` with whole
gangs and with gangs that may start with a share of their workers (``--elastic``).

Usage:
    python bench/elastic.py --traces DIR/cluster01.csv ... [--load 0.7] \
        [--shares 1,0.5,0.25] [--grow] [--jobs 2] --out FILE.md

With ``--grow``, each share below 1 is replayed twice, without and with growth (a gang that
started smaller restarts larger, ``--grow`` of the replay), and the table gains a ``grow``
column and the number of gangs that restarted larger.

Each trace gets one cluster of 8-GPU nodes sized for ``--load`` of its average demand
(``bench/sim_replay.py``'s rule). A gang started with fewer workers runs slower in proportion
(``jobs/simulator/replay.py``), so its completion time, not only its wait, says whether
starting early paid. Gangs are the training jobs of more than one worker (over 8 GPUs).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.sim_replay import cluster_for  # noqa: E402
from jobs.simulator.replay import Replay, make_policy  # noqa: E402
from jobs.simulator.replay_cli import summarise  # noqa: E402
from jobs.simulator.traces import read_jobs  # noqa: E402

H = 3600.0


def one(trace: str, share: float, load: float, grow: bool = False) -> tuple:
    jobs = read_jobs(trace)
    cluster = cluster_for(jobs, load)
    started = time.process_time()
    result = Replay([cluster], jobs, make_policy("mlsched", grow=grow), share).run()
    seconds = time.process_time() - started
    gangs = [j for j in result.jobs if j.whole > 1 and j.end is not None]
    gang = {
        "count": len(gangs),
        "wait": sum(j.first_start - j.trace.submit for j in gangs) / max(len(gangs), 1),
        "jct": sum(j.end - j.trace.submit for j in gangs) / max(len(gangs), 1),
    }
    return (
        Path(trace).stem,
        f"{cluster.nodes}x{cluster.gpus_per_node}",
        share,
        grow,
        summarise(result),
        gang,
        seconds,
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", nargs="+", required=True)
    parser.add_argument("--load", type=float, default=0.7)
    parser.add_argument("--shares", default="1,0.5")
    parser.add_argument("--grow", action="store_true", help="shares below 1 with growth too")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    shares = [float(s) for s in args.shares.split(",")]
    growths = (False, True) if args.grow else (False,)
    # Whole gangs (share 1) never grow: replayed once.
    tasks = [(t, s, args.load, g) for t in args.traces for s in shares for g in growths
             if s < 1 or not g]  # fmt: skip
    with ProcessPoolExecutor(args.jobs) as pool:
        results = list(pool.map(one, *zip(*tasks, strict=True)))
    lines = [
        f"Command: `python bench/elastic.py {shlex.join(argv)}`",
        "",
        "Hours; share 1 = whole gangs (today's replay); GPU util over the first submit to the "
        "last end.",
        "",
        *table(results, args.grow),
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


def table(results: list[tuple], grow: bool) -> list[str]:
    """The Markdown table; with ``grow``, whether gangs grew and how many times they did."""
    columns = ["trace", "cluster", "share", "grow", "jobs", "mean wait", "p95 wait", "max wait",
               "mean JCT", "gangs", "gangs' mean wait", "gangs' mean JCT", "GPU util %", "grows",
               "CPU s"]  # fmt: skip
    if not grow:
        columns = [c for c in columns if c not in ("grow", "grows")]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for trace, shape, share, grew, s, g, cpu in results:
        row = {
            "trace": trace,
            "cluster": shape,
            "share": f"{share:g}",
            "grow": "yes" if grew else "no",
            "jobs": f"{s['done']}",
            "mean wait": f"{s['mean_wait'] / H:.2f}",
            "p95 wait": f"{s['p95_wait'] / H:.2f}",
            "max wait": f"{s['max_wait'] / H:.1f}",
            "mean JCT": f"{s['mean_jct'] / H:.2f}",
            "gangs": f"{g['count']}",
            "gangs' mean wait": f"{g['wait'] / H:.2f}",
            "gangs' mean JCT": f"{g['jct'] / H:.2f}",
            "GPU util %": f"{s['util']:.2f}",
            "grows": f"{s['grows']}",
            "CPU s": f"{cpu:.0f}",
        }
        lines.append("| " + " | ".join(row[c] for c in columns) + " |")
    return lines


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
