"""Command line of the simulator: ``fgd`` (the FGD packing protocol) and ``replay``."""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

from jobs.placement.fit_policies import POLICIES
from jobs.simulator import fgd, report
from jobs.simulator.openb import read_nodes, read_pods


def parse_seeds(text: str) -> list[int]:
    """Seeds from ``42``, ``42-51`` or ``42,45,50``."""
    seeds: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        if int(hi or lo) < int(lo):
            raise ValueError(f"empty range {part!r}")
        seeds.extend(range(int(lo), int(hi or lo) + 1))
    return seeds


def between(low: float, high: float, kind=float):
    """An argparse type: a number in (low, high]."""

    def parse(text: str):
        value = kind(text)
        if not low < value <= high:
            most = f" and at most {high}" if high < float("inf") else ""
            raise argparse.ArgumentTypeError(f"want more than {low}{most}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its message
    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="simulate", description=__doc__)
    sub = parser.add_subparsers(dest="mode", required=True)
    f = sub.add_parser("fgd", help="the FGD paper's packing experiment on an openb trace")
    f.add_argument("--nodes", required=True, type=Path, help="node list CSV")
    f.add_argument("--pods", required=True, type=Path, help="pod list CSV")
    f.add_argument("--policy", required=True, help="comma-separated: " + ", ".join(POLICIES))
    group = f.add_mutually_exclusive_group()
    group.add_argument("--seed", type=int, default=42)
    group.add_argument("--seeds", type=parse_seeds, help="e.g. 42-51")
    f.add_argument(
        "--tune",
        type=between(0, 10),
        default=1.3,
        help="inflate pods to this x GPU capacity (at most 10)",
    )
    f.add_argument("--out", type=Path, help="directory for the CSV and PNG")
    f.add_argument(
        "--published",
        type=Path,
        help="published analysis_allo_discrete.csv to compare with "
        "(default: ../fgd-expected-results/ beside the pod list, if present)",
    )
    from jobs.simulator import replay_cli

    replay_cli.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the simulator; returns the process exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    command = "simulate " + shlex.join(argv)
    if args.mode == "fgd":
        return run_fgd(args, command)
    from jobs.simulator import replay_cli

    return replay_cli.run(args, command)


def bad_input(error: Exception) -> int:
    """One line on stderr for an input the simulator cannot use; the exit status is 2."""
    print(f"simulate: {error}", file=sys.stderr)
    return 2


def run_fgd(args: argparse.Namespace, command: str) -> int:
    """Run every policy x seed, print a line per run, write CSV/PNG, end with the summary line."""
    policies = args.policy.split(",")
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        print(f"unknown policy: {', '.join(unknown)}", file=sys.stderr)
        return 2
    seeds = args.seeds or [args.seed]
    try:
        nodes, pods = read_nodes(args.nodes), read_pods(args.pods)
    except (OSError, ValueError) as error:
        return bad_input(error)
    workload = args.pods.stem
    gpus = sum(n.gpus for n in nodes)
    published_path = args.published or report.find_published(args.pods)
    published = report.published_curves(published_path, workload) if published_path else {}
    rows: list[list] = []
    curves: dict[str, list] = {}
    results: dict[str, list[float | None]] = {}
    log = [f"# {command}"]
    frag_rows: dict[str, list] = {"frag": [], "frag_ratio": []}
    for policy in policies:
        for seed in seeds:
            trial = fgd.prepare(nodes, pods, seed, args.tune)
            started = time.perf_counter()
            outcome = fgd.run(trial, policy)
            elapsed = time.perf_counter() - started
            curve = fgd.allocation_curve(outcome)
            curves.setdefault(policy, []).append(curve)
            rows.append(report.csv_row(workload, policy, args.tune, seed, gpus, curve))
            for name, fn in (
                ("frag", fgd.fragmentation_curve),
                ("frag_ratio", fgd.fragmentation_ratio_curve),
            ):
                row = report.csv_row(workload, policy, args.tune, seed, gpus, fn(outcome))
                frag_rows[name].append(row[:4] + row[5:])
            unalloc = None if curve[100] is None else 100 - curve[100]
            results.setdefault(policy, []).append(unalloc)
            _say(
                log,
                f"{workload} {policy} seed={seed} pods={len(trial.pods)} "
                f"failed={outcome.failed} unallocated_at_100={_fmt(unalloc)} "
                f"seconds={elapsed:.2f}",
            )
    _summarise(results, published, seeds, log)
    last = [v for v in results[policies[-1]] if v is not None]
    final = f"unallocated_gpu_pct_at_100: {_fmt(sum(last) / len(last) if last else None)}"
    if args.out:
        _write_outputs(args.out, workload, rows, curves, published, command, log + [final])
        stem = f"{workload}_{'-'.join(curves)}"
        for name, frows in frag_rows.items():
            path = args.out / f"{stem}_{name}.csv"
            report.write_csv(path, frows, command, report.FRAG_HEADER)
    print(final)
    return 0


def _say(log: list[str], line: str) -> None:
    print(line, flush=True)
    log.append(line)


def _summarise(results: dict, published: dict, seeds: list[int], log: list[str]) -> None:
    for policy, values in results.items():
        got = [v for v in values if v is not None]
        mean = sum(got) / len(got) if got else None
        label = report.PUBLISHED_NAMES.get(policy)
        ref = report.mean_at(published[label], 100, seeds) if label in published else None
        diff = "" if ref is None or mean is None else f" diff={mean - ref:+.3f}"
        _say(
            log,
            f"summary {policy}: mean unallocated at 100% = {_fmt(mean)} "
            f"over {len(got)} seeds; published={_fmt(ref)}{diff}",
        )


def _write_outputs(out: Path, workload: str, rows, curves, published, command, log) -> None:
    """The runs' CSV (published layout), the plot, and the printed log, each under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    stem = f"{workload}_{'-'.join(curves)}"
    report.write_csv(out / f"{stem}.csv", rows, command)
    report.plot(out / f"{stem}.png", f"{workload} (median over seeds)", curves, published)
    (out / f"{stem}.txt").write_text("\n".join(log) + "\n")
    print(f"wrote {out / stem}.csv, .png and .txt")


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"
