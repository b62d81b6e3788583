"""The Kubernetes execution backend: one Pod per worker, bound to the node mlsched chose.

- inventory: nodes' allocatable cpu, memory and `nvidia.com/gpu`; the GPU type from the
  `nvidia.com/gpu.product` label; `mlsched.io/gpu-shareable=true` marks nodes where fractional
  GPU shares may run; topology from node labels (`topology_labels`). A cordoned node or one
  whose Ready condition is not True is reported not ready.
- start: the tenant's namespace `<prefix><tenant>` (with an optional ResourceQuota), a headless
  Service for a gang, then the pods: restartPolicy Never, requests equal to limits (Guaranteed
  QoS), labels mlsched.io/{attempt,job,rank,tenant,cluster}. Objects that already exist (409)
  are left alone, so starting twice is harmless.
- status: from a pod watch (see k8s_watch) and a periodic node list (see k8s_status for the
  mapping of pod states, OOMKilled, evictions, image pull failures and lost nodes). Where the
  agent mounts the checkpoint volume too (`checkpoint_mount`, a ReadWriteMany claim), a running
  worker also reports when its job last touched the checkpoint marker.
- logs: each started pod's log, followed (see k8s_logs).
- stop: deletes the pods with a grace period (SIGTERM, then SIGKILL from the kubelet) and the
  Service. forget: deletes what is left of an ended attempt and drops its state.

Needs RBAC to list and watch pods in all namespaces, list nodes, create namespaces and
resource quotas, and create and delete pods and services in the tenants' namespaces.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.utils import parse_quantity
from urllib3.exceptions import HTTPError

from clusters.backends import k8s_specs as specs
from clusters.backends.base import (
    CHECKPOINT_MARKER,
    RUNNING,
    AttemptSpec,
    LogLine,
    NodeInventory,
    WorkerStatus,
)
from clusters.backends.k8s_logs import LogFollowers
from clusters.backends.k8s_status import (
    NODE_MISSING,
    NODE_READY,
    Seen,
    is_finished,
    is_started,
    node_state,
)
from clusters.backends.k8s_status import worker_status as classify
from clusters.backends.k8s_watch import Key, PodWatcher

log = logging.getLogger(__name__)

DEFAULT_TOPOLOGY_LABELS = {
    "zone": "topology.kubernetes.io/zone",
    "rack": "mlsched.io/rack",
    "nvlink": "mlsched.io/nvlink-domain",
}
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
MIB = 2**20


@dataclass
class _Attempt:
    namespace: str
    nodes: dict[int, str]  # rank -> node
    checkpoint_dir: str = ""


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
    ):
        self.core = client.CoreV1Api(api_client)
        self.cluster, self.namespace_prefix = cluster, namespace_prefix
        self.checkpoint_root, self.checkpoint_claim = checkpoint_root, checkpoint_claim
        # Where this agent sees the checkpoint volume the pods mount at checkpoint_root.
        self.checkpoint_mount = checkpoint_mount
        self.namespace_quota, self.cluster_domain = namespace_quota, cluster_domain
        self.topology_labels = topology_labels or DEFAULT_TOPOLOGY_LABELS
        self.node_refresh_s, self.sync_timeout_s = node_refresh_s, sync_timeout_s
        self._lock = threading.Lock()
        self._attempts: dict[int, _Attempt] = {}
        self._stopping: set[int] = set()
        self._forgotten: set[int] = set()
        self._create_errors: dict[Key, str] = {}
        self._nodes: dict[str, client.V1Node] | None = None  # None: not listed yet
        self._nodes_at = -math.inf
        selector = f"{specs.LABEL_CLUSTER}={specs.label_value(cluster)}"
        self._logs = LogFollowers(self.core, self._pod_done, retry_s=retry_s)
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
        nodes = self.core.list_node().items
        self._remember_nodes(nodes)
        return [self._inventory_of(node) for node in nodes]

    def start(self, spec: AttemptSpec) -> None:
        """Create the namespace, the gang's Service and one pod per worker; 409s are fine."""
        namespace = specs.namespace_name(self.namespace_prefix, spec.tenant)
        with self._lock:
            self._forgotten.discard(spec.attempt_id)
            for key in [k for k in self._create_errors if k[0] == spec.attempt_id]:
                self._create_errors.pop(key)  # this start tries them again
            self._attempts[spec.attempt_id] = _Attempt(
                namespace, {w.rank: w.node for w in spec.workers}, spec.checkpoint_dir
            )
        try:
            self._ensure_namespace(namespace, spec.tenant)
            if spec.world_size > 1:
                service = specs.build_service(spec, namespace, self.cluster)
                _create(self.core.create_namespaced_service, namespace, service)
        except (ApiException, HTTPError) as error:
            return self._fail_create(spec.attempt_id, spec.workers, error)
        for worker in spec.workers:
            self._start_worker(spec, worker, namespace)

    def stop(self, attempt_id: int, grace_s: float) -> None:
        """Delete the attempt's pods with the grace period, and its Service."""
        with self._lock:
            self._stopping.add(attempt_id)
        # Whole seconds, at least 1: a grace of 0 would force-delete without the kubelet.
        self._delete_attempt(attempt_id, max(1, math.ceil(grace_s)))

    def status(self) -> list[WorkerStatus]:
        """Every worker this backend started or finds on the cluster, from the pod watch."""
        # The control plane reads the report as the whole truth (a started worker left out is
        # lost), so never answer from a pod list that has not been read in full yet.
        if not self._watcher.synced.wait(self.sync_timeout_s):
            raise RuntimeError("the pod watch has not listed the cluster's pods yet")
        nodes = self._node_states()
        pods, deleted = self._watcher.snapshot()
        with self._lock:
            expected = {
                (a, r): att.nodes[r] for a, att in self._attempts.items() for r in att.nodes
            }
            known = set(pods) | set(expected) | set(self._create_errors)
            keys = {key for key in known if key[0] not in self._forgotten}
            seen = {key: self._seen(key, pods, deleted, expected, nodes) for key in keys}
            folders = {a: att.checkpoint_dir for a, att in self._attempts.items()}
        statuses = [classify(key[0], key[1], seen[key]) for key in sorted(seen)]
        return [self._with_checkpoint(status, folders) for status in statuses]

    def _with_checkpoint(self, status: WorkerStatus, folders: dict[int, str]) -> WorkerStatus:
        folder = folders.get(status.attempt_id)
        if self.checkpoint_mount is None or status.phase != RUNNING or folder is None:
            return status
        marker = Path(self.checkpoint_mount, folder.lstrip("/"), CHECKPOINT_MARKER)
        try:
            return dataclasses.replace(status, checkpoint_at=marker.stat().st_mtime)
        except OSError:  # no checkpoint yet
            return status

    def logs(self) -> list[LogLine]:
        """Log lines read since the last call, seq per (attempt, rank) from 0."""
        return self._logs.drain()

    def forget(self, attempt_id: int) -> None:
        """Delete what is left of the attempt (ended pods, the Service) and drop its state."""
        self._delete_attempt(attempt_id, 1)
        with self._lock:
            self._forgotten.add(attempt_id)
            self._attempts.pop(attempt_id, None)
            self._stopping.discard(attempt_id)
            for key in [k for k in self._create_errors if k[0] == attempt_id]:
                self._create_errors.pop(key)
        self._watcher.ignore(attempt_id)
        self._logs.drop(attempt_id)

    # Starting.

    def _ensure_namespace(self, namespace: str, tenant: str) -> None:
        try:
            _create(self.core.create_namespace, None, specs.build_namespace(namespace, tenant))
        except ApiException as error:
            if error.status != 403:
                raise
            # Without the right to create namespaces, one an admin made in advance will do.
            self.core.read_namespace(namespace)
        if self.namespace_quota:
            quota = specs.build_quota(namespace, self.namespace_quota)
            _create(self.core.create_namespaced_resource_quota, namespace, quota)

    def _start_worker(self, spec: AttemptSpec, worker, namespace: str) -> None:
        pod = specs.build_pod(
            spec,
            worker,
            namespace=namespace,
            cluster=self.cluster,
            cluster_domain=self.cluster_domain,
            checkpoint_root=self.checkpoint_root,
            checkpoint_claim=self.checkpoint_claim,
        )
        try:
            created = _create(self.core.create_namespaced_pod, namespace, pod)
        except (ApiException, HTTPError) as error:
            return self._fail_create(spec.attempt_id, [worker], error)
        if created is not None:
            self._watcher.remember((spec.attempt_id, worker.rank), created)

    def _fail_create(self, attempt_id: int, workers, error: Exception) -> None:
        # The attempt cannot run as asked: report its workers failed so it is retried.
        reason = f"CreateFailed: {getattr(error, 'status', '')} {getattr(error, 'reason', error)}"
        log.warning("attempt %s: %s", attempt_id, reason)
        with self._lock:
            for worker in workers:
                self._create_errors[(attempt_id, worker.rank)] = reason.strip()

    # Stopping.

    def _delete_attempt(self, attempt_id: int, grace: int) -> None:
        pods = self._pod_names(attempt_id)
        for namespace, name in pods:
            options = client.V1DeleteOptions(grace_period_seconds=grace)
            _delete(self.core.delete_namespaced_pod, name, namespace, options)
        for namespace in {ns for ns, _ in pods}:
            service = specs.service_name(attempt_id)
            _delete(self.core.delete_namespaced_service, service, namespace, None)

    def _pod_names(self, attempt_id: int) -> set[tuple[str, str]]:
        """The attempt's pods: those it was started with and those the watch has seen."""
        pods, _ = self._watcher.snapshot()
        names = {
            (pod.metadata.namespace, pod.metadata.name)
            for key, pod in pods.items()
            if key[0] == attempt_id
        }
        with self._lock:
            attempt = self._attempts.get(attempt_id)
        if attempt:
            names |= {(attempt.namespace, specs.pod_name(attempt_id, r)) for r in attempt.nodes}
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
        )

    def _node_states(self) -> dict[str, str] | None:
        """Node name -> state, listed at most every node_refresh_s; None if never listed."""
        if time.monotonic() - self._nodes_at >= self.node_refresh_s:
            try:
                self._remember_nodes(self.core.list_node().items)
            except (ApiException, HTTPError) as error:
                # Keep the last known nodes: an API hiccup is not a lost node.
                log.warning("node list failed: %s", error)
        if self._nodes is None:
            return None
        return {name: node_state(node) for name, node in self._nodes.items()}

    def _remember_nodes(self, nodes: list[client.V1Node]) -> None:
        self._nodes = {node.metadata.name: node for node in nodes}
        self._nodes_at = time.monotonic()

    def _inventory_of(self, node: client.V1Node) -> NodeInventory:
        allocatable = (node.status.allocatable if node.status else None) or {}
        labels = node.metadata.labels or {}
        cordoned = bool(node.spec and node.spec.unschedulable)
        return NodeInventory(
            name=node.metadata.name,
            cpu_milli=int(parse_quantity(allocatable.get("cpu", "0")) * 1000),
            memory_mb=int(parse_quantity(allocatable.get("memory", "0")) / MIB),
            gpu_type=labels.get(GPU_PRODUCT_LABEL, ""),
            gpu_count=int(parse_quantity(allocatable.get(specs.GPU_RESOURCE, "0"))),
            gpu_shareable=labels.get(specs.LABEL_SHAREABLE) == "true",
            topology={k: labels[v] for k, v in self.topology_labels.items() if v in labels},
            ready=node_state(node) == NODE_READY and not cordoned,
        )

    # Watch and log callbacks.

    def _pod_changed(self, key: Key, pod: client.V1Pod) -> None:
        if is_started(pod):
            self._logs.follow(key, pod.metadata.namespace, pod.metadata.name)

    def _pod_done(self, key: Key) -> bool:
        pods, deleted = self._watcher.snapshot()
        return key in deleted or key not in pods or is_finished(pods[key])


def _create(method, namespace: str | None, body):
    """Create an object; None when it already exists."""
    try:
        if namespace is None:
            return method(body)
        return method(namespace, body)
    except ApiException as error:
        if error.status == 409:
            return None
        raise


def _delete(method, name: str, namespace: str, options) -> None:
    try:
        method(name, namespace, body=options) if options else method(name, namespace)
    except ApiException as error:
        if error.status != 404:
            log.warning("delete %s/%s: %s %s", namespace, name, error.status, error.reason)
    except HTTPError as error:
        log.warning("delete %s/%s: %r", namespace, name, error)
