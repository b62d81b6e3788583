"""Results of FGD-protocol runs: CSV rows in the published layout, published curves, the plot."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

from jobs.simulator.fgd import MAX_ARRIVED_PCT

# Our policy names and the published ``sc_policy`` labels of fgd-expected-results/.
PUBLISHED_NAMES = {
    "random": "01-Random",
    "dotprod": "02-DotProd",
    "gpuclustering": "03-GpuClustering",
    "gpupacking": "04-GpuPacking",
    "bestfit": "05-BestFit",
    "fgd": "06-FGD",
}
HEADER = ["workload", "sc_policy", "tune", "seed", "total_gpus"] + [
    str(k) for k in range(MAX_ARRIVED_PCT + 1)
]


def csv_row(
    workload: str, policy: str, tune: float, seed: int, gpus: int, curve: Sequence[float | None]
) -> list:
    """One row in the layout of analysis_allo_discrete.csv (values rounded to 2 decimals)."""
    values = ["" if v is None else round(v, 2) for v in curve]
    return [workload, policy, tune, seed, gpus, *values]


def write_csv(path: Path, rows: Sequence[list], command: str, header=HEADER) -> None:
    """Write rows under the header, after a comment line with the command that produced them."""
    with open(path, "w", newline="") as f:
        f.write(f"# {command}\n")
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)


# The published fragmentation files have no total_gpus column.
FRAG_HEADER = HEADER[:4] + HEADER[5:]


def published_curves(path: Path, workload: str) -> dict[str, dict[int, list[float]]]:
    """Published allocation curves by policy label, then seed, for one workload."""
    curves: dict[str, dict[int, list[float]]] = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if row["workload"] != workload:
                continue
            values = [float(row[str(k)]) for k in range(MAX_ARRIVED_PCT + 1)]
            curves.setdefault(row["sc_policy"], {})[int(row["seed"])] = values
    return curves


def find_published(pods_path: Path) -> Path | None:
    """The published results next to a pod list (``../fgd-expected-results/``), if present."""
    candidate = pods_path.resolve().parent.parent / "fgd-expected-results"
    path = candidate / "analysis_allo_discrete.csv"
    return path if path.exists() else None


def mean_at(curves_by_seed: dict[int, list[float]], k: int, seeds: Sequence[int]) -> float | None:
    """Mean unallocated GPU % at arrived k over the given seeds present in the published data."""
    values = [100 - curves_by_seed[s][k] for s in seeds if s in curves_by_seed]
    return sum(values) / len(values) if values else None


def plot(
    path: Path,
    title: str,
    ours: dict[str, list[list[float | None]]],
    published: dict[str, dict[int, list[float]]],
) -> None:
    """Unallocated GPU % against arrived load (75..130 %): ours solid, published dashed.

    Each line is the median over seeds, as in the paper's Fig. 9(a).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ks = list(range(75, MAX_ARRIVED_PCT + 1))
    fig, ax = plt.subplots(figsize=(8, 5))
    ax.plot(ks, [max(0, 100 - k) for k in ks], color="grey", lw=1, label="ideal")
    # One colour per policy: ours solid, the published run of the same policy dashed.
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colours = dict(zip([*PUBLISHED_NAMES, "mlsched"], palette, strict=False))
    ours_by_label = {label: policy for policy, label in PUBLISHED_NAMES.items()}
    for label, by_seed in sorted(published.items()):
        colour = colours.get(ours_by_label.get(label, ""))
        ax.plot(
            ks,
            _median_unalloc(list(by_seed.values()), ks),
            ls="--",
            lw=1,
            color=colour,
            label=f"published: {label}",
        )
    for policy, curves in ours.items():
        ax.plot(
            ks,
            _median_unalloc(curves, ks),
            lw=2,
            color=colours.get(policy),
            label=f"ours: {policy}",
        )
    ax.set(xlabel="arrived GPU load (% of capacity)", ylabel="unallocated GPU (%)", title=title)
    ax.set_ylim(0, 30)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _median_unalloc(curves: Sequence[Sequence[float | None]], ks: Sequence[int]) -> list[float]:
    out = []
    for k in ks:
        values = sorted(100 - v for c in curves if (v := c[k]) is not None)
        n = len(values)
        if not n:
            out.append(float("nan"))
        else:
            out.append(values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2)
    return out
