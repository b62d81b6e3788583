"""Supervise one worker of the local backend: `python -m clusters.backends.local_shim DIR`.

DIR holds `spec.json` (command, env, cwd, limits). The shim leads its own process group, starts
the command in it, inside a cgroup holding its processes to the worker's CPU and memory request
where the host allows (`cgroups.py`; else an address-space rlimit stands in for the memory
limit), writes every output line to `log` as "<stream>\\t<text>", enforces the runtime limit
(SIGTERM, then SIGKILL after the grace period) and writes `exit.json` when the command ends.
The files outlive the agent: an agent that restarts reads them to adopt the worker or learn how
it ended.
"""

import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from clusters.backends import cgroups


def prepare(spec: dict, group: cgroups.Group | None, report: int):
    """In the child, before the command runs: default SIGTERM handling, resource limits and,
    last, the tenant's own user if the spec names one. One byte to the ``report`` pipe says
    whether the child joined the cgroup."""

    def apply():
        # An ignored signal stays ignored across exec: undo the shim's own "ignore SIGTERM".
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        joined = False
        if group is not None:
            with contextlib.suppress(OSError):  # a host that refuses it: rlimits after all
                group.join(os.getpid())  # its children are born in the group too
                joined = True
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

    return apply


def pump(stream, name: str, out, lock: threading.Lock) -> None:
    for raw in iter(stream.readline, b""):
        text = raw.decode(errors="replace").rstrip("\n")
        with lock:
            out.write(f"{name}\t{text}\n")
            out.flush()


def write_exit(directory: Path, record: dict) -> None:
    tmp = directory / "exit.json.tmp"
    tmp.write_text(json.dumps(record))
    tmp.replace(directory / "exit.json")  # atomic: a reader sees all of it or nothing


def main(directory: Path) -> int:
    spec = json.loads((directory / "spec.json").read_text())
    # The agent stops a worker by signalling the whole group; the shim stays to record the end.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.umask(0o077)  # its log and records are the agent's alone
    cwd = Path(spec["cwd"])
    cwd.mkdir(parents=True, exist_ok=True)
    if spec.get("uid") is not None:
        os.chown(cwd, spec["uid"], spec["uid"])
    group = None
    if spec.get("cgroups") and spec.get("cpu_milli") and spec.get("memory_mb"):
        group = cgroups.create(str(directory), spec["cpu_milli"], spec["memory_mb"])
    if group is not None:  # for whoever cleans up after a shim killed before it could
        (directory / "cgroup").write_text(f"{group.cpu}\n{group.memory}\n")
    report, told = os.pipe()
    try:
        child = subprocess.Popen(
            spec["command"], env=spec["env"], cwd=spec["cwd"], stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, preexec_fn=prepare(spec, group, told), pass_fds=(told,),
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError) as error:
        return not_started(directory, error, group)
    finally:
        os.close(told)
    joined = os.read(report, 1) == b"1"
    os.close(report)
    (directory / "child.pid").write_text(str(child.pid))
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
    with open(directory / "log", "a", buffering=1) as out:
        pumps = [
            threading.Thread(target=pump, args=(child.stdout, "stdout", out, lock)),
            threading.Thread(target=pump, args=(child.stderr, "stderr", out, lock)),
        ]
        for t in pumps:
            t.start()
        timed_out = wait(child, spec["max_runtime_s"], spec.get("grace_s", 10))
        for t in pumps:
            t.join()
    code = child.returncode
    oom_killed = group is not None and code == -signal.SIGKILL and group.oom_kills() > 0
    write_exit(directory, {
        "code": code,
        "signal": signal.Signals(-code).name if code < 0 else None,
        "timed_out": timed_out,
        "oom_killed": oom_killed,
        "ended": time.time(),
    })  # fmt: skip
    if group is not None:
        group.remove()
    return 0


def not_started(directory: Path, error: Exception, group: cgroups.Group | None) -> int:
    """The command could not start. Missing or not executable is the job's own error, with the
    shell's codes (127, 126) and a line in its log; anything else (the worker could not be
    prepared: its user, its limits) is the host's, and the attempt fails as such."""
    if isinstance(error, OSError):
        code = 127 if isinstance(error, FileNotFoundError) else 126
        reason = f"cannot run {error.filename or 'the command'}: {error.strerror}"
        with open(directory / "log", "a") as out:
            out.write(f"stderr\t{reason}\n")
        record = {"code": code, "reason": reason}
    else:
        record = {"code": None, "refused": f"the worker could not be prepared: {error}"}
    write_exit(directory, {**record, "ended": time.time()})
    if group is not None:
        group.remove()
    return 0


def wait(child: subprocess.Popen, max_runtime_s: float, grace_s: float) -> bool:
    """Wait for the child; past the runtime limit, stop it. Return whether it timed out."""
    try:
        child.wait(timeout=max_runtime_s)
        return False
    except subprocess.TimeoutExpired:
        child.terminate()
    try:
        child.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
    return True


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
