"""The local backend: every worker a real process on this host, supervised by local_shim.

Nodes are either this host as it is (CPUs, memory, GPUs from nvidia-smi) or a declared virtual
inventory such as `2x8xA100,4x1xT4:shared`, so GPU placement can be exercised on machines
without GPUs: CUDA_VISIBLE_DEVICES then names virtual GPUs.

State lives in files under `state_dir/<attempt>/<rank>/` (spec, pid, log, exit status, stop
request, the time of the last checkpoint line), not in this object: an agent that restarts
builds a new LocalBackend on the same directory and finds every worker again. Those files are
the agent's alone (mode 0600): the spec holds the job's environment. The worker reads two of
them, the agent's still: its MLSCHED_STOP_AT_FILE (0644) and the gang's hostfile,
MLSCHED_HOSTFILE (0444). The job's secrets given as files are in the worker's `secrets/` there
(mode 0700, each file 0600, the worker's user's), never under its checkpoint directory: forget
removes them with the rest, a restarted agent's as well as the one that started the worker.
So are a gang's SSH files (MLSCHED_SSH_DIR), in each worker's `ssh/`, of the same modes and
user: one key pair for every worker of the attempt, made as its start writes the first of them
(a start cut short and asked again takes the key from a worker that has it); a restarted agent
finds them written, as it finds the rest.

The job's data volumes are folders on the host, which each worker is told of and finds linked
in its own `volumes/`, those it only reads made read-only to it (see local_volumes).

Tenants: with ``worker_uids`` (a range of user ids, `run_agent --worker-uids 20000-29999`; the
agent must run as root) each tenant's workers run as a user of their own, the range's start
plus the tenant's id, owning their job's checkpoint directory and working directory (mode
0700). A worker then cannot read another tenant's checkpoints, working files or processes'
environments, nor the agent's (and its token). Without it, every worker runs as the agent's
own user: fine for one team's machine, not for tenants who must not see each other.

The agent writes its state files (spec, pid, stop) whole or not at all (a temporary file
renamed over), and reads every one as possibly torn by an older agent killed mid-write or a full
disk: a file it cannot read counts as absent for that worker (a lost pid file is found again
from the shim's command line), so one bad file never stops the reports of the whole cluster.
"""

import contextlib
import dataclasses
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

from clusters.backends import base, cgroups, local_shim, local_usage
from clusters.backends.base import AttemptSpec, LogLine, NodeInventory, WorkerStatus
from clusters.backends.local_volumes import (
    VOLUMES,
    link_volumes,
    read_only_folders,
    volume_folders,
    volumes_problem,
)
from clusters.backends.state_files import read_number, write_state

SHIM = "clusters.backends.local_shim"
ROOT = Path(__file__).resolve().parents[2]
INVENTORY = re.compile(r"^(\d+)x(\d+)x([A-Za-z0-9_.-]+)(:shared)?(?:@([A-Za-z0-9_.+-]+))?$")
KILLED_REASON = "killed by SIGKILL from outside (its node ran short, or went away)"
OOM_REASON = "OOMKilled: its processes together passed its memory request"
# A worker's secrets given as files: in this folder of its own directory, by name.
SECRET_FILES = "secrets"
# A secret's name as the control plane checks it (quotas.models.validate_secret_name): a
# variable's name, so never a path that would leave the worker's folder.
SECRET_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


USAGE_EPOCH = "usage-epoch"


def usage_epoch_in(state_dir: Path) -> str:
    """The run of counts kept in this state directory (each worker's GPU-seconds, in its own
    directory): made once, read back by a restarted agent, which counts on from them."""
    path = state_dir / USAGE_EPOCH
    with contextlib.suppress(OSError):
        if epoch := path.read_text().strip():
            return epoch
    epoch = uuid.uuid4().hex
    write_state(path, epoch)
    return epoch


def parse_inventory(text: str, cluster: str) -> list[NodeInventory]:
    """`2x8xA100@ib+nvme,4x1xT4:shared`: node count x GPUs per node x GPU type, optionally
    shareable, then optionally the features they offer (what a job may require), joined by +.

    Virtual nodes get 8 cores and 64 GiB per GPU (at least one GPU's worth).
    """
    nodes = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        match = INVENTORY.match(part)
        if not match:
            raise ValueError(f"inventory {part!r}: expected COUNTxGPUSxTYPE, e.g. 2x8xA100")
        count, gpus, gpu_type, shared, offers = match.groups()
        features = tuple(sorted(set(offers.split("+")))) if offers else ()
        if bad := [name for name in features if not base.is_name(name)]:
            raise ValueError(f"inventory {part!r}: {bad[0]!r} is no feature: {base.FEATURE_RULE}")
        size = max(int(gpus), 1)
        for _ in range(int(count)):
            nodes.append(
                NodeInventory(
                    name=f"{cluster}-{gpu_type.lower()}-{len(nodes)}",
                    cpu_milli=8000 * size,
                    memory_mb=65_536 * size,
                    gpu_type=gpu_type,
                    gpu_count=int(gpus),
                    gpu_shareable=bool(shared),
                    topology={"host": os.uname().nodename},
                    features=features,
                )
            )
    return nodes


def detect_inventory(cluster: str) -> list[NodeInventory]:
    """This host as one node: its CPUs, memory and NVIDIA GPUs if nvidia-smi answers."""
    gpus: list[str] = []
    if shutil.which("nvidia-smi"):
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=False,
        )  # fmt: skip
        gpus = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    memory_kb = int(Path("/proc/meminfo").read_text().split()[1])
    return [
        NodeInventory(
            name=f"{cluster}-{os.uname().nodename}",
            cpu_milli=(os.cpu_count() or 1) * 1000,
            memory_mb=memory_kb // 1024,
            gpu_type=gpus[0].replace(" ", "-") if gpus else "",
            gpu_count=len(gpus),
        )
    ]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def alive(pid: int, directory: Path | None = None) -> bool:
    """Is `pid` a live (not zombie) shim, the one of the worker `directory` when given? Guards
    against a recycled pid: on a busy host another worker's shim may have taken it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    state = stat.rsplit(")", 1)[1].split()[0]
    if state == "Z" or SHIM.encode() not in cmdline:
        return False
    return directory is None or shim_of(cmdline.split(b"\0"), directory)


def shim_of(args: list[bytes], directory: Path) -> bool:
    """Whether a command line (its NUL-split arguments) is the shim of the worker `directory`
    (``python -m SHIM DIRECTORY``; the directory compared resolved, however it was spelled)."""
    if args[-4:-2] != [b"-m", SHIM.encode()] or args[-1] != b"":
        return False
    return Path(os.fsdecode(args[-2])).resolve() == directory.resolve()


def find_shim(directory: Path) -> int | None:
    """The live shim of this worker, found by its command line: for a pid file lost or torn."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if shim_of(args, directory) and alive(int(entry.name)):
            return int(entry.name)
    return None


def worker_group(directory: Path, shim: int) -> int | None:
    """The process group of the worker's command: its main process's pid, while that is the
    live shim's own child (unreaped, so the id names nobody else) and leads a group of its own
    (an older shim kept the command in the shim's group)."""
    pid = read_number(directory / "child.pid", int)
    if not pid:
        return None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    ppid, pgrp = stat.rsplit(")", 1)[1].split()[1:3]
    return pid if int(ppid) == shim and int(pgrp) == pid else None


# The most of a worker's log read at one step (a few seconds of a very chatty worker).
READ_BYTES = 8 << 20


def untraversable(path: Path) -> Path | None:
    """The first existing directory on the way to ``path`` (``path`` included) that users other
    than its owner and group may not pass through (no execute bit for others), if any:
    workers running as their tenants' users (``worker_uids``) could not reach their
    directories beyond it."""
    for directory in [*reversed(path.absolute().parents), path.absolute()]:
        if directory.is_dir() and not directory.stat().st_mode & 0o001:
            return directory
    return None


class LocalBackend:
    def __init__(
        self,
        state_dir: Path,
        nodes: list[NodeInventory],
        checkpoint_root: Path,
        default_grace_s: float = 10.0,
        cgroups: bool = True,
        worker_uids: range | None = None,
        measure_gpus: bool = False,
    ):
        self.state_dir = Path(state_dir)
        self.worker_uids = worker_uids
        # Hold each worker to its CPU and memory request with a cgroup where the host allows.
        self.cgroups = cgroups
        self.nodes = nodes
        self.checkpoint_root = Path(checkpoint_root)
        self.default_grace_s = default_grace_s
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.usage_epoch = usage_epoch_in(self.state_dir)
        if worker_uids is not None:
            for where in (self.state_dir, self.checkpoint_root):
                if (shut := untraversable(where)) is not None:
                    raise ValueError(
                        f"{shut} is mode {shut.stat().st_mode & 0o777:04o}: the workers' users "
                        f"(--worker-uids) cannot pass it to reach {where}; give it o+x (0711)"
                    )
        self._children: dict[int, subprocess.Popen] = {}
        self._log_offsets: dict[tuple[int, int], tuple[int, int]] = {}
        # The GPUs' utilization, where the nodes are this host's own (detect_inventory).
        self._usage = local_usage.Sampler(measure_gpus=measure_gpus)

    def inventory(self) -> list[NodeInventory]:
        return list(self.nodes)

    def start(self, spec: AttemptSpec) -> None:
        try:
            uid = self.uid_of(spec.tenant_id)
        except ValueError as error:
            return self._refuse(spec, str(error))
        if bad := [name for name in spec.secret_files if not SECRET_NAME.fullmatch(name)]:
            return self._refuse(
                spec, f"its secret file {bad[0][:100]!r} is not named as a variable"
            )
        if problem := volumes_problem(spec.volumes):
            return self._refuse(spec, problem)
        checkpoint = self.checkpoint_root / spec.checkpoint_dir
        checkpoint.mkdir(parents=True, exist_ok=True)
        if uid is not None:
            os.chown(checkpoint, uid, uid)
            checkpoint.chmod(0o700)
        # Every worker shares this host: each gang needs its own rendezvous port.
        spec = dataclasses.replace(spec, master_port=free_port())
        ssh_key = ""  # the gang's, once a worker needs it
        for worker in spec.workers:
            directory = self.worker_dir(spec.attempt_id, worker.rank)
            if (directory / "spec.json").exists():
                continue  # already started: start is idempotent
            # Others may pass through to their own working directory, not look inside.
            directory.mkdir(parents=True, exist_ok=True)
            directory.chmod(0o711)
            env = {
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "HOME": str(directory / "work"),
                "LANG": "C.UTF-8",
                "PYTHONUNBUFFERED": "1",
                # Kept in the worker's spec.json (mode 0600, the agent's) until it is forgotten.
                **spec.secrets,
                **secret_file_paths(directory, spec.secret_files),
                **base.worker_env(spec, worker, "127.0.0.1", str(checkpoint)),
                **volume_folders(spec.volumes),
            }
            if "MLSCHED_STOP_AT" in env:
                env["MLSCHED_STOP_AT_FILE"] = str(directory.absolute() / base.STOP_AT_FILE)
            env["MLSCHED_HOSTFILE"] = str(directory.absolute() / base.HOSTFILE)
            ssh: dict[str, str] = {}
            if spec.world_size > 1:
                ssh_key = ssh_key or self._ssh_key(spec.attempt_id)
                env["MLSCHED_SSH_DIR"] = str(directory.absolute() / base.SSH_DIR_NAME)
                ssh = base.ssh_files(spec.attempt_id, env["MLSCHED_SSH_DIR"], ssh_key)
            self._launch(directory, spec, worker, env, ssh)

    def _ssh_key(self, attempt_id: int) -> str:
        """The gang's SSH private key: that of a worker of the attempt already started (a start
        cut short, asked again), else a new one."""
        for directory in self.worker_dirs(attempt_id):
            with contextlib.suppress(OSError, UnicodeError):
                if key := (directory / base.SSH_DIR_NAME / base.SSH_KEY).read_text():
                    return key
        return base.new_ssh_key()

    def _refuse(self, spec: AttemptSpec, reason: str) -> None:
        """Record the attempt's workers as failed before they ran, with the reason."""
        for worker in spec.workers:
            directory = self.worker_dir(spec.attempt_id, worker.rank)
            directory.mkdir(parents=True, exist_ok=True)
            write_state(directory / "exit.json", json.dumps({"code": None, "refused": reason}))
            write_state(directory / "spec.json", json.dumps({"refused": reason, "env": {}}))

    def uid_of(self, tenant_id: int) -> int | None:
        """The user the tenant's workers run as; None: the agent's own."""
        if self.worker_uids is None:
            return None
        uid = self.worker_uids.start + tenant_id
        if tenant_id < 1 or uid not in self.worker_uids:
            # Sharing another tenant's user would be no isolation at all: refuse to start.
            raise ValueError(f"tenant {tenant_id} has no user in --worker-uids {self.worker_uids}")
        return uid

    def _launch(
        self, directory: Path, spec: AttemptSpec, worker, env: dict, ssh: dict[str, str]
    ) -> None:
        write_state(directory / "spec.json", json.dumps({
            "uid": self.uid_of(spec.tenant_id),
            "command": list(spec.command), "env": env, "cwd": str(directory / "work"),
            "memory_mb": worker.memory_mb, "cpu_milli": worker.cpu_milli,
            "gpu_indices": list(worker.gpu_indices), "gpu_milli": worker.gpu_milli,
            "cgroups": self.cgroups, "max_runtime_s": spec.max_runtime_s,
            # CPU time the worker's share allows over its whole runtime limit.
            "cpu_seconds": max(1, worker.cpu_milli * spec.max_runtime_s // 1000),
            # The runtime limit's grace to checkpoint: as long as the control plane's stops give.
            "grace_s": spec.stop_grace_s,
            "read_only": read_only_folders(spec.volumes),
        }))  # fmt: skip
        # After spec.json: a worker directory with it is reported, and so forgotten (its files
        # removed), even if the agent dies before the shim starts.
        if "MLSCHED_STOP_AT" in env:  # readable by the worker's user: its folder lets it pass
            write_state(directory / base.STOP_AT_FILE, env["MLSCHED_STOP_AT"], mode=0o644)
        # Every worker of the gang is on this host, at its MASTER_ADDR: one line, every GPU.
        hosts = base.hostfile(spec, (), env["MASTER_ADDR"])
        write_state(directory / base.HOSTFILE, hosts, mode=0o444)
        uid = self.uid_of(spec.tenant_id)
        write_secret_files(directory / SECRET_FILES, spec.secret_files, uid)
        write_secret_files(directory / base.SSH_DIR_NAME, ssh, uid)
        link_volumes(directory / VOLUMES, spec.volumes, uid)
        with open(directory / "shim.out", "ab") as shim_out:
            shim = subprocess.Popen(
                [sys.executable, "-m", SHIM, str(directory)], cwd=ROOT, start_new_session=True,
                stdin=subprocess.DEVNULL, stdout=shim_out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        self._children[shim.pid] = shim
        write_state(directory / "pid", str(shim.pid))

    def stop(self, attempt_id: int, grace_s: float) -> None:
        deadline = time.time() + grace_s
        for directory in self.worker_dirs(attempt_id):
            if (directory / "exit.json").exists():
                continue  # it ended on its own before the stop: reported as it ended
            stop_file = directory / "stop"
            if read_number(stop_file, float) is None:  # not asked yet, or its file is torn
                write_state(stop_file, str(deadline))
            # The shim passes it on to the worker's own process group.
            self._signal(directory, signal.SIGTERM)

    def lower_runtime_limit(self, attempt_id: int, max_runtime_s: int) -> None:
        """Write the lower limit to each live worker's `limit` file, which its shim reads
        again every second or so, and the sooner stop to its MLSCHED_STOP_AT_FILE; a worker
        whose limit is already that or lower is left."""
        for directory in self.worker_dirs(attempt_id):
            if (directory / "exit.json").exists():
                continue
            try:
                spec = json.loads((directory / "spec.json").read_text())
                started, stop_at = spec["max_runtime_s"], int(spec["env"]["MLSCHED_STOP_AT"])
            except (OSError, ValueError, KeyError, TypeError):
                started = stop_at = None  # a torn spec: its shim reads the limit all the same
            now = read_number(directory / local_shim.LIMIT, int) or started
            if now is not None and max_runtime_s >= now:
                continue
            write_state(directory / local_shim.LIMIT, str(max_runtime_s))
            if stop_at is not None and started:
                lowered = base.stop_at_lowered(stop_at, started, max_runtime_s)
                write_state(directory / base.STOP_AT_FILE, str(lowered), mode=0o644)

    def status(self) -> list[WorkerStatus]:
        for child in list(self._children.values()):
            if child.poll() is not None:  # reap, so a dead shim is not a zombie
                self._children.pop(child.pid, None)
        found = []
        for d in self._all_worker_dirs():
            if (d / "spec.json").exists():
                status = self._worker_status(int(d.parent.name), int(d.name), d)
                found.append((d, with_start(with_printed_checkpoint(status, d), d)))
        return self._usage.add(found)

    def _live_shim(self, pid: int, directory: Path) -> bool:
        """Whether ``pid`` is the live shim of the worker ``directory``: one this agent started
        and has not reaped (its pid cannot be recycled, and between fork and exec its command
        line is still the agent's), or, for one an earlier agent started, by its command line."""
        child = self._children.get(pid)
        if child is not None and child.poll() is None:
            return child.args[-1] == str(directory)  # started as `python -m SHIM directory`
        return alive(pid, directory)

    def _all_worker_dirs(self) -> list[Path]:
        return [
            d for d in sorted(self.state_dir.glob("*/*"))
            if d.parent.name.isdigit() and d.name.isdigit()
        ]  # fmt: skip

    def _worker_status(self, attempt_id: int, rank: int, d: Path) -> WorkerStatus:
        stopping = (d / "stop").exists()
        ended = self._ended(attempt_id, rank, d, stopping)
        if ended is not None:
            return self._once_read(ended, d)
        pid = self._shim_pid(d)
        if pid and self._live_shim(pid, d):
            if stopping and time.time() > self._stop_deadline(d):
                self._signal(d, signal.SIGKILL)  # the grace period is over
            return WorkerStatus(attempt_id, rank, base.RUNNING, checkpoint_at=checkpoint_at(d))
        # The shim may have written its exit record and gone since the first look: a worker
        # that ended on its own is not a vanished one.
        ended = self._ended(attempt_id, rank, d, stopping)
        if ended is not None:
            return self._once_read(ended, d)
        if stopping:
            return WorkerStatus(attempt_id, rank, base.STOPPED, reason="stopped")
        return WorkerStatus(attempt_id, rank, base.LOST, reason="worker process vanished")

    def _once_read(self, ended: WorkerStatus, d: Path) -> WorkerStatus:
        """An ended worker's status once the log read that follows the status in an agent's
        step reaches its end (the shim has written all of it before its exit record), running
        until then: the agent ships a worker's last lines, its traceback, before its end."""
        read, _ = self._log_offsets.get((ended.attempt_id, ended.rank), (0, 0))
        try:
            behind = (d / "log").stat().st_size - read > READ_BYTES
        except OSError:
            behind = False
        if behind:
            key = ended.attempt_id, ended.rank
            return WorkerStatus(*key, base.RUNNING, checkpoint_at=checkpoint_at(d))
        return ended

    def _ended(self, attempt_id: int, rank: int, d: Path, stopping: bool) -> WorkerStatus | None:
        try:
            record = json.loads((d / "exit.json").read_text())
        except (OSError, ValueError):
            return None  # none yet (or unreadable: as good as none)
        if not isinstance(record, dict):
            return None
        return WorkerStatus(
            attempt_id, rank, *classify(record, stopping), **local_usage.recorded(record)
        )

    def _shim_pid(self, directory: Path) -> int | None:
        pid = read_number(directory / "pid", int)
        if pid is not None and pid > 0:
            return pid
        pid = find_shim(directory)  # the pid file is lost or torn: find the shim, and say so
        if pid is not None:
            with contextlib.suppress(OSError):
                write_state(directory / "pid", str(pid))
        return pid

    def _stop_deadline(self, directory: Path) -> float:
        """When the stop's grace ends: as the stop file says or, where it cannot be read, the
        default grace after the file was written."""
        deadline = read_number(directory / "stop", float)
        if deadline is not None:
            return deadline
        try:
            return (directory / "stop").stat().st_mtime + self.default_grace_s
        except OSError:
            return math.inf

    def _signal(self, directory: Path, sig: signal.Signals) -> None:
        pid = self._shim_pid(directory)
        if not pid or not self._live_shim(pid, directory):
            return
        if sig == signal.SIGKILL:
            # The shim passes a SIGTERM on; a SIGKILL ends it, so the agent kills the command's
            # own process group and everything in its cgroup itself, before the shim.
            group = worker_group(directory, pid)
            if group is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(group, sig)
            cgroups.kill(cgroups.worker_groups(directory))
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, sig)  # the shim leads a process group of its own

    def logs(self) -> list[LogLine]:
        lines = []
        for d in self._all_worker_dirs():
            if (d / "log").exists():
                lines.extend(self._read_log(int(d.parent.name), int(d.name), d / "log"))
        return lines

    def _read_log(self, attempt_id: int, rank: int, path: Path) -> list[LogLine]:
        """The worker's next lines, at most READ_BYTES of its log a step: a worker that wrote
        gigabytes since the last step, or a restarted agent reading a long log again from its
        start, holds no more in memory at once (the shim cuts each record well below it)."""
        offset, seq = self._log_offsets.get((attempt_id, rank), (0, 0))
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read(READ_BYTES)
        complete = data[: data.rfind(b"\n") + 1]  # a partial last line waits for its end
        lines = []
        # Records end at \n alone: a \r (a progress bar's) is part of the text.
        for raw in complete.split(b"\n")[:-1]:
            stream, text = local_shim.parse_record(raw)
            lines.append(LogLine(attempt_id, rank, seq, stream, text[: base.MAX_LINE]))
            seq += 1
        self._log_offsets[attempt_id, rank] = (offset + len(complete), seq)
        return lines

    def logs_to_resume(self) -> list[tuple[int, int]]:
        """None: a worker's log file is kept whole, so a restarted agent numbers it again from
        its start as before."""
        return []

    def resume_logs(self, points: dict[tuple[int, int], base.LogResume | None]) -> None:
        pass

    def forget(self, attempt_id: int) -> None:
        for directory in self.worker_dirs(attempt_id):
            kill_left_behind(directory)
            remove_cgroups(directory)
        shutil.rmtree(self.state_dir / str(attempt_id), ignore_errors=True)
        for key in [k for k in self._log_offsets if k[0] == attempt_id]:
            del self._log_offsets[key]
        self._usage.forget(attempt_id)

    def worker_dir(self, attempt_id: int, rank: int) -> Path:
        return self.state_dir / str(attempt_id) / str(rank)

    def worker_dirs(self, attempt_id: int) -> list[Path]:
        return sorted((self.state_dir / str(attempt_id)).glob("*"))


def secret_file_paths(worker_dir: Path, files: dict[str, str]) -> dict[str, str]:
    """The variables naming each of the worker's secret files: its absolute path, by name."""
    folder = worker_dir.absolute() / SECRET_FILES
    return {name: str(folder / name) for name in files}


def write_secret_files(folder: Path, files: dict[str, str], uid: int | None) -> None:
    """Write each secret (a secret file of the job's, a file of the gang's SSH key) as a file
    of its name in ``folder``, its value's UTF-8 bytes as they are: the folder mode 0700 and
    each file 0600, owned by the worker's user (``uid``; None: the agent's), so that no other
    tenant's worker reads them, and ssh and sshd take them as the user's own."""
    if not files:
        return
    folder.mkdir(mode=0o700, exist_ok=True)
    folder.chmod(0o700)  # whatever the agent's umask
    for name, value in files.items():
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
        with os.fdopen(os.open(folder / name, flags, 0o600), "wb") as file:
            os.fchmod(file.fileno(), 0o600)
            if uid is not None:
                os.fchown(file.fileno(), uid, uid)
            file.write(value.encode())
    if uid is not None:
        os.chown(folder, uid, uid)


def kill_left_behind(worker_dir: Path) -> None:
    """SIGKILL what is left of the worker's process group when its shim could not (killed
    before it wrote the exit record): the main process died with the shim, but what it started
    runs on in the group, where no cgroup holds it. Only while no live process has the
    group's id: a group with members (or its leader's zombie) keeps that pid from being given
    to another process."""
    group = read_number(worker_dir / "child.pid", int)
    if (worker_dir / "exit.json").exists() or not group or group < 1:
        return  # the shim ended the group itself, or never started the command
    if exited(group):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)


def exited(pid: int) -> bool:
    """Has ``pid`` exited (gone, or a zombie not yet reaped)?"""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def remove_cgroups(worker_dir: Path, wait_s: float = 2.0) -> None:
    """Delete the worker's cgroups: its shim does so when the command ends, but not if it was
    killed first (a stop past its grace kills the whole process group, shim included).

    The attempt is over: a process still in a group (one still dying, or one that outlived its
    shim) is killed, and the group removed once the kernel has let it go.
    """
    paths = cgroups.worker_groups(worker_dir)
    deadline = time.monotonic() + wait_s
    for path in paths:
        while path.exists():
            with contextlib.suppress(OSError):
                for pid in (path / "cgroup.procs").read_text().split():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), signal.SIGKILL)
                path.rmdir()
            if time.monotonic() > deadline:
                break
            time.sleep(0.02)


def with_start(status: WorkerStatus, worker_dir: Path) -> WorkerStatus:
    """The status with when the worker's command started: when the shim wrote its pid, once
    the command was running (a command that could not start has none)."""
    try:
        return dataclasses.replace(status, started_at=(worker_dir / "child.pid").stat().st_mtime)
    except OSError:
        return status


def checkpoint_at(worker_dir: Path) -> float | None:
    """When the worker's job last touched its checkpoint marker, if it ever did."""
    try:
        marker = json.loads((worker_dir / "spec.json").read_text())["env"]
        return os.stat(marker["MLSCHED_CHECKPOINT_MARKER"]).st_mtime
    except (OSError, ValueError, KeyError, TypeError):
        return None


def with_printed_checkpoint(status: WorkerStatus, worker_dir: Path) -> WorkerStatus:
    """The status with the later of its checkpoint time and the last time the worker printed
    the checkpoint line, in any phase: a job saves one as it is stopped, in its grace period,
    and the shim notes the line before it records the end."""
    return base.with_checkpoint(status, read_number(worker_dir / local_shim.CHECKPOINT, float))


def classify(record: dict, stopping: bool) -> tuple[str, int | None, str]:
    """(phase, exit code, reason) of a worker that ended, from its exit record; a worker
    killed by signal N (Python's returncode -N) exits 128+N, as a shell and Kubernetes say it."""
    code = record.get("code")
    if code is not None and code < 0:
        code = 128 - code
    if record.get("refused"):
        return base.FAILED, None, record["refused"]
    if stopping:
        return base.STOPPED, code, "stopped"
    if record.get("timed_out"):
        return base.TIMED_OUT, code, "exceeded its runtime limit"
    if record.get("oom_killed"):  # past its own memory request: the job's to fix, not a retry
        return base.EXITED, code, OOM_REASON
    if record.get("signal") == "SIGKILL":
        return base.FAILED, code, KILLED_REASON
    if signal_name := record.get("signal"):
        return base.EXITED, code, f"killed by {signal_name}"
    return base.EXITED, code, record.get("reason", "")
