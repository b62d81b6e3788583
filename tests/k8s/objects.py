"""JSON shapes of the Kubernetes objects the test server keeps, and the kubelet's state changes."""

from __future__ import annotations

import copy
import hashlib
import time
import uuid
from datetime import UTC, datetime, timedelta

TERMINAL = ("Succeeded", "Failed")


class Clock:
    """The control plane's clock: this host's, unless a test sets it `ahead_s` seconds ahead
    (behind, below 0), for every time the test server stamps and its answers' Date header."""

    ahead_s = 0.0

    @classmethod
    def time(cls) -> float:
        return time.time() + cls.ahead_s


def now(offset_s: float = 0.0) -> str:
    """The control plane's time, moved by `offset_s` seconds, as the API server writes it."""
    at = datetime.fromtimestamp(Clock.time(), UTC) + timedelta(seconds=offset_s)
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def status(code: int, reason: str, message: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Status",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def bookmark(rv: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"resourceVersion": rv}}


def list_of(kind: str, api_version: str, items: list[dict], rv: str) -> dict:
    return {
        "apiVersion": api_version,
        "kind": f"{kind}List",
        "metadata": {"resourceVersion": rv},
        "items": items,
    }


def volume_attachment(volume: str, node: str) -> dict:
    """The attach-detach controller's record that `volume` (a PersistentVolume) is attached to
    `node`, named as it names them (csi-<sha256 of volume, driver and node>)."""
    digest = hashlib.sha256(f"{volume}{ATTACHER}{node}".encode()).hexdigest()
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "VolumeAttachment",
        "metadata": {"name": f"csi-{digest}", "uid": str(uuid.uuid4())},
        "spec": {"attacher": ATTACHER, "nodeName": node,
                 "source": {"persistentVolumeName": volume}},
        "status": {"attached": True},
    }  # fmt: skip


ATTACHER = "disk.csi.example.com"  # a CSI driver of attachable disks


def created(
    body: dict, kind: str, ns: str | None, rv: str, uid: str, api_version: str = "v1"
) -> dict:
    obj = copy.deepcopy(body)
    obj.update(apiVersion=api_version, kind=kind)
    meta = obj.setdefault("metadata", {})
    meta.update(resourceVersion=rv, uid=uid, creationTimestamp=now())
    if ns is not None:
        meta["namespace"] = ns
    return obj


def node(
    name: str,
    rv: str,
    cpu: str = "32",
    memory: str = "256Gi",
    gpus: int = 0,
    product: str = "",
    labels: dict[str, str] | None = None,
    ready: bool = True,
) -> dict:
    allocatable = {"cpu": cpu, "memory": memory, "pods": "110"}
    all_labels = {"kubernetes.io/hostname": name, **(labels or {})}
    if gpus:
        allocatable["nvidia.com/gpu"] = str(gpus)
    if product:
        all_labels["nvidia.com/gpu.product"] = product
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": all_labels, "resourceVersion": rv, "uid": name},
        "status": {
            "allocatable": allocatable,
            "capacity": dict(allocatable),
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "lastTransitionTime": now(),
                }
            ],
        },
    }


def claim(name: str, phase: str = "Bound") -> dict:
    """A ReadWriteMany claim, bound, as a platform team provisions one for the shared store; or
    in another phase (a "Pending" one has no volume yet)."""
    bound = phase == "Bound"
    return {
        "metadata": {"name": name},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "resources": {"requests": {"storage": "10Ti"}},
            **({"volumeName": f"checkpoints-{name}"} if bound else {}),
        },
        "status": {"phase": phase, **({"accessModes": ["ReadWriteMany"]} if bound else {})},
    }


def matches(obj: dict, selector: str) -> bool:
    """Equality (`k=v`, `k==v`, `k!=v`) and existence (`k`, `!k`) label selectors."""
    labels = obj.get("metadata", {}).get("labels") or {}
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            ok = labels.get(key) != value
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            ok = labels.get(key) == value
        elif term.startswith("!"):
            ok = term[1:] not in labels
        else:
            ok = term in labels
        if not ok:
            return False
    return True


def qos_class(pod: dict) -> str:
    """The API server's rule: Guaranteed when every container's cpu and memory requests equal
    limits; BestEffort with no requests or limits at all; Burstable otherwise."""
    containers = pod["spec"].get("containers", [])
    resources = [c.get("resources") or {} for c in containers]
    if not any(r.get("requests") or r.get("limits") for r in resources):
        return "BestEffort"
    for r in resources:
        limits = r.get("limits") or {}
        requests = r.get("requests") or limits  # unset requests default to the limits
        for name in ("cpu", "memory"):
            if name not in limits or requests.get(name) != limits[name]:
                return "Burstable"
        if any(requests.get(k) != v for k, v in limits.items()):
            return "Burstable"
    return "Guaranteed"


def is_terminal(pod: dict) -> bool:
    return pod.get("status", {}).get("phase") in TERMINAL


def worker_ended(pod: dict) -> bool:
    """The pod has ended, or the worker's container in it has: its log follow ends."""
    statuses = pod.get("status", {}).get("containerStatuses", [])
    states = [c.get("state", {}) for c in statuses if c["name"] == "worker"]
    return is_terminal(pod) or any("terminated" in state for state in states)


def container_started(pod: dict) -> bool:
    states = [c.get("state", {}) for c in pod.get("status", {}).get("containerStatuses", [])]
    return any("running" in s or "terminated" in s for s in states)


def _container_status(pod: dict, state: dict, ready: bool) -> list[dict]:
    container = pod["spec"]["containers"][0]
    return [
        {
            "name": container["name"],
            "image": container["image"],
            "imageID": "",
            "ready": ready,
            "restartCount": 0,
            "started": ready,
            "state": state,
        }
    ]


def running(pod: dict) -> None:
    pod["status"].update(
        phase="Running",
        startTime=now(),
        containerStatuses=_container_status(pod, {"running": {"startedAt": now()}}, True),
    )


def terminated(pod: dict, exit_code: int, reason: str) -> None:
    state = {"terminated": {"exitCode": exit_code, "reason": reason, "finishedAt": now()}}
    pod["status"].update(
        phase="Succeeded" if exit_code == 0 else "Failed",
        containerStatuses=_container_status(pod, state, False),
    )


def beside_sidecar(pod: dict, exit_code: int) -> None:
    state = {"terminated": {"exitCode": exit_code, "reason": "Completed", "finishedAt": now()}}
    proxy = {"name": "istio-proxy", "image": "proxy", "imageID": "", "ready": True}
    proxy.update(restartCount=0, started=True, state={"running": {"startedAt": now()}})
    pod["status"].update(
        phase="Running", containerStatuses=[proxy, *_container_status(pod, state, False)]
    )


def failed_by_kubelet(pod: dict, reason: str, message: str) -> None:
    """The kubelet ends the pod itself: eviction, active deadline."""
    state = {"terminated": {"exitCode": 137, "reason": "Error", "finishedAt": now()}}
    pod["status"].update(
        phase="Failed",
        reason=reason,
        message=message,
        containerStatuses=_container_status(pod, state, False),
    )


def disrupted(pod: dict, reason: str, message: str) -> None:
    """Kubernetes is about to take the pod away (drain, preemption, taint): the
    DisruptionTarget condition, added before the pod is deleted."""
    condition = {"type": "DisruptionTarget", "status": "True", "reason": reason}
    condition.update(message=message, lastTransitionTime=now())
    pod["status"].setdefault("conditions", []).append(condition)


def waiting(pod: dict, reason: str, message: str) -> None:
    state = {"waiting": {"reason": reason, "message": message}}
    pod["status"]["containerStatuses"] = _container_status(pod, state, False)


def mark_deleting(pod: dict, grace: int | None) -> None:
    """A graceful delete: without a grace period of its own, the pod's terminationGracePeriodSeconds
    (30 s when it sets none)."""
    if grace is None:
        grace = pod["spec"].get("terminationGracePeriodSeconds", 30)
    pod["metadata"]["deletionTimestamp"] = now()
    pod["metadata"]["deletionGracePeriodSeconds"] = grace
