"""Small generated openb-format fixtures, so the simulator tests need no shared trace."""

import csv

import pytest

NODE_HEADER = ["sn", "cpu_milli", "memory_mib", "gpu", "model"]
POD_HEADER = ["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec"]


def write_csv(path, header, rows):
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    return path


@pytest.fixture
def n4_gpu_nodes(tmp_path):
    """Four nodes: two with 2 G2 GPUs, one with 4 T4 GPUs, one CPU-only (to be ignored)."""
    rows = [
        ["node-0", 32000, 65536, 2, "G2"],
        ["node-1", 32000, 65536, 2, "G2"],
        ["node-2", 64000, 131072, 4, "T4"],
        ["node-3", 64000, 131072, 0, ""],
    ]
    return write_csv(tmp_path / "nodes.csv", NODE_HEADER, rows)


@pytest.fixture
def p12_mixed_pods(tmp_path):
    """Twelve pods: shares, whole GPUs, a 2-GPU pod, CPU-only ones and a T4-only share."""
    rows = [
        ["pod-00", 4000, 1024, 1, 500, ""],
        ["pod-01", 4000, 1024, 1, 500, ""],
        ["pod-02", 4000, 1024, 1, 300, ""],
        ["pod-03", 8000, 2048, 1, 1000, ""],
        ["pod-04", 8000, 2048, 2, 1000, ""],
        ["pod-05", 2000, 1024, 0, 0, ""],
        ["pod-06", 2000, 1024, 0, 0, ""],
        ["pod-07", 4000, 1024, 1, 700, "T4"],
        ["pod-08", 4000, 1024, 1, 200, ""],
        ["pod-09", 8000, 2048, 1, 1000, ""],
        ["pod-10", 4000, 1024, 1, 500, ""],
        ["pod-11", 4000, 1024, 1, 1000, ""],
    ]
    return write_csv(tmp_path / "pods.csv", POD_HEADER, rows)
