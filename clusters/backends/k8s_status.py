"""What a worker's pod means for the control plane: a pure mapping from the last pod object seen
(and what happened around it) to a WorkerStatus phase, exit code and reason."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

from kubernetes import client

from clusters.backends import base
from clusters.backends.k8s_specs import CONTAINER

# Waiting reasons that will not fix themselves: the attempt has to be retried elsewhere or later.
# ErrImagePull is not one: it is the first failed pull, which the kubelet tries again (then
# waiting as ImagePullBackOff).
STUCK_WAITING = frozenset(
    {
        "ImagePullBackOff",
        "ErrImageNeverPull",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
    }
)
# The job's own image cannot be had: its name does not parse, or the registry says there is no
# such image (containerd: "not found", CRI-O: "manifest unknown", Docker Hub: "pull access
# denied, repository does not exist"). Pulling again will not help; since Kubernetes 1.32 the
# ImagePullBackOff message ends with the failed pull's. Other pull errors (timeouts, a registry
# down) are the infrastructure's.
IMAGE_PULL = frozenset({"ErrImagePull", "ImagePullBackOff"})
NO_SUCH_IMAGE = re.compile(
    r"not found|manifest unknown|name unknown|pull access denied|repository does not exist",
    re.IGNORECASE,
)
# Reported as the exit code of a worker whose image cannot be had: like a command that does
# not exist (127, as the local backend reports it), the job's own error, not retried.
NO_IMAGE_EXIT = 127
# Container termination reasons caused by the node or runtime, not by the user's code. An
# OOMKilled container passed its own memory limit (requests equal limits): the user's to fix.
INFRA_TERMINATION = frozenset({"ContainerCannotRun", "StartError"})
# ... but for the job's own command, which the runtime could not start (runc: "exec: "train":
# executable file not found in $PATH", "no such file or directory", "permission denied"): the
# job's own error, with the exit code the local backend gives a command that does not exist
# (127) or cannot be run (126).
NO_COMMAND = re.compile(
    r'exec: "[^"]*": (executable file not found|(stat [^:]*: )?no such file or directory)'
)
COMMAND_NOT_RUNNABLE = re.compile(r'exec: "[^"]*": permission denied')
NODE_READY, NODE_NOT_READY, NODE_MISSING = "ready", "not-ready", "missing"
# NotReady for less than the grace period: the kubelet may only be cut off from the API server
# while the node's pods still run, so they are reported as they were last seen.
NODE_UNREACHABLE = "unreachable"


@dataclass(frozen=True)
class Seen:
    """What the backend knows about one worker's pod."""

    pod: client.V1Pod | None = None  # the last version seen, None before the first
    deleted: bool = False  # the pod is gone from the API
    stopping: bool = False  # the backend deleted it on purpose (stop)
    node: str = NODE_READY  # the bound node's state
    create_error: str = ""  # why the pod could not be created
    # The last failed pull's message the watch saw (ErrImagePull): kubelets before 1.32 do not
    # repeat it in the ImagePullBackOff that follows, which may be all a status read sees.
    pull_error: str = ""


def worker_status(attempt_id: int, rank: int, seen: Seen) -> base.WorkerStatus:
    phase, exit_code, reason = _classify(seen)
    return base.WorkerStatus(attempt_id, rank, phase, exit_code, reason)


def _classify(seen: Seen) -> tuple[str, int | None, str]:
    if seen.create_error:
        return base.FAILED, None, seen.create_error
    if seen.stopping:
        return _stopping(seen)
    if seen.pod is None:
        return base.PENDING, None, ""
    ended = _ended(seen.pod)
    if ended:
        return ended
    if seen.deleted:
        return base.LOST, None, _disruption(seen.pod) or "PodDeleted"
    return _live(seen.pod, seen.node, seen.pull_error)


def _stopping(seen: Seen) -> tuple[str, int | None, str]:
    gone = seen.deleted or seen.node == NODE_MISSING or seen.pod is None
    if gone or is_finished(seen.pod):
        term = _terminated(seen.pod)
        return base.STOPPED, term.exit_code if term else None, "Stopped"
    return _live(seen.pod, seen.node)


def _ended(pod: client.V1Pod) -> tuple[str, int | None, str] | None:
    """The final state of a pod that ran to an end, None while it has not ended. The worker's
    end is the pod's: a classic sidecar a mesh injected (a proxy) keeps the pod Running after
    the worker's container has exited, and the pod never restarts it (restartPolicy Never)."""
    phase = _phase(pod)
    term = _terminated(pod)
    exit_code = term.exit_code if term else None
    if phase == "Succeeded":
        return base.EXITED, exit_code or 0, ""
    if phase == "Failed":
        pod_reason = pod.status.reason or ""
        if pod_reason == "DeadlineExceeded":  # activeDeadlineSeconds: the runtime limit
            return base.TIMED_OUT, exit_code, "exceeded its runtime limit (DeadlineExceeded)"
        if pod_reason:  # Evicted, OutOfcpu, NodeAffinity, Shutdown...
            return base.FAILED, exit_code, pod_reason
        # Drained, preempted or deleted for a taint: the kubelet stopped the container (143,
        # 137) and marked the pod Failed before it went; Kubernetes' Job controller ignores
        # these too.
        disruption = _disruption(pod)
        if disruption:
            return base.FAILED, exit_code, disruption
    elif term is None or _disruption(pod):
        return None  # running; or being taken away, which the pod's end or deletion tells
    return _container_end(term)


def _container_end(term: client.V1ContainerStateTerminated | None) -> tuple[str, int | None, str]:
    """How the worker's container ended, when the pod around it says nothing more."""
    exit_code = term.exit_code if term else None
    if term and term.reason in INFRA_TERMINATION:
        message = term.message or ""
        if NO_COMMAND.search(message):
            return base.EXITED, 127, f"{term.reason}: {message}"
        if COMMAND_NOT_RUNNABLE.search(message):
            return base.EXITED, 126, f"{term.reason}: {message}"
        return base.FAILED, exit_code, term.reason
    if exit_code is None:
        return base.FAILED, None, "PodFailed"
    return base.EXITED, exit_code, term.reason if term and term.reason == "OOMKilled" else ""


def _live(pod: client.V1Pod | None, node: str, pull_error: str = "") -> tuple[str, int | None, str]:
    if node == NODE_MISSING:
        return base.LOST, None, "NodeLost"
    if node == NODE_NOT_READY:
        return base.LOST, None, "NodeNotReady"
    phase = _phase(pod)
    if node == NODE_UNREACHABLE and phase == "Unknown":
        return base.RUNNING, None, ""  # the node stopped reporting: the pod may well still run
    waiting, message = _waiting(pod)
    if waiting == "ImagePullBackOff" and pull_error and "ErrImagePull" not in message:
        message = f"{message}: ErrImagePull: {pull_error}"  # as Kubernetes 1.32 says it
    said = f"{waiting}: {message}" if message else waiting
    if waiting == "InvalidImageName" or (waiting in IMAGE_PULL and NO_SUCH_IMAGE.search(message)):
        return base.EXITED, NO_IMAGE_EXIT, said
    if waiting in STUCK_WAITING:
        return base.FAILED, None, said
    if phase == "Running" and not waiting:  # an injected container may run while it waits
        return base.RUNNING, None, ""
    if phase == "Unknown":
        return base.LOST, None, "PodUnknown"
    return base.PENDING, None, said


def pull_error(pod: client.V1Pod) -> str:
    """The kubelet's message for a failed pull of the worker's image, "" if it is not one."""
    waiting, message = _waiting(pod)
    return message if waiting == "ErrImagePull" else ""


def _phase(pod: client.V1Pod | None) -> str:
    return (pod.status.phase if pod and pod.status else "") or "Pending"


def _container(pod: client.V1Pod | None) -> client.V1ContainerStatus | None:
    """The worker's container: a mesh or an admission webhook may add others to the pod, and
    the kubelet lists containers by name."""
    statuses = (pod.status.container_statuses if pod and pod.status else None) or []
    return next((status for status in statuses if status.name == CONTAINER), None)


def _terminated(pod: client.V1Pod | None) -> client.V1ContainerStateTerminated | None:
    container = _container(pod)
    return container.state.terminated if container and container.state else None


def _waiting(pod: client.V1Pod | None) -> tuple[str, str]:
    """Why the worker's container waits, and the kubelet's message: ("", "") if it does not."""
    container = _container(pod)
    waiting = container.state.waiting if container and container.state else None
    return ((waiting.reason or ""), (waiting.message or "")) if waiting else ("", "")


def _disruption(pod: client.V1Pod) -> str:
    """The reason Kubernetes gives for a pod it is taking away (drain, taint, preemption)."""
    for condition in (pod.status.conditions if pod.status else None) or []:
        if condition.type == "DisruptionTarget" and condition.status == "True":
            return condition.reason or "DisruptionTarget"
    return ""


def is_started(pod: client.V1Pod) -> bool:
    """The container has run, so it has a log to read."""
    container = _container(pod)
    state = container.state if container else None
    return bool(state and (state.running or state.terminated))


def is_finished(pod: client.V1Pod | None) -> bool:
    """The pod, or the worker's container in it, has ended: it will not run again."""
    return _phase(pod) in ("Succeeded", "Failed") or _terminated(pod) is not None


def node_state(node: client.V1Node | None) -> str:
    """Ready, not ready or missing, for scheduling: a node not ready takes no new work."""
    if node is None:
        return NODE_MISSING
    ready = _ready_condition(node)
    return NODE_READY if ready is not None and ready.status == "True" else NODE_NOT_READY


def not_ready_since(node: client.V1Node) -> datetime | None:
    """When a node that is not ready stopped being ready: its Ready condition's
    lastTransitionTime; None when the node is ready or the time is not given."""
    ready = _ready_condition(node)
    if ready is not None and ready.status == "True":
        return None
    return ready.last_transition_time if ready is not None else None


def pods_node_state(
    node: client.V1Node | None, now: datetime, grace_s: float, noticed: datetime | None = None
) -> str:
    """The node's state as its pods are reported: a node that has been NotReady for less than
    `grace_s` (since `not_ready_since`, else since the backend `noticed` it) is unreachable,
    and its pods count as still there; after that they are lost, and at once if the node
    object is gone. Kubernetes itself waits 300 s before evicting them (tolerationSeconds)."""
    state = node_state(node)
    if state != NODE_NOT_READY:
        return state
    since = not_ready_since(node) or noticed
    if since is not None and since.tzinfo is None:
        since = since.replace(tzinfo=UTC)
    if since is not None and (now - since).total_seconds() < grace_s:
        return NODE_UNREACHABLE
    return NODE_NOT_READY


def _ready_condition(node: client.V1Node) -> client.V1NodeCondition | None:
    conditions = (node.status.conditions if node.status else None) or []
    return next((c for c in conditions if c.type == "Ready"), None)
