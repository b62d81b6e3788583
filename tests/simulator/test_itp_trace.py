"""Two real ITP traces (kept in tests/data) replayed under fifo and mlsched, on the clusters of
bench/results/sim_replay_itp.md (8-GPU nodes sized for 70 % average GPU demand)."""

from pathlib import Path

import pytest

from jobs.simulator.replay import Replay, make_policy
from jobs.simulator.replay_cli import summarise
from jobs.simulator.traces import parse_clusters, read_jobs

TRACES = Path(__file__).resolve().parents[1] / "data/itp-2021"


def replayed(trace: str, spec: str, policy: str) -> dict[str, float]:
    jobs = read_jobs(TRACES / f"{trace}.csv")
    return summarise(Replay(parse_clusters(spec), jobs, make_policy(policy)).run())


@pytest.mark.parametrize("trace, spec", [("cluster01", "a:8x8xA100"), ("cluster06", "a:16x8xA100")])
def test_mlsched_halves_fifos_mean_wait_at_equal_use_with_a_bounded_longest_wait(trace, spec):
    fifo, mine = (replayed(trace, spec, policy) for policy in ("fifo", "mlsched"))

    assert mine["done"] == fifo["done"] == mine["jobs"]
    assert fifo["mean_wait"] >= 2 * mine["mean_wait"]
    assert round(mine["util"], 2) >= round(fifo["util"], 2)
    # Aging keeps large jobs from waiting without end behind a stream of small ones.
    assert mine["max_wait"] <= 2 * fifo["max_wait"]
