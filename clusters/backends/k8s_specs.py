"""Kubernetes objects for an attempt: the tenant's namespace and its NetworkPolicy, one Pod per
worker, a headless Service for a gang's rendezvous, a Secret holding the job's secrets, one
holding a gang's SSH key pair and one holding its team's registry credential, a ConfigMap
holding the gang's hostfile. Pure functions: no API calls.

Names: namespace `<prefix><tenant>` (hashed when the tenant is not a DNS label), Service
`mlsched-<attempt id>`, Pod `mlsched-<attempt id>-<rank>`, Secrets
`mlsched-<attempt id>-secrets`, `mlsched-<attempt id>-ssh` and `mlsched-<attempt id>-pull`,
ConfigMap `mlsched-<attempt id>-hosts`. A gang's pods set hostname `w<rank>` and the Service
as their subdomain, so rank 0 answers at
`w0.mlsched-<attempt id>.<namespace>.svc.<cluster domain>`.

The job's secrets given as files are keys of its secrets' Secret too, mounted read-only in
every worker at SECRET_FILES_DIR (a secret volume of those keys alone), each variable of their
names holding the path. A job with a runtime limit finds MLSCHED_STOP_AT as it stands in
STOP_AT_DIR (the pod's STOP_AT_ANNOTATION through the downward API, lowered with its limit).
Every worker finds the gang's hostfile (MLSCHED_HOSTFILE: each pod's stable name, its GPUs as
slots) in HOSTFILE_DIR, the attempt's ConfigMap mounted read-only. Every worker of a gang of
more than one finds the attempt's SSH files (MLSCHED_SSH_DIR: its key pair, authorized_keys, a
client config; base.ssh_files) in SSH_DIR, its SSH Secret mounted read-only, for a launcher
that starts the ranks over SSH through an sshd the image runs, as Kubeflow's MPI Operator
gives an MPIJob.

The registry credential's Secret is a Docker config (`.dockerconfigjson`) with the one registry
keyed by its host as image references write it, Docker Hub's by `https://index.docker.io/v1/`;
each pod names it in imagePullSecrets, so no pod spec holds the password.

The job's data volumes are the tenant's PersistentVolumeClaims, each a pod volume
`data-<name>` (apart from the backend's own volumes) mounted at the path the job asked for,
read-only as asked, its MLSCHED_VOLUME_<NAME> variable holding that path.
"""

from __future__ import annotations

import base64
import hashlib
import json
import posixpath
import re
from collections.abc import Callable

from kubernetes import client

from clusters.backends.base import (
    DOCKER_HUB_NAMES,
    HOSTFILE,
    STOP_AT_FILE,
    AttemptSpec,
    WorkerSpec,
    hostfile,
    ssh_files,
    stop_at_lowered,
    volume_variable,
    worker_env,
)

GROUP = "mlsched.io"
LABEL_ATTEMPT = f"{GROUP}/attempt"
LABEL_JOB = f"{GROUP}/job"
LABEL_RANK = f"{GROUP}/rank"
LABEL_TENANT = f"{GROUP}/tenant"
LABEL_CLUSTER = f"{GROUP}/cluster"
LABEL_SHAREABLE = f"{GROUP}/gpu-shareable"  # on nodes: "true" allows fractional GPU pods
GPU_RESOURCE = "nvidia.com/gpu"
CONTAINER = "worker"
CHECKPOINT_VOLUME = "checkpoints"
SECRET_FILES_VOLUME = "secret-files"
SECRET_FILES_DIR = "/var/run/mlsched/secrets"
# Readable, not writable: the volume is this pod's alone, its files the job's, and an image
# that runs as a user of its own (no fsGroup is set) must still read them, owned by root.
SECRET_FILES_MODE = 0o444
# MLSCHED_STOP_AT as it stands: an annotation of the pod, which the backend lowers with the
# pod's activeDeadlineSeconds, projected by the downward API into a file of this folder, which
# the kubelet rewrites when the annotation changes (MLSCHED_STOP_AT_FILE).
STOP_AT_ANNOTATION = f"{GROUP}/stop-at"
STOP_AT_VOLUME = "stop-at"
STOP_AT_DIR = "/var/run/mlsched/stop-at"
# The gang's hostfile: the key HOSTFILE of the attempt's ConfigMap, a file of that name in this
# folder.
HOSTFILE_VOLUME = "hostfile"
HOSTFILE_DIR = "/var/run/mlsched/hostfile"
# A gang's SSH files (MLSCHED_SSH_DIR): the keys of the attempt's SSH Secret, files of their
# names in this folder, root's alone to read: ssh refuses a private key others may read. An
# image whose job runs as another user has its entrypoint, as root, copy the folder to that
# user's ~/.ssh, owned by the user, and points ssh and sshd there (base.worker_env).
SSH_VOLUME = "ssh"
SSH_DIR = "/var/run/mlsched/ssh"
SSH_MODE = 0o400
# A worker's /dev/shm: memory (a tmpfs) as large as its memory, whose pages count against it.
# The container runtime's own is 64 MiB: PyTorch's DataLoader workers and NCCL's transport
# between GPUs of a node outgrow it and die with a bus error.
SHM_VOLUME = "shm"
SHM_DIR = "/dev/shm"
NETWORK_POLICY = "mlsched-same-namespace-only"
# The pod volumes of the job's data volumes start with it: never the name of one of the
# backend's own (CHECKPOINT_VOLUME, SECRET_FILES_VOLUME, STOP_AT_VOLUME, HOSTFILE_VOLUME,
# SSH_VOLUME, SHM_VOLUME), whose folders, SSH_DIR among them, are under /var/run/mlsched and
# /dev, where the control plane mounts no data volume (quotas.tenant_volumes.RESERVED_PATHS).
DATA_VOLUME_PREFIX = "data-"
DNS_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")


def dns_label(text: str, limit: int = 63) -> str:
    """`text` as a DNS-1123 label: lower case, [a-z0-9-], no dash at either end."""
    label = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return label[:limit].rstrip("-") or "x"


def label_value(text: str) -> str:
    """`text` as a label value: at most 63 of [A-Za-z0-9-_.], alphanumeric at both ends."""
    value = re.sub(r"[^A-Za-z0-9_.-]+", "-", text)[:63]
    return value.strip("-_.")


def namespace_name(prefix: str, tenant: str) -> str:
    """The tenant's namespace: `<prefix><tenant>` when that is already a DNS label without
    "--"; otherwise its nearest label, then "--" and a hash of the tenant, so that tenants
    whose slugs differ only in case or `_` never share a namespace."""
    name = prefix + tenant
    if dns_label(name) == name and "--" not in name:
        return name
    digest = hashlib.sha256(tenant.encode()).hexdigest()[:12]
    return f"{dns_label(name, 63 - 14)}--{digest}"


def service_name(attempt_id: int) -> str:
    return f"mlsched-{attempt_id}"


def pod_name(attempt_id: int, rank: int) -> str:
    return f"mlsched-{attempt_id}-{rank}"


def secret_name(attempt_id: int) -> str:
    return f"mlsched-{attempt_id}-secrets"


def pull_secret_name(attempt_id: int) -> str:
    return f"mlsched-{attempt_id}-pull"  # k8s_status.TEAM_PULL_SECRET matches it


def hostfile_name(attempt_id: int) -> str:
    return f"mlsched-{attempt_id}-hosts"


def ssh_secret_name(attempt_id: int) -> str:
    return f"mlsched-{attempt_id}-ssh"


def secret_names(spec: AttemptSpec) -> tuple[str, ...]:
    """The Secrets the attempt's start creates: its job's secrets' (variables and files), a
    gang's SSH files', its registry credential's."""
    return tuple(name(spec.attempt_id) for asked, name, _ in _secrets_asked(spec) if asked)


def _secrets_asked(spec: AttemptSpec) -> list[tuple[object, Callable[[int], str], Callable]]:
    """Each Secret an attempt may have: whether it asks for it, its name's, its builder."""
    return [(spec.secrets or spec.secret_files, secret_name, build_secret),
            (spec.world_size > 1, ssh_secret_name, build_ssh_secret),
            (spec.pull_credential, pull_secret_name, build_pull_secret)]  # fmt: skip


def pod_labels(spec: AttemptSpec, rank: int, cluster: str) -> dict[str, str]:
    return {
        LABEL_ATTEMPT: str(spec.attempt_id),
        LABEL_JOB: str(spec.job_id),
        LABEL_RANK: str(rank),
        LABEL_TENANT: label_value(spec.tenant),
        LABEL_CLUSTER: label_value(cluster),
    }


def worker_addrs(spec: AttemptSpec, namespace: str, cluster_domain: str) -> tuple[str, ...]:
    """Each worker's stable DNS name through the headless Service, by rank (its pod's
    hostname and subdomain); a single worker is its own master, at localhost."""
    if spec.world_size == 1:
        return ("localhost",)
    domain = f"{service_name(spec.attempt_id)}.{namespace}.svc.{cluster_domain}"
    return tuple(f"w{rank}.{domain}" for rank in range(spec.world_size))


def is_fractional(worker: WorkerSpec) -> bool:
    return bool(worker.gpu_indices) and 0 < worker.gpu_milli < 1000


def resources(worker: WorkerSpec) -> client.V1ResourceRequirements:
    """Requests equal to limits, so the pod gets the Guaranteed QoS class.

    Whole GPUs go through the device plugin as `nvidia.com/gpu`. A fractional share requests no
    GPU resource (the device plugin only hands out whole devices); see `gpu_env`.
    """
    amounts = {}
    if worker.cpu_milli:
        amounts["cpu"] = f"{worker.cpu_milli}m"
    if worker.memory_mb:
        amounts["memory"] = f"{worker.memory_mb}Mi"
    if worker.gpu_indices and not is_fractional(worker):
        amounts[GPU_RESOURCE] = str(len(worker.gpu_indices))
    return client.V1ResourceRequirements(requests=dict(amounts), limits=dict(amounts))


def gpu_env(worker: WorkerSpec) -> dict[str, str]:
    """GPU variables as seen inside the container.

    The container runtime renumbers the devices it exposes from 0, so CUDA_VISIBLE_DEVICES is
    0..n-1 there; the node-level indices the scheduler allocated travel in MLSCHED_GPU_INDICES.
    Whole GPUs are picked by the device plugin. A fractional share names its device through
    NVIDIA_VISIBLE_DEVICES for the NVIDIA runtime, on nodes labelled shareable. A worker without
    GPUs gets "void" there: CUDA images set it to "all", and the NVIDIA runtime would then show
    the container every GPU of the node, those of other jobs included.
    """
    if not worker.gpu_indices:
        return {"CUDA_VISIBLE_DEVICES": "", "NVIDIA_VISIBLE_DEVICES": "void"}
    node_indices = ",".join(str(i) for i in worker.gpu_indices)
    env = {
        "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in range(len(worker.gpu_indices))),
        "MLSCHED_GPU_INDICES": node_indices,
    }
    if is_fractional(worker):
        env.update(NVIDIA_VISIBLE_DEVICES=node_indices, MLSCHED_GPU_MILLI=str(worker.gpu_milli))
    return env


def checkpoint_folder(spec: AttemptSpec) -> str:
    """The job's checkpoint folder within the checkpoint volume (`<tenant>/<job id>`, the same for
    every attempt), as a relative path that cannot leave the volume: a pod mounts only it."""
    parts = [part for part in spec.checkpoint_dir.split("/") if part not in ("", ".")]
    if not parts or ".." in parts:
        raise ValueError(f"unsafe checkpoint folder {spec.checkpoint_dir!r}")
    return "/".join(parts)


def checkpoint_dir(root: str, spec: AttemptSpec) -> str:
    """Where the job's checkpoint folder is inside the container: `<root>/<folder>`."""
    return posixpath.join(root, checkpoint_folder(spec))


def build_pod(
    spec: AttemptSpec,
    worker: WorkerSpec,
    *,
    namespace: str,
    cluster: str,
    cluster_domain: str,
    checkpoint_root: str,
    checkpoint_claim: str | None,
    tolerated_taints: tuple[str, ...] = (),
    gpu_runtime_class: str = "",
) -> client.V1Pod:
    """The worker's Pod, bound to its node (no kube-scheduler: mlsched already placed it).

    With a checkpoint claim the pod mounts the job's own folder of the claim (subPath), not the
    claim's root: on a store shared by every tenant it can neither read nor overwrite another
    job's checkpoints. The folder is mounted at MLSCHED_CHECKPOINT_DIR, the path the job is told.
    The job's secrets given as files are mounted at SECRET_FILES_DIR, each variable of their
    names holding its file's path. The attempt's ConfigMap is mounted at HOSTFILE_DIR,
    MLSCHED_HOSTFILE holding its file's path, and a gang's SSH Secret at SSH_DIR, which
    MLSCHED_SSH_DIR names. Each data volume's claim is mounted at the path the job asked for
    (``check_data_volumes`` first: each has a claim).
    """
    folder = checkpoint_dir(checkpoint_root, spec)
    addrs = worker_addrs(spec, namespace, cluster_domain)
    env = worker_env(spec, worker, addrs[0], folder, addrs)
    env.update(gpu_env(worker))
    env.update(data_volume_paths(spec))
    env = secret_file_paths(spec) | env  # a variable set literally wins, as over a secret
    if stop_at := env.get("MLSCHED_STOP_AT"):
        env["MLSCHED_STOP_AT_FILE"] = posixpath.join(STOP_AT_DIR, STOP_AT_FILE)
    env["MLSCHED_HOSTFILE"] = posixpath.join(HOSTFILE_DIR, HOSTFILE)
    if spec.world_size > 1:
        env["MLSCHED_SSH_DIR"] = SSH_DIR
    container = client.V1Container(
        name=CONTAINER,
        image=spec.image,
        command=list(spec.command) or None,
        env=env_vars(env, spec),
        resources=resources(worker),
        volume_mounts=_mounts(folder, checkpoint_folder(spec), checkpoint_claim, spec)
        + [client.V1VolumeMount(name=SHM_VOLUME, mount_path=SHM_DIR)],
    )
    gang = spec.world_size > 1
    pod_spec = client.V1PodSpec(
        node_name=worker.node,
        restart_policy="Never",
        hostname=f"w{worker.rank}" if gang else None,
        subdomain=service_name(spec.attempt_id) if gang else None,
        active_deadline_seconds=spec.max_runtime_s or None,
        # What a drain, a node shutdown, kube-scheduler's preemption and the active deadline
        # give the job after SIGTERM; at least 1 s: with 0 a delete would remove the pod from
        # the API before the kubelet has stopped it.
        termination_grace_period_seconds=max(1, spec.stop_grace_s),
        # Workloads need neither API credentials nor every Service's address in their env.
        automount_service_account_token=False,
        enable_service_links=False,
        image_pull_secrets=[client.V1LocalObjectReference(name=pull_secret_name(spec.attempt_id))]
        if spec.pull_credential
        else None,
        containers=[container],
        volumes=_volumes(checkpoint_claim, spec) + [_shm_volume(worker)],
        tolerations=[client.V1Toleration(key=key, operator="Exists") for key in tolerated_taints]
        or None,
        # Where the NVIDIA runtime is not the nodes' default (k3s, some GPU Operator set-ups),
        # a pod reaches its GPUs only through its RuntimeClass.
        runtime_class_name=(gpu_runtime_class or None) if worker.gpu_indices else None,
    )
    metadata = client.V1ObjectMeta(
        name=pod_name(spec.attempt_id, worker.rank),
        namespace=namespace,
        labels=pod_labels(spec, worker.rank, cluster),
        annotations={
            f"{GROUP}/job-name": spec.name,
            f"{GROUP}/attempt-number": str(spec.number),
            **({STOP_AT_ANNOTATION: stop_at} if stop_at else {}),
        },
    )
    return client.V1Pod(api_version="v1", kind="Pod", metadata=metadata, spec=pod_spec)


def env_vars(env: dict[str, str], spec: AttemptSpec) -> list[client.V1EnvVar]:
    """The worker's literal variables, and each of the job's secrets as a reference to its key
    in the attempt's Secret, never its value (anyone who can read the pod would see it), all in
    order of name. A variable set literally (the platform's) wins over a secret of its name."""
    literal = [client.V1EnvVar(name=k, value=v) for k, v in env.items()]
    secret = secret_name(spec.attempt_id)
    refs = [
        client.V1EnvVar(
            name=name,
            value_from=client.V1EnvVarSource(
                secret_key_ref=client.V1SecretKeySelector(name=secret, key=name)
            ),
        )
        for name in spec.secrets
        if name not in env
    ]
    return sorted(literal + refs, key=lambda var: var.name)


def secret_file_paths(spec: AttemptSpec) -> dict[str, str]:
    """The variables naming the job's secret files: each one's path in the container."""
    return {name: posixpath.join(SECRET_FILES_DIR, name) for name in spec.secret_files}


def check_data_volumes(spec: AttemptSpec) -> None:
    """Raise ValueError, saying why, if a data volume of the attempt cannot be mounted in its
    pods: it has no claim (a volume of local clusters alone: the control plane places its jobs
    elsewhere, but its claim may have been removed since), or is not named as a DNS label, or
    not at an absolute path."""
    for volume in spec.volumes:
        name, path = str(volume.get("name", "")), str(volume.get("path", ""))
        if not DNS_LABEL.fullmatch(name):
            raise ValueError(f"its data volume {name[:100]!r} is not named as a DNS label")
        if not volume.get("claim"):
            raise ValueError(f"its data volume {name!r} has no claim: a Kubernetes cluster "
                             "cannot mount it")  # fmt: skip
        if not path.startswith("/"):
            raise ValueError(f"its data volume {name!r} is not at an absolute path: {path[:100]!r}")


def data_volume_name(name: str) -> str:
    """The pod's volume of the data volume ``name`` (a DNS label): `data-<name>`, or, for a
    name too long for that to stay a label, its head and a hash of it."""
    volume = DATA_VOLUME_PREFIX + name
    if len(volume) <= 63:
        return volume
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{DATA_VOLUME_PREFIX}{name[:49].rstrip('-')}-{digest}"


def data_volume_paths(spec: AttemptSpec) -> dict[str, str]:
    """The variables telling a worker where each data volume is: its path in the container."""
    return {volume_variable(volume["name"]): volume["path"] for volume in spec.volumes}


def _data_mounts(spec: AttemptSpec) -> list[client.V1VolumeMount]:
    return [
        client.V1VolumeMount(
            name=data_volume_name(volume["name"]),
            mount_path=volume["path"],
            read_only=bool(volume.get("read_only", True)),
        )
        for volume in spec.volumes
    ]


def _data_volumes(spec: AttemptSpec) -> list[client.V1Volume]:
    """Each data volume's claim; read-only at the volume too when the job only reads it, so
    that no container of the pod writes it."""
    return [
        client.V1Volume(
            name=data_volume_name(volume["name"]),
            persistent_volume_claim=client.V1PersistentVolumeClaimVolumeSource(
                claim_name=volume["claim"], read_only=bool(volume.get("read_only", True))
            ),
        )
        for volume in spec.volumes
    ]


# The node lifecycle's own taints: a node not ready, or unreachable, whose pods the backend
# judges by the Ready condition and its grace (k8s_status.pods_node_state).
LIFECYCLE_TAINTS = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"})
# NoSchedule taints the pods meet as kube-scheduler would let them: memory pressure keeps off
# BestEffort pods alone (the control plane tolerates it for the others, and the pods are
# Guaranteed); a GPU node's taint of the GPU resource keeps off pods that do not ask for it
# (the ExtendedResourceToleration admission), where the core places CPU-only work as it
# chooses, as on any GPU node.
MET_NO_SCHEDULE = frozenset({"node.kubernetes.io/memory-pressure", GPU_RESOURCE})
# The effects that keep pods off: NoExecute, the kubelet refuses them and evicts those there;
# NoSchedule, kube-scheduler places none there (PreferNoSchedule is a preference).
KEEPING_OFF = frozenset({"NoExecute", "NoSchedule"})


def untolerated_taint(node: client.V1Node, tolerated: tuple[str, ...]) -> str:
    """A taint of the node that keeps the pods off and that they do not tolerate, as
    ``key:effect`` ("": none): NoExecute, which the kubelet enforces (it refuses such a pod,
    UntoleratedTaint, and evicts one already there), or NoSchedule, which kube-scheduler does
    and a pod bound to its node never meets: the platform's way of keeping new work off a node
    (a disk under pressure, a node being set up or set apart), so the agent reports it not
    ready, what runs there running on."""
    for taint in (node.spec.taints if node.spec else None) or []:
        if taint.effect not in KEEPING_OFF or taint.key in LIFECYCLE_TAINTS:
            continue
        if taint.effect == "NoSchedule" and taint.key in MET_NO_SCHEDULE:
            continue
        if taint.key not in tolerated:
            return f"{taint.key}:{taint.effect}"
    return ""


def _shm_volume(worker: WorkerSpec) -> client.V1Volume:
    """The worker's /dev/shm: an emptyDir in memory, at most its memory (none asked: the
    node's default for memory-backed volumes, the pod's share of the node)."""
    size = f"{worker.memory_mb}Mi" if worker.memory_mb else None
    return client.V1Volume(
        name=SHM_VOLUME, empty_dir=client.V1EmptyDirVolumeSource(medium="Memory", size_limit=size)
    )


def _mounts(
    path: str, folder: str, claim: str | None, spec: AttemptSpec
) -> list[client.V1VolumeMount]:
    mounts: list[client.V1VolumeMount] = []
    if claim:
        # The kubelet creates the folder on the volume if it is not there yet.
        mounts.append(
            client.V1VolumeMount(name=CHECKPOINT_VOLUME, mount_path=path, sub_path=folder)
        )
    if spec.secret_files:
        mounts.append(
            client.V1VolumeMount(
                name=SECRET_FILES_VOLUME, mount_path=SECRET_FILES_DIR, read_only=True
            )
        )
    if spec.max_runtime_s:
        mounts.append(
            client.V1VolumeMount(name=STOP_AT_VOLUME, mount_path=STOP_AT_DIR, read_only=True)
        )
    mounts.append(
        client.V1VolumeMount(name=HOSTFILE_VOLUME, mount_path=HOSTFILE_DIR, read_only=True)
    )
    if spec.world_size > 1:
        mounts.append(client.V1VolumeMount(name=SSH_VOLUME, mount_path=SSH_DIR, read_only=True))
    mounts += _data_mounts(spec)
    return mounts


def _volumes(claim: str | None, spec: AttemptSpec) -> list[client.V1Volume]:
    volumes: list[client.V1Volume] = []
    if claim:
        source = client.V1PersistentVolumeClaimVolumeSource(claim_name=claim)
        volumes.append(client.V1Volume(name=CHECKPOINT_VOLUME, persistent_volume_claim=source))
    if spec.secret_files:
        volumes.append(_secret_files_volume(spec))
    if spec.max_runtime_s:
        volumes.append(_stop_at_volume())
    volumes.append(_hostfile_volume(spec))
    if spec.world_size > 1:
        volumes.append(_ssh_volume(spec))
    volumes += _data_volumes(spec)
    return volumes


def stop_at_after(pod: client.V1Pod, seconds: int) -> int | None:
    """The pod's STOP_AT_ANNOTATION once its activeDeadlineSeconds, as this version of the pod
    has it beside the annotation, is `seconds`; None for a pod without both."""
    annotations = pod.metadata.annotations or {}
    deadline = pod.spec.active_deadline_seconds if pod.spec else None
    try:
        stop_at = int(annotations[STOP_AT_ANNOTATION])
    except (KeyError, ValueError):
        return None
    return stop_at_lowered(stop_at, deadline, seconds) if deadline else None


def _stop_at_volume() -> client.V1Volume:
    """The pod's STOP_AT_ANNOTATION as the file STOP_AT_FILE (the downward API)."""
    field = client.V1ObjectFieldSelector(field_path=f"metadata.annotations['{STOP_AT_ANNOTATION}']")
    item = client.V1DownwardAPIVolumeFile(path=STOP_AT_FILE, field_ref=field)
    source = client.V1DownwardAPIVolumeSource(items=[item], default_mode=SECRET_FILES_MODE)
    return client.V1Volume(name=STOP_AT_VOLUME, downward_api=source)


def _hostfile_volume(spec: AttemptSpec) -> client.V1Volume:
    """The attempt's ConfigMap as the file HOSTFILE, readable by any user of the image."""
    item = client.V1KeyToPath(key=HOSTFILE, path=HOSTFILE)
    source = client.V1ConfigMapVolumeSource(
        name=hostfile_name(spec.attempt_id), items=[item], default_mode=SECRET_FILES_MODE
    )
    return client.V1Volume(name=HOSTFILE_VOLUME, config_map=source)


def _ssh_volume(spec: AttemptSpec) -> client.V1Volume:
    """The attempt's SSH Secret, every key a file of its name, readable by root alone."""
    source = client.V1SecretVolumeSource(
        secret_name=ssh_secret_name(spec.attempt_id), default_mode=SSH_MODE
    )
    return client.V1Volume(name=SSH_VOLUME, secret=source)


def _secret_files_volume(spec: AttemptSpec) -> client.V1Volume:
    """The job's secret files: only their keys of the attempt's Secret (not its variables),
    each as a file of its name."""
    items = [client.V1KeyToPath(key=name, path=name) for name in sorted(spec.secret_files)]
    source = client.V1SecretVolumeSource(
        secret_name=secret_name(spec.attempt_id), items=items, default_mode=SECRET_FILES_MODE
    )
    return client.V1Volume(name=SECRET_FILES_VOLUME, secret=source)


def build_service(spec: AttemptSpec, namespace: str, cluster: str) -> client.V1Service:
    """Headless Service giving the gang's pods stable DNS names before they are ready."""
    port = client.V1ServicePort(
        name="rendezvous", port=spec.master_port, target_port=spec.master_port
    )
    return client.V1Service(
        api_version="v1",
        kind="Service",
        metadata=client.V1ObjectMeta(
            name=service_name(spec.attempt_id),
            namespace=namespace,
            labels={LABEL_ATTEMPT: str(spec.attempt_id), LABEL_CLUSTER: label_value(cluster)},
        ),
        spec=client.V1ServiceSpec(
            cluster_ip="None",
            # Rendezvous happens while pods start, before any readiness.
            publish_not_ready_addresses=True,
            selector={LABEL_ATTEMPT: str(spec.attempt_id)},
            ports=[port],
        ),
    )


def build_secrets(spec: AttemptSpec, namespace: str, cluster: str) -> list[client.V1Secret]:
    """The attempt's Secrets, as it asks for them (``secret_names``)."""
    return [build(spec, namespace, cluster) for asked, _, build in _secrets_asked(spec) if asked]


def build_secret(spec: AttemptSpec, namespace: str, cluster: str) -> client.V1Secret:
    """The job's secrets for the attempt's pods, one key per name, variables' and files' (a
    tenant's secret names are unique, so they never share one); immutable, as the attempt's
    values never change (a retry is a new attempt, with a Secret of its own)."""
    return _secret(spec, secret_name(spec.attempt_id), namespace, cluster, "Opaque",
                   {**spec.secrets, **spec.secret_files})  # fmt: skip


def build_ssh_secret(
    spec: AttemptSpec, namespace: str, cluster: str, files: dict[str, str] | None = None
) -> client.V1Secret:
    """A gang's SSH files (``base.ssh_files``: `files`, else those of a new key pair) for the
    attempt's pods, which find them in SSH_DIR; immutable, as the attempt's key pair never
    changes (a retry is a new attempt, with a key pair of its own)."""
    files = files or ssh_files(spec.attempt_id, SSH_DIR)
    return _secret(spec, ssh_secret_name(spec.attempt_id), namespace, cluster, "Opaque", files)


def build_pull_secret(spec: AttemptSpec, namespace: str, cluster: str) -> client.V1Secret:
    """The team's credential for the registry of the job's image, as the attempt's pods pull
    with it (imagePullSecrets): a Docker config, as `docker login` writes it."""
    return _secret(spec, pull_secret_name(spec.attempt_id), namespace, cluster,
                   "kubernetes.io/dockerconfigjson",
                   {".dockerconfigjson": docker_config(spec.pull_credential)})  # fmt: skip


# The key Docker and the kubelet look Docker Hub's credentials up by.
DOCKER_HUB_KEY = "https://index.docker.io/v1/"


def docker_config(credential: dict[str, str]) -> str:
    """A `.dockerconfigjson` with the one registry's credential: keyed by its host as written
    in image references (a port kept), Docker Hub's by the key Docker reads it from."""
    user, password = credential["username"], credential["password"]
    registry = credential["registry"]
    auth = base64.b64encode(f"{user}:{password}".encode()).decode()
    key = DOCKER_HUB_KEY if registry in DOCKER_HUB_NAMES else registry
    return json.dumps({"auths": {key: {"username": user, "password": password, "auth": auth}}})


def build_hostfile(
    spec: AttemptSpec, namespace: str, cluster: str, cluster_domain: str
) -> client.V1ConfigMap:
    """The gang's hostfile for the attempt's pods, at the key HOSTFILE: each pod's stable name
    (``worker_addrs``) with its GPUs as slots; immutable, as the gang never changes within an
    attempt."""
    addrs = worker_addrs(spec, namespace, cluster_domain)
    return client.V1ConfigMap(
        api_version="v1",
        kind="ConfigMap",
        metadata=client.V1ObjectMeta(
            name=hostfile_name(spec.attempt_id),
            namespace=namespace,
            labels=_attempt_labels(spec, cluster),
        ),
        immutable=True,
        data={HOSTFILE: hostfile(spec, addrs, addrs[0])},
    )


def _attempt_labels(spec: AttemptSpec, cluster: str) -> dict[str, str]:
    """The labels of an object the attempt's start creates beside its pods."""
    return {
        LABEL_ATTEMPT: str(spec.attempt_id),
        LABEL_JOB: str(spec.job_id),
        LABEL_TENANT: label_value(spec.tenant),
        LABEL_CLUSTER: label_value(cluster),
    }


def _secret(
    spec: AttemptSpec, name: str, namespace: str, cluster: str, kind: str, data: dict[str, str]
) -> client.V1Secret:
    labels = _attempt_labels(spec, cluster)
    return client.V1Secret(
        api_version="v1",
        kind="Secret",
        metadata=client.V1ObjectMeta(name=name, namespace=namespace, labels=labels),
        type=kind,
        immutable=True,
        string_data=data,
    )


def owned_by(pods: list[client.V1Pod]) -> dict:
    """A merge patch making the pods an object's owners: Kubernetes' garbage collector deletes
    it once every one of them is gone."""
    owners = [
        {"apiVersion": "v1", "kind": "Pod", "name": pod.metadata.name, "uid": pod.metadata.uid}
        for pod in pods
    ]
    return {"metadata": {"ownerReferences": owners}}


def build_namespace(name: str, tenant: str) -> client.V1Namespace:
    labels = {LABEL_TENANT: label_value(tenant)}
    return client.V1Namespace(
        api_version="v1", kind="Namespace", metadata=client.V1ObjectMeta(name=name, labels=labels)
    )


def build_network_policy(namespace: str) -> client.V1NetworkPolicy:
    """Ingress to every pod of the namespace from pods of the same namespace only.

    A gang's rank 0 serves torch's TCPStore, which has no authentication, at a DNS name any pod
    can resolve: pods of other namespaces (other tenants) must not reach it. Egress is left
    open (images, datasets, DNS). Enforced only by a network plugin that implements
    NetworkPolicy (Calico, Cilium, ...).
    """
    same_namespace = client.V1NetworkPolicyPeer(pod_selector=client.V1LabelSelector())
    return client.V1NetworkPolicy(
        api_version="networking.k8s.io/v1",
        kind="NetworkPolicy",
        metadata=client.V1ObjectMeta(name=NETWORK_POLICY, namespace=namespace),
        spec=client.V1NetworkPolicySpec(
            pod_selector=client.V1LabelSelector(),  # every pod of the namespace
            policy_types=["Ingress"],
            ingress=[client.V1NetworkPolicyIngressRule(_from=[same_namespace])],
        ),
    )


def build_quota(namespace: str, hard: dict[str, str]) -> client.V1ResourceQuota:
    return client.V1ResourceQuota(
        api_version="v1",
        kind="ResourceQuota",
        metadata=client.V1ObjectMeta(name="mlsched", namespace=namespace),
        spec=client.V1ResourceQuotaSpec(hard=dict(hard)),
    )
