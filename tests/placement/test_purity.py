"""The placement core stays pure: no Django, no clock, no randomness outside the seed."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from jobs.placement import place
from tests.placement.builders import j_eval, j_training, n4_t4_shared_nodes, n8_a100_nodes, snapshot

ROOT = Path(__file__).resolve().parents[2]

BLOCK_DJANGO = """
import sys
sys.modules["django"] = None  # any "import django..." now raises ImportError
import jobs.placement
from jobs.placement import place, Snapshot
assert place(Snapshot()).outcomes == ()
assert not any(name == "django" or name.startswith("django.") for name in sys.modules
               if sys.modules[name] is not None)
"""


def test_it_imports_and_runs_with_django_absent():
    result = subprocess.run(
        [sys.executable, "-c", BLOCK_DJANGO], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


def test_it_never_reads_the_clock(monkeypatch):
    def no_clock():
        raise AssertionError("place() must take the time from the snapshot")

    monkeypatch.setattr(time, "time", no_clock)
    monkeypatch.setattr(time, "monotonic", no_clock)
    queue = (j_training("g", gpus=4), j_eval("e"))
    place(snapshot(n8_a100_nodes(1) + n4_t4_shared_nodes(1), queue))


def test_the_seed_only_changes_ties():
    queue = tuple(j_training(f"g{i}", gpus=1) for i in range(3))
    a = place(snapshot(n8_a100_nodes(8), queue, seed=1))
    b = place(snapshot(n8_a100_nodes(8), queue, seed=2))
    assert [o.status for o in a.outcomes] == [o.status for o in b.outcomes] == ["placed"] * 3
