"""The gang's hostfile (MLSCHED_HOSTFILE): a line `ADDRESS slots=N` per distinct address of the
gang's workers, in the order of the first rank at each, N their GPUs (a worker without GPUs
counts one), as DeepSpeed and Open MPI read it; and the local backend's, every worker's at
127.0.0.1. No database involved."""

import dataclasses
from pathlib import Path

import pytest

from clusters.backends import base
from clusters.backends.base import AttemptSpec, WorkerSpec
from tests.clusters.test_local_backend import ended, spec

MASTER = "10.0.0.9"


def gang(*workers: tuple[str, tuple[int, ...]]) -> AttemptSpec:
    """A gang of workers by rank, each (node, GPU indices)."""
    return AttemptSpec(
        attempt_id=1, job_id=7, number=1, tenant="alpha", name="job", image="local",
        command=("true",), env={}, checkpoint_dir="alpha/7", max_runtime_s=60,
        workers=tuple(WorkerSpec(rank=r, node=node, gpu_indices=gpus)
                      for r, (node, gpus) in enumerate(workers)),
    )  # fmt: skip


FOUR = (0, 1, 2, 3)
TWO_NODES_OF_TWO = gang(("n0", (0, 1)), ("n0", (2, 3)), ("n1", (0, 1)), ("n1", (2, 3)))


@pytest.mark.parametrize(
    ("attempt", "addrs", "want"),
    [
        # Several workers on several nodes, each node at one address.
        (TWO_NODES_OF_TWO, ("10.0.0.1", "10.0.0.1", "10.0.0.2", "10.0.0.2"),
         "10.0.0.1 slots=4\n10.0.0.2 slots=4\n"),
        # Each worker at an address of its own (Kubernetes' pods), whatever its node.
        (TWO_NODES_OF_TWO, ("w0.g", "w1.g", "w2.g", "w3.g"),
         "w0.g slots=2\nw1.g slots=2\nw2.g slots=2\nw3.g slots=2\n"),
        # In the order of each address's first rank, not of the addresses.
        (gang(("n1", FOUR), ("n0", (0,)), ("n1", (4, 5))), ("b", "a", "b"),
         "b slots=6\na slots=1\n"),
        # Workers of unequal GPU counts at one address add up.
        (gang(("n0", (0,)), ("n0", (1, 2, 3)), ("n1", FOUR)), ("a", "a", "b"),
         "a slots=4\nb slots=4\n"),
        # A worker without GPUs counts one slot, alone or beside GPU workers.
        (gang(("n0", ()), ("n0", ()), ("n1", ())), ("a", "a", "b"), "a slots=2\nb slots=1\n"),
        (gang(("n0", ()), ("n0", (0, 1))), ("a", "a"), "a slots=3\n"),
        # No addresses given: every worker at the master's.
        (gang(("n0", (0, 1)), ("n1", (0, 1))), (), f"{MASTER} slots=4\n"),
        (gang(("n0", ()), ("n1", ()), ("n2", ())), (), f"{MASTER} slots=3\n"),
        # A single worker: one line.
        (gang(("n0", FOUR)), ("localhost",), "localhost slots=4\n"),
        (gang(("n0", ())), (), f"{MASTER} slots=1\n"),
    ],
)  # fmt: skip
def test_it_lists_each_address_once_with_its_workers_gpus(attempt, addrs, want):
    assert base.hostfile(attempt, addrs, MASTER) == want


def test_it_pairs_each_address_with_the_worker_of_its_rank_in_any_order():
    listed_backwards = dataclasses.replace(
        TWO_NODES_OF_TWO, workers=(WorkerSpec(rank=1, node="n1", gpu_indices=FOUR),
                                   WorkerSpec(rank=0, node="n0"))
    )  # fmt: skip

    assert base.hostfile(listed_backwards, ("a", "b"), MASTER) == "a slots=1\nb slots=4\n"


def test_a_fractional_gpu_counts_one_slot():
    one = gang(("n0", (3,)))
    shared = dataclasses.replace(one, workers=(dataclasses.replace(one.workers[0], gpu_milli=500),))

    assert base.hostfile(shared, (), MASTER) == f"{MASTER} slots=1\n"


def test_it_lists_the_addresses_the_workers_are_told_of():
    addrs = ("10.0.0.1", "10.0.0.1", "10.0.0.2", "10.0.0.2")
    worker = TWO_NODES_OF_TWO.workers[0]

    told = base.worker_env(TWO_NODES_OF_TWO, worker, addrs[0], "/ckpt", addrs)

    hosts = base.hostfile(TWO_NODES_OF_TWO, addrs, MASTER)
    listed = [line.split()[0] for line in hosts.splitlines()]
    assert listed == list(dict.fromkeys(told["MLSCHED_WORKER_ADDRS"].split(",")))


# The local backend: every worker of the gang on this host.

PRINT_HOSTFILE = ["sh", "-c", 'cat "$MLSCHED_HOSTFILE"']


def test_each_local_worker_reads_the_gangs_hostfile(backend):
    backend.start(spec(PRINT_HOSTFILE, workers=2, gpus=((0, 1), (2, 3))))

    statuses = ended(backend, workers=2)
    lines = sorted((line.rank, line.stream, line.text) for line in backend.logs())
    assert lines == [(0, "stdout", "127.0.0.1 slots=4"), (1, "stdout", "127.0.0.1 slots=4")]
    assert {s.phase for s in statuses.values()} == {base.EXITED}


def test_a_local_worker_is_told_its_hostfile_in_its_own_folder_read_only(backend):
    told = 'echo "$MLSCHED_HOSTFILE"; stat -c %a "$MLSCHED_HOSTFILE"; cat "$MLSCHED_HOSTFILE"'
    backend.start(spec(["sh", "-c", told], gpus=((),)))  # a single worker, CPU-only

    assert ended(backend)
    path, mode, line = [line.text for line in backend.logs()]
    assert Path(path) == backend.worker_dir(1, 0).absolute() / base.HOSTFILE
    assert (mode, line) == ("444", "127.0.0.1 slots=1")
