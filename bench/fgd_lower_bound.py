"""A lower bound on unallocated GPU % at arrived load 100 % for any policy, from the pod list.

    python bench/fgd_lower_bound.py --nodes NODES.csv --pods PODS.csv --seeds 42-51 \
        [--big-failed 0,50,100,none] [--out FILE.md]

For each seed the pods are ordered and inflated exactly as the FGD protocol does
(``jobs.simulator.fgd.prepare``) and those arriving until the arrived GPU milli reaches the
cluster's capacity are packed offline, in any order, as GPU bins of 1000 milli: a GPU holds any
multiset of shares summing to at most 1000, or one whole-GPU task. CPU, memory, node boundaries
and GPU models are ignored and the packing may be fractional (a linear programme over GPU
patterns), so every policy that places pods one at a time allocates at most this much and the
bound is valid for all of them. With ``--big-failed F`` at most F shares above 500 milli may be
left out: a policy that places every pod that fits somewhere leaves out only those arriving when
no GPU has room for them, which happens only near the end.

Needs scipy (in requirements.txt); the simulator itself does not.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jobs.simulator import fgd  # noqa: E402
from jobs.simulator.cli import parse_seeds  # noqa: E402
from jobs.simulator.openb import read_nodes, read_pods  # noqa: E402

MILLI = 1000


def arrived_items(nodes, pods, seed: int, tune: float) -> tuple[Counter, int]:
    """GPU milli per item (shares, and one 1000 per whole GPU) arriving up to 100 %."""
    trial = fgd.prepare(nodes, pods, seed, tune)
    capacity = sum(n.gpus for n in trial.nodes) * MILLI
    items: Counter = Counter()
    arrived = 0
    for pod in trial.pods:
        arrived += pod.gpu_request
        if arrived > capacity:
            break
        if pod.num_gpu == 1 and pod.gpu_milli < MILLI:
            items[pod.gpu_milli] += 1
        elif pod.num_gpu:
            items[MILLI] += pod.num_gpu
    return items, capacity


def patterns(items: Counter) -> list[tuple[int, ...]]:
    """Every multiset of item sizes (within their counts) that fits one GPU."""
    sizes = sorted(items)
    out: list[tuple[int, ...]] = []

    def extend(start: int, room: int, current: list[int]) -> None:
        for j in range(start, len(sizes)):
            s = sizes[j]
            if s <= room and current.count(s) < items[s]:
                extend(j, room - s, [*current, s])
        if current:
            out.append(tuple(current))

    extend(0, MILLI, [])
    return out


def bound(items: Counter, capacity: int, big_failed: int | None) -> float:
    """Least unallocated GPU % over fractional packings of the items on the cluster's GPUs."""
    import numpy as np
    from scipy.optimize import linprog
    from scipy.sparse import lil_matrix

    sizes = sorted(items)
    pats = patterns(items)
    rows = len(sizes) + 2
    a = lil_matrix((rows, len(pats)))
    gain = np.zeros(len(pats))
    big = MILLI // 2
    for k, pat in enumerate(pats):
        for s in pat:
            a[sizes.index(s), k] += 1
        a[len(sizes), k] = 1  # one GPU per pattern
        a[len(sizes) + 1, k] = -sum(1 for s in pat if big < s < MILLI)
        gain[k] = -sum(pat)
    n_big = sum(n for s, n in items.items() if big < s < MILLI)
    floor = -(n_big - big_failed) if big_failed is not None else 0
    limits = [items[s] for s in sizes] + [capacity // MILLI, floor]
    result = linprog(gain, A_ub=a.tocsr(), b_ub=limits, bounds=(0, None), method="highs")
    if result.status != 0:
        raise RuntimeError(result.message)
    return (capacity + result.fun) / capacity * 100


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", required=True, type=Path)
    parser.add_argument("--pods", required=True, type=Path)
    parser.add_argument("--seeds", type=parse_seeds, default=parse_seeds("42-51"))
    parser.add_argument("--tune", type=float, default=1.3)
    parser.add_argument("--big-failed", default="0,50,100,none")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    nodes, pods = read_nodes(args.nodes), read_pods(args.pods)
    limits = [None if x == "none" else int(x) for x in args.big_failed.split(",")]
    per_seed = {seed: arrived_items(nodes, pods, seed, args.tune) for seed in args.seeds}
    lines = [
        f"Command: `python bench/fgd_lower_bound.py {' '.join(argv)}`",
        "",
        f"Lower bound on unallocated GPU % at arrived load 100 % ({args.pods.stem}), "
        f"seeds {args.seeds[0]}..{args.seeds[-1]}.",
        "",
        "| shares above 500 milli left out, at most | mean | min | max |",
        "|---|---|---|---|",
    ]
    for limit in limits:
        values = [bound(items, cap, limit) for items, cap in per_seed.values()]
        name = "any number" if limit is None else str(limit)
        mean = sum(values) / len(values)
        lines.append(f"| {name} | {mean:.2f} | {min(values):.2f} | {max(values):.2f} |")
        print(lines[-1], flush=True)
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
