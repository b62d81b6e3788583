"""What the Kubernetes backend's workers use, from their kubelets' stats (metrics-server reads
the same): each node's `/stats/summary`, through the API server's node proxy, gives every pod
on it its CPU time so far (`usageCoreNanoSeconds`) and the memory it holds now
(`workingSetBytes`, what the kubelet evicts and the kernel's OOM killer judge by).

A node with running workers is read at most every `usage.SAMPLE_EVERY_S`, a few nodes per
status call, each read with a short timeout: a kubelet that does not answer costs its pods
their samples, never the agent's step. The kubelet keeps no high-water mark of memory: a
worker's peak is the most any sample saw. A pod that has ended is no longer in the summary,
and keeps its last sample.

Needs RBAC `get` on `nodes/proxy`; without it (403) there are no samples, said once in the log.
"""

from __future__ import annotations

import json
import logging
import time
from collections import defaultdict

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from clusters.backends import base, usage

log = logging.getLogger(__name__)

NODES_PER_CALL = 20
TIMEOUT_S = 5.0

Key = tuple[int, int]


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


class NodeStats:
    """Samples the running workers of a Kubernetes backend, node by node."""

    def __init__(self, core: client.CoreV1Api):
        self.core = core
        self.samples = usage.Samples()
        self._read_at: dict[str, float] = {}  # node -> when its summary was last asked for
        self._refused = False

    def add(self, statuses: list[base.WorkerStatus], pods: dict) -> list[base.WorkerStatus]:
        """The statuses with what each worker has used; ``pods``: (attempt, rank) -> V1Pod."""
        now = time.monotonic()
        running: dict[str, dict[tuple[str, str], Key]] = defaultdict(dict)
        for status in statuses:
            pod = pods.get((status.attempt_id, status.rank))
            if status.phase == base.RUNNING and pod is not None and pod.spec and pod.spec.node_name:
                name = (pod.metadata.namespace, pod.metadata.name)
                running[pod.spec.node_name][name] = (status.attempt_id, status.rank)
        due = [
            node
            for node in sorted(running, key=lambda n: self._read_at.get(n, -usage.SAMPLE_EVERY_S))
            if now - self._read_at.get(node, -usage.SAMPLE_EVERY_S) >= usage.SAMPLE_EVERY_S
        ]
        for node in due[:NODES_PER_CALL]:
            self._read_at[node] = now
            for name, (cpu, memory) in self._summary(node).items():
                if name in running[node]:
                    self.samples.keep(running[node][name], now, cpu, usage.mib(memory), mark=False)
        for node in set(self._read_at) - set(running):
            del self._read_at[node]
        return [self.samples.with_usage(status) for status in statuses]

    def forget(self, attempt_id: int) -> None:
        self.samples.forget(attempt_id)

    def _summary(self, node: str) -> dict[tuple[str, str], tuple[float, int]]:
        try:
            # Not preloaded: the client would read the JSON answer as the text of a dict.
            answer = self.core.connect_get_node_proxy_with_path(
                node, "stats/summary", _preload_content=False, _request_timeout=TIMEOUT_S
            )
            return pod_usage(json.loads(answer.data))
        except ApiException as error:
            if error.status == 403 and not self._refused:
                self._refused = True
                log.warning("no usage samples: nodes/proxy is not allowed (%s)", error.reason)
            elif error.status != 403:
                log.info("node %s: no stats summary (%s %s)", node, error.status, error.reason)
        except (HTTPError, OSError, ValueError) as error:
            log.info("node %s: no stats summary (%s)", node, error)
        return {}
