"""The contract between the cluster agent and an execution backend.

The agent knows what the control plane wants (attempts to run, attempts to stop); a backend
knows how to make it so on its substrate (local processes, Kubernetes pods) and reports what it
sees. Backends never talk to the control plane and never touch the database.
"""

from __future__ import annotations

import dataclasses
import re
import time
from dataclasses import dataclass, field
from typing import Protocol

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
    load_ssh_private_key,
)

# A node topology label's key and a node feature's name alike (clusters.models checks both):
# lower-case letters, digits, '-', '_' and '.', from and to a letter or digit, at most 63.
NAME = r"^[a-z0-9]([a-z0-9_.-]{0,61}[a-z0-9])?\Z"
FEATURE_RULE = (
    "lower-case letters, digits, '-', '_' and '.', from and to a letter or digit, at most 63 "
    "(ib, nvme)"
)


def is_name(text: str) -> bool:
    """Whether the text is a topology key or a feature name (NAME)."""
    return re.fullmatch(NAME, text) is not None


# Worker and attempt phases as a backend reports them.
PENDING = "pending"  # accepted, not yet running (pod scheduling, image pull)
RUNNING = "running"
EXITED = "exited"  # the user's process ended by itself: see exit_code
FAILED = "failed"  # the infrastructure failed it: see reason (OOMKilled, Evicted, ...)
STOPPED = "stopped"  # stopped on request (cancel or preemption)
LOST = "lost"  # the backend no longer finds it (node gone, process vanished)
TIMED_OUT = "timed_out"  # the runtime limit ended it

# A GPU whose utilization reads under this share is idle: a job holding idle GPUs for long
# (waiting on data, hung, a notebook left open) keeps them from everyone else's work.
GPU_IDLE = 0.05

# Reasons of infrastructure failures that are the platform's rather than their node's, as regular
# expressions over a FAILED worker's reason (case ignored): an image pull the registry failed
# (an outage, a rate limit: any node would have failed it) and a pod configuration the cluster
# lacks (a missing secret, for the container's env or a volume it mounts: FailedMount), a claim's
# volume that will not attach (FailedAttachVolume: another node holds it, or the storage fails
# to attach it), or a pod the API server or the backend refused before it existed (CreateFailed:
# a claim the namespace lacks, no right to make it) and a data volume with no host folder at
# all. A pull that failed for the node's own full disk stays the node's, as does a volume folder
# missing on one host. Quarantine and retries keeping off failed nodes count only the node's
# (Attempt.node_fault).
PLATFORM_FAULT = (
    r"ErrImagePull|ImagePullBackOff|RegistryUnavailable|CreateContainerConfigError"
    r"|FailedMount|FailedAttachVolume|CreateFailed|has no host folder"
)
NODE_FAULT_ALL_THE_SAME = r"no space left on device"


@dataclass(frozen=True)
class NodeInventory:
    """One node as the backend sees it. cpu in millicores, memory in MiB."""

    name: str
    cpu_milli: int
    memory_mb: int
    gpu_type: str = ""
    gpu_count: int = 0
    gpu_shareable: bool = False
    topology: dict[str, str] = field(default_factory=dict)
    ready: bool = True
    # What it offers that a job may require (Slurm's node Features: ib, nvme).
    features: tuple[str, ...] = ()
    # Why it is not ready, in a line ("": ready, or the backend cannot say).
    not_ready: str = ""


@dataclass(frozen=True)
class WorkerSpec:
    """One worker (gang rank or shard) of an attempt, placed on a node."""

    rank: int
    node: str
    gpu_indices: tuple[int, ...] = ()
    gpu_milli: int = 0  # per listed GPU; 1000 = whole GPU
    cpu_milli: int = 0
    memory_mb: int = 0


@dataclass(frozen=True)
class AttemptSpec:
    """Everything needed to start one attempt of a job, with no database access."""

    attempt_id: int
    job_id: int
    number: int
    tenant: str  # the tenant's slug: the Kubernetes namespace is derived from it
    name: str
    image: str
    command: tuple[str, ...]
    env: dict[str, str]
    workers: tuple[WorkerSpec, ...]
    checkpoint_dir: str
    max_runtime_s: int
    master_port: int = 29500
    # The tenant's id (0: not given): the local backend runs each tenant's workers as a user of
    # their own from it.
    tenant_id: int = 0
    # The grace the control plane gives a stop (MLSCHED_STOP_GRACE_S) to save a checkpoint: a
    # backend gives the same where its substrate stops the job by itself (the runtime limit, a
    # drain, a node shutdown).
    stop_grace_s: int = 30
    # Which shard of a batch inference job this is (0..shards-1), of how many: each shard's
    # workers are told, to take their own part of the input. A job of one shard is shard 0 of 1.
    shard_index: int = 0
    shards: int = 1
    # An elastic gang's range (torchrun's --nnodes=MIN:MAX): the fewest workers it may start
    # with and its whole gang, whatever this attempt started with (0: its world size).
    min_workers: int = 0
    max_workers: int = 0
    # The tenant's secrets the job names (Job.secrets), by name, opened: each worker gets them
    # as environment variables beside the job's env, and a backend keeps them no longer than
    # the attempt (never in a place another tenant reads).
    secrets: dict[str, str] = field(default_factory=dict)
    # The tenant's credential for the registry the job's image is pulled from, opened:
    # {"registry": host, "username": ..., "password": ...}; empty: the image is pulled with
    # what the node holds. A backend that pulls images uses it for this attempt's pulls only.
    pull_credential: dict[str, str] = field(default_factory=dict)
    # The tenant's secrets the job names that its owners deliver as files (a service
    # account's key, a kubeconfig), by name, opened: each worker gets the file, readable by
    # its job alone, and the path to it in the variable of that name.
    secret_files: dict[str, str] = field(default_factory=dict)
    # The tenant's data volumes the job mounts (Job.volumes), each {"name", "path" (where its
    # workers see it in their container), "read_only", "claim" (the PersistentVolumeClaim in
    # the tenant's namespace: Kubernetes), "host_path" (the folder on every host: local)}.
    # Every worker is told where each is in MLSCHED_VOLUME_<NAME> (``volume_variable``).
    volumes: tuple[dict, ...] = ()

    @property
    def world_size(self) -> int:
        return len(self.workers)


# Docker Hub's names in image references, all written DOCKER_HUB by the control plane
# (quotas.models.registry_name) and keyed as Docker reads them by the Kubernetes backend.
DOCKER_HUB = "docker.io"
DOCKER_HUB_NAMES = frozenset({"docker.io", "index.docker.io", "registry-1.docker.io"})

# The run spec's fields an agent of this release keeps (an agent leaves out those it does not
# know: ``runner.spec_from_dict``). It tells the control plane in its inventory and with every
# heartbeat.
SPEC_FIELDS = tuple(sorted(f.name for f in dataclasses.fields(AttemptSpec)))
KUBERNETES = "kubernetes"  # the backend that pulls images (clusters.models.Cluster.Backend)


def volume_variable(name: str) -> str:
    """The variable that tells a worker where the data volume ``name`` is."""
    return "MLSCHED_VOLUME_" + name.upper().replace("-", "_")


def spec_fields_lacking(
    kept: list[str] | None,
    secrets: bool,
    pull_credential: bool,
    backend: str,
    secret_files: bool = False,
    volumes: bool = False,
) -> list[str]:
    """Of the run spec's fields an attempt's agent must keep for it to run as asked, those an
    agent keeping ``kept`` (None: it did not say) leaves out: its job's secrets, secret
    files and data volumes (else it would start without them), and its team's registry
    credential on a backend that pulls images (else the pull is refused). Fields every
    release keeps are not asked for."""
    needed = {"secrets"} if secrets else set()
    if secret_files:
        needed.add("secret_files")
    if volumes:
        needed.add("volumes")
    if pull_credential and backend == KUBERNETES:
        needed.add("pull_credential")
    return sorted(needed - set(kept or ()))


@dataclass(frozen=True)
class WorkerStatus:
    """What the backend sees of one worker now."""

    attempt_id: int
    rank: int
    phase: str
    exit_code: int | None = None
    reason: str = ""
    # When the job last saved a checkpoint (seconds since the epoch), if the backend can see it.
    checkpoint_at: float | None = None
    # When the worker's command started (seconds since the epoch, the agent's clock), once it
    # has, where the backend can tell: an attempt that ends before a report shows it running
    # has run all the same.
    started_at: float | None = None
    # What the worker has used so far (all of it, once it has ended), where the backend can
    # measure it: CPU time of all its processes in seconds, its memory's high-water mark in
    # MiB, and the GPU-seconds its whole GPUs were busy (estimated from periodic readings of
    # their utilization). None: not measured.
    cpu_seconds: float | None = None
    memory_peak_mb: int | None = None
    gpu_busy_seconds: float | None = None
    # Since when (seconds since the epoch) its whole GPUs have read idle (under GPU_IDLE) at
    # every sample; None: busy at the last one, or not measured.
    gpu_idle_since: float | None = None


@dataclass(frozen=True)
class LogLine:
    """A line of a worker's output. `seq` increases per (attempt, worker) from 0 and is stable:
    a backend that restarts resumes where it left off, so the control plane can deduplicate.
    `at` is when the worker wrote it (seconds since the epoch) where the substrate stamps each
    line (Kubernetes); the control plane keeps it, to tell a restarted agent where its copy of
    the log ends (`LogResume`)."""

    attempt_id: int
    rank: int
    seq: int
    stream: str  # "stdout" | "stderr"
    text: str
    at: float | None = None


@dataclass(frozen=True)
class LogResume:
    """Where the control plane's copy of a worker's log ends: the seq of its last line, that
    line's stamp (`LogLine.at`; None for a line without one) and how many lines in a row, up to
    it, carry the same stamp. A backend that follows a log it did not start reading itself
    (found again after a restart) goes on numbering after it. `first` is line 0's stamp and
    `line_head`, where the control plane has line 0 with a stamp: a log that still begins with
    it has not rotated, and its lines are numbered by their place in it, whatever their stamps
    (a node's clock may step back)."""

    seq: int
    at: float | None = None
    taken: int = 0
    first: tuple[float, str] | None = None


class Backend(Protocol):
    # Names the run of counts the GPU-seconds the backend reports belong to: the same for as
    # long as they count on from where they were (the local backend keeps its counts, and
    # this, in its state directory), new where they start again from 0 (a restarted
    # Kubernetes agent's). The control plane adds a new run's counts to what it had.
    usage_epoch: str

    def inventory(self) -> list[NodeInventory]:
        """The cluster's nodes and their allocatable resources."""

    def start(self, spec: AttemptSpec) -> None:
        """Start every worker of the attempt. Starting an attempt already started does nothing."""

    def stop(self, attempt_id: int, grace_s: float) -> None:
        """Ask every worker to stop (SIGTERM / pod deletion with a grace period), then kill
        what is left after `grace_s`. Returns at once; `status` later shows STOPPED."""

    def status(self) -> list[WorkerStatus]:
        """Every worker the backend knows, including those it adopted after a restart.

        The control plane reads this as the whole truth: a worker of a started attempt that is
        left out counts as lost. A backend that cannot see everything yet raises instead.
        """

    def logs(self) -> list[LogLine]:
        """New output lines since the last call."""

    def logs_to_resume(self) -> list[tuple[int, int]]:
        """The (attempt, rank) of workers whose log the backend follows without knowing where
        to number it from: it found them again after a restart, and cannot tell which lines
        the control plane has (a rotated Kubernetes log no longer starts at line 0). Their
        lines wait for `resume_logs`."""

    def resume_logs(self, points: dict[tuple[int, int], LogResume | None]) -> None:
        """Number these workers' lines on from where the control plane's copy of each log
        ends (None: it has no line of it). Workers not waiting for it are left as they are."""

    def forget(self, attempt_id: int) -> None:
        """Drop what is kept for an ended attempt once the control plane has it."""

    def lower_runtime_limit(self, attempt_id: int, max_runtime_s: int) -> None:
        """Bring the runtime limit of a started attempt's workers down to `max_runtime_s`,
        counted from their launch as the limit they started with is: a worker that has run
        that long is stopped as timed out, with its stop grace. A limit not lower than a
        worker's own leaves it; asking again for the same limit does nothing. The worker's
        MLSCHED_STOP_AT_FILE then says the sooner stop (`stop_at_lowered`)."""


def with_checkpoint(status: WorkerStatus, *times: float | None) -> WorkerStatus:
    """The status with the latest of its checkpoint time and `times` (None: none seen): a job
    reports a checkpoint by its marker or by its line, and the later of them counts."""
    seen = [at for at in (status.checkpoint_at, *times) if at is not None]
    return dataclasses.replace(status, checkpoint_at=max(seen)) if seen else status


# The characters of a log line the control plane keeps (its agents' API cuts a longer one):
# backends cut a line to them as they read it, so one line never holds more in memory, and the
# agent before it sends it, so one line never passes the request limit alone.
MAX_LINE = 65_536
# The characters of a log's line 0 that tell it apart, with its stamp (`LogResume.first`): few,
# so that a heartbeat answering for hundreds of workers stays small.
LINE_HEAD = 256


def line_head(text: str) -> str:
    """The start of a line as the control plane keeps it (its agents' API makes NUL U+FFFD)."""
    return text[:LINE_HEAD].replace("\x00", "\ufffd")


# A job reports a checkpoint it has saved in either of two ways: by touching this file in
# MLSCHED_CHECKPOINT_DIR (read where the agent sees that directory too) ...
CHECKPOINT_MARKER = ".mlsched-checkpoint"
# ... or by printing this line, alone on its line, to stdout or stderr (MLSCHED_CHECKPOINT_LINE),
# which every backend reads in the worker's output and which needs no shared volume.
CHECKPOINT_LINE = "mlsched: checkpoint saved"
# The file MLSCHED_STOP_AT_FILE names, in a folder each backend keeps for it: MLSCHED_STOP_AT as
# it stands, rewritten when the runtime limit is lowered while the worker runs (the variable
# keeps the time the worker started with).
STOP_AT_FILE = "stop_at"
# The file MLSCHED_HOSTFILE names, in a folder each backend keeps for it: the gang's hostfile
# (`hostfile`), written once before the workers start.
HOSTFILE = "hostfile"
# The folder MLSCHED_SSH_DIR names, in a place each backend keeps for it, for a gang of more
# than one worker: the attempt's SSH key pair, which every worker of the gang trusts, and a
# client config using it (`ssh_files`), written once before the workers start.
SSH_DIR_NAME = "ssh"
SSH_KEY = "id_ed25519"
SSH_PUBLIC_KEY = f"{SSH_KEY}.pub"
SSH_AUTHORIZED_KEYS = "authorized_keys"
SSH_CONFIG = "config"


def stop_at_lowered(stop_at: int, limit_s: int, lowered_s: int) -> int:
    """MLSCHED_STOP_AT once a runtime limit of `limit_s` seconds that it was counted with is
    lowered to `lowered_s`, counted from the same start."""
    return stop_at - (limit_s - lowered_s)


def is_checkpoint_line(text: str) -> bool:
    """Whether a line of output (without its line ending) reports a saved checkpoint: it is
    CHECKPOINT_LINE exactly. A line that holds it among other text (a logger's prefix, an echo
    of the environment, a shell's trace of the print) does not count."""
    return text == CHECKPOINT_LINE


# The environment variables every backend sets for a worker (worker_env; a local worker's
# PATH, HOME, LANG and PYTHONUNBUFFERED; a Kubernetes worker's NVIDIA_VISIBLE_DEVICES): no
# secret takes one of their names, nor one that starts with MLSCHED_.
PLATFORM_ENV = frozenset({
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK",
    "MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER",
    "NVIDIA_VISIBLE_DEVICES", "PATH", "HOME", "LANG", "PYTHONUNBUFFERED",
})  # fmt: skip
PLATFORM_ENV_PREFIX = "MLSCHED_"


def worker_env(
    spec: AttemptSpec,
    worker: WorkerSpec,
    master_addr: str,
    checkpoint_dir: str,
    worker_addrs: tuple[str, ...] = (),
):
    """The environment every backend gives a worker, on top of the job's own `env`.

    LOCAL_RANK counts the attempt's workers on the same node, LOCAL_WORLD_SIZE of how many, and
    NODE_RANK (torchrun's GROUP_RANK) the node among the gang's, in the order of their first
    ranks, as torchrun and Lightning name them; CUDA_VISIBLE_DEVICES lists the
    worker's GPU indices, in the order nvidia-smi numbers them (CUDA_DEVICE_ORDER=PCI_BUS_ID:
    CUDA's own order puts the fastest GPU first, and on a host of mixed GPUs index 0 would be
    another worker's GPU); MLSCHED_RESUME=1 tells a retried attempt to resume from its checkpoint
    directory, which is the same for every attempt of the job. After saving a checkpoint the job
    touches MLSCHED_CHECKPOINT_MARKER or prints MLSCHED_CHECKPOINT_LINE. A batch inference
    shard takes its part of the input by MLSCHED_SHARD_INDEX of MLSCHED_SHARDS (Slurm's
    SLURM_ARRAY_TASK_ID and _COUNT, a Kubernetes Indexed Job's JOB_COMPLETION_INDEX). An
    elastic gang's workers are told its range, MLSCHED_MIN_WORKERS to MLSCHED_MAX_WORKERS
    (torchrun's --nnodes=MIN:MAX; both the world size for a rigid one), to keep their global
    batch whatever WORLD_SIZE this attempt started with. MLSCHED_WORKER_ADDRS lists where each
    of the gang's workers is reached, by rank (`worker_addrs`: the backend's; else every one at
    MASTER_ADDR), for what needs its peers beside torchrun's rendezvous (an MPI hostfile, a
    Ray cluster's workers, Slurm's SLURM_JOB_NODELIST). Each backend adds MLSCHED_HOSTFILE,
    the path of a file the job may read but not change: the same addresses as a hostfile, a
    line per address with its GPUs as slots, for an MPI, DeepSpeed or Horovod launcher
    (`hostfile`). For a gang of more than one worker each backend adds MLSCHED_SSH_DIR, a
    folder of the files `ssh_files` makes (SSH_KEY, SSH_PUBLIC_KEY, SSH_AUTHORIZED_KEYS,
    SSH_CONFIG), for a launcher that starts the ranks over SSH (Open MPI's mpirun, DeepSpeed's
    pdsh, horovodrun), as Kubeflow's MPI Operator gives an MPIJob: a key pair of the
    attempt's own, which every worker of it holds and trusts, and a client config logging in
    with it. The launcher reads the config (`mpirun --mca plm_rsh_args "-F
    $MLSCHED_SSH_DIR/config"`, `ssh -F`), and each worker's image runs the sshd that lets it
    in, started with `-o AuthorizedKeysFile=$MLSCHED_SSH_DIR/authorized_keys`: mlsched runs
    no sshd of its own. sshd refuses an authorized_keys file in a folder others may write to
    on its way from / (a Kubernetes secret volume's own folder, a state directory under
    /tmp): such an sshd runs with `-o StrictModes=no`, as the MPI Operator's images do. The
    files are the worker's alone to read (on Kubernetes root's: an image whose job runs as
    another user copies the folder to that user's ~/.ssh first).
    MLSCHED_STOP_AT is when the runtime limit stops the worker at the latest, in whole seconds
    since the epoch (Slurm's SLURM_JOB_END_TIME), counted from now, as the worker is about to
    start (a backend counts its limit from the start, later: the time is never late), and
    MLSCHED_STOP_GRACE_S how long it then has to save a checkpoint: a job whose checkpoint
    takes longer saves one before that time instead. Each backend adds MLSCHED_STOP_AT_FILE,
    where the time stands after a lower limit (STOP_AT_FILE).
    """
    same_node = [w.rank for w in spec.workers if w.node == worker.node]
    nodes = list(dict.fromkeys(w.node for w in sorted(spec.workers, key=lambda w: w.rank)))
    env = dict(spec.env)
    env.update(
        MLSCHED_JOB_ID=str(spec.job_id),
        MLSCHED_ATTEMPT=str(spec.number),
        MLSCHED_CHECKPOINT_DIR=checkpoint_dir,
        MLSCHED_CHECKPOINT_MARKER=f"{checkpoint_dir}/{CHECKPOINT_MARKER}",
        MLSCHED_CHECKPOINT_LINE=CHECKPOINT_LINE,
        RANK=str(worker.rank),
        WORLD_SIZE=str(spec.world_size),
        LOCAL_RANK=str(same_node.index(worker.rank)),
        LOCAL_WORLD_SIZE=str(len(same_node)),
        NODE_RANK=str(nodes.index(worker.node)),
        GROUP_RANK=str(nodes.index(worker.node)),
        MASTER_ADDR=master_addr,
        MASTER_PORT=str(spec.master_port),
        CUDA_VISIBLE_DEVICES=",".join(str(i) for i in worker.gpu_indices),
        CUDA_DEVICE_ORDER="PCI_BUS_ID",
        MLSCHED_SHARD_INDEX=str(spec.shard_index),
        MLSCHED_SHARDS=str(spec.shards),
        MLSCHED_MIN_WORKERS=str(spec.min_workers or spec.world_size),
        MLSCHED_MAX_WORKERS=str(spec.max_workers or spec.world_size),
        MLSCHED_WORKER_ADDRS=",".join(gang_addrs(spec, worker_addrs, master_addr)),
    )
    if spec.max_runtime_s:
        env["MLSCHED_STOP_AT"] = str(int(time.time()) + spec.max_runtime_s)
    env["MLSCHED_STOP_GRACE_S"] = str(spec.stop_grace_s)
    if spec.number > 1:
        env["MLSCHED_RESUME"] = "1"
    return env


def gang_addrs(
    spec: AttemptSpec, worker_addrs: tuple[str, ...], master_addr: str
) -> tuple[str, ...]:
    """Where each of the gang's workers is reached, by rank: the backend's addresses
    (`worker_addrs`), else every one at `master_addr` (MLSCHED_WORKER_ADDRS)."""
    return worker_addrs or (master_addr,) * spec.world_size


def hostfile(spec: AttemptSpec, worker_addrs: tuple[str, ...], master_addr: str) -> str:
    """The gang's hostfile (MLSCHED_HOSTFILE), as DeepSpeed and Open MPI read one: a line
    `ADDRESS slots=N` per distinct address of `gang_addrs`, in the order of the first rank at
    each, N the GPUs of the workers there (a worker without GPUs counts one slot)."""
    slots: dict[str, int] = {}
    workers = sorted(spec.workers, key=lambda w: w.rank)
    for worker, addr in zip(workers, gang_addrs(spec, worker_addrs, master_addr), strict=True):
        slots[addr] = slots.get(addr, 0) + max(len(worker.gpu_indices), 1)
    return "".join(f"{addr} slots={count}\n" for addr, count in slots.items())


def new_ssh_key() -> str:
    """A new Ed25519 private key, unencrypted, in OpenSSH's format (`ssh-keygen -t ed25519`)."""
    key = Ed25519PrivateKey.generate()
    return key.private_bytes(Encoding.PEM, PrivateFormat.OpenSSH, NoEncryption()).decode()


def ssh_files(attempt_id: int, folder: str, private_key: str = "") -> dict[str, str]:
    """The gang's SSH files by name, as a worker finds them in `folder` (MLSCHED_SSH_DIR): the
    attempt's private key (`private_key`, in OpenSSH's format, that of the files made for
    another worker of the gang; "": a new one), its public key, commented with the attempt,
    the same as the one line of authorized_keys, and a client config logging in to any host
    with that key and no other, taking whatever host key the host shows without keeping it:
    a peer's sshd shows its image's or container's own, which no worker could know before."""
    key = private_key or new_ssh_key()
    loaded = load_ssh_private_key(key.encode(), password=None)
    public = loaded.public_key().public_bytes(Encoding.OpenSSH, PublicFormat.OpenSSH).decode()
    line = f"{public} mlsched-attempt-{attempt_id}\n"
    # Quoted, for a folder with spaces; '%' would start one of ssh's tokens.
    identity = '"' + f"{folder.rstrip('/')}/{SSH_KEY}".replace("%", "%%") + '"'
    config = (
        "Host *\n"
        f"    IdentityFile {identity}\n"
        "    IdentitiesOnly yes\n"
        "    StrictHostKeyChecking no\n"
        "    UserKnownHostsFile /dev/null\n"
        "    LogLevel ERROR\n"
    )
    return {SSH_KEY: key, SSH_PUBLIC_KEY: line, SSH_AUTHORIZED_KEYS: line, SSH_CONFIG: config}
