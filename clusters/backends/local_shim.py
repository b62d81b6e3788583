"""Supervise one worker of the local backend: `python -m clusters.backends.local_shim DIR`.

DIR holds `spec.json` (command, env, cwd, limits). The shim leads its own process group and
starts the command in a session (and process group) of the command's own, inside a cgroup
holding its processes to the worker's CPU and memory request where the host allows
(`cgroups.py`; else an address-space rlimit stands in for the memory limit). It writes every
output line to `log` (`record`; a line longer than MAX_LINE_BYTES as its head, at once) and,
for a line that is exactly the checkpoint line (base.CHECKPOINT_LINE), the time it read it
to `checkpoint` (the output is read as the job writes it, so that is when the job printed it,
give or take its own buffering), enforces the runtime limit (SIGTERM to the command's process
group, SIGKILL to it and its cgroup after the grace period; a lower limit the agent writes to
`limit` since the start counts from the same launch), passes the agent's stop (SIGTERM
to the shim's group) on to the command's group, and writes `exit.json` when the command ends,
with what it used (`used`).

Like a container, a worker is its main process: when that ends (on its own, at the runtime
limit or on a stop), whatever it left behind (background processes, a daemon that left the
process group but not the cgroup) is killed with SIGKILL at once, so nothing keeps holding the
worker's GPUs, and the exit code is the main process's. The output readers get READERS_JOIN_S
more to drain the pipes: a process that escaped both groups (setsid on a host without cgroups)
may hold them open for ever, and the exit record is written anyway. A shim that dies takes its
main process with it (parent-death signal). The files outlive the agent: an agent that restarts
reads them to adopt the worker or learn how it ended.
"""

import contextlib
import ctypes
import json
import os
import resource
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from clusters.backends import base, cgroups
from clusters.backends.local_volumes import ReadOnly
from clusters.backends.state_files import read_number

# After the main process ended, how long the output readers may take to drain the pipes.
READERS_JOIN_S = 5.0
STREAMS = ("stdout", "stderr")
# When the job last printed the checkpoint line, as the shim read it (seconds since the epoch).
CHECKPOINT = "checkpoint"
PR_SET_PDEATHSIG = 1
# The control plane's characters of a line take at most 4 bytes each in UTF-8: a record holds
# at most MAX_LINE_BYTES of a line's text.
MAX_LINE_BYTES = 4 * base.MAX_LINE
# What the child writes to its report pipe, before why, when it could not prepare the worker.
REFUSED = b"!"
# A runtime limit lowered since the start (seconds from the launch), as the agent writes it;
# read again every LIMIT_READ_S.
LIMIT = "limit"
LIMIT_READ_S = 1.0


def record(stream: str, text: bytes) -> bytes:
    """One line of output as a record of the log file: ``<stream>\\t<text>\\n``.

    The text is the line's bytes as the job wrote them, without its end (``\\n``, or ``\\r\\n``),
    so it holds no ``\\n``: ``\\n`` alone ends a record, the first tab ends the stream's name,
    and everything else (a progress bar's ``\\r``, tabs, NUL, invalid UTF-8) is the text's own.
    ``parse_record`` reads it back."""
    # A line's end is its last byte: a \n before it only comes from odd callers.
    text = without_end(text).replace(b"\n", b" ")
    return stream.encode() + b"\t" + text + b"\n"


def without_end(line: bytes) -> bytes:
    """The line without its ending (``\\n`` or ``\\r\\n``)."""
    if line.endswith(b"\n"):
        return line[:-2] if line.endswith(b"\r\n") else line[:-1]
    return line


def parse_record(raw: bytes) -> tuple[str, str]:
    """(stream, text) of a record without its ``\\n``; bytes that are not UTF-8 become U+FFFD.
    A record without a known stream (a torn write) is kept whole as stdout."""
    stream, tab, text = raw.partition(b"\t")
    name = stream.decode(errors="replace")
    if not tab or name not in STREAMS:
        return "stdout", raw.decode(errors="replace")
    return name, text.decode(errors="replace")


def prepare(spec: dict, group: cgroups.Group | None, report: int, die_with, read_only):
    """In the child, before the command runs (in a session of its own already): default
    SIGTERM handling, resource limits, the data volumes it only reads made read-only
    (``read_only``, a local_volumes.ReadOnly), the tenant's own user if the spec names one
    and, last (a change of user clears it), death with the shim. One byte to the ``report``
    pipe says whether the child joined the cgroup; or, where the volumes could not be made
    read-only, REFUSED and why, and the command does not run."""
    shim = os.getpid()

    def apply():
        # The shim's own SIGTERM handling is not the command's.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        joined = False
        if group is not None:
            with contextlib.suppress(OSError):  # a host that refuses it: rlimits after all
                group.join(os.getpid())  # its children are born in the group too
                joined = True
        if folders := spec.get("read_only"):
            try:
                read_only(folders)
            except OSError as error:
                said = f"its read-only data volumes could not be made read only here: {error}"
                os.write(report, REFUSED + said.encode(errors="backslashreplace"))
                raise
        os.write(report, b"1" if joined else b"0")
        os.close(report)
        if not joined and spec.get("memory_mb"):
            # Per process and of address space, not memory: the closest stand-in without cgroups.
            cap = spec["memory_mb"] * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        if spec.get("cpu_seconds"):
            cap = int(spec["cpu_seconds"])
            resource.setrlimit(resource.RLIMIT_CPU, (cap, cap + 5))
        os.umask(0o022)  # the shim's own 0077 is for the agent's files, not the job's
        if spec.get("uid") is not None:
            os.setgroups([])
            os.setgid(spec["uid"])
            os.setuid(spec["uid"])
        if die_with is not None:
            # A shim killed (the agent's stop past its grace, a host's OOM killer) takes the
            # main process along: reported lost, the worker must not run on unseen.
            die_with(PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGKILL))
            if os.getppid() != shim:  # it died before that took hold
                os.kill(os.getpid(), signal.SIGKILL)

    return apply


def parent_death_signal():
    """libc's prctl, loaded before the fork; None where there is none."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def pump(stream, name: str, out, lock: threading.Lock, checkpoint: Path) -> None:
    """Copy the stream's lines to the log; note the time of each checkpoint line.

    A line longer than MAX_LINE_BYTES (a progress bar redrawn with ``\\r`` for hours, binary
    output) is written as its first MAX_LINE_BYTES as soon as they are read, and the rest of it
    skipped: held until its end, it would grow the shim without limit and reach the control
    plane, which keeps no more of it, only once it ended."""
    cut = False  # the head of the line being read is written: skip to its end
    for raw in iter(lambda: stream.readline(MAX_LINE_BYTES), b""):
        skip, cut = cut, not raw.endswith(b"\n")
        if skip:
            continue
        with lock:
            if out.closed:  # the exit record is written: a straggler's lines are dropped
                return
            out.write(record(name, raw))
            if base.is_checkpoint_line(without_end(raw).decode(errors="replace")):
                # A time that cannot be noted (a full disk) must not stop the log.
                with contextlib.suppress(OSError):
                    write_atomic(checkpoint, repr(time.time()))


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)  # atomic: a reader sees all of it or nothing


def write_exit(directory: Path, result: dict) -> None:
    write_atomic(directory / "exit.json", json.dumps(result))


def signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def kill_all(pgid: int, group: cgroups.Group | None, wait_s: float = 0.0) -> None:
    """SIGKILL the worker's process group and, where it has one, everything in its cgroup (a
    process that left the group with setsid included), waiting up to ``wait_s`` for that to
    empty."""
    signal_group(pgid, signal.SIGKILL)
    if group is not None:
        group.kill(wait_s)


class Forward:
    """The SIGTERM handler: the agent stops a worker with SIGTERM to the shim's process group;
    the shim (which stays to record the end) passes it on to the command's own group, while
    that group's leader is unreaped (its pid, the group's id, cannot be reused meanwhile)."""

    def __init__(self):
        self.pid: int | None = None
        self.pending = False

    def __call__(self, signum, frame) -> None:
        if self.pid is None:
            self.pending = True  # the command is not started yet
        else:
            signal_group(self.pid, signal.SIGTERM)

    def started(self, pid: int) -> None:
        self.pid = pid
        if self.pending:
            signal_group(pid, signal.SIGTERM)

    def ended(self) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the leader is about to be reaped
        self.pid = None


def main(directory: Path) -> int:
    spec = json.loads((directory / "spec.json").read_text())
    forward = Forward()
    signal.signal(signal.SIGTERM, forward)
    os.umask(0o077)  # its log and records are the agent's alone
    cwd = Path(spec["cwd"])
    cwd.mkdir(parents=True, exist_ok=True)
    if spec.get("uid") is not None:
        os.chown(cwd, spec["uid"], spec["uid"])
    group = None
    if spec.get("cgroups") and spec.get("cpu_milli") and spec.get("memory_mb"):
        group = cgroups.create(str(directory), spec["cpu_milli"], spec["memory_mb"])
    if group is not None:  # for whoever cleans up after a shim killed before it could
        write_atomic(directory / "cgroup", f"{group.cpu}\n{group.memory}\n")
    report, told = os.pipe()
    try:
        child = subprocess.Popen(
            spec["command"], env=spec["env"], cwd=spec["cwd"], stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, start_new_session=True, pass_fds=(told,),
            preexec_fn=prepare(spec, group, told, parent_death_signal(), ReadOnly()),
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError) as error:
        os.close(told)
        said = os.read(report, 4096)
        os.close(report)
        failure: Exception = error
        if said.startswith(REFUSED):  # the child's own account of what it could not prepare
            failure = subprocess.SubprocessError(said.removeprefix(REFUSED).decode())
        return not_started(directory, failure, group)
    else:
        os.close(told)
    forward.started(child.pid)
    joined = os.read(report, 1) == b"1"
    os.close(report)
    write_atomic(directory / "child.pid", str(child.pid))
    if group is not None and not joined:
        # The host made the group but would not take the worker: it runs under the rlimits.
        group.remove()
        (directory / "cgroup").unlink(missing_ok=True)
        print("limits: rlimits (the cgroup refused the worker)", flush=True)
        group = None
    elif group is not None:
        print(f"limits: cgroup {group.cpu} {group.memory}", flush=True)
    else:
        print("limits: rlimits", flush=True)
    lock = threading.Lock()
    out = open(directory / "log", "ab", buffering=0)  # noqa: SIM115 (closed under the lock)
    pumps = [
        threading.Thread(
            target=pump, args=(stream, name, out, lock, directory / CHECKPOINT), daemon=True
        )
        for stream, name in ((child.stdout, "stdout"), (child.stderr, "stderr"))
    ]
    for t in pumps:
        t.start()
    timed_out = supervise(child.pid, limit_of(directory, spec), spec.get("grace_s", 10), group)
    # The main process has ended: what it left behind goes at once, the group while its
    # leader is unreaped (so that its id names no one else's), the cgroup once it is reaped.
    forward.ended()
    signal_group(child.pid, signal.SIGKILL)
    child.wait()
    if group is not None:
        group.kill(wait_s=2.0)
    deadline = time.monotonic() + READERS_JOIN_S
    for t in pumps:
        t.join(timeout=max(0.0, deadline - time.monotonic()))
    with lock:
        out.close()
    code = child.returncode
    oom_killed = group is not None and code == -signal.SIGKILL and group.oom_kills() > 0
    write_exit(directory, {
        "code": code,
        "signal": signal.Signals(-code).name if code < 0 else None,
        "timed_out": timed_out,
        "oom_killed": oom_killed,
        "ended": time.time(),
        **used(group),
    })  # fmt: skip
    if group is not None:
        group.remove()
    return 0


def used(group: cgroups.Group | None) -> dict:
    """What the command used, once it is reaped: the CPU time of its process and of every
    descendant it reaped (``RUSAGE_CHILDREN``: the shim's only child is the command), and its
    memory's high-water mark: the cgroup's, all its processes together, or else the largest
    peak of any one of them (``ru_maxrss``, KiB on Linux)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    peak = group.memory_peak_mb() if group is not None else None
    return {
        "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 3),
        "memory_peak_mb": peak if peak is not None else -(-usage.ru_maxrss // 1024),
    }


def not_started(directory: Path, error: Exception, group: cgroups.Group | None) -> int:
    """The command could not start. Missing or not executable is the job's own error, with the
    shell's codes (127, 126) and a line in its log; anything else (the worker could not be
    prepared: its user, its limits) is the host's, and the attempt fails as such."""
    if isinstance(error, OSError):
        code = 127 if isinstance(error, FileNotFoundError) else 126
        reason = f"cannot run {error.filename or 'the command'}: {error.strerror}"
        with open(directory / "log", "ab") as out:
            out.write(record("stderr", reason.encode(errors="backslashreplace")))
        result = {"code": code, "reason": reason}
    else:
        result = {"code": None, "refused": f"the worker could not be prepared: {error}"}
    write_exit(directory, {**result, "ended": time.time()})
    if group is not None:
        group.remove()
    return 0


def limit_of(directory: Path, spec: dict) -> Callable[[], float]:
    """The worker's runtime limit as it stands: the one it started with, or the lower one the
    agent wrote since (`LIMIT`; a missing or torn file leaves the last one read)."""
    last = [float(spec["max_runtime_s"])]

    def limit() -> float:
        lowered = read_number(directory / LIMIT, float)
        if lowered is not None:
            last[0] = min(last[0], lowered)
        return last[0]

    return limit


def supervise(
    pid: int, limit: Callable[[], float], grace_s: float, group: cgroups.Group | None
) -> bool:
    """Wait for the command's main process to end, leaving it unreaped; past the runtime
    limit (`limit()` seconds from now, read again every LIMIT_READ_S: the agent may lower it),
    SIGTERM its process group, and after the grace SIGKILL that and its cgroup. Return
    whether it timed out."""
    with Watch(pid) as ended:
        launched = time.monotonic()

        def left() -> float:
            return launched + limit() - time.monotonic()

        while not ended(min(max(left(), 0.0), LIMIT_READ_S)):
            if left() <= 0:
                break
        else:
            return False
        signal_group(pid, signal.SIGTERM)
        if not ended(grace_s):
            kill_all(pid, group)
            while not ended(10):  # dying: no process outlives a SIGKILL for long
                kill_all(pid, group)
    return True


class Watch:
    """``ended(timeout)``: has the child ``pid`` ended within ``timeout`` seconds? It is left
    a zombie for the caller to reap. A pidfd wakes the wait at the exit; without one (Linux
    before 5.3) it polls."""

    def __init__(self, pid: int):
        self.pid = pid
        self.fd: int | None = None

    def __enter__(self):
        with contextlib.suppress(OSError, AttributeError):
            self.fd = os.pidfd_open(self.pid)
        return self.ended

    def __exit__(self, *exc) -> None:
        if self.fd is not None:
            os.close(self.fd)

    def ended(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            if os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is not None:
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if self.fd is not None:
                # Returns at the exit; a signal (the agent's stop) only makes it go on waiting.
                poll = select.poll()
                poll.register(self.fd, select.POLLIN)
                poll.poll(min(left, 3600) * 1000)
            else:
                time.sleep(min(left, 0.1))


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
