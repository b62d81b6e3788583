"""A small Kubernetes API server for tests: real HTTP on 127.0.0.1, objects kept in memory.

It speaks enough of /api/v1, /apis/networking.k8s.io/v1 and /apis/storage.k8s.io/v1 for the
Kubernetes backend: nodes (list), volume attachments (list: those `attach_elsewhere` keeps),
namespaces (create, get), pods (create, get, list, delete, watch, log with follow and
timestamps, and a JSON merge patch of their metadata and of their spec.activeDeadlineSeconds,
which may only go down, as ValidatePodUpdate lets it: any other change of their spec is
Invalid), services, resource
quotas, persistent volume claims and network policies (create, get, list, delete), secrets and
config maps (create, get, list, delete, and a JSON merge patch of their metadata), and events
(list, with a fieldSelector on involvedObject.name, reason or type). Pods' volume mounts are
validated as the API server does (a known volume, at an absolute path no other mount of the
container has, a relative subPath without ".."), and so are their volumes (each named by a DNS
label no other has, of exactly one type), secret and config map volumes (a Secret or ConfigMap
named, items of valid keys at relative paths without "..", a mode of 0 to 0777), downward API
volumes (items at relative paths, each one label or annotation of the pod: `downward_file` is
the file as the kubelet projects it), claim volumes (a claimName), their env (a name, and a
value or a valueFrom, not both), a secret's keys (a Docker config's must parse) and a config
map's (each a valid key, its value a string); a secret's stringData is merged into its data,
base64, as the API server stores it.
The API server takes a pod whose secret or config map volume names an object or a key that is
not there, or whose claim volume names a claim the namespace lacks, has not bound or is
deleting; the kubelet then never starts it (`run_pod` leaves it ContainerCreating, with a
FailedMount event, in the kubelet's words, counted again at each try). So does one whose claim's
volume cannot be attached to its node (`attach_elsewhere`, `fail_attach`), with a
FailedAttachVolume event in the attach-detach controller's words. A claim a pod bound to a node
names is not removed when deleted, only marked deleting until the last such pod is gone, as the
kubernetes.io/pvc-protection finalizer keeps it. Pods are bound to their nodes (nodeName): no
scheduler is modelled. Watches stream newline-delimited JSON events in chunked encoding, the way
the API server does, and honour resourceVersion, timeoutSeconds and labelSelector; a watch from
before `compact()` gets the 410 Gone error event.

Tests play the kubelet and the node controller through methods such as `run_pod`, `exit_pod`,
`oom_kill`, `evict`, `drain`, `image_pull_backoff`, `wait_pod`, `failed_pull_events`,
`append_log`, `rotate_log`,
`set_node_ready` and `remove_node`, the attach-detach controller (`attach_elsewhere`,
`fail_attach`), a kubelet's stats of a pod (`use`, read at
/api/v1/nodes/<node>/proxy/stats/summary), a node's DCGM exporter (`add_gpu_exporter`, and a
pod's GPUs' utilization, `use_gpus`, read at its /metrics through the pod proxy), a platform
team through `add_claim`, a failing API server through `fail`, and a control plane whose clock
is off the host's through `set_clock` (its stamps and its answers' Date header).
Log lines are streamed in chunks of at most 16 KiB, as the kubelet streams a long line.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import re
import socket
import threading
import time
import uuid
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

from tests.k8s import objects

# resource -> (kind, apiVersion)
KINDS = {
    "pods": ("Pod", "v1"),
    "services": ("Service", "v1"),
    "resourcequotas": ("ResourceQuota", "v1"),
    "persistentvolumeclaims": ("PersistentVolumeClaim", "v1"),
    "networkpolicies": ("NetworkPolicy", "networking.k8s.io/v1"),
    "events": ("Event", "v1"),
    "secrets": ("Secret", "v1"),
    "configmaps": ("ConfigMap", "v1"),
}
MERGE_PATCH = ("application/merge-patch+json", "application/strategic-merge-patch+json")
GROUP = r"(?P<group>api/v1|apis/networking\.k8s\.io/v1)"
ROUTES = [
    (re.compile(r"^/api/v1/nodes$"), "nodes"),
    (re.compile(r"^/apis/storage\.k8s\.io/v1/volumeattachments$"), "volume_attachments"),
    (re.compile(r"^/api/v1/namespaces$"), "namespaces"),
    (re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)$"), "namespace"),
    (re.compile(r"^/api/v1/pods$"), "all_pods"),
    (re.compile(rf"^/{GROUP}/namespaces/(?P<ns>[^/]+)/(?P<kind>[a-z]+)$"), "collection"),
    (re.compile(rf"^/{GROUP}/namespaces/(?P<ns>[^/]+)/(?P<kind>[a-z]+)/(?P<name>[^/]+)$"), "item"),
    (re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)/log$"), "log"),
    (re.compile(r"^/api/v1/nodes/(?P<name>[^/]+)/proxy/stats/summary$"), "node_summary"),
    (
        re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)/proxy/metrics$"),
        "pod_metrics",
    ),  # fmt: skip
]


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, details: dict | None = None):
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details

    def status(self) -> dict:
        status = objects.status(self.code, self.reason, self.message)
        if self.details is not None:
            status["details"] = self.details
        return status


class KubeTestServer:
    """The in-memory API server. `url` is its address once `start()` has run."""

    def __init__(self, watch_history: int = 10_000):
        self.cond = threading.Condition()
        self.rv = 1
        self.nodes: dict[str, dict] = {}
        self.namespaces: dict[str, dict] = {}
        self.store: dict[str, dict[tuple[str, str], dict]] = {kind: {} for kind in KINDS}
        self.events: list[tuple[int, str, dict]] = []  # pod watch history: (rv, type, pod)
        self.oldest_rv = 0  # a watch from before this answers 410 Gone
        self.logs: dict[tuple[str, str], list[tuple[float, str]]] = {}  # (stamp, text) lines
        self.log_files: dict[tuple[str, str], int] = {}  # the latest log file's first line
        self.deletions: list[tuple[str, str, str, int | None]] = []  # kind, ns, name, grace
        self.requests: list[tuple[str, str, dict]] = []  # method, path, query
        self.finish_deletions = True  # False keeps gracefully deleted pods "Terminating"
        self.reject: dict[str, ApiError] = {}  # kind -> the error its creations answer
        # [method, path pattern, error, times left or None, query]
        self.failures: list[list] = []
        self.usage: dict[tuple[str, str], dict] = {}  # a pod's cpu and memory, kubelet's words
        self.gpu_usage: dict[tuple[str, str], list[float]] = {}  # a pod's GPUs, DCGM's words
        self.attached: dict[tuple[str, str], str] = {}  # a claim's volume -> the node holding it
        # Claims of attachable storage (a cloud disk, not NFS): the controller attaches their
        # volume to the pod's node and says so, SuccessfulAttachVolume.
        self.attachable: set[tuple[str, str]] = set()
        self.attach_errors: dict[tuple[str, str], str] = {}  # a claim's -> the storage's error
        self.watch_generation = 0
        self.log_streams = 0
        self.runtime_classes: set[str] = set()  # the cluster's RuntimeClasses, by name
        self.closed = False
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.daemon_threads = True
        self.httpd.kube = self
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def start(self) -> KubeTestServer:
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def set_clock(self, ahead_s: float) -> None:
        """Run the control plane's clock `ahead_s` seconds ahead of this host's (behind, below
        0), as the agent's host would read it if its own clock were off the other way; the
        server's stop sets it right again."""
        objects.Clock.ahead_s = ahead_s

    def stop(self) -> None:
        objects.Clock.ahead_s = 0.0
        with self.cond:
            self.closed = True
            self.cond.notify_all()
        self.httpd.shutdown()
        self.httpd.server_close()

    # Test controls: the kubelet, the node controller and other cluster users.

    def add_node(self, name: str, **kwargs) -> None:
        with self.cond:
            self.nodes[name] = objects.node(name, self._next_rv(), **kwargs)

    def remove_node(self, name: str) -> None:
        with self.cond:
            self.nodes.pop(name, None)

    def set_node_ready(
        self, name: str, ready: bool, since_s: float | None = 0.0, reason: str = "", message=""
    ) -> None:
        """The node controller sets the Ready condition, changed `since_s` seconds ago (None:
        without a lastTransitionTime), with the kubelet's `reason` and `message` if given."""
        with self.cond:
            cond = self.nodes[name]["status"]["conditions"][0]
            cond["status"] = "True" if ready else "False"
            for key, said in (("reason", reason), ("message", message)):
                cond.pop(key, None)
                if said:
                    cond[key] = said
            cond.pop("lastTransitionTime", None)
            if since_s is not None:
                cond["lastTransitionTime"] = objects.now(-since_s)
            self.nodes[name]["metadata"]["resourceVersion"] = self._next_rv()

    def set_node_condition(
        self, name: str, kind: str, status: bool, reason: str = "", message: str = ""
    ) -> None:
        """A node-problem-detector (or another checker) sets the node's condition `kind`."""
        with self.cond:
            conditions = self.nodes[name]["status"]["conditions"]
            conditions[:] = [c for c in conditions if c["type"] != kind]
            said = {k: v for k, v in (("reason", reason), ("message", message)) if v}
            conditions.append({"type": kind, "status": "True" if status else "False",
                               "lastTransitionTime": objects.now(), **said})  # fmt: skip
            self.nodes[name]["metadata"]["resourceVersion"] = self._next_rv()

    def add_claim(
        self,
        ns: str,
        name: str,
        phase: str = "Bound",
        access_modes=("ReadWriteMany",),
        volume: str = "",
    ) -> None:
        """A platform team provisions a claim in a tenant namespace (made if need be), of the
        access modes given (asked for, and those of the volume bound to it), bound to the
        PersistentVolume `volume` if named; one still "Pending" has no volume bound to it yet,
        and so no access modes in its status."""
        claim = objects.claim(name, phase)
        claim["spec"]["accessModes"] = list(access_modes)
        if volume and phase == "Bound":
            claim["spec"]["volumeName"] = volume
        if "accessModes" in claim["status"]:
            claim["status"]["accessModes"] = list(access_modes)
        with self.cond:
            if ns not in self.namespaces:
                self.create_namespace({"metadata": {"name": ns}})
            self.create("persistentvolumeclaims", ns, claim)

    def attach_elsewhere(self, ns: str, claim: str, node: str) -> None:
        """The claim's volume, of one node at a time, stays attached to `node` (a former pod's,
        not yet detached): the attach-detach controller cannot attach it to another node."""
        with self.cond:
            self.attached[ns, claim] = node
            self.attachable.add((ns, claim))

    def detach(self, ns: str, claim: str) -> None:
        """The node holding the claim's volume lets it go: the controller may attach it."""
        with self.cond:
            self.attached.pop((ns, claim), None)

    def fail_attach(self, ns: str, claim: str, error: str) -> None:
        """The storage fails each attach of the claim's volume with `error`."""
        with self.cond:
            self.attach_errors[ns, claim] = error
            self.attachable.add((ns, claim))

    def fail(
        self,
        method: str,
        path: str,
        error: ApiError,
        times: int | None = 1,
        query: dict[str, str] | None = None,
    ) -> None:
        """Answer the next `times` requests (None: all) whose path matches the regular
        expression `path`, and whose query holds `query` if given, with `error`, as an API
        server in trouble does."""
        with self.cond:
            self.failures.append([method, re.compile(path), error, times, query or {}])

    def _failure(self, method: str, path: str, query: dict[str, str]) -> ApiError | None:
        with self.cond:
            for failure in self.failures:
                if (
                    failure[0] == method
                    and failure[1].search(path)
                    and failure[3] != 0
                    and failure[4].items() <= query.items()
                ):
                    if failure[3] is not None:
                        failure[3] -= 1
                    return failure[2]
        return None

    def cordon(self, name: str) -> None:
        with self.cond:
            self.nodes[name]["spec"] = {"unschedulable": True}

    def taint(self, name: str, key: str, effect: str, value: str = "") -> None:
        with self.cond:
            taints = self.nodes[name].setdefault("spec", {}).setdefault("taints", [])
            taints.append({"key": key, "effect": effect, **({"value": value} if value else {})})
            self.nodes[name]["metadata"]["resourceVersion"] = self._next_rv()

    def pod(self, ns: str, name: str) -> dict:
        with self.cond:
            return copy.deepcopy(self.store["pods"][(ns, name)])

    def pods(self) -> list[dict]:
        with self.cond:
            return [copy.deepcopy(p) for p in self.store["pods"].values()]

    def objects_of(self, kind: str) -> list[dict]:
        with self.cond:
            return [copy.deepcopy(o) for o in self.store[kind].values()]

    def use(self, ns: str, name: str, cpu_seconds: float, memory_bytes: int, pod_level=True):
        """The kubelet's stats of a pod: its CPU time so far and its working set now, at the
        pod's level (kubelets since 1.15) or only per container (``pod_level=False``)."""
        cpu = {"usageCoreNanoSeconds": int(cpu_seconds * 1e9), "usageNanoCores": 1000}
        memory = {"workingSetBytes": memory_bytes, "usageBytes": memory_bytes + 4096}
        container = {"name": "worker", "cpu": cpu, "memory": memory}
        with self.cond:
            self.usage[ns, name] = (
                {"cpu": cpu, "memory": memory, "containers": [container]}
                if pod_level
                else {"containers": [container]}
            )

    def add_gpu_exporter(
        self, node: str, ns: str = "gpu-operator", running: bool = True, name: str = ""
    ) -> str:
        """The GPU Operator's DCGM exporter pod on a node (its name), read at
        /api/v1/namespaces/<ns>/pods/<name>:9400/proxy/metrics."""
        name = name or f"nvidia-dcgm-exporter-{node}"
        container = {"name": "exporter", "image": "dcgm"}
        body = {"metadata": {"name": name, "labels": {"app": "nvidia-dcgm-exporter"}},
                "spec": {"nodeName": node, "containers": [container]}}  # fmt: skip
        with self.cond:
            if ns not in self.namespaces:
                self.create_namespace({"metadata": {"name": ns}})
            self.create("pods", ns, body)
        if running:
            self.run_pod(ns, name)
        return name

    def use_gpus(self, ns: str, name: str, percents: list[float]) -> None:
        """DCGM's utilization (in %) of each GPU the pod holds."""
        with self.cond:
            self.gpu_usage[ns, name] = list(percents)

    def gpu_metrics(self, ns: str, name: str) -> str:
        """A DCGM exporter's /metrics: each GPU of its node, those of pods labelled with them."""
        with self.cond:
            exporter = self.store["pods"].get((ns, name.partition(":")[0]))
            if exporter is None:
                raise ApiError(404, "NotFound", f'pods "{name}" not found')
            node = exporter["spec"]["nodeName"]
            held = [
                (pod_ns, pod_name, percent)
                for (pod_ns, pod_name), pod in self.store["pods"].items()
                if pod["spec"].get("nodeName") == node
                for percent in self.gpu_usage.get((pod_ns, pod_name), [])
            ]
            gpus = int(self.nodes[node]["status"]["capacity"].get("nvidia.com/gpu", 0))
            held += [("", "", 0)] * max(0, gpus - len(held))
        lines = ["# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).",
                 "# TYPE DCGM_FI_DEV_GPU_UTIL gauge"]  # fmt: skip
        for index, (pod_ns, pod_name, percent) in enumerate(held):
            labels = (f'gpu="{index}",UUID="GPU-{node}-{index}",device="nvidia{index}",'
                      f'modelName="NVIDIA A100",Hostname="{node}",container="worker",'
                      f'namespace="{pod_ns}",pod="{pod_name}"')  # fmt: skip
            lines.append(f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} {percent:g}")
            lines.append(f"DCGM_FI_DEV_FB_USED{{{labels}}} 1024")
        return "\n".join(lines) + "\n"

    def summary(self, node: str) -> dict:
        """A kubelet's /stats/summary: its node, and the stats of the pods bound to it."""
        with self.cond:
            if node not in self.nodes:
                raise ApiError(404, "NotFound", f'nodes "{node}" not found')
            pods = [
                {"podRef": {"name": name, "namespace": ns, "uid": pod["metadata"]["uid"]},
                 **copy.deepcopy(self.usage[ns, name])}
                for (ns, name), pod in self.store["pods"].items()
                if pod["spec"].get("nodeName") == node and (ns, name) in self.usage
            ]  # fmt: skip
            return {"node": {"nodeName": node}, "pods": pods}

    def run_pod(self, ns: str, name: str, mounted: bool = True) -> None:
        """The kubelet starts the container once it has mounted the pod's secret and claim
        volumes: while one names a Secret or a key the namespace does not hold, or a claim it
        lacks or has not bound, it waits ContainerCreating, with a FailedMount event; while a
        claim's volume cannot be attached to the pod's node, it waits so too, and the
        attach-detach controller records a FailedAttachVolume event. Called again, the kubelet
        tries the mount again, and the controller the attach: the same failure counts on the
        same event, but for a Multi-Attach error, which the controller reports once a pod.
        Once the attachable volumes are attached (a Normal SuccessfulAttachVolume event each,
        once a pod), the pod waits ContainerCreating still until they are `mounted`."""
        with self.cond:
            pod = self.store["pods"][(ns, name)]
            if taint := self._untolerated(pod):  # the kubelet's admission (UntoleratedTaint)
                message = (f"Pod was rejected: Predicate TaintToleration failed: node(s) had "
                           f"untolerated taint {{{taint}}}")  # fmt: skip
                return self._set_pod_state(
                    ns, name, lambda p: objects.failed_by_kubelet(p, "UntoleratedTaint", message)
                )
            if problem := self._unmountable(ns, pod):
                self._pod_event(ns, pod, "FailedMount", problem, "kubelet")
            elif problem := self._unattachable(ns, pod):
                once = problem.startswith("Multi-Attach error")
                self._pod_event(ns, pod, "FailedAttachVolume", problem, ADC, repeat=not once)
            else:
                for said in self._attached(ns, pod):
                    self._pod_event(ns, pod, "SuccessfulAttachVolume", said, ADC, False, "Normal")
            if problem or not mounted:
                change = lambda p: objects.waiting(p, "ContainerCreating", "")  # noqa: E731
                return self._set_pod_state(ns, name, change)
        self._set_pod_state(ns, name, objects.running)

    def _untolerated(self, pod: dict) -> str:
        """A NoExecute taint of the pod's node that no toleration of the pod matches, as the
        kubelet writes it ("key: value"; "": none)."""
        node = self.nodes.get(pod["spec"].get("nodeName", ""), {})
        tolerated = pod["spec"].get("tolerations") or []
        for taint in (node.get("spec") or {}).get("taints") or []:
            if taint["effect"] != "NoExecute":
                continue
            if not any(_tolerates(toleration, taint) for toleration in tolerated):
                return f"{taint['key']}: {taint.get('value', '')}"
        return ""

    def _attached(self, ns: str, pod: dict) -> list[str]:
        """What the controller says of each attachable claim volume of the pod once attached
        (operation_generator.go's GenerateAttachVolumeFunc: GenerateMsg's words)."""
        return [
            f'AttachVolume.Attach succeeded for volume "{self._claim_volume(ns, claim)}" '
            for volume in pod["spec"].get("volumes") or []
            if (claim := (volume.get("persistentVolumeClaim") or {}).get("claimName"))
            and (ns, claim) in self.attachable
        ]

    def _claim_volume(self, ns: str, claim: str) -> str:
        return self.store["persistentvolumeclaims"][ns, claim]["spec"]["volumeName"]

    def _pod_event(
        self,
        ns: str,
        pod: dict,
        reason: str,
        message: str,
        component: str,
        repeat=True,
        kind="Warning",
    ) -> None:
        """An event about the pod (not one of its containers), a Warning unless `kind` says; a
        repeat of one recorded already is counted on it and moves its lastTimestamp, as the
        event correlator does, unless the recorder does not `repeat` it."""
        uid = pod["metadata"]["uid"]
        for event in self.store["events"].values():
            said = (event["involvedObject"]["uid"], event["reason"], event["message"])
            if said == (uid, reason, message):
                if repeat:
                    event["count"] += 1
                    event["lastTimestamp"] = objects.now()
                    event["metadata"]["resourceVersion"] = self._next_rv()
                return
        name = f"{pod['metadata']['name']}.{self.rv + 1:016x}"
        event = _kubelet_event(pod, name, reason, message)
        del event["involvedObject"]["fieldPath"]  # of the pod, not of a container
        event["source"]["component"] = component
        event["type"] = kind
        self.create("events", ns, event)

    def _unattachable(self, ns: str, pod: dict) -> str:
        """Why the attach-detach controller cannot attach one of the pod's claim volumes to its
        node, as its FailedAttachVolume event says it; "" if it can. The words are
        operationexecutor's (VolumeToAttach.GenerateMsg and GenerateError,
        pkg/volume/util/operationexecutor/operation_executor.go), the volume named by its
        PersistentVolume: the reconciler's Multi-Attach error for a volume attached to another
        node with no pod there using it (reportMultiAttachError,
        pkg/controller/volume/attachdetach/reconciler/reconciler.go), and a failed attach
        (GenerateAttachVolumeFunc, pkg/volume/util/operationexecutor/operation_generator.go)."""
        for volume in pod["spec"].get("volumes") or []:
            claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
            if claim is None:
                continue
            pv = self._claim_volume(ns, claim)
            holder = self.attached.get((ns, claim))
            if holder is not None and holder != pod["spec"].get("nodeName"):
                held = "Volume is already exclusively attached to one node and can't be attached"
                return f'Multi-Attach error for volume "{pv}" {held} to another'
            if error := self.attach_errors.get((ns, claim)):
                return f'AttachVolume.Attach failed for volume "{pv}" : {error}'
        return ""

    def _unmountable(self, ns: str, pod: dict) -> str:
        """Why the kubelet cannot mount one of the pod's secret, config map or claim volumes,
        as its FailedMount event says it; "" if it can."""
        for volume in pod["spec"].get("volumes") or []:
            if "persistentVolumeClaim" in volume:
                if problem := self._unbound(ns, volume):
                    return problem
                continue
            said = f'MountVolume.SetUp failed for volume "{volume["name"]}" : '
            if problem := self._missing(ns, volume):
                return said + problem
        return ""

    def _missing(self, ns: str, volume: dict) -> str:
        """What a secret or config map volume names that the namespace lacks, in the kubelet's
        words (its secret and configmap volume plugins'); "" if nothing (or it is optional)."""
        if (source := volume.get("secret")) is not None:
            kind, name, key_kind = "secret", source.get("secretName"), "secret"
            found = self.store["secrets"].get((ns, name))
        elif (source := volume.get("configMap")) is not None:
            kind, name, key_kind = "configmap", source.get("name"), "config"
            found = self.store["configmaps"].get((ns, name))
        else:
            return ""
        if source.get("optional"):
            return ""
        if found is None:
            return f'{kind} "{name}" not found'
        for item in source.get("items") or []:
            if item["key"] not in (found.get("data") or {}):
                prefix = "configmap " if kind == "configmap" else ""
                return f"{prefix}references non-existent {key_kind} key: {item['key']}"
        return ""

    def _unbound(self, ns: str, volume: dict) -> str:
        """Why the kubelet cannot mount a claim volume, as its volume manager says it: the
        claim is not in the namespace, is being deleted, or no volume is bound to it; "" if it
        can. The words are the kubelet's: getPVCExtractPV's errors
        (pkg/kubelet/volumemanager/populator/desired_state_of_world_populator.go), in
        createVolumeSpec's "error processing PVC <ns>/<claim>: ", in WaitForAttachAndMount's
        "unmounted volumes=..., unattached volumes=..., failed to process volumes=...: "
        (pkg/kubelet/volumemanager/volume_manager.go), in syncPod's FailedMount event "Unable
        to attach or mount volumes: " (pkg/kubelet/kubelet.go). Its lists name the failing
        volume alone, as at a retry once the pod's other volumes are mounted (a claim volume
        never attaches before its claim is processed)."""
        name = volume["name"]
        claim = volume["persistentVolumeClaim"]["claimName"]
        found = self.store["persistentvolumeclaims"].get((ns, claim))
        said = (f"Unable to attach or mount volumes: unmounted volumes=[{name}], unattached "
                f"volumes=[], failed to process volumes=[{name}]: error processing PVC "
                f"{ns}/{claim}: ")  # fmt: skip
        if found is None:  # the API server's NotFound, as the kubelet's client got it
            fetch = (
                f'failed to fetch PVC from API server: persistentvolumeclaims "{claim}" not found'
            )
            return said + fetch
        if found["metadata"].get("deletionTimestamp"):
            return said + "PVC is being deleted"
        if (found.get("status") or {}).get("phase") != "Bound":
            return said + "PVC is not bound"
        return ""

    def exit_pod(self, ns: str, name: str, exit_code: int, reason: str = "") -> None:
        """The container ends by itself: Succeeded on 0, Failed otherwise."""
        reason = reason or ("Completed" if exit_code == 0 else "Error")
        self._set_pod_state(ns, name, lambda pod: objects.terminated(pod, exit_code, reason))

    def exit_beside_sidecar(self, ns: str, name: str, exit_code: int) -> None:
        """The worker's container ends while a classic sidecar injected beside it (a mesh's
        proxy) runs on: the pod stays Running."""
        self._set_pod_state(ns, name, lambda pod: objects.beside_sidecar(pod, exit_code))

    def oom_kill(self, ns: str, name: str) -> None:
        self.exit_pod(ns, name, 137, "OOMKilled")

    def evict(self, ns: str, name: str) -> None:
        message = "The node was low on resource: memory."
        self._set_pod_state(ns, name, lambda p: objects.failed_by_kubelet(p, "Evicted", message))

    def drain(self, ns: str, name: str) -> None:
        """An administrator drains the pod's node (the Eviction API): the API server marks the
        pod DisruptionTarget and deletes it; the kubelet stops the container (SIGTERM: 143)
        and, as it does since Kubernetes 1.27, sets the pod's terminal phase before it goes."""
        self.start_drain(ns, name)
        self.exit_pod(ns, name, 143)
        with self.cond:
            self._remove("pods", ns, name)

    def start_drain(self, ns: str, name: str) -> None:
        """The first half of `drain`: the pod is marked DisruptionTarget and deleted with its
        own grace period (`kubectl drain` gives none), and runs on through it."""
        with self.cond:
            pod = self.store["pods"][(ns, name)]
            objects.disrupted(pod, "EvictionByEvictionAPI", "Eviction API: evicting")
            objects.mark_deleting(pod, None)
            pod["metadata"]["resourceVersion"] = self._next_rv()
            self._record("pods", "MODIFIED", pod)

    def exceed_deadline(self, ns: str, name: str) -> None:
        message = "Pod was active on the node longer than the specified deadline"
        change = lambda p: objects.failed_by_kubelet(p, "DeadlineExceeded", message)  # noqa: E731
        self._set_pod_state(ns, name, change)

    def downward_file(self, ns: str, name: str, volume: str, path: str) -> str:
        """The file `path` of the pod's downward API volume `volume` as the kubelet projects
        it from the pod as it is now (and again after each change of its metadata): a label's
        or an annotation's value, "" when the pod has none of that key."""
        with self.cond:
            pod = self.store["pods"][(ns, name)]
            source = next(v["downwardAPI"] for v in pod["spec"]["volumes"] if v["name"] == volume)
            item = next(i for i in source["items"] if i["path"] == path)
            kind, key = DOWNWARD_FIELD.fullmatch(item["fieldRef"]["fieldPath"]).groups()
            return (pod["metadata"].get(kind) or {}).get(key, "")

    def image_pull_backoff(self, ns: str, name: str, error: str = "") -> None:
        """The kubelet waits to pull the image again; since Kubernetes 1.32 its message ends
        with the last pull's error."""
        image = self.store["pods"][(ns, name)]["spec"]["containers"][0]["image"]
        message = f'Back-off pulling image "{image}"' + (
            f": ErrImagePull: {error}" if error else ""
        )
        self.wait_pod(ns, name, "ImagePullBackOff", message)

    def wait_pod(self, ns: str, name: str, reason: str, message: str) -> None:
        """The kubelet cannot start the container yet: ErrImagePull (the first failed pull),
        InvalidImageName, CreateContainerConfigError..., with its message."""
        self._set_pod_state(ns, name, lambda pod: objects.waiting(pod, reason, message))

    def failed_pull_events(self, ns: str, name: str, error: str) -> None:
        """The kubelet's events for a failed pull of the pod's image: "Failed to pull image",
        with the runtime's error, then "Error: ErrImagePull"."""
        with self.cond:
            pod = self.store["pods"][(ns, name)]
            image = pod["spec"]["containers"][0]["image"]
            for message in (f'Failed to pull image "{image}": {error}', "Error: ErrImagePull"):
                event = _kubelet_event(pod, f"{name}.{self.rv + 1:016x}", "Failed", message)
                self.create("events", ns, event)

    def append_log(self, ns: str, name: str, *lines: str, at: float | None = None) -> None:
        """The container writes lines; the runtime stamps them with the time `at` (seconds
        since the epoch; now if not given)."""
        at = time.time() if at is None else at
        with self.cond:
            self.logs.setdefault((ns, name), []).extend((at, line) for line in lines)
            self.cond.notify_all()

    def rotate_log(self, ns: str, name: str) -> None:
        """The kubelet rotates the container's log file (containerLogMaxSize, 10 MiB by
        default): a log request serves the latest file only, so a new one begins with the
        lines written after this; a stream already following goes on into the new file."""
        with self.cond:
            self.log_files[(ns, name)] = len(self.logs.get((ns, name), []))

    def delete_pod(self, ns: str, name: str) -> None:
        """Someone other than the backend deletes the pod, at once."""
        with self.cond:
            self._remove("pods", ns, name)

    def compact(self) -> None:
        """Forget the watch history, as etcd compaction does, and end open watches: resuming
        from any resourceVersion handed out so far answers 410 Gone."""
        with self.cond:
            self.events.clear()
            self.oldest_rv = int(self._next_rv())
            self.watch_generation += 1
            self.cond.notify_all()

    @contextlib.contextmanager
    def unwatched(self):
        """Changes made inside reach no open watch: the history is compacted right after them,
        so only a new list shows them."""
        with self.cond:
            yield
            self.compact()

    def drop_watches(self) -> None:
        """Close every open watch and log stream, as a restarting API server does."""
        with self.cond:
            self.watch_generation += 1
            self.cond.notify_all()

    def count_requests(
        self,
        method: str,
        path_prefix: str,
        watch: bool | None = None,
        query: dict[str, str] | None = None,
    ) -> int:
        """Requests made so far; `watch` True or False counts only watches or only the rest,
        `query` only those whose query holds it."""
        with self.cond:
            return sum(
                1
                for m, p, q in self.requests
                if m == method
                and p.startswith(path_prefix)
                and (watch is None or (q.get("watch") in TRUE) == watch)
                and (query or {}).items() <= q.items()
            )

    # Store internals; callers hold self.cond.

    def _next_rv(self) -> str:
        self.rv += 1
        return str(self.rv)

    def _record(self, kind: str, event: str, obj: dict) -> None:
        if kind == "pods":
            self.events.append((int(obj["metadata"]["resourceVersion"]), event, copy.deepcopy(obj)))
        self.cond.notify_all()

    def _set_pod_state(self, ns: str, name: str, change) -> None:
        with self.cond:
            pod = self.store["pods"][(ns, name)]
            change(pod)
            pod["metadata"]["resourceVersion"] = self._next_rv()
            self._record("pods", "MODIFIED", pod)

    def _remove(self, kind: str, ns: str, name: str) -> dict:
        obj = self.store[kind].pop((ns, name))
        obj["metadata"]["resourceVersion"] = self._next_rv()
        self._record(kind, "DELETED", obj)
        if kind == "pods":  # the pvc-protection controller lets go of claims no pod uses
            for (claim_ns, claim), found in list(self.store["persistentvolumeclaims"].items()):
                deleting = found["metadata"].get("deletionTimestamp")
                if claim_ns == ns and deleting and not self._claim_in_use(ns, claim):
                    self._remove("persistentvolumeclaims", ns, claim)
        return obj

    def _claim_in_use(self, ns: str, claim: str) -> bool:
        """A pod bound to a node names the claim: the kubernetes.io/pvc-protection finalizer
        keeps it (pkg/controller/volume/pvcprotection, podUsesPVC), whatever the pod's phase."""
        return any(
            pod_ns == ns
            and pod["spec"].get("nodeName")
            and any(
                (volume.get("persistentVolumeClaim") or {}).get("claimName") == claim
                for volume in pod["spec"].get("volumes") or []
            )
            for (pod_ns, _), pod in self.store["pods"].items()
        )

    # API operations.

    def create(self, kind: str, ns: str, body: dict) -> dict:
        with self.cond:
            if ns not in self.namespaces:
                raise ApiError(404, "NotFound", f'namespaces "{ns}" not found')
            name = body.get("metadata", {}).get("name", "")
            if kind in self.reject:
                raise self.reject[kind]
            if (ns, name) in self.store[kind]:
                raise ApiError(409, "AlreadyExists", f'{kind} "{name}" already exists')
            if kind == "pods":
                _validate_pod(body)
                runtime = (body.get("spec") or {}).get("runtimeClassName")
                if runtime and runtime not in self.runtime_classes:  # the RuntimeClass plugin
                    raise ApiError(403, "Forbidden", f'pods "{name}" is forbidden: pod rejected: '
                                   f'RuntimeClass "{runtime}" not found')  # fmt: skip
            if kind == "secrets":
                body = _stored_secret(body)
            if kind == "configmaps":
                _validate_config_map(body)
            kind_name, version = KINDS[kind]
            obj = objects.created(body, kind_name, ns, self._next_rv(), str(uuid.uuid4()), version)
            if kind == "pods":
                obj["status"] = {"phase": "Pending", "qosClass": objects.qos_class(obj)}
            self.store[kind][(ns, name)] = obj
            self._record(kind, "ADDED", obj)
            return copy.deepcopy(obj)

    def get(self, kind: str, ns: str, name: str) -> dict:
        with self.cond:
            if (ns, name) not in self.store[kind]:
                raise ApiError(404, "NotFound", f'{kind} "{name}" not found')
            return copy.deepcopy(self.store[kind][(ns, name)])

    def patch(self, kind: str, ns: str, name: str, body: dict, content_type: str) -> dict:
        """A JSON merge patch (RFC 7386) of a secret's or a config map's metadata or of a pod's
        spec, as the API server applies one (a JSON Patch, a list of operations, is answered
        415); a pod's spec is validated as ValidatePodUpdate does (`_validate_pod_update`)."""
        if content_type.split(";")[0].strip() not in MERGE_PATCH:
            raise ApiError(415, "UnsupportedMediaType", f"not a merge patch: {content_type}")
        patched = {
            "secrets": {"metadata"},
            "configmaps": {"metadata"},
            "pods": {"metadata", "spec"},
        }.get(kind)
        if patched is None or not isinstance(body, dict) or set(body) - patched:
            raise ApiError(405, "MethodNotAllowed",
                           "only a secret's or a config map's metadata or a pod's metadata and "
                           "spec are patched here")  # fmt: skip
        with self.cond:
            obj = self.store[kind].get((ns, name))
            if obj is None:
                raise ApiError(404, "NotFound", f'{kind} "{name}" not found')
            meta = _merge_patch(obj["metadata"], body.get("metadata") or {})
            for key in ("name", "namespace", "uid"):
                if meta.get(key) != obj["metadata"].get(key):
                    raise ApiError(422, "Invalid", f"metadata.{key}: field is immutable")
            for key, value in (meta.get("annotations") or {}).items():
                if not isinstance(value, str):
                    raise ApiError(422, "Invalid", f"metadata.annotations[{key}]: must be a "
                                   "string")  # fmt: skip
            if "spec" in body:
                spec = _merge_patch(obj, {"spec": body["spec"]}).get("spec") or {}
                _validate_pod_update(name, obj["spec"], spec)
                obj["spec"] = spec
            obj["metadata"] = meta
            obj["metadata"]["resourceVersion"] = self._next_rv()
            self._record(kind, "MODIFIED", obj)
            return copy.deepcopy(obj)

    def delete(self, kind: str, ns: str, name: str, grace: int | None) -> dict:
        with self.cond:
            obj = self.store[kind].get((ns, name))
            if obj is None:
                raise ApiError(404, "NotFound", f'{kind} "{name}" not found')
            self.deletions.append((kind, ns, name, grace))
            if kind == "persistentvolumeclaims" and self._claim_in_use(ns, name):
                obj["metadata"]["deletionTimestamp"] = objects.now()
                obj["metadata"]["finalizers"] = ["kubernetes.io/pvc-protection"]
                obj["metadata"]["resourceVersion"] = self._next_rv()
                return copy.deepcopy(obj)
            if kind != "pods" or grace == 0 or objects.is_terminal(obj):
                return self._remove(kind, ns, name)
            objects.mark_deleting(obj, grace)
            obj["metadata"]["resourceVersion"] = self._next_rv()
            self._record(kind, "MODIFIED", obj)
            if self.finish_deletions:
                return self._remove(kind, ns, name)
            return copy.deepcopy(obj)

    def create_namespace(self, body: dict) -> dict:
        with self.cond:
            name = body["metadata"]["name"]
            if "namespaces" in self.reject:
                raise self.reject["namespaces"]
            if name in self.namespaces:
                raise ApiError(409, "AlreadyExists", f'namespaces "{name}" already exists')
            obj = objects.created(body, "Namespace", None, self._next_rv(), str(uuid.uuid4()))
            obj["status"] = {"phase": "Active"}
            self.namespaces[name] = obj
            return copy.deepcopy(obj)

    def get_namespace(self, name: str) -> dict:
        with self.cond:
            if name not in self.namespaces:
                raise ApiError(404, "NotFound", f'namespaces "{name}" not found')
            return copy.deepcopy(self.namespaces[name])

    def list(self, kind: str, ns: str | None, selector: str, fields: str = "") -> dict:
        with self.cond:
            items = [
                copy.deepcopy(o)
                for (o_ns, _), o in sorted(self.store[kind].items())
                if (ns is None or o_ns == ns)
                and objects.matches(o, selector)
                and _fields_match(o, fields)
            ]
            return objects.list_of(*KINDS[kind], items, str(self.rv))

    def list_nodes(self) -> dict:
        with self.cond:
            items = [copy.deepcopy(n) for _, n in sorted(self.nodes.items())]
            return objects.list_of("Node", "v1", items, str(self.rv))

    def list_volume_attachments(self) -> dict:
        """A CSI driver's VolumeAttachment for each claim volume `attach_elsewhere` keeps on a
        node, as the attach-detach controller writes it (storage.k8s.io/v1, cluster-scoped)."""
        with self.cond:
            items = [
                objects.volume_attachment(self._claim_volume(ns, claim), node)
                for (ns, claim), node in sorted(self.attached.items())
            ]
            return objects.list_of("VolumeAttachment", "storage.k8s.io/v1", items, str(self.rv))

    def watch(self, handler, ns, selector: str, since: int, timeout_s: float, bookmarks=False):
        """Stream pod events after resourceVersion `since` until the timeout or a drop; a watch
        that times out ends on a BOOKMARK when asked to, as the API server does."""
        handler.start_stream("application/json")
        deadline = time.monotonic() + timeout_s
        with self.cond:
            generation = self.watch_generation
            if since < self.oldest_rv:
                gone = objects.status(410, "Expired", f"too old resource version: {since}")
                handler.write_chunk(json.dumps({"type": "ERROR", "object": gone}) + "\n")
                return handler.end_stream()
        last = since
        while True:
            with self.cond:
                batch = [
                    (rv, kind, obj)
                    for rv, kind, obj in self.events
                    if rv > last
                    and (ns is None or obj["metadata"]["namespace"] == ns)
                    and objects.matches(obj, selector)
                ]
                last = max([last] + [rv for rv, _, _ in self.events])
                left = deadline - time.monotonic()
                dropped = self.closed or generation != self.watch_generation
                ended = dropped or left <= 0
                bookmark = objects.bookmark(str(self.rv)) if bookmarks and not dropped else None
                if not batch and not ended:
                    self.cond.wait(min(left, 0.5))
                    continue
            for _, kind, obj in batch:
                if not handler.write_chunk(json.dumps({"type": kind, "object": obj}) + "\n"):
                    return None
            if ended:
                if bookmark is not None:
                    handler.write_chunk(json.dumps({"type": "BOOKMARK", "object": bookmark}) + "\n")
                return handler.end_stream()

    def log(self, handler, ns: str, name: str, follow: bool, tail: int | None, stamps: bool):
        """The container's output, then (with follow) new lines until the pod ends; with
        `stamps` (timestamps=true) each line starts with its time and a space."""
        pod = self.get("pods", ns, name)
        if not objects.container_started(pod):
            raise ApiError(400, "BadRequest", f'container "worker" in pod "{name}" is waiting')
        handler.start_stream("text/plain")
        with self.cond:
            self.log_streams += 1
            generation = self.watch_generation
        try:
            self._stream_log(handler, ns, name, follow, tail, stamps, generation)
        finally:
            with self.cond:
                self.log_streams -= 1

    def open_log_streams(self) -> int:
        """Log streams being served now."""
        with self.cond:
            return self.log_streams

    def _stream_log(self, handler, ns, name, follow, tail, stamps: bool, generation: int):
        def send(lines) -> bool:
            return all(
                handler.write_chunk(part) for line in lines for part in _log_parts(line, stamps)
            )

        with self.cond:
            sent = len(self.logs.get((ns, name), []))
            start = self.log_files.get((ns, name), 0)
            first = max(start, sent - tail) if tail is not None else start
            lines = self.logs.get((ns, name), [])[first:sent]
        if not send(lines):
            return None
        while follow:
            with self.cond:
                lines = self.logs.get((ns, name), [])[sent:]
                pod = self.store["pods"].get((ns, name))
                dropped = self.closed or generation != self.watch_generation
                done = dropped or pod is None or objects.worker_ended(pod)
                if not lines and not done:
                    self.cond.wait(0.5)
                    continue
                sent += len(lines)
            if not send(lines):
                return None
            if done and not lines:
                break
        return handler.end_stream()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        # Headers and body go out as separate writes: without this, Nagle's algorithm and
        # delayed ACKs hold each response back for 40 ms.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format, *args):  # noqa: A002 - the base class names it so
        pass

    def date_time_string(self, timestamp=None):
        """The Date header, on the control plane's clock."""
        return super().date_time_string(objects.Clock.time() if timestamp is None else timestamp)

    def do_GET(self):
        self._dispatch("GET")

    def do_POST(self):
        self._dispatch("POST")

    def do_DELETE(self):
        self._dispatch("DELETE")

    def do_PATCH(self):
        self._dispatch("PATCH")

    def _dispatch(self, method: str) -> None:
        kube: KubeTestServer = self.server.kube
        url = urlsplit(self.path)
        # Routed on the decoded path, as the API server does: the client quotes the "/" of a
        # proxy path (stats%2Fsummary).
        url = url._replace(path=unquote(url.path))
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}") if length else {}
        with kube.cond:
            kube.requests.append((method, url.path, query))
        try:
            failure = kube._failure(method, url.path, query)
            if failure is not None:
                raise failure
            for pattern, route in ROUTES:
                match = pattern.match(url.path)
                if match:
                    return _route(kube, self, method, route, match.groupdict(), query, body)
            raise ApiError(404, "NotFound", f"no route for {url.path}")
        except ApiError as error:
            self.send_json(error.code, error.status())

    def send_json(self, code: int, obj: dict) -> None:
        self.send_body(code, json.dumps(obj).encode(), "application/json")

    def send_text(self, code: int, text: str) -> None:
        self.send_body(code, text.encode(), "text/plain; version=0.0.4")

    def send_body(self, code: int, data: bytes, content_type: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def start_stream(self, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def write_chunk(self, text: str | bytes) -> bool:
        """Send one chunk; False once the client has gone."""
        data = text.encode() if isinstance(text, str) else text
        try:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
            return True
        except OSError:
            self.close_connection = True
            return False

    def end_stream(self) -> None:
        try:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            self.close_connection = True


def _route(kube: KubeTestServer, handler, method, route, args, query, body) -> None:
    ns, kind, name = args.get("ns"), args.get("kind"), args.get("name")
    group = (args.get("group") or "api/v1").removeprefix("apis/").removeprefix("api/")
    if kind is not None and (kind not in KINDS or KINDS[kind][1] != group):
        raise ApiError(404, "NotFound", f"the server could not find the resource {kind}")
    if route in ("all_pods", "collection") and method == "GET" and query.get("watch") in TRUE:
        since = int(query.get("resourceVersion") or 0)
        timeout = float(query.get("timeoutSeconds") or 300)
        bookmarks = query.get("allowWatchBookmarks") in TRUE
        return kube.watch(handler, ns, query.get("labelSelector", ""), since, timeout, bookmarks)
    if route == "pod_metrics" and method == "GET":
        return handler.send_text(200, kube.gpu_metrics(ns, name))
    if route == "log":
        tail = int(query["tailLines"]) if "tailLines" in query else None
        stamps = query.get("timestamps") in TRUE
        return kube.log(handler, ns, name, query.get("follow") in TRUE, tail, stamps)
    if route == "item" and method == "PATCH":
        content_type = handler.headers.get("Content-Type", "")
        return handler.send_json(200, kube.patch(kind, ns, name, body, content_type))
    handler.send_json(*_call(kube, method, route, ns, kind, name, query, body))


TRUE = ("true", "1", "True")


def _log_line(line: tuple[float, str], stamps: bool) -> str:
    """A log line as the API server sends it: with timestamps, first the time the container
    runtime took it, RFC 3339 with nanoseconds in UTC, and a space."""
    at, text = line
    if not stamps:
        return text + "\n"
    stamp = datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")
    return f"{stamp}000Z {text}\n"


# The container runtime stores a longer line as partial entries of this many bytes (containerd's
# max_container_log_line_size); the kubelet joins them again, writing each to the stream.
PARTIAL_ENTRY = 16 * 1024


def _log_parts(line: tuple[float, str], stamps: bool) -> list[bytes]:
    """A log line as the chunks the kubelet streams it in: a multibyte character may be split
    between two of them."""
    data = _log_line(line, stamps).encode()
    return [data[i : i + PARTIAL_ENTRY] for i in range(0, len(data), PARTIAL_ENTRY)]


ADC = "attachdetach-controller"  # the attach-detach controller's events' source


def _kubelet_event(pod: dict, name: str, reason: str, message: str) -> dict:
    """A Warning event the kubelet records about the pod's worker container."""
    meta = pod["metadata"]
    involved = {"kind": "Pod", "apiVersion": "v1", "fieldPath": "spec.containers{worker}"}
    involved |= {key: meta[key] for key in ("namespace", "name", "uid")}
    stamp = objects.now()
    return {
        "metadata": {"name": name, "namespace": meta["namespace"]},
        "involvedObject": involved,
        "reason": reason,
        "message": message,
        "type": "Warning",
        "source": {"component": "kubelet", "host": pod["spec"].get("nodeName", "")},
        "count": 1,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
    }


def _fields_match(obj: dict, fields: str) -> bool:
    """A fieldSelector of `path=value` terms (`involvedObject.name=mlsched-7-0`), all equal."""
    for term in filter(None, fields.split(",")):
        path, _, value = term.partition("=")
        found = obj
        for part in path.split("."):
            found = found.get(part, {}) if isinstance(found, dict) else {}
        if found != value:
            return False
    return True


def _validate_pod(pod: dict) -> None:
    """The API server's checks of volume mounts: each names a volume of the pod, at an absolute
    path no other mount of its container has, and a subPath is relative and never goes up
    (".."); and of the pod's volumes."""
    spec = pod.get("spec") or {}
    volumes = {v.get("name") for v in spec.get("volumes") or []}
    _validate_volumes(spec.get("volumes") or [])
    for container in spec.get("containers") or []:
        _validate_env(container)
        paths: set[str] = set()
        for mount in container.get("volumeMounts") or []:
            sub_path, path = mount.get("subPath", ""), mount.get("mountPath", "")
            problems = [
                mount.get("name") not in volumes and "not a volume of the pod",
                not path.startswith("/") and "mountPath must be absolute",
                path in paths and "mountPath must be unique",
                sub_path.startswith("/") and "subPath must be a relative path",
                ".." in sub_path.split("/") and "subPath must not contain '..'",
            ]
            for problem in filter(None, problems):
                raise ApiError(422, "Invalid", f"volumeMounts {mount.get('name')}: {problem}")
            paths.add(path)


MAX_INT32 = 2**31 - 1
POD_UPDATABLE = (
    "`spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,"
    "`spec.tolerations` (only additions to existing tolerations),"
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"
)


def _validate_pod_update(name: str, old: dict, new: dict) -> None:
    """ValidatePodUpdate's checks of a pod's new spec (pkg/apis/core/validation): of the fields
    this server keeps only activeDeadlineSeconds may change, to 1 to 2^31 - 1 seconds
    (ValidatePodSpec), no more than it was, and never from a value back to none."""
    field = "spec.activeDeadlineSeconds"
    before, after = old.get("activeDeadlineSeconds"), new.get("activeDeadlineSeconds")
    rest = [{k: v for k, v in spec.items() if k != "activeDeadlineSeconds"} for spec in (old, new)]
    if rest[0] != rest[1]:
        said = f"Forbidden: pod updates may not change fields other than {POD_UPDATABLE}"
        raise _pod_invalid(name, "spec", "FieldValueForbidden", said)
    if after is None:
        if before is not None:
            said = 'Invalid value: "null": must not update from a positive integer to nil value'
            raise _pod_invalid(name, field, "FieldValueInvalid", said)
    elif isinstance(after, bool) or not isinstance(after, int) or not 1 <= after <= MAX_INT32:
        said = f"Invalid value: {json.dumps(after)}: must be between 1 and {MAX_INT32}, inclusive"
        raise _pod_invalid(name, field, "FieldValueInvalid", said)
    elif before is not None and after > before:
        said = f"Invalid value: {after}: must be less than or equal to previous value"
        raise _pod_invalid(name, field, "FieldValueInvalid", said)


def _pod_invalid(name: str, field: str, reason: str, said: str) -> ApiError:
    """The API server's 422 for an invalid pod: its message and its details' cause name the
    field."""
    cause = {"reason": reason, "message": said, "field": field}
    details = {"name": name, "kind": "Pod", "causes": [cause]}
    return ApiError(422, "Invalid", f'Pod "{name}" is invalid: {field}: {said}', details)


DNS_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")


def _validate_volumes(volumes: list[dict]) -> None:
    """The API server's checks of a pod's volumes: each named by a DNS label no other volume of
    the pod has, of exactly one type; a secret volume's and a claim volume's own."""
    names: set[str] = set()
    for volume in volumes:
        name = volume.get("name", "")
        types = [key for key in volume if key != "name"]
        problems = [
            not DNS_LABEL.fullmatch(name) and "name must be a DNS label",
            name in names and "name must be unique",
            len(types) != 1 and "must specify exactly one volume type",
        ]
        for problem in filter(None, problems):
            raise ApiError(422, "Invalid", f"volumes {name}: {problem}")
        names.add(name)
        if "secret" in volume:
            _validate_secret_volume(name, volume["secret"] or {})
        if "configMap" in volume:
            _validate_config_map_volume(name, volume["configMap"] or {})
        if "persistentVolumeClaim" in volume:
            _validate_claim_volume(name, volume["persistentVolumeClaim"] or {})
        if "downwardAPI" in volume:
            _validate_downward_volume(name, volume["downwardAPI"] or {})
        if "emptyDir" in volume:
            _validate_empty_dir(name, volume["emptyDir"] or {})


def _validate_empty_dir(name: str, source: dict) -> None:
    """The API server's check of an emptyDir: a medium it knows, a size that is a quantity."""
    medium = source.get("medium", "")
    if medium not in ("", "Memory") and not medium.startswith("HugePages"):
        raise ApiError(422, "Invalid", f"volumes {name}: emptyDir: medium: Unsupported value: "
                       f"{medium!r}")  # fmt: skip
    size = source.get("sizeLimit")
    if size is not None and not re.fullmatch(r"[0-9]+(\.[0-9]+)?([KMGTPE]i?|m|k)?", str(size)):
        raise ApiError(422, "Invalid", f"volumes {name}: emptyDir: sizeLimit: quantities must "
                       "match the regular expression")  # fmt: skip


def _validate_claim_volume(name: str, source: dict) -> None:
    """The API server's check of a claim volume: it names its claim. Whether the claim is
    there, and bound, is the kubelet's to find (`run_pod`)."""
    if not source.get("claimName"):
        raise ApiError(422, "Invalid", f"volumes {name}: persistentVolumeClaim: claimName is "
                       "required")  # fmt: skip
    if not isinstance(source.get("readOnly", False), bool):
        raise ApiError(422, "Invalid", f"volumes {name}: persistentVolumeClaim: readOnly is "
                       "a boolean")  # fmt: skip


# The fields of a pod's own metadata a downward API volume file may hold, one key each (the
# whole labels and annotations, and name, namespace, uid, are not needed here).
DOWNWARD_FIELD = re.compile(r"metadata\.(labels|annotations)\['([^']+)'\]")


def _validate_downward_volume(name: str, source: dict) -> None:
    """The API server's checks of a downward API volume, for the fields this server projects:
    each item at a relative path that never goes up, holding one label or annotation of the
    pod (`metadata.annotations['<key>']`); modes from 0 to 0777."""
    modes = [source.get("defaultMode")] + [item.get("mode") for item in source.get("items") or []]
    problems = [
        any(mode is not None and not 0 <= mode <= 0o777 for mode in modes)
        and "mode must be between 0 and 0777",
    ]
    for item in source.get("items") or []:
        path, field = item.get("path", ""), (item.get("fieldRef") or {}).get("fieldPath", "")
        problems += [
            (not path or path.startswith("/")) and "items path must be a relative path",
            ".." in path.split("/") and "items path must not contain '..'",
            not DOWNWARD_FIELD.fullmatch(field) and f"fieldRef: unsupported value: {field!r}",
        ]
    for problem in filter(None, problems):
        raise ApiError(422, "Invalid", f"volumes {name}: downwardAPI: {problem}")


def _validate_secret_volume(name: str, source: dict) -> None:
    """The API server's checks of a secret volume: it names its Secret; each item a valid key,
    at a relative path that never goes up (".."); modes from 0 to 0777. Whether the Secret and
    its keys are there is the kubelet's to find (`run_pod`)."""
    problems = [not source.get("secretName") and "secretName is required"]
    for problem in filter(None, problems + _key_items_problems(source)):
        raise ApiError(422, "Invalid", f"volumes {name}: secret: {problem}")


def _validate_config_map_volume(name: str, source: dict) -> None:
    """The API server's checks of a config map volume, as of a secret volume: it names its
    ConfigMap; its items and modes alike. Whether they are there is the kubelet's to find."""
    problems = [not source.get("name") and "name is required"]
    for problem in filter(None, problems + _key_items_problems(source)):
        raise ApiError(422, "Invalid", f"volumes {name}: configMap: {problem}")


def _key_items_problems(source: dict) -> list:
    """What is wrong with a secret or config map volume's items and modes: each item a valid
    key, at a relative path that never goes up (".."); modes from 0 to 0777 (False: nothing)."""
    modes = [source.get("defaultMode")] + [item.get("mode") for item in source.get("items") or []]
    problems = [
        any(mode is not None and not 0 <= mode <= 0o777 for mode in modes)
        and "mode must be between 0 and 0777",
    ]
    for item in source.get("items") or []:
        path = item.get("path", "")
        problems += [
            not SECRET_KEY.fullmatch(item.get("key", "")) and "items key must be a valid key",
            (not path or path.startswith("/")) and "items path must be a relative path",
            ".." in path.split("/") and "items path must not contain '..'",
        ]
    return problems


def _validate_env(container: dict) -> None:
    """The API server's checks of a container's env: each variable has a name, and a value or
    a valueFrom but not both; a secretKeyRef names its key."""
    for var in container.get("env") or []:
        name = var.get("name", "")
        source = var.get("valueFrom")
        problems = [
            not name and "a name is required",
            "value" in var and source is not None and "may not have both value and valueFrom",
            source is not None
            and "secretKeyRef" in source
            and not source["secretKeyRef"].get("key")
            and "secretKeyRef.key is required",
        ]
        for problem in filter(None, problems):
            raise ApiError(422, "Invalid", f"env {name}: {problem}")


SECRET_KEY = re.compile(r"[-._a-zA-Z0-9]+")


def _stored_secret(body: dict) -> dict:
    """A secret as the API server stores it: stringData merged into data (base64), its keys
    checked; stringData is write-only, never read back."""
    body = copy.deepcopy(body)
    data = dict(body.get("data") or {})
    for key, value in (body.pop("stringData", None) or {}).items():
        data[key] = base64.b64encode(value.encode()).decode()
    for key in data:
        if not SECRET_KEY.fullmatch(key):
            raise ApiError(422, "Invalid", f"data[{key}]: a valid config key must consist of "
                           "alphanumeric characters, '-', '_' or '.'")  # fmt: skip
    body["data"] = data
    body.setdefault("type", "Opaque")
    if body["type"] == "kubernetes.io/dockerconfigjson" and not _is_docker_config(data):
        said = "data[.dockerconfigjson]: missing, or not a JSON object, in a Docker config secret"
        raise ApiError(422, "Invalid", said)
    return body


def _validate_config_map(body: dict) -> None:
    """The API server's checks of a config map's data: each key valid, each value a string."""
    for key, value in (body.get("data") or {}).items():
        if not SECRET_KEY.fullmatch(key):
            raise ApiError(422, "Invalid", f"data[{key}]: a valid config key must consist of "
                           "alphanumeric characters, '-', '_' or '.'")  # fmt: skip
        if not isinstance(value, str):
            raise ApiError(422, "Invalid", f"data[{key}]: must be a string")


def _is_docker_config(data: dict) -> bool:
    """Whether the API server takes the secret's `.dockerconfigjson`: it unmarshals it into a
    map (JSON null too), and looks no further (no check of "auths")."""
    try:
        config = json.loads(base64.b64decode(data[".dockerconfigjson"]))
    except (KeyError, ValueError):
        return False
    return config is None or isinstance(config, dict)


def _merge_patch(target, patch):
    """RFC 7386: objects merged key by key, null removes a key, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    merged = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = _merge_patch(merged.get(key), value)
    return merged


def _call(kube: KubeTestServer, method, route, ns, kind, name, query, body) -> tuple[int, dict]:
    selector = query.get("labelSelector", "")
    match (route, method):
        case ("nodes", "GET"):
            return 200, kube.list_nodes()
        case ("volume_attachments", "GET"):
            return 200, kube.list_volume_attachments()
        case ("namespaces", "POST"):
            return 201, kube.create_namespace(body)
        case ("namespace", "GET"):
            return 200, kube.get_namespace(ns)
        case ("all_pods", "GET"):
            return 200, kube.list("pods", None, selector)
        case ("collection", "GET"):
            return 200, kube.list(kind, ns, selector, query.get("fieldSelector", ""))
        case ("collection", "POST"):
            return 201, kube.create(kind, ns, body)
        case ("item", "GET"):
            return 200, kube.get(kind, ns, name)
        case ("node_summary", "GET"):
            return 200, kube.summary(name)
        case ("item", "DELETE"):
            grace = body.get("gracePeriodSeconds", query.get("gracePeriodSeconds"))
            return 200, kube.delete(kind, ns, name, None if grace is None else int(grace))
    raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on {route}")


def _tolerates(toleration: dict, taint: dict) -> bool:
    """Whether the toleration matches the taint (its key, or none with Exists; its effect, or
    every effect; its value with Equal, the default operator)."""
    if toleration.get("key") not in (None, "", taint["key"]):
        return False
    if toleration.get("effect") not in (None, "", taint["effect"]):
        return False
    if toleration.get("operator", "Equal") == "Exists":
        return True
    return toleration.get("value", "") == taint.get("value", "")
