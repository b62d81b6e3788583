"""The SRPT reference bound (bench/srpt_bound.py): what preemption with real durations gives."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "srpt_bound.py"


def _bound():
    spec = importlib.util.spec_from_file_location("srpt_bound", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_short_job_preempts_a_long_one_under_srpt_and_waits_under_fifo():
    jobs = [(0.0, 10.0), (1.0, 1.0)]  # (submit, duration) on one GPU
    bound = _bound()
    assert sorted(bound.waits(jobs, 1, srpt=False)) == [0.0, 9.0]
    assert sorted(bound.waits(jobs, 1, srpt=True)) == [0.0, 1.0]


def test_jobs_run_side_by_side_when_gpus_allow():
    jobs = [(0.0, 5.0), (0.0, 5.0), (2.0, 1.0)]
    bound = _bound()
    assert bound.waits(jobs, 2, srpt=False) == [0.0, 0.0, 3.0]
    assert sorted(bound.waits(jobs, 2, srpt=True)) == [0.0, 0.0, 1.0]
