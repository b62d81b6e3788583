"""FGD protocol over every pod list in a folder: our policies side by side with the published.

Usage:
    python bench/sim_fgd_variants.py --csv-dir DIR --policies fgd,mlsched --seeds 42-51 \
        [--published summary_unalloc_gpu_pct_at_arrived100.csv] [--jobs 2] --out FILE.md

Writes a markdown table (mean unallocated GPU % at arrived 100 % per workload and policy, the
published means where known, and whether mlsched beats our fgd) with the command on top, and a
CSV of every run next to it.
"""

from __future__ import annotations

import argparse
import csv
import shlex
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jobs.simulator import fgd  # noqa: E402
from jobs.simulator.cli import parse_seeds  # noqa: E402
from jobs.simulator.openb import read_nodes, read_pods  # noqa: E402

PUBLISHED_LABELS = {
    "random": "Random",
    "dotprod": "DotProd",
    "gpuclustering": "GpuClustering",
    "gpupacking": "GpuPacking",
    "bestfit": "BestFit",
    "fgd": "FGD",
}


def one_run(nodes_path: str, pods_path: str, policy: str, seed: int) -> tuple:
    """(workload, policy, seed, unallocated % at 100, failed pods, seconds)."""
    nodes, pods = read_nodes(nodes_path), read_pods(pods_path)
    trial = fgd.prepare(nodes, pods, seed, 1.3)
    started = time.perf_counter()
    outcome = fgd.run(trial, policy)
    elapsed = time.perf_counter() - started
    unalloc = 100 - fgd.allocation_curve(outcome)[100]
    return Path(pods_path).stem, policy, seed, unalloc, outcome.failed, elapsed


def read_published(path: Path | None) -> dict[tuple[str, str], float]:
    if not path:
        return {}
    with open(path, newline="") as f:
        rows = csv.DictReader(f)
        return {
            (r["workload"], r["policy"]): float(r["unalloc_gpu_pct_at_arrived100_mean"])
            for r in rows
        }


def table(results: list[tuple], policies: list[str], published: dict) -> list[str]:
    by = {}
    for workload, policy, _seed, unalloc, _failed, _secs in results:
        by.setdefault((workload, policy), []).append(unalloc)
    workloads = sorted({w for w, _ in by})
    head = ["workload"] + [f"{p} (ours)" for p in policies]
    head += [f"{PUBLISHED_LABELS[p]} (published)" for p in policies if p in PUBLISHED_LABELS]
    lines = ["| " + " | ".join(head + ["mlsched < our fgd"]) + " |", "|" + "---|" * (len(head) + 1)]
    for w in workloads:
        means = {p: sum(by[w, p]) / len(by[w, p]) for p in policies if (w, p) in by}
        cells = [w] + [f"{means[p]:.2f}" if p in means else "" for p in policies]
        for p in policies:
            if p in PUBLISHED_LABELS:
                ref = published.get((w, PUBLISHED_LABELS[p]))
                cells.append("" if ref is None else f"{ref:.2f}")
        better = "mlsched" in means and "fgd" in means and means["mlsched"] < means["fgd"]
        cells.append("yes" if better else ("no" if "mlsched" in means else ""))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv-dir", required=True, type=Path)
    parser.add_argument("--nodes", default="openb_node_list_gpu_node.csv")
    parser.add_argument("--pattern", default="openb_pod_list_*.csv")
    parser.add_argument("--policies", default="fgd,mlsched")
    parser.add_argument("--seeds", type=parse_seeds, default=parse_seeds("42-51"))
    parser.add_argument("--published", type=Path)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    policies = args.policies.split(",")
    nodes = str(args.csv_dir / args.nodes)
    pods = sorted(str(p) for p in args.csv_dir.glob(args.pattern))
    tasks = [(nodes, p, pol, s) for p in pods for pol in policies for s in args.seeds]
    with ProcessPoolExecutor(args.jobs) as pool:
        results = list(pool.map(one_run, *zip(*tasks, strict=True)))
    command = "python bench/sim_fgd_variants.py " + shlex.join(argv)
    lines = [f"Command: `{command}`", "", f"Seeds: {args.seeds[0]}..{args.seeds[-1]}", ""]
    lines += ["Mean unallocated GPU % at arrived load 100 % (lower is better).", ""]
    lines += table(results, policies, read_published(args.published))
    slowest = {p: max(r[5] for r in results if r[1] == p) for p in policies}
    lines += [
        "",
        "Slowest single run (s): " + ", ".join(f"{p} {t:.2f}" for p, t in slowest.items()),
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    with open(args.out.with_suffix(".csv"), "w", newline="") as f:
        f.write(f"# {command}\n")
        writer = csv.writer(f)
        writer.writerow(["workload", "policy", "seed", "unalloc_pct_at_100", "failed", "seconds"])
        writer.writerows([*r[:3], round(r[3], 3), r[4], round(r[5], 2)] for r in results)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
