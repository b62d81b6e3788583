"""The placement core stays pure: no Django, no clock, no randomness outside the seed."""

from __future__ import annotations

import gc
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


REPLAY = """
import hashlib
from jobs.placement import place
from tests.placement.builders import *
nodes = n8_a100_nodes(6, topology=("rack=a",)) + n4_t4_shared_nodes(6, cluster="c2")
queue = [j_training(f"t{i}", workers=1 + i % 3, gpus=(1, 2, 4, 8)[i % 4], tenant=("a", "b")[i % 2])
         for i in range(30)]
queue += [j_eval(f"e{i}", gpu_milli=(100, 250, 500)[i % 3], tier=i % 3) for i in range(60)]
queue += [j_batch(f"b{i}", shards=1 + i % 4, gpu_milli=500) for i in range(20)]
decision = place(snapshot(nodes, queue, seed=5))
print(hashlib.sha256(repr(decision).encode()).hexdigest())
"""


def test_a_replay_in_another_process_gives_the_same_decision():
    def run(hash_seed: str) -> str:
        env = {"PYTHONHASHSEED": hash_seed, "PATH": "/usr/bin:/bin"}
        done = subprocess.run(
            [sys.executable, "-c", REPLAY], cwd=ROOT, env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert run("1") == run("2")


def test_it_leaves_the_garbage_collector_as_it_found_it():
    place(snapshot(n8_a100_nodes(1), (j_training("g", gpus=1),)))
    assert gc.isenabled()
    gc.disable()
    try:
        place(snapshot(n8_a100_nodes(1), (j_training("g", gpus=1),)))
        assert not gc.isenabled()
    finally:
        gc.enable()
