"""The local backend runs real processes: no database involved."""

import contextlib
import dataclasses
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from clusters.backends import base, cgroups, local, local_shim
from clusters.backends.base import AttemptSpec, WorkerSpec
from clusters.backends.local import OOM_REASON, LocalBackend, alive, parse_inventory
from tests.processes import gone, wait_until

NODE_ENV = (
    "import os; print(*(os.environ[k] for k in "
    "['LOCAL_RANK', 'LOCAL_WORLD_SIZE', 'NODE_RANK', 'GROUP_RANK']))"
)
SHARD_ENV = "import os; print(os.environ['MLSCHED_SHARD_INDEX'], os.environ['MLSCHED_SHARDS'])"
PRINT_ENV = (
    "import os; print(' '.join(f'{k}={os.environ.get(k)}' for k in "
    "['RANK','WORLD_SIZE','LOCAL_RANK','CUDA_VISIBLE_DEVICES','CUDA_DEVICE_ORDER','MASTER_ADDR',"
    "'MLSCHED_WORKER_ADDRS','MLSCHED_RESUME']))"
)


def spec(command, workers=1, attempt=1, number=1, runtime=60, gpus=((0,),)):
    return AttemptSpec(
        attempt_id=attempt, job_id=7, number=number, tenant="alpha", name="job",
        image="local", command=tuple(command), env={"FROM_JOB": "yes"},
        workers=tuple(
            WorkerSpec(rank=r, node="n0", gpu_indices=gpus[r % len(gpus)], gpu_milli=1000,
                       cpu_milli=1000, memory_mb=2048)
            for r in range(workers)
        ),
        checkpoint_dir="alpha/7", max_runtime_s=runtime, stop_grace_s=2,
    )  # fmt: skip


def phases(backend, attempt=1):
    return {s.rank: s for s in backend.status() if s.attempt_id == attempt}


def ended(backend, attempt=1, workers=1):
    done = {base.EXITED, base.FAILED, base.STOPPED, base.LOST, base.TIMED_OUT}
    return wait_until(
        lambda: (
            len(p := phases(backend, attempt)) == workers
            and all(s.phase in done for s in p.values())
            and p
        ),
        timeout=30,
    )


def printed_pid(backend, attempt=1) -> int:
    """The pid the worker printed as its first line of output."""
    lines = wait_until(lambda: [line for line in backend.logs() if line.attempt_id == attempt],
                       timeout=15)  # fmt: skip
    assert lines, "the worker printed nothing"
    return int(lines[0].text)


def kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


# Starts `sleep 60` (in its process group unless told otherwise), prints its pid and sleeps.
LEAVES_A_CHILD = (
    "import subprocess, sys, time; p = subprocess.Popen(['sleep', '60']); "
    "print(p.pid, flush=True); time.sleep(60)"
)


def test_it_parses_a_virtual_inventory():
    nodes = parse_inventory("2x8xA100,4x1xT4:shared", "east")

    assert [(n.gpu_type, n.gpu_count, n.gpu_shareable) for n in nodes] == [
        ("A100", 8, False)] * 2 + [("T4", 1, True)] * 4  # fmt: skip
    assert len({n.name for n in nodes}) == 6


def test_it_refuses_a_malformed_inventory():
    with pytest.raises(ValueError, match="8xA100"):
        parse_inventory("eight A100s", "east")


def test_it_gives_each_worker_its_rank_and_gpus(backend):
    backend.start(spec([sys.executable, "-c", PRINT_ENV], workers=2, gpus=((0, 1), (2, 3))))

    assert ended(backend, workers=2)
    lines = {(line.rank, line.text) for line in backend.logs()}
    same = ("CUDA_DEVICE_ORDER=PCI_BUS_ID MASTER_ADDR=127.0.0.1 "
            "MLSCHED_WORKER_ADDRS=127.0.0.1,127.0.0.1 MLSCHED_RESUME=None")  # fmt: skip
    assert (0, f"RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 CUDA_VISIBLE_DEVICES=0,1 {same}") in lines
    assert (1, f"RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 CUDA_VISIBLE_DEVICES=2,3 {same}") in lines
    assert {s.phase for s in phases(backend).values()} == {base.EXITED}


def test_a_shard_is_told_which_it_is_and_of_how_many(backend):
    shard = dataclasses.replace(spec([sys.executable, "-c", SHARD_ENV]), shard_index=4, shards=9)
    backend.start(shard)

    assert ended(backend)
    assert backend.logs()[0].text == "4 9"


def test_a_worker_is_told_when_its_runtime_limit_stops_it_and_its_grace(backend):
    told = "import os; print(os.environ['MLSCHED_STOP_AT'], os.environ['MLSCHED_STOP_GRACE_S'])"
    before = time.time()
    backend.start(spec([sys.executable, "-c", told], runtime=600))

    assert ended(backend)
    stop_at, grace = backend.logs()[0].text.split()
    assert before + 600 - 1 <= int(stop_at) <= time.time() + 600
    assert grace == "2"


def test_a_second_attempt_is_told_to_resume(backend):
    backend.start(spec([sys.executable, "-c", PRINT_ENV], number=2))

    assert ended(backend)
    assert "MLSCHED_RESUME=1" in backend.logs()[0].text


def test_it_reports_a_non_zero_exit_with_its_code(backend):
    backend.start(spec([sys.executable, "-c", "import sys; sys.exit(3)"]))

    assert ended(backend)
    status = phases(backend)[0]
    assert (status.phase, status.exit_code) == (base.EXITED, 3)


def test_a_worker_killed_by_another_signal_exits_128_and_its_number_and_says_which(backend):
    backend.start(spec([sys.executable, "-c", "import os, signal; os.abort()"]))

    status = ended(backend)[0]

    assert (status.phase, status.exit_code, status.reason) == (
        base.EXITED, 128 + signal.SIGABRT, "killed by SIGABRT"
    )  # fmt: skip


def test_a_worker_killed_with_sigkill_is_an_infrastructure_failure(backend):
    backend.start(spec([sys.executable, "-c", "import time; time.sleep(60)"]))
    child = backend.worker_dir(1, 0) / "child.pid"
    assert wait_until(child.exists, timeout=10)

    os.kill(int(child.read_text()), signal.SIGKILL)

    assert ended(backend)
    assert phases(backend)[0].phase == base.FAILED


def test_stop_ends_every_process_within_the_grace_period(backend):
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    backend.start(spec([sys.executable, "-c", stubborn], workers=2))
    shims = [int((backend.worker_dir(1, r) / "pid").read_text()) for r in (0, 1)]
    assert wait_until(lambda: all((backend.worker_dir(1, r) / "child.pid").exists()
                                  for r in (0, 1)), timeout=10)  # fmt: skip
    children = [int((backend.worker_dir(1, r) / "child.pid").read_text()) for r in (0, 1)]
    started = time.monotonic()

    backend.stop(1, grace_s=1)

    assert ended(backend, workers=2)
    assert {s.phase for s in phases(backend).values()} == {base.STOPPED}
    assert all(gone(pid) for pid in children)
    # A shim exits right after writing the exit record the backend reads.
    assert wait_until(lambda: all(gone(pid) for pid in shims), timeout=5)
    assert time.monotonic() - started < 1 + 5


def test_it_enforces_the_runtime_limit(backend):
    backend.start(spec([sys.executable, "-c", "import time; time.sleep(60)"], runtime=1))

    assert ended(backend)
    assert phases(backend)[0].phase == base.TIMED_OUT


def test_a_new_backend_on_the_same_directory_adopts_running_workers(backend, tmp_path):
    backend.start(spec([sys.executable, "-c", "import time; print('hi'); time.sleep(2)"]))
    # The shim has started the command (so it is past exec: its command line is the shim's).
    assert wait_until(lambda: (backend.worker_dir(1, 0) / "child.pid").exists(), timeout=10)
    assert phases(backend)[0].phase == base.RUNNING

    restarted = LocalBackend(backend.state_dir, backend.nodes, tmp_path / "ckpt")

    assert phases(restarted)[0].phase == base.RUNNING
    assert ended(restarted)
    assert phases(restarted)[0].phase == base.EXITED
    assert [line.text for line in restarted.logs()] == ["hi"]


def test_log_sequence_numbers_continue_across_calls(backend):
    count = "import time\nfor i in range(3):\n print(i); time.sleep(0.3)"
    backend.start(spec([sys.executable, "-c", count]))
    assert ended(backend)
    first = backend.logs()

    assert [(line.seq, line.text) for line in first] == [(0, "0"), (1, "1"), (2, "2")]
    assert backend.logs() == []


def test_a_command_that_does_not_exist_is_the_jobs_own_error_127_and_says_why(backend):
    backend.start(spec(["/no/such/train.py"]))

    assert ended(backend)
    status = phases(backend)[0]
    reason = "cannot run /no/such/train.py: No such file or directory"
    assert (status.phase, status.exit_code, status.reason) == (base.EXITED, 127, reason)
    assert [line.text for line in backend.logs()] == [reason]


def test_a_command_that_is_not_executable_is_the_jobs_own_error_126(backend, tmp_path):
    script = tmp_path / "train.sh"
    script.write_text("echo hi\n")  # no execute bit

    backend.start(spec([str(script)]))

    assert ended(backend)
    assert (phases(backend)[0].phase, phases(backend)[0].exit_code) == (base.EXITED, 126)


def restarted(backend) -> LocalBackend:
    """The backend as an agent that restarts finds it: the same state, no children of its own."""
    return LocalBackend(backend.state_dir, backend.nodes, backend.checkpoint_root,
                        default_grace_s=backend.default_grace_s)  # fmt: skip


def test_a_worker_that_ends_between_two_looks_is_reported_ended_not_vanished(backend, monkeypatch):
    backend.start(spec([sys.executable, "-c", "import time; time.sleep(30)"]))
    directory = backend.worker_dir(1, 0)
    assert wait_until(lambda: (directory / "child.pid").exists(), timeout=10)
    shim = int((directory / "pid").read_text())

    def ends_meanwhile(pid, directory=None):  # the shim writes its record and exits meanwhile
        local_shim.write_exit(directory, {"code": 0, "signal": None, "ended": time.time()})
        return False

    monkeypatch.setattr(local, "alive", ends_meanwhile)
    try:
        status = phases(restarted(backend))[0]  # it judges the shim by /proc, not as its child
    finally:
        os.killpg(shim, signal.SIGKILL)
    assert (status.phase, status.exit_code) == (base.EXITED, 0)


def test_a_shim_not_yet_past_exec_is_running_not_vanished(backend, monkeypatch):
    # Between fork and exec a new shim's /proc command line is still the agent's: by that alone
    # it would not look like a shim, and its worker would be reported lost.
    backend.start(spec([sys.executable, "-c", "import time; time.sleep(30)"]))
    monkeypatch.setattr(local, "alive", lambda pid: False)
    try:
        status = phases(backend)[0]
    finally:
        backend.stop(1, grace_s=0)
    assert status.phase == base.RUNNING


def test_start_is_idempotent(backend):
    command = [sys.executable, "-c", "print('once')"]
    backend.start(spec(command))
    backend.start(spec(command))

    assert ended(backend)
    assert [line.text for line in backend.logs()] == ["once"]


def with_limits(command, cpu_milli=1000, memory_mb=2048):
    one = spec(command)
    worker = dataclasses.replace(one.workers[0], cpu_milli=cpu_milli, memory_mb=memory_mb)
    return dataclasses.replace(one, workers=(worker,))


HOG = "b = bytearray(600 * 1024 * 1024); print('allocated')"

# The worker and a child it forks allocate 200 MiB each: under the rlimit of one process either
# fits, together they pass a 300 MiB request. The parent offers itself to the OOM killer.
TREE_HOG = """
import os, time
if os.fork() == 0:
    b = bytearray(200 << 20); time.sleep(2); os._exit(0)
open('/proc/self/oom_score_adj', 'w').write('1000')
time.sleep(0.5)
b = bytearray(200 << 20)
print('allocated')
time.sleep(2)
"""

# Spins for two seconds of wall time, then prints the CPU seconds it got.
SPIN = """
import os, time
end = time.time() + 2
while time.time() < end:
    pass
t = os.times()
print(round(t.user + t.system, 2))
"""


def _cgroups_writable() -> bool:
    group = cgroups.create("probe", 1000, 64)
    if group is not None:
        group.remove()
    return group is not None


needs_cgroups = pytest.mark.skipif(
    not _cgroups_writable(), reason="this host gives no writable cgroups"
)


@needs_cgroups
def test_a_worker_past_its_memory_request_is_oom_killed_and_says_so(backend):
    backend.start(with_limits([sys.executable, "-c", HOG], memory_mb=300))

    assert ended(backend)
    status = phases(backend)[0]
    assert (status.phase, status.exit_code, status.reason) == (base.EXITED, 137, OOM_REASON)
    assert "allocated" not in [line.text for line in backend.logs()]


@needs_cgroups
def test_the_memory_request_caps_the_workers_processes_together(backend):
    backend.start(with_limits([sys.executable, "-c", TREE_HOG], memory_mb=300))

    assert ended(backend)
    assert phases(backend)[0].reason == OOM_REASON


@needs_cgroups
def test_a_busy_worker_gets_no_more_cpu_than_it_asked_for(backend):
    backend.start(with_limits([sys.executable, "-c", SPIN], cpu_milli=250))

    assert ended(backend)
    (line,) = [line.text for line in backend.logs()]
    assert float(line) < 0.8  # a quarter of a CPU for 2 s is 0.5 s; unlimited it spins ~2 s


def cgroup_dirs(backend) -> list[Path]:
    return [Path(g) for g in (backend.worker_dir(1, 0) / "cgroup").read_text().split()]


@needs_cgroups
def test_a_worker_leaves_no_cgroup_behind(backend):
    backend.start(with_limits([sys.executable, "-c", "print('hi')"]))

    assert ended(backend)
    groups = cgroup_dirs(backend)
    assert len(groups) == 2 and not any(g.exists() for g in groups)


@needs_cgroups
def test_forgetting_a_worker_whose_shim_was_killed_kills_what_is_left_and_removes_its_cgroups(
    backend,
):
    backend.start(with_limits([sys.executable, "-c", LEAVES_A_CHILD]))
    directory = backend.worker_dir(1, 0)
    left = printed_pid(backend)
    worker = int((directory / "child.pid").read_text())
    # The shim dies alone (as under a machine's OOM killer): nobody is left to remove the
    # groups. Its main process dies with it, but what that started still runs in them.
    os.kill(int((directory / "pid").read_text()), signal.SIGKILL)
    assert ended(backend)
    groups = cgroup_dirs(backend)
    assert len(groups) == 2 and all(g.exists() for g in groups)
    assert not gone(left)

    backend.forget(1)

    assert not any(g.exists() for g in groups)
    assert gone(worker) and gone(left)


def test_without_cgroups_an_address_space_limit_stands_in(tmp_path):
    nodes = parse_inventory("1x8xA100", "local")
    backend = LocalBackend(tmp_path / "state", nodes, tmp_path / "ckpt", 2, cgroups=False)
    backend.start(with_limits([sys.executable, "-c", HOG], memory_mb=300))

    assert ended(backend)
    status = phases(backend)[0]
    assert (status.phase, status.exit_code) == (base.EXITED, 1)
    assert any("MemoryError" in line.text for line in backend.logs())


def test_a_running_worker_reports_when_its_job_last_checkpointed(backend):
    touch = ("import os, pathlib, time; pathlib.Path(os.environ['MLSCHED_CHECKPOINT_MARKER'])"
             ".touch(); time.sleep(30)")  # fmt: skip
    backend.start(spec([sys.executable, "-c", touch]))

    reported = wait_until(lambda: phases(backend).get(0) and phases(backend)[0].checkpoint_at,
                          timeout=15)  # fmt: skip

    assert reported is not None and abs(reported - time.time()) < 15
    backend.stop(1, grace_s=1)
    assert ended(backend)


@needs_cgroups
def test_a_worker_the_cgroup_refuses_runs_under_rlimits_and_the_shim_says_so(
    tmp_path, monkeypatch, capsys
):
    def refuse(group, pid):
        raise PermissionError("cgroup.procs refused the worker")

    # The child forks from this process, so it joins through the patched method.
    monkeypatch.setattr(cgroups.Group, "join", refuse)
    made = []
    create = cgroups.create
    monkeypatch.setattr(cgroups, "create", lambda *a: made.append(create(*a)) or made[-1])
    directory = tmp_path / "worker"
    directory.mkdir()
    limit_probe = "import resource; print(resource.getrlimit(resource.RLIMIT_AS)[0])"
    (directory / "spec.json").write_text(json.dumps({
        "command": [sys.executable, "-c", limit_probe], "env": dict(os.environ),
        "cwd": str(directory / "work"), "memory_mb": 512, "cpu_milli": 1000, "cgroups": True,
        "max_runtime_s": 30, "cpu_seconds": 30, "grace_s": 1,
    }))  # fmt: skip
    sigterm, umask = signal.getsignal(signal.SIGTERM), os.umask(0o022)
    try:
        local_shim.main(directory)
    finally:  # the shim sets both for its own process, here the test's
        signal.signal(signal.SIGTERM, sigterm)
        os.umask(umask)

    assert "limits: rlimits (the cgroup refused the worker)" in capsys.readouterr().out
    assert not (directory / "cgroup").exists()
    assert (directory / "log").read_text().strip() == f"stdout\t{512 * 1024 * 1024}"
    (group,) = made
    assert not group.cpu.exists() and not group.memory.exists()


# A worker is its main process: when that ends, so does the worker, and what it left behind.

# Starts a child that ignores SIGTERM (as does the main process), prints its pid, waits.
STUBBORN_TREE = """
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # inherited by the child across exec
child = subprocess.Popen(["sleep", "60"])
print(child.pid, flush=True)
time.sleep(60)
"""


def test_a_worker_ends_when_its_main_process_does_and_what_it_left_behind_is_killed(backend):
    # The background sleep holds the worker's stdout and stderr open.
    backend.start(spec(["sh", "-c", "sleep 60 & echo $!; exit 0"]))
    left = printed_pid(backend)

    assert ended(backend)
    status = phases(backend)[0]
    assert (status.phase, status.exit_code) == (base.EXITED, 0)
    assert wait_until(lambda: gone(left), timeout=10)


def test_the_runtime_limit_ends_the_commands_whole_process_group(backend):
    # Neither the main process nor its child ends on SIGTERM: SIGKILL after the grace (2 s).
    backend.start(spec([sys.executable, "-c", STUBBORN_TREE], runtime=1))
    left = printed_pid(backend)

    assert ended(backend)
    status = phases(backend)[0]
    assert (status.phase, status.exit_code) == (base.TIMED_OUT, 128 + signal.SIGKILL)
    assert wait_until(lambda: gone(left), timeout=10)


def test_the_runtime_limit_gives_the_grace_the_control_plane_gives_its_stops(backend):
    # A job that saves its checkpoint on SIGTERM, slowly: the spec's grace is its time to.
    stubborn = dataclasses.replace(
        spec([sys.executable, "-c", STUBBORN_TREE], runtime=1), stop_grace_s=4
    )
    started = time.monotonic()
    backend.start(stubborn)

    assert ended(backend)
    assert time.monotonic() - started >= 1 + 4
    assert phases(backend)[0].exit_code == 128 + signal.SIGKILL


def test_the_runtime_limit_reaches_a_child_of_the_main_process(backend):
    # The shell waits for its foreground sleep; SIGTERM to the group ends both.
    backend.start(spec(["sh", "-c", "sleep 60; echo never"], runtime=1))

    assert ended(backend)
    assert phases(backend)[0].phase == base.TIMED_OUT
    assert "never" not in [line.text for line in backend.logs()]


def test_a_rank_that_exited_before_the_stop_is_reported_as_it_exited_not_stopped(backend):
    # Rank 0 exits 0 at once, rank 1 runs on; then the attempt is stopped (canceled, or its
    # agent came back to find it declared lost): rank 0's own ending stands.
    command = "import os, time; os.environ['RANK'] == '0' or time.sleep(60)"
    backend.start(spec([sys.executable, "-c", command], workers=2))
    assert wait_until(lambda: phases(backend).get(0) and phases(backend)[0].phase == base.EXITED,
                      timeout=15)  # fmt: skip

    backend.stop(1, grace_s=1)

    assert ended(backend, workers=2)
    done = phases(backend)
    assert (done[0].phase, done[0].exit_code) == (base.EXITED, 0)
    assert done[1].phase == base.STOPPED


def test_stop_ends_the_commands_whole_process_group_within_the_grace_period(backend):
    backend.start(spec([sys.executable, "-c", STUBBORN_TREE]))
    left = printed_pid(backend)
    started = time.monotonic()

    backend.stop(1, grace_s=1)

    assert ended(backend)
    assert time.monotonic() - started < 1 + 5
    assert phases(backend)[0].phase == base.STOPPED
    assert wait_until(lambda: gone(left), timeout=10)


def test_a_main_process_that_ends_on_the_stop_takes_what_it_left_behind_along(backend):
    # The main process ends on SIGTERM at once; its child ignores it and would run on.
    command = ("import signal, subprocess; p = subprocess.Popen(['sleep', '60'], "
               "preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_IGN)); "
               "print(p.pid, flush=True); p.wait()")  # fmt: skip
    backend.start(spec([sys.executable, "-c", command]))
    left = printed_pid(backend)

    backend.stop(1, grace_s=30)

    assert ended(backend)
    assert phases(backend)[0].phase == base.STOPPED
    assert wait_until(lambda: gone(left), timeout=10)


ESCAPES = """
import subprocess, sys
p = subprocess.Popen(["sleep", "60"], start_new_session=True)  # out of the process group
print(p.pid, flush=True)
"""


def test_a_process_that_left_the_group_does_not_keep_the_worker_from_ending(tmp_path):
    nodes = parse_inventory("1x8xA100", "local")
    backend = LocalBackend(tmp_path / "state", nodes, tmp_path / "ckpt", 2, cgroups=False)
    backend.start(spec([sys.executable, "-c", ESCAPES]))
    left = printed_pid(backend)
    try:
        # Without a cgroup nothing finds it, and it holds the output pipes: the shim stops
        # waiting for them and writes the exit record all the same.
        assert ended(backend)
        status = phases(backend)[0]
        assert (status.phase, status.exit_code) == (base.EXITED, 0)
    finally:
        kill(left)


@needs_cgroups
def test_a_process_that_left_the_group_but_not_the_cgroup_is_killed_with_the_worker(backend):
    backend.start(with_limits([sys.executable, "-c", ESCAPES]))
    left = printed_pid(backend)
    try:
        assert ended(backend)
        assert (phases(backend)[0].phase, phases(backend)[0].exit_code) == (base.EXITED, 0)
        assert wait_until(lambda: gone(left), timeout=10)
        assert not any(g.exists() for g in cgroup_dirs(backend))
    finally:
        kill(left)


@needs_cgroups
def test_a_stop_past_its_grace_kills_what_left_the_group_but_not_the_cgroup(backend):
    stubborn = (
        "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(60)\n"
    )
    backend.start(with_limits([sys.executable, "-c", ESCAPES + stubborn]))
    left = printed_pid(backend)
    try:
        backend.stop(1, grace_s=1)

        assert ended(backend)
        assert phases(backend)[0].phase == base.STOPPED
        assert wait_until(lambda: gone(left), timeout=10)
    finally:
        kill(left)


def test_a_worker_dies_with_its_shim(tmp_path):
    nodes = parse_inventory("1x8xA100", "local")
    backend = LocalBackend(tmp_path / "state", nodes, tmp_path / "ckpt", 2, cgroups=False)
    backend.start(spec([sys.executable, "-c", "import time; print('up', flush=True); "
                                               "time.sleep(60)"]))  # fmt: skip
    directory = backend.worker_dir(1, 0)
    assert wait_until(lambda: backend.logs(), timeout=15)
    worker = int((directory / "child.pid").read_text())

    os.kill(int((directory / "pid").read_text()), signal.SIGKILL)

    assert wait_until(lambda: gone(worker), timeout=10)
    assert ended(backend)
    assert phases(backend)[0].phase == base.LOST


# Output lines: a record per line, whatever bytes the line holds.


def test_a_line_with_carriage_returns_is_one_line_of_its_stream(backend):
    progress = "import sys; sys.stderr.write('10%\\r50%\\r100%\\n'); print('done')"
    backend.start(spec([sys.executable, "-c", progress]))

    assert ended(backend)
    lines = sorted((line.stream, line.text) for line in backend.logs())
    assert lines == [("stderr", "10%\r50%\r100%"), ("stdout", "done")]


def test_odd_bytes_in_a_line_keep_its_stream_and_text(backend):
    odd = (b"a\tb\x00c\xff\xfed\r\n"  # a tab, NUL, invalid UTF-8, a CRLF line end
           b"\xe2\x82\xac\x0b\x0c\x1c\xc2\x85\n"  # UTF-8, and what str.splitlines splits on
           b"no end")  # fmt: skip
    write = f"import sys; sys.stdout.buffer.write({odd!r})"
    backend.start(spec([sys.executable, "-c", write]))

    assert ended(backend)
    lines = [(line.seq, line.stream, line.text) for line in backend.logs()]
    assert lines == [
        (0, "stdout", "a\tb\x00c\ufffd\ufffdd"),
        (1, "stdout", "\u20ac\x0b\x0c\x1c\x85"),
        (2, "stdout", "no end"),
    ]


@pytest.mark.parametrize("text", [b"", b"\rx", b"x\ty", b"\x00\xff", b"50%\r100%"])
def test_a_record_reads_back_as_written(text):
    raw = local_shim.record("stderr", text + b"\n")

    assert raw.count(b"\n") == 1 and raw.endswith(b"\n")
    assert local_shim.parse_record(raw[:-1]) == ("stderr", text.decode(errors="replace"))


def test_a_torn_record_is_kept_as_stdout_not_given_a_made_up_stream(backend, tmp_path):
    directory = backend.worker_dir(1, 0)
    directory.mkdir(parents=True)
    (directory / "log").write_bytes(b"std\nstdout\tok\n50%\r100%\n")

    lines = [(line.stream, line.text) for line in backend.logs()]

    assert lines == [("stdout", "std"), ("stdout", "ok"), ("stdout", "50%\r100%")]


# State files: written whole, read as possibly torn.


def test_the_agents_state_files_are_its_alone_and_leave_no_temporary_behind(backend):
    backend.start(spec([sys.executable, "-c", "import time; time.sleep(60)"]))
    backend.stop(1, grace_s=1)
    directory = backend.worker_dir(1, 0)

    for name in ("spec.json", "pid", "stop"):
        assert (directory / name).stat().st_mode & 0o777 == 0o600, name
    assert not list(directory.glob("*.tmp"))
    assert ended(backend)


@pytest.mark.parametrize("torn", ["", "12a", "\x00\x00"])
def test_a_torn_pid_file_neither_stops_the_report_nor_loses_the_worker(backend, torn):
    backend.start(spec([sys.executable, "-c", "import time; time.sleep(60)"]))
    backend.start(spec([sys.executable, "-c", "import time; time.sleep(60)"], attempt=2))
    assert wait_until(lambda: all(p.get(0) and p[0].phase == base.RUNNING
                                  for p in (phases(backend, 1), phases(backend, 2))),
                      timeout=15)  # fmt: skip
    pid_file = backend.worker_dir(1, 0) / "pid"
    shim = int(pid_file.read_text())

    pid_file.write_text(torn)  # as an agent killed mid-write, or a full disk, left it

    assert phases(backend, 1)[0].phase == base.RUNNING  # its shim is found again
    assert phases(backend, 2)[0].phase == base.RUNNING
    assert pid_file.read_text() == str(shim)
    backend.stop(1, grace_s=1)
    backend.stop(2, grace_s=1)
    assert ended(backend, 1) and ended(backend, 2)
    assert not alive(shim)


@pytest.mark.parametrize("torn", ["", "soon", "nan"])
def test_a_torn_stop_file_neither_stops_the_report_nor_the_stop(backend, torn):
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    backend.start(spec([sys.executable, "-c", stubborn]))
    backend.start(spec([sys.executable, "-c", "import time; time.sleep(60)"], attempt=2))
    assert wait_until(lambda: (backend.worker_dir(1, 0) / "child.pid").exists(), timeout=10)
    backend.stop(1, grace_s=1)
    stop_file = backend.worker_dir(1, 0) / "stop"
    started = time.monotonic()

    stop_file.write_text(torn)

    assert phases(backend, 2)[0].phase in (base.PENDING, base.RUNNING)
    # The grace is then the default one (2 s) from when the file was written.
    assert ended(backend, 1)
    assert time.monotonic() - started < 2 + 5
    assert phases(backend, 1)[0].phase == base.STOPPED
    backend.stop(2, grace_s=1)
    assert ended(backend, 2)


def test_stop_asked_again_rewrites_a_torn_stop_file(backend):
    backend.start(spec([sys.executable, "-c", "import time; time.sleep(60)"]))
    assert wait_until(lambda: (backend.worker_dir(1, 0) / "child.pid").exists(), timeout=10)
    stop_file = backend.worker_dir(1, 0) / "stop"
    stop_file.write_text("")

    backend.stop(1, grace_s=1)

    assert float(stop_file.read_text()) <= time.time() + 1
    assert ended(backend)


def test_a_pid_another_workers_shim_took_is_not_taken_for_the_workers_own(backend):
    # A busy host recycles pids: the pid file of a worker whose shim has gone names another
    # worker's live shim. That worker has vanished, and a stop of it must not reach the other.
    backend.start(spec([sys.executable, "-c", "import time; time.sleep(60)"]))
    backend.start(spec([sys.executable, "-c", "print('hi')"], attempt=2))
    assert ended(backend, 2)
    other = int((backend.worker_dir(1, 0) / "pid").read_text())
    (backend.worker_dir(2, 0) / "pid").write_text(str(other))
    (backend.worker_dir(2, 0) / "exit.json").unlink()

    assert phases(backend, 2)[0].phase == base.LOST
    backend.stop(2, grace_s=0)
    backend.status()
    assert phases(backend, 1)[0].phase == base.RUNNING and alive(other)
    backend.stop(1, grace_s=1)
    assert ended(backend, 1)


def test_a_torn_exit_record_is_as_good_as_none(backend):
    backend.start(spec([sys.executable, "-c", "print('hi')"]))
    backend.start(spec([sys.executable, "-c", "print('hi')"], attempt=2))
    assert ended(backend, 1) and ended(backend, 2)
    shim = int((backend.worker_dir(1, 0) / "pid").read_text())
    # Exited, not only exiting: a shim on its way out has lost its command line already, but
    # until it is a zombie the backend rightly counts its child as running.
    assert wait_until(lambda: gone(shim), timeout=10)
    (backend.worker_dir(1, 0) / "exit.json").write_text('{"code": ')

    assert phases(backend, 1)[0].phase == base.LOST
    assert (phases(backend, 2)[0].phase, phases(backend, 2)[0].exit_code) == (base.EXITED, 0)


def test_a_gang_over_two_nodes_is_told_each_workers_place_as_torchrun_names_it(backend):
    gang = spec([sys.executable, "-c", NODE_ENV], workers=3)
    nodes = ("n1", "n0", "n1")  # ranks 0 and 2 share a node, which comes first by rank 0
    workers = tuple(
        dataclasses.replace(w, node=n) for w, n in zip(gang.workers, nodes, strict=True)
    )
    backend.start(dataclasses.replace(gang, workers=workers))

    assert ended(backend, workers=3)
    told = {line.rank: line.text for line in backend.logs()}
    assert told == {0: "0 2 0 0", 1: "0 1 1 1", 2: "1 2 0 0"}
