"""The Kubernetes execution backend: one Pod per worker, bound to the node mlsched chose.

- inventory: nodes' allocatable cpu, memory and `nvidia.com/gpu`; the GPU type from the
  `nvidia.com/gpu.product` label; `mlsched.io/gpu-shareable=true` marks nodes where fractional
  GPU shares may run; topology from node labels (`topology_labels`). A cordoned node, one
  whose Ready condition is not True, and one tainted NoExecute (the kubelet would refuse the
  pods) or NoSchedule (kube-scheduler's, which pods bound to their node never meet) with a key
  the pods do not tolerate (`tolerated_taints`), and one with a condition of
  a type in `unhealthy_conditions` True (node-problem-detector's) are reported not ready, with
  why (`k8s_status.not_ready_reason`).
- start: the tenant's namespace `<prefix><tenant>` (with an optional ResourceQuota and a
  NetworkPolicy letting only pods of the same namespace in), a headless Service for a gang, the
  job's secrets in a Secret of the attempt (`mlsched-<attempt id>-secrets`) that the pods' env
  refers to by secretKeyRef (a pod spec holds no secret's value) or, for those given as files,
  mounts read-only at /var/run/mlsched/secrets (a secret volume; the variables hold the
  paths), for a gang of more than one worker an SSH key pair of the attempt's own in a Secret
  (`mlsched-<attempt id>-ssh`: the private key, the public key, authorized_keys and a client
  config, base.ssh_files) that every pod mounts read-only at /var/run/mlsched/ssh, mode 0400
  (MLSCHED_SSH_DIR), for a launcher that starts the ranks over SSH through an sshd the image
  runs, the team's credential for the registry of the job's image in a Secret of type
  kubernetes.io/dockerconfigjson (`mlsched-<attempt id>-pull`) that the pods pull with
  (imagePullSecrets), and the gang's hostfile in a ConfigMap of the attempt
  (`mlsched-<attempt id>-hosts`, each pod's stable name with its GPUs as slots) that every pod
  mounts read-only at /var/run/mlsched/hostfile (MLSCHED_HOSTFILE); each Secret and the
  ConfigMap is made owned by the pods the start created, for Kubernetes' garbage collector;
  then the pods: restartPolicy Never, requests equal to limits (Guaranteed QoS), /dev/shm in
  memory as large as the worker's memory (not the runtime's 64 MiB), a toleration of each of
  `tolerated_taints`, a GPU worker's `gpu_runtime_class` if set, labels
  mlsched.io/{attempt,job,rank,tenant,cluster}, and with a checkpoint claim only the job's own
  folder of it mounted (subPath). The claim is the platform team's to provide in
  every tenant namespace: a start in a namespace without it fails at once (CreateFailed)
  instead of leaving pods that never mount. The job's data volumes are the tenant's claims,
  mounted at the paths it asked for (read-only as asked): an attempt whose data volume has no
  claim, or whose claim the namespace lacks, has not bound, is deleting, or has no access mode
  letting its pods on their nodes mount it as asked (ReadWriteOnce for a gang on one node
  only, ReadWriteOncePod for one pod, ReadOnlyMany read-only), fails at once (CreateFailed) in
  the same way. Objects that already exist (409) are left alone, so starting twice is
  harmless.
- status: from a pod watch (see k8s_watch) and a periodic node list (see k8s_status for the
  mapping of pod states, OOMKilled, evictions, image pull failures and lost nodes; a node
  NotReady for less than `not_ready_grace_s` keeps its pods as they were). A pod in an image
  pull back-off that does not say why the pull failed (kubelets before 1.32), and whose failed
  pull the watch did not see (the agent restarted meanwhile), has its events read once, for the
  kubelet's "Failed to pull image" event. A pod whose container waits for a volume the kubelet
  cannot mount, its Secret or ConfigMap missing, or its claim missing, being deleted or unbound
  since the start, fails once the kubelet's FailedMount events have said so for
  `mount_failure_s`, and one whose claim's volume will not attach to its node once the
  attach-detach controller's FailedAttachVolume events have (see k8s_mounts). A pod's end is
  reported once its whole log has been read (at most `log_catchup_s` later), so the lines are in
  the logs() call the agent makes before its heartbeat. A worker reports its job's last saved
  checkpoint: the time Kubernetes stamped on the last checkpoint line in its pod's log (a line
  that is exactly MLSCHED_CHECKPOINT_LINE; see k8s_logs), moved onto the agent's clock by the
  control plane's offset (`k8s_clock`), and, where the agent mounts the
  checkpoint volume too (`checkpoint_mount`, a ReadWriteMany claim) and the worker runs, when
  its job last touched the checkpoint marker; the later of the two.
- usage: what each running worker has used, from its kubelet's stats and its node's DCGM
  exporter (see k8s_usage).
- logs: each started pod's log, followed (see k8s_logs); checkpoint lines too. The log of a pod
  this backend did not create (found again after a restart) waits until the agent says where
  the control plane's copy of it ends (`logs_to_resume`, `resume_logs`), and so does the pod's
  end: a rotated log no longer begins at line 0, so lines numbered from 0 would be taken for
  ones the control plane has.
- stop: deletes the pods with a grace period (SIGTERM, then SIGKILL from the kubelet), the
  Service and, once every pod's delete has succeeded, the Secrets and the ConfigMap.
  Idempotent: calling it again deletes what is still there and not yet terminating, and a
  delete the API server failed is tried again at the next status() (every retry_s).
- lower_runtime_limit: patches each pod of the attempt that has not ended and is not being
  deleted down to the new limit (spec.activeDeadlineSeconds, which the kubelet counts from the
  pod's start, as the job's limit is counted, and which the API server only lets go down); a
  pod whose deadline is not above it is left; a failed patch is raised after the others, for
  the agent to ask again at its next step.
- forget: deletes what is left of an ended attempt (pods, Service, Secrets, ConfigMap) and
  drops its state, once every delete has succeeded (or found the object gone); until then the
  attempt is still reported, so the next forget tries again. An attempt found on the cluster
  after a restart may have any of the Secrets: all are deleted.

Needs RBAC to list and watch pods in all namespaces, list nodes, create namespaces, resource
quotas and networkpolicies (or get those made in advance), get persistentvolumeclaims, list
events, get nodes/proxy (usage), list pods and get pods/proxy in the DCGM exporters'
namespace (GPU time), create, patch (activeDeadlineSeconds) and delete pods, create and delete
services in the tenants' namespaces, and create, patch (ownerReferences) and delete secrets
and configmaps there.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.utils import parse_quantity
from urllib3.exceptions import HTTPError

from clusters.backends import k8s_specs as specs
from clusters.backends import k8s_tenancy as tenancy
from clusters.backends.base import (
    CHECKPOINT_MARKER,
    PENDING,
    RUNNING,
    AttemptSpec,
    LogLine,
    LogResume,
    NodeInventory,
    WorkerStatus,
    is_name,
    with_checkpoint,
)
from clusters.backends.k8s_clock import ControlPlaneClock
from clusters.backends.k8s_logs import LogFollowers
from clusters.backends.k8s_mounts import FORCE_DETACH_S, MountFailures
from clusters.backends.k8s_status import (
    NODE_MISSING,
    NODE_NOT_READY,
    NODE_READY,
    Seen,
    is_finished,
    is_started,
    node_state,
    not_ready_reason,
    pods_node_state,
    pull_error,
    pull_error_in_events,
    pull_error_unknown,
    started_at,
)
from clusters.backends.k8s_status import worker_status as classify
from clusters.backends.k8s_tenancy import create
from clusters.backends.k8s_usage import GPU_OPERATOR, Exporters, NodeStats
from clusters.backends.k8s_watch import Key, PodWatcher

log = logging.getLogger(__name__)

DEFAULT_TOPOLOGY_LABELS = {
    "zone": "topology.kubernetes.io/zone",
    "rack": "mlsched.io/rack",
    "nvlink": "mlsched.io/nvlink-domain",
}
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
# A node offers feature NAME (what a job may require, Slurm's node Features) when it carries the
# label FEATURE_PREFIX + NAME with the value "true", as node-feature-discovery writes its own.
FEATURE_PREFIX = "feature.mlsched.io/"
MIB = 2**20
MAX_DEADLINE_S = 2**31 - 1  # the API server's largest activeDeadlineSeconds


@dataclass
class _Attempt:
    namespace: str
    nodes: dict[int, str]  # rank -> node
    checkpoint_dir: str = ""  # the job's folder within the checkpoint volume
    secrets: tuple[str, ...] = ()  # the Secrets its start creates: stop and forget delete them


@dataclass
class _Stop:
    """A stop asked for an attempt: what has been deleted, whether a delete failed."""

    grace: int
    # pods, Service, Secrets, ConfigMap deleted or gone
    deleted: set[str] = field(default_factory=set)
    failed: bool = False  # a delete failed: status() tries again


class KubernetesBackend:
    """The Backend protocol on one Kubernetes cluster, through the official client."""

    def __init__(
        self,
        api_client: client.ApiClient,
        cluster: str,
        namespace_prefix: str = "mlsched-",
        checkpoint_root: str = "/checkpoints",
        *,
        checkpoint_claim: str | None = None,
        checkpoint_mount: str | None = None,
        namespace_quota: dict[str, str] | None = None,
        cluster_domain: str = "cluster.local",
        topology_labels: dict[str, str] | None = None,
        watch_timeout_s: int = 60,
        node_refresh_s: float = 5.0,
        sync_timeout_s: float = 10.0,
        retry_s: float = 1.0,
        not_ready_grace_s: float = 300.0,
        log_catchup_s: float = 10.0,
        mount_failure_s: float = 60.0,
        mount_check_s: float = 5.0,
        force_detach_s: float = FORCE_DETACH_S,
        isolate_namespaces: bool = True,
        gpu_exporters: Exporters | None = GPU_OPERATOR,
        tolerated_taints: tuple[str, ...] = (),
        unhealthy_conditions: tuple[str, ...] = (),
        gpu_runtime_class: str = "",
    ):
        self.core = client.CoreV1Api(api_client)
        self.networking = client.NetworkingV1Api(api_client)
        self.cluster, self.namespace_prefix = cluster, namespace_prefix
        self.checkpoint_root, self.checkpoint_claim = checkpoint_root, checkpoint_claim
        # Where this agent sees the checkpoint volume the pods mount at checkpoint_root.
        self.checkpoint_mount = checkpoint_mount
        self.namespace_quota, self.cluster_domain = namespace_quota, cluster_domain
        self.topology_labels = topology_labels or DEFAULT_TOPOLOGY_LABELS
        self.node_refresh_s, self.sync_timeout_s = node_refresh_s, sync_timeout_s
        # A node NotReady for less than this keeps its pods running in the report: the kubelet
        # may be cut off from the API server while they run (Kubernetes evicts after 300 s).
        self.not_ready_grace_s = not_ready_grace_s
        # How long a pod's end waits at most for its log to be read to the end.
        self.log_catchup_s = log_catchup_s
        # Create a NetworkPolicy in each tenant namespace (see k8s_specs.build_network_policy).
        self.isolate_namespaces = isolate_namespaces
        # Taints (by key) every pod tolerates: a node tainted NoExecute (its kubelet would refuse
        # the pod, UntoleratedTaint) or NoSchedule with another key takes no work.
        self.tolerated_taints = tolerated_taints
        # Node condition types that, True, mean the node should take no work (a
        # node-problem-detector's KernelDeadlock, a GPU checker's).
        self.unhealthy_conditions = unhealthy_conditions
        # The RuntimeClass of pods with GPUs ("": the nodes' default runtime).
        self.gpu_runtime_class = gpu_runtime_class
        self.retry_s = retry_s
        # Its GPU-seconds are counted in memory: a restarted agent counts again from 0.
        self.usage_epoch = uuid.uuid4().hex
        self._lock = threading.Lock()
        self._attempts: dict[int, _Attempt] = {}
        self._stopping: dict[int, _Stop] = {}
        self._stops_retried_at = -math.inf
        self._create_errors: dict[Key, str] = {}
        self._pull_errors: dict[Key, str] = {}  # k8s_status.Seen.pull_error
        self._pull_events_read: set[Key] = set()  # pods whose events were read for it
        self._ended_at: dict[Key, float] = {}  # ended pods whose log is still being read
        # Deadlines this backend lowered, by pod (its uid, the seconds): the watch may not
        # have brought the patched pod yet.
        self._lowered: dict[Key, tuple[str, int]] = {}
        self._nodes: dict[str, client.V1Node] | None = None  # None: not listed yet
        self._nodes_at = -math.inf
        self._not_ready_noticed: dict[str, datetime] = {}  # nodes without a transition time
        # The control plane's time, learned from the node and event listings' answers: the
        # times its components stamp are measured against it, not the agent's own clock.
        self._clock = ControlPlaneClock()
        selector = f"{specs.LABEL_CLUSTER}={specs.label_value(cluster)}"
        self._logs = LogFollowers(self.core, self._pod_done, retry_s=retry_s, clock=self._clock)
        self._usage = NodeStats(self.core, gpu_exporters)
        # A pod fails once the kubelet has kept failing to mount a missing Secret or ConfigMap,
        # or a claim gone since the start, for mount_failure_s (k8s_status.MISSING_FOR_MOUNT),
        # or its claim's volume has failed to attach that long (k8s_status.MULTI_ATTACH,
        # ATTACH_FAILED).
        # 60 s: the kubelet's retries, backing off, pass it at their eighth try (63.5 s), far
        # past a new namespace's kube-root-ca.crt or a lagging cache, and far before the
        # control plane's start timeout (300 s). The events are read at most every
        # mount_check_s.
        # While the node holding its volume is not ready, a Multi-Attach error waits
        # force_detach_s more: the volume is that node's until the controller detaches it by
        # force.
        self._mounts = MountFailures(
            self.core, mount_failure_s, mount_check_s, self._clock, force_detach_s,
            client.StorageV1Api(api_client),
        )  # fmt: skip
        self._watcher = PodWatcher(
            self.core, selector, self._pod_changed, timeout_s=watch_timeout_s, backoff_s=retry_s
        )
        self._watcher.start()

    def close(self) -> None:
        """Stop the watch and log threads (the pods keep running)."""
        self._logs.close()
        self._watcher.close()

    # Backend protocol.

    def inventory(self) -> list[NodeInventory]:
        """Every node with its allocatable resources, GPU type, topology and readiness."""
        nodes = self._list_nodes()
        self._remember_nodes(nodes)
        return [self._inventory_of(node) for node in nodes]

    def start(self, spec: AttemptSpec) -> None:
        """Create the namespace, the gang's Service, the attempt's Secrets (the job's secrets,
        the gang's SSH key pair, its team's registry credential), its ConfigMap (the gang's
        hostfile) and one pod per worker; 409s are fine (a Secret already there keeps its key
        pair, which the pods already there mount)."""
        namespace = specs.namespace_name(self.namespace_prefix, spec.tenant)
        try:
            folder = specs.checkpoint_folder(spec)
            specs.check_data_volumes(spec)
        except ValueError as error:
            folder, refused = "", error
        else:
            refused = None
        with self._lock:
            for key in [k for k in self._create_errors if k[0] == spec.attempt_id]:
                self._create_errors.pop(key)  # this start tries them again
            self._attempts[spec.attempt_id] = _Attempt(
                namespace, {w.rank: w.node for w in spec.workers}, folder, specs.secret_names(spec)
            )
        if refused is not None:
            return self._fail_create(spec.attempt_id, spec.workers, refused)
        try:
            tenancy.prepare(self.core, self.networking, namespace, spec.tenant,
                            self.namespace_quota, self.isolate_namespaces,
                            self.checkpoint_claim)  # fmt: skip
            tenancy.check_data_claims(self.core, namespace, spec.volumes,
                                      nodes=len({w.node for w in spec.workers}),
                                      pods=spec.world_size)  # fmt: skip
            if spec.world_size > 1:
                service = specs.build_service(spec, namespace, self.cluster)
                create(self.core.create_namespaced_service, namespace, service)
            # Before the pods: a pod whose Secret or ConfigMap is missing fails to start its
            # container, or pulls without the credential.
            for secret in specs.build_secrets(spec, namespace, self.cluster):
                create(self.core.create_namespaced_secret, namespace, secret)
            hosts = specs.build_hostfile(spec, namespace, self.cluster, self.cluster_domain)
            create(self.core.create_namespaced_config_map, namespace, hosts)
        except (ApiException, HTTPError, tenancy.Refused) as error:
            return self._fail_create(spec.attempt_id, spec.workers, error)
        pods = [self._start_worker(spec, worker, namespace) for worker in spec.workers]
        created = [pod for pod in pods if pod]
        owned = [(name, self.core.patch_namespaced_secret) for name in specs.secret_names(spec)]
        owned.append((specs.hostfile_name(spec.attempt_id), self.core.patch_namespaced_config_map))
        for name, patch in owned:
            self._own(spec.attempt_id, patch, namespace, name, created)

    def stop(self, attempt_id: int, grace_s: float) -> None:
        """Delete the attempt's pods with the grace period, its Service, its Secrets and its
        ConfigMap.

        Calling it again for the same attempt deletes what is still there and not yet
        terminating (a delete that failed); pods already terminating are left to the kubelet.
        """
        # Whole seconds, at least 1: a grace of 0 would force-delete without the kubelet.
        grace = max(1, math.ceil(grace_s))
        with self._lock:
            self._stopping.setdefault(attempt_id, _Stop(grace)).grace = grace
        self._stop_attempt(attempt_id)

    def status(self) -> list[WorkerStatus]:
        """Every worker this backend started or finds on the cluster, from the pod watch."""
        # The control plane reads the report as the whole truth (a started worker left out is
        # lost), so never answer from a pod list that has not been read in full yet.
        if not self._watcher.synced.wait(self.sync_timeout_s):
            raise RuntimeError("the pod watch has not listed the cluster's pods yet")
        self._retry_stops()
        nodes = self._node_states()
        pods, deleted = self._watcher.snapshot()
        self._find_pull_errors(pods, deleted)
        self._mounts.check(pods, deleted, nodes)
        with self._lock:
            expected = {
                (a, r): att.nodes[r] for a, att in self._attempts.items() for r in att.nodes
            }
            keys = set(pods) | set(expected) | set(self._create_errors)
            seen = {key: self._seen(key, pods, deleted, expected, nodes) for key in keys}
            folders = {a: att.checkpoint_dir for a, att in self._attempts.items()}
        statuses = [classify(key[0], key[1], seen[key]) for key in sorted(seen)]
        statuses = [self._after_last_lines(status, pods, deleted) for status in statuses]
        statuses = [self._with_start(s, pods.get((s.attempt_id, s.rank))) for s in statuses]
        return self._usage.add([self._with_checkpoint(s, folders) for s in statuses], pods)

    def _after_last_lines(self, status: WorkerStatus, pods, deleted) -> WorkerStatus:
        """A pod that has ended is reported ended once its log has been read to the end, so
        the agent ships its last lines before the control plane sees the end; until then (at
        most log_catchup_s) it is reported running."""
        key = (status.attempt_id, status.rank)
        pod = pods.get(key)
        ended = pod is not None and (key in deleted or is_finished(pod))
        if status.phase in (PENDING, RUNNING) or not ended or not is_started(pod):
            return status
        if not self._logs.placed(key):
            # Its log waits to be told where to number from (the next heartbeat's answer):
            # only then can its last lines be read, in log_catchup_s from then.
            return WorkerStatus(status.attempt_id, status.rank, RUNNING)
        if self._logs.caught_up(key):
            with self._lock:
                self._ended_at.pop(key, None)
            return status
        now = time.monotonic()
        with self._lock:
            since = self._ended_at.setdefault(key, now)
            if now - since < self.log_catchup_s:
                return WorkerStatus(status.attempt_id, status.rank, RUNNING)
            if since == -math.inf:
                return status
            self._ended_at[key] = -math.inf  # said once
        log.warning("attempt %s rank %s ended; its log could not be read to the end", *key)
        return status

    def _with_start(self, status: WorkerStatus, pod: client.V1Pod | None) -> WorkerStatus:
        """The status with when its container started, the kubelet's time moved onto the
        agent's clock (`k8s_clock`)."""
        at = started_at(pod)
        if at is None:
            return status
        return replace(status, started_at=at.timestamp() - self._clock.offset_s)

    def _with_checkpoint(self, status: WorkerStatus, folders: dict[int, str]) -> WorkerStatus:
        """The status with the job's last checkpoint: the later of the pod's last checkpoint
        line, in any phase (a job saves one as it is stopped, in its grace period), and the
        marker on the mounted volume while the worker runs."""
        printed = self._logs.checkpoint_at((status.attempt_id, status.rank))
        if status.phase != RUNNING:
            return with_checkpoint(status, printed)
        return with_checkpoint(status, printed, self._marker_time(folders.get(status.attempt_id)))

    def _marker_time(self, folder: str | None) -> float | None:
        """When the job last touched its checkpoint marker, where the agent mounts the volume."""
        if self.checkpoint_mount is None or not folder:
            return None
        # The same folder the worker's pod mounts (subPath) at MLSCHED_CHECKPOINT_DIR.
        marker = Path(self.checkpoint_mount, folder, CHECKPOINT_MARKER)
        try:
            return marker.stat().st_mtime
        except OSError:  # no checkpoint yet
            return None

    def logs(self) -> list[LogLine]:
        """Log lines read since the last call, seq per (attempt, rank) from 0."""
        return self._logs.drain()

    def logs_to_resume(self) -> list[Key]:
        """The pods not created by this backend whose log waits for `resume_logs`."""
        return self._logs.unplaced()

    def resume_logs(self, points: dict[Key, LogResume | None]) -> None:
        """Number each waiting pod's log on from the control plane's last line of it."""
        for key, point in points.items():
            self._logs.resume(key, point)

    def forget(self, attempt_id: int) -> None:
        """Delete what is left of the attempt (ended pods, Service, Secrets, ConfigMap); drop
        its state.

        Only once every delete succeeded or found the object gone: until then the attempt is
        still reported (ended), so the agent forgets it again and the deletes are tried again.
        """
        if not self._delete_attempt(attempt_id, 1):
            return
        # First: it waits for a watch callback in flight, which could write its state again.
        self._watcher.ignore(attempt_id)
        with self._lock:
            self._attempts.pop(attempt_id, None)
            self._stopping.pop(attempt_id, None)
            for keys in (self._create_errors, self._pull_errors, self._ended_at, self._lowered):
                for key in [k for k in keys if k[0] == attempt_id]:
                    keys.pop(key)
            self._pull_events_read = {k for k in self._pull_events_read if k[0] != attempt_id}
        self._mounts.forget(attempt_id)
        self._logs.drop(attempt_id)
        self._usage.forget(attempt_id)

    def lower_runtime_limit(self, attempt_id: int, max_runtime_s: int) -> None:
        """Bring the activeDeadlineSeconds of the attempt's pods down to `max_runtime_s` (from 1
        to the API server's largest): the kubelet ends a pod past it, DeadlineExceeded, which
        is reported TIMED_OUT. Pods ended or being deleted are left, and so are those whose
        deadline is not above it, without a request: asking again costs nothing. Raises
        RuntimeError, as status() does, before the pod watch has listed the cluster's pods,
        and once the others are patched when a patch failed (the agent asks again)."""
        if not self._watcher.synced.wait(self.sync_timeout_s):
            raise RuntimeError("the pod watch has not listed the cluster's pods yet")
        seconds = min(max(int(max_runtime_s), 1), MAX_DEADLINE_S)
        pods, deleted = self._watcher.snapshot()
        failed = 0
        for key, pod in sorted(pods.items()):
            if key[0] != attempt_id or key in deleted or is_finished(pod):
                continue
            if pod.metadata.deletion_timestamp is not None:
                continue
            deadline = self._deadline_of(key, pod)
            if deadline is None or deadline > seconds:
                failed += not self._lower_deadline(key, pod, seconds)
        if failed:
            raise RuntimeError(f"{failed} pods of attempt {attempt_id} not lowered to {seconds} s")

    # Runtime limit.

    def _deadline_of(self, key: Key, pod: client.V1Pod) -> int | None:
        """The pod's activeDeadlineSeconds: as last seen, or as this backend lowered it since."""
        own = pod.spec.active_deadline_seconds if pod.spec else None
        with self._lock:
            uid, lowered = self._lowered.get(key, ("", None))
        if lowered is None or uid != pod.metadata.uid:
            return own
        return lowered if own is None else min(own, lowered)

    def _lower_deadline(self, key: Key, pod: client.V1Pod, seconds: int) -> bool:
        """Patch the pod's activeDeadlineSeconds to `seconds`, and its stop-at annotation (the
        worker's MLSCHED_STOP_AT_FILE) as much sooner; whether it was (a failure warns)."""
        namespace, name = pod.metadata.namespace, pod.metadata.name
        body: dict = {"spec": {"activeDeadlineSeconds": seconds}}
        if stop_at := specs.stop_at_after(pod, seconds):
            body["metadata"] = {"annotations": {specs.STOP_AT_ANNOTATION: str(stop_at)}}
        try:
            patched = self.core.patch_namespaced_pod(
                name, namespace, body, _content_type="application/merge-patch+json"
            )
        except (ApiException, HTTPError) as error:
            detail = f"{getattr(error, 'status', '')} {getattr(error, 'reason', error)}"
            log.warning("attempt %s: pod %s/%s runtime limit not lowered to %s s: %s",
                        key[0], namespace, name, seconds, detail.strip())  # fmt: skip
            return False
        with self._lock:
            self._lowered[key] = (patched.metadata.uid, seconds)
        log.info("attempt %s: pod %s/%s runtime limit lowered to %s s",
                 key[0], namespace, name, seconds)  # fmt: skip
        return True

    # Starting.

    def _start_worker(self, spec: AttemptSpec, worker, namespace: str) -> client.V1Pod | None:
        """Create the worker's pod: the pod created, None if it was there already or failed."""
        pod = specs.build_pod(
            spec,
            worker,
            namespace=namespace,
            cluster=self.cluster,
            cluster_domain=self.cluster_domain,
            checkpoint_root=self.checkpoint_root,
            checkpoint_claim=self.checkpoint_claim,
            tolerated_taints=self.tolerated_taints,
            gpu_runtime_class=self.gpu_runtime_class,
        )
        try:
            created = create(self.core.create_namespaced_pod, namespace, pod)
        except (ApiException, HTTPError) as error:
            self._fail_create(spec.attempt_id, [worker], error)
            return None
        if created is not None:
            # Created here, so no line of it was read before: numbered from line 0.
            self._logs.from_start((spec.attempt_id, worker.rank))
            self._watcher.remember((spec.attempt_id, worker.rank), created)
        return created

    def _own(self, attempt_id: int, patch, ns: str, name: str, pods: list[client.V1Pod]) -> None:
        """Make the pods created the owners of a Secret or ConfigMap just created (`patch`
        patches its kind), so that Kubernetes' garbage collector deletes it once they are all
        gone, even if this backend never forgets the attempt. Stop and forget delete it all the
        same: a failure only warns."""
        if not pods:
            return
        try:
            patch(name, ns, specs.owned_by(pods), _content_type="application/merge-patch+json")
        except (ApiException, HTTPError) as error:
            detail = f"{getattr(error, 'status', '')} {getattr(error, 'reason', error)}"
            log.warning("attempt %s: %s/%s not given owners: %s",
                        attempt_id, ns, name, detail.strip())  # fmt: skip

    def _fail_create(self, attempt_id: int, workers, error: Exception) -> None:
        # The attempt cannot run as asked: report its workers failed so it is retried.
        if isinstance(error, ApiException | HTTPError):
            detail = f"{getattr(error, 'status', '')} {getattr(error, 'reason', error)}"
            if said := status_message(error):
                detail += f": {said}"
        else:
            detail = str(error)
        reason = f"CreateFailed: {detail}"
        log.warning("attempt %s: %s", attempt_id, reason)
        with self._lock:
            for worker in workers:
                self._create_errors[(attempt_id, worker.rank)] = reason.strip()

    # Stopping.

    def _stop_attempt(self, attempt_id: int) -> None:
        """Delete the stopping attempt's pods that are there, not ended and not yet terminating,
        its Service, its Secrets and its ConfigMap; remember whether a delete failed."""
        with self._lock:
            stop = self._stopping.get(attempt_id)
            if stop is None:
                return
            grace, done = stop.grace, set(stop.deleted)
        pods, deleted = self._watcher.snapshot()
        names = self._pod_names(attempt_id, pods)
        failed = False
        namespaces = sorted({ns for ns, _ in names.values()})
        for key, (namespace, name) in sorted(names.items()):
            pod = pods.get(key)
            terminating = pod is not None and pod.metadata.deletion_timestamp is not None
            # An ended pod is left for forget: deleting it now would take its last lines.
            if name in done or key in deleted or terminating or is_finished(pod):
                continue
            options = client.V1DeleteOptions(grace_period_seconds=grace)
            if _delete(self.core.delete_namespaced_pod, name, namespace, options):
                done.add(name)
            else:
                failed = True
        deletes: list[tuple[str, Callable]] = [
            (specs.service_name(attempt_id), self.core.delete_namespaced_service)
        ]
        # The Secrets and the ConfigMap once no pod is left that may yet start its container
        # (one whose delete failed): a running container keeps the variables, image and files
        # it was started with.
        if not failed:
            deletes += self._secrets_and_hosts_of(attempt_id)
        for object_name, method in deletes:
            if object_name in done:
                continue
            if all([_delete(method, object_name, ns, None) for ns in namespaces]):
                done.add(object_name)
            else:
                failed = True
        with self._lock:
            stop.deleted |= done
            stop.failed = failed

    def _retry_stops(self) -> None:
        """Try again, every retry_s, the deletes of stops that failed (an API server error):
        a pod left running would hold GPUs the control plane has given to another job."""
        now = time.monotonic()
        with self._lock:
            if now - self._stops_retried_at < self.retry_s:
                return
            failed = [a for a, stop in self._stopping.items() if stop.failed]
            if failed:
                self._stops_retried_at = now
        for attempt_id in failed:
            self._stop_attempt(attempt_id)

    def _delete_attempt(self, attempt_id: int, grace: int) -> bool:
        """Delete the attempt's pods, ended or not, its Service, its Secrets and its ConfigMap:
        whether every delete succeeded or found the object gone."""
        pods, _ = self._watcher.snapshot()
        names = set(self._pod_names(attempt_id, pods).values())
        ok = True
        for namespace, name in sorted(names):
            options = client.V1DeleteOptions(grace_period_seconds=grace)
            ok &= _delete(self.core.delete_namespaced_pod, name, namespace, options)
        objects = self._secrets_and_hosts_of(attempt_id)
        for namespace in sorted({ns for ns, _ in names}):
            service = specs.service_name(attempt_id)
            ok &= _delete(self.core.delete_namespaced_service, service, namespace, None)
            for name, method in objects:
                ok &= _delete(method, name, namespace, None)
        return ok

    def _secrets_and_hosts_of(self, attempt_id: int) -> list[tuple[str, Callable]]:
        """The attempt's Secrets and its ConfigMap, each with the method deleting it."""
        secrets = [(name, self.core.delete_namespaced_secret)
                   for name in self._secrets_of(attempt_id)]  # fmt: skip
        hosts = (specs.hostfile_name(attempt_id), self.core.delete_namespaced_config_map)
        return [*secrets, hosts]

    def _secrets_of(self, attempt_id: int) -> tuple[str, ...]:
        """The Secrets the attempt may have: those its start created, or, for one found on the
        cluster (after a restart), whose start this backend did not see, any it may have."""
        with self._lock:
            attempt = self._attempts.get(attempt_id)
        if attempt is not None:
            return attempt.secrets
        return (
            specs.secret_name(attempt_id),
            specs.ssh_secret_name(attempt_id),
            specs.pull_secret_name(attempt_id),
        )

    def _pod_names(self, attempt_id: int, pods) -> dict[Key, tuple[str, str]]:
        """The attempt's pods, (namespace, name) by key: those it was started with and those
        the watch has seen."""
        with self._lock:
            attempt = self._attempts.get(attempt_id)
        names = {}
        if attempt:
            names = {
                (attempt_id, r): (attempt.namespace, specs.pod_name(attempt_id, r))
                for r in attempt.nodes
            }
        for key, pod in pods.items():
            if key[0] == attempt_id:
                names[key] = (pod.metadata.namespace, pod.metadata.name)
        return names

    # Status.

    def _seen(self, key: Key, pods, deleted, expected, nodes) -> Seen:
        pod = pods.get(key)
        node = pod.spec.node_name if pod is not None and pod.spec else expected.get(key)
        return Seen(
            pod=pod,
            deleted=key in deleted,
            stopping=key[0] in self._stopping,
            # Until nodes have been listed once, assume them ready rather than lost.
            node=NODE_READY if nodes is None or not node else nodes.get(node, NODE_MISSING),
            create_error=self._create_errors.get(key, ""),
            pull_error=self._pull_errors.get(key, ""),
            mount_error=self._mounts.error(key),
        )

    def _find_pull_errors(self, pods, deleted) -> None:
        """The failed pull of each pod in a back-off that does not name it, when the watch has
        not seen it either: from the kubelet's events, read once per pod (the pod is reported
        at every status, and its events would tell the same)."""
        with self._lock:
            keys = [
                key
                for key, pod in pods.items()
                if key not in deleted
                and key not in self._pull_errors
                and key not in self._pull_events_read
                and pull_error_unknown(pod)
            ]
            self._pull_events_read.update(keys)
        for key in keys:
            if found := self._pull_error_of(pods[key]):
                with self._lock:
                    self._pull_errors.setdefault(key, found)  # unless the watch saw a later one

    def _pull_error_of(self, pod: client.V1Pod) -> str:
        """The pod's last failed pull, as the kubelet's events about it tell it; "" if none."""
        meta = pod.metadata
        try:
            events = self._clock.read(
                self.core.list_namespaced_event_with_http_info,
                meta.namespace,
                field_selector=f"involvedObject.name={meta.name}",
            ).items
        except (ApiException, HTTPError) as error:
            # Without them the back-off counts as the platform's, as an unknown pull error does.
            log.warning("events of %s/%s: %s", meta.namespace, meta.name, error)
            return ""
        return pull_error_in_events(events, meta.uid)

    def _node_states(self) -> dict[str, str] | None:
        """Node name -> state for its pods, listed at most every node_refresh_s; None if never
        listed. A node NotReady for less than not_ready_grace_s is unreachable, not lost."""
        if time.monotonic() - self._nodes_at >= self.node_refresh_s:
            try:
                self._remember_nodes(self._list_nodes())
            except (ApiException, HTTPError) as error:
                # Keep the last known nodes: an API hiccup is not a lost node.
                log.warning("node list failed: %s", error)
        if self._nodes is None:
            return None
        now = self._clock.now()
        states = {}
        for name, node in self._nodes.items():
            if node_state(node) == NODE_NOT_READY:
                noticed = self._not_ready_noticed.setdefault(name, now)
            else:
                noticed = self._not_ready_noticed.pop(name, None)
            states[name] = pods_node_state(node, now, self.not_ready_grace_s, noticed)
        return states

    def _list_nodes(self) -> list[client.V1Node]:
        return self._clock.read(self.core.list_node_with_http_info).items

    def _remember_nodes(self, nodes: list[client.V1Node]) -> None:
        self._nodes = {node.metadata.name: node for node in nodes}
        self._nodes_at = time.monotonic()

    def _inventory_of(self, node: client.V1Node) -> NodeInventory:
        allocatable = (node.status.allocatable if node.status else None) or {}
        labels = node.metadata.labels or {}
        why = not_ready_reason(node, self.tolerated_taints, self.unhealthy_conditions)
        return NodeInventory(
            name=node.metadata.name,
            cpu_milli=int(parse_quantity(allocatable.get("cpu", "0")) * 1000),
            memory_mb=int(parse_quantity(allocatable.get("memory", "0")) / MIB),
            gpu_type=labels.get(GPU_PRODUCT_LABEL, ""),
            gpu_count=int(parse_quantity(allocatable.get(specs.GPU_RESOURCE, "0"))),
            gpu_shareable=labels.get(specs.LABEL_SHAREABLE) == "true",
            topology={k: labels[v] for k, v in self.topology_labels.items() if v in labels},
            ready=not why,
            features=features_of(labels),
            not_ready=why,
        )

    # Watch and log callbacks.

    def _pod_changed(self, key: Key, pod: client.V1Pod) -> None:
        if failed_pull := pull_error(pod):
            with self._lock:
                self._pull_errors[key] = failed_pull
        if is_started(pod):
            self._logs.follow(key, pod.metadata.namespace, pod.metadata.name)
            if self._pod_done(key):
                self._logs.wake(key)  # a reader waiting after a dropped stream reads now

    def _pod_done(self, key: Key) -> bool:
        pod, deleted = self._watcher.get(key)
        return deleted or pod is None or is_finished(pod)


def _delete(method, name: str, namespace: str, options) -> bool:
    """Delete an object: whether it was deleted or is gone already (404)."""
    try:
        method(name, namespace, body=options) if options else method(name, namespace)
    except ApiException as error:
        if error.status == 404:
            return True
        log.warning("delete %s/%s: %s %s", namespace, name, error.status, error.reason)
        return False
    except HTTPError as error:
        log.warning("delete %s/%s: %r", namespace, name, error)
        return False
    return True


def features_of(labels: dict[str, str]) -> tuple[str, ...]:
    """The features a node's labels say it offers: FEATURE_PREFIX + a name a job could require,
    "true"."""
    return tuple(
        sorted(
            key.removeprefix(FEATURE_PREFIX)
            for key, value in labels.items()
            if key.startswith(FEATURE_PREFIX)
            and value == "true"
            and is_name(key.removeprefix(FEATURE_PREFIX))
        )
    )


def status_message(error: Exception) -> str:
    """The API server's own words of a refusal (its Status's message: which admission plugin,
    which field), at most 300 characters; "" when it gave none."""
    try:
        said = json.loads(getattr(error, "body", None) or "{}").get("message", "")
    except (ValueError, AttributeError):
        return ""
    return said[:300] if isinstance(said, str) else ""
