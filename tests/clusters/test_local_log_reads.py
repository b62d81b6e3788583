"""The local backend reads a worker's log a bounded piece at a time, and reports the worker's
end once the piece read with it reaches the log's end."""

import sys

from clusters.backends import base, local
from clusters.backends.local import LocalBackend, parse_inventory
from tests.clusters.test_local_backend import phases, spec
from tests.processes import wait_until

CHATTY = "for i in range(20000): print(f'line {i:06d} ' + 'x' * 40)"  # about 1 MiB


def test_a_long_log_is_read_a_piece_at_a_time_and_the_end_reported_with_its_last_piece(
    backend, monkeypatch
):
    monkeypatch.setattr(local, "READ_BYTES", 64 * 1024)
    backend.start(spec([sys.executable, "-c", CHATTY]))
    assert wait_until(lambda: (backend.worker_dir(1, 0) / "exit.json").exists(), 30)

    steps = []  # as an agent's step goes: the status, then the lines
    while not steps or steps[-1][0] == base.RUNNING:
        phase = phases(backend)[0].phase
        steps.append((phase, [line.text for line in backend.logs()]))

    texts = [text for _, lines in steps for text in lines]
    assert texts == [f"line {i:06d} " + "x" * 40 for i in range(20000)]
    assert len(steps) >= 1024 * 1024 // (64 * 1024)
    assert all(len(lines) * 52 <= 64 * 1024 for _, lines in steps)
    assert [phase for phase, _ in steps[:-1]] == [base.RUNNING] * (len(steps) - 1)
    assert steps[-1][0] == base.EXITED and steps[-1][1]  # its end with its last lines


def test_a_restarted_agent_reads_a_long_log_again_a_piece_at_a_time(tmp_path, monkeypatch):
    monkeypatch.setattr(local, "READ_BYTES", 64 * 1024)
    nodes = parse_inventory("1x8xA100", "local")
    first = LocalBackend(tmp_path / "state", nodes, tmp_path / "ckpt", default_grace_s=2)
    first.start(spec([sys.executable, "-c", CHATTY]))
    assert wait_until(lambda: (first.worker_dir(1, 0) / "exit.json").exists(), 30)

    again = LocalBackend(tmp_path / "state", nodes, tmp_path / "ckpt", default_grace_s=2)
    lines = again.logs()

    assert 0 < len(lines) * 52 <= 64 * 1024
    assert [line.seq for line in lines] == list(range(len(lines)))
