"""What the Kubernetes backend's workers use, from their kubelets' stats (metrics-server reads
the same): each node's `/stats/summary`, through the API server's node proxy, gives every pod
on it its CPU time so far (`usageCoreNanoSeconds`) and the memory it holds now
(`workingSetBytes`, what the kubelet evicts and the kernel's OOM killer judge by).

A node with running workers is read at most every `usage.SAMPLE_EVERY_S`, a few nodes per
status call, each read with a short timeout: a kubelet that does not answer costs its pods
their samples, never the agent's step. The kubelet keeps no high-water mark of memory: a
worker's peak is the most any sample saw. A pod that has ended is no longer in the summary,
and keeps its last sample.

GPU time comes from the cluster's DCGM exporter (NVIDIA's GPU Operator runs one on each GPU node,
`gpu-operator/app=nvidia-dcgm-exporter:9400` by default), which labels each GPU's utilization
(`DCGM_FI_DEV_GPU_UTIL`, in %) with the pod holding it: the exporters are listed at most every
EXPORTERS_EVERY_S (and at the next sample after one has gone), and the one on a node is read
through the API server's pod proxy as that node's summary is. A worker holding whole GPUs is
counted busy for their utilization times the time since its last sample, as the local backend
counts it; an agent that restarts counts running workers' GPU time again from then (what the
control plane holds does not move back). A share of a GPU is not counted: its utilization is
its sharers' together.

Needs RBAC `get` on `nodes/proxy`, and `list` pods and `get` on `pods/proxy` in the exporters'
namespace; without them (403) there are no samples, said once in the log.
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.utils import parse_quantity
from urllib3.exceptions import HTTPError

from clusters.backends import base, usage
from clusters.backends import k8s_specs as specs

log = logging.getLogger(__name__)

NODES_PER_CALL = 20
TIMEOUT_S = 5.0
EXPORTERS_EVERY_S = 300.0
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
# A sample line of the exposition format: name{labels} value [timestamp].
SAMPLE_LINE = re.compile(r"^(?P<name>[A-Za-z_:][\w:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)")
LABEL = re.compile(r'(?P<key>[A-Za-z_]\w*)="(?P<value>(?:[^"\\]|\\.)*)"')

Key = tuple[int, int]
T = TypeVar("T")
Pod = tuple[str, str]  # (namespace, name)


@dataclass(frozen=True)
class Exporters:
    """Where a cluster's DCGM exporters run: their namespace, label selector and port."""

    namespace: str
    selector: str
    port: int

    @classmethod
    def parse(cls, text: str) -> Exporters | None:
        """`NAMESPACE/SELECTOR:PORT`, e.g. `gpu-operator/app=nvidia-dcgm-exporter:9400`; None
        for an empty text (GPU time not read)."""
        if not text:
            return None
        namespace, slash, rest = text.partition("/")
        selector, colon, port = rest.rpartition(":")
        if not (namespace and slash and selector and colon and port.isdigit()):
            raise ValueError(f"NAMESPACE/SELECTOR:PORT, e.g. {DCGM_EXPORTERS}: {text!r}")
        return cls(namespace, selector, int(port))

    def __str__(self) -> str:
        return f"{self.namespace}/{self.selector}:{self.port}"


# The GPU Operator's exporters, read unless the agent is told otherwise.
GPU_OPERATOR = Exporters("gpu-operator", "app=nvidia-dcgm-exporter", 9400)
DCGM_EXPORTERS = str(GPU_OPERATOR)


def gpu_utilization(text: str) -> dict[Pod, list[float]]:
    """(namespace, pod) -> its GPUs' utilization (0 to 1) from a DCGM exporter's metrics: the
    `DCGM_FI_DEV_GPU_UTIL` samples labelled with a pod, one a GPU. Lines of another shape are
    left out."""
    found: dict[Pod, list[float]] = defaultdict(list)
    for line in text.splitlines():
        match = SAMPLE_LINE.match(line)
        if match is None or match["name"] != GPU_UTIL:
            continue
        labels = {m["key"]: m["value"] for m in LABEL.finditer(match["labels"] or "")}
        try:
            value = float(match["value"])
        except ValueError:
            continue
        if labels.get("namespace") and labels.get("pod") and 0 <= value <= 100:
            found[labels["namespace"], labels["pod"]].append(value / 100)
    return dict(found)


def pod_usage(summary: dict) -> dict[tuple[str, str], tuple[float, int]]:
    """(namespace, pod) -> (CPU seconds, working set bytes) of each pod in a kubelet's summary:
    the pod's own figures, or its containers' summed where the kubelet gives no pod figures
    (before 1.15). A pod without figures is left out."""
    found = {}
    pods = summary.get("pods") if isinstance(summary, dict) else None
    for pod in pods if isinstance(pods, list) else []:
        try:
            ref = pod.get("podRef") or {}
            parts = [pod] if "cpu" in pod and "memory" in pod else pod.get("containers") or []
            cpu = sum(part["cpu"]["usageCoreNanoSeconds"] for part in parts) / 1e9
            memory = sum(part["memory"]["workingSetBytes"] for part in parts)
        except (AttributeError, KeyError, TypeError):
            continue
        if parts and ref.get("namespace") and ref.get("name"):
            found[ref["namespace"], ref["name"]] = (cpu, int(memory))
    return found


def whole_gpus(pod: client.V1Pod) -> int:
    """How many whole GPUs the pod holds through the device plugin (0 for a share, which asks
    for none: k8s_specs.resources)."""
    limits = [(c.resources and c.resources.limits) or {} for c in pod.spec.containers or []]
    return sum(int(parse_quantity(limit.get(specs.GPU_RESOURCE, "0"))) for limit in limits)


class NodeStats:
    """Samples the running workers of a Kubernetes backend, node by node."""

    def __init__(self, core: client.CoreV1Api, exporters: Exporters | None = None):
        self.core = core
        self.exporters = exporters
        self.samples = usage.Samples()
        self._read_at: dict[str, float] = {}  # node -> when its summary was last asked for
        self._exporter_on: dict[str, str] = {}  # node -> the name of the exporter pod on it
        self._exporters_at = -math.inf
        self._refused: set[str] = set()  # what the API server refused: said once

    def add(self, statuses: list[base.WorkerStatus], pods: dict) -> list[base.WorkerStatus]:
        """The statuses with what each worker has used; ``pods``: (attempt, rank) -> V1Pod."""
        now = time.monotonic()
        running: dict[str, dict[Pod, tuple[Key, int]]] = defaultdict(dict)
        for status in statuses:
            pod = pods.get((status.attempt_id, status.rank))
            if status.phase == base.RUNNING and pod is not None and pod.spec and pod.spec.node_name:
                name = (pod.metadata.namespace, pod.metadata.name)
                key = (status.attempt_id, status.rank)
                running[pod.spec.node_name][name] = (key, whole_gpus(pod))
        due = [
            node
            for node in sorted(running, key=lambda n: self._read_at.get(n, -usage.SAMPLE_EVERY_S))
            if now - self._read_at.get(node, -usage.SAMPLE_EVERY_S) >= usage.SAMPLE_EVERY_S
        ]
        if due and self.exporters and now - self._exporters_at >= EXPORTERS_EVERY_S:
            self._exporters_at = now
            self._exporter_on = self._list_exporters()
        for node in due[:NODES_PER_CALL]:
            self._read_at[node] = now
            busy = self._gpu_utilization(node) if self._exporter_on.get(node) else {}
            for name, (cpu, memory) in self._summary(node).items():
                if name not in running[node]:
                    continue
                key, gpus = running[node][name]
                readings = busy.get(name, [])
                gpu, idle = (
                    self.samples.gpu_figures(key, readings, now)
                    if gpus and len(readings) == gpus
                    else (None, None)
                )
                self.samples.keep(
                    key, now, cpu, usage.mib(memory), mark=False,
                    gpu_busy_seconds=gpu, gpu_idle_since=idle,
                )  # fmt: skip
        for node in set(self._read_at) - set(running):
            del self._read_at[node]
        return [self.samples.with_usage(status) for status in statuses]

    def forget(self, attempt_id: int) -> None:
        self.samples.forget(attempt_id)

    def _summary(self, node: str) -> dict[Pod, tuple[float, int]]:
        # Not preloaded: the client would read the JSON answer as the text of a dict.
        return self._read(
            "nodes/proxy",
            f"node {node}: no stats summary",
            lambda: pod_usage(json.loads(self.core.connect_get_node_proxy_with_path(
                node, "stats/summary", _preload_content=False, _request_timeout=TIMEOUT_S
            ).data)),
        )  # fmt: skip

    def _gpu_utilization(self, node: str) -> dict[Pod, list[float]]:
        assert self.exporters is not None
        exporters, pod = self.exporters, self._exporter_on[node]
        return self._read(
            "pods/proxy",
            f"node {node}: no GPU metrics from {exporters.namespace}/{pod}",
            lambda: gpu_utilization(self.core.connect_get_namespaced_pod_proxy_with_path(
                f"{pod}:{exporters.port}", exporters.namespace, "metrics",
                _preload_content=False, _request_timeout=TIMEOUT_S,
            ).data.decode("utf-8", "replace")),
            gone=self._relist,
        )  # fmt: skip

    def _list_exporters(self) -> dict[str, str]:
        """node -> the running DCGM exporter pod on it."""
        assert self.exporters is not None
        exporters = self.exporters
        listed = self._read(
            "pods",
            f"no DCGM exporters listed in {exporters.namespace}",
            lambda: self.core.list_namespaced_pod(
                exporters.namespace, label_selector=exporters.selector,
                _request_timeout=TIMEOUT_S,
            ).items,
        )  # fmt: skip
        return {
            pod.spec.node_name: pod.metadata.name
            for pod in listed
            if pod.spec and pod.spec.node_name and pod.status and pod.status.phase == "Running"
        }

    def _relist(self) -> None:
        """List the exporters again at the next sample: one has gone (a rolling update of
        their DaemonSet names its new pods anew)."""
        self._exporters_at = -math.inf

    def _read(
        self, rights: str, failed: str, call: Callable[[], T], gone: Callable | None = None
    ) -> T | dict:
        """What ``call`` answers, or nothing (an empty dict) where it fails: a refusal (403)
        is said once for each of the ``rights`` the agent lacks, other failures each time;
        ``gone`` is called on a 404."""
        try:
            return call()
        except ApiException as error:
            if error.status == 404 and gone is not None:
                gone()
            if error.status == 403 and rights not in self._refused:
                self._refused.add(rights)
                log.warning("no usage samples: %s is not allowed (%s)", rights, error.reason)
            elif error.status != 403:
                log.info("%s (%s %s)", failed, error.status, error.reason)
        except (HTTPError, OSError, ValueError) as error:
            log.info("%s (%s)", failed, error)
        return {}
