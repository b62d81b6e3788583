"""What a worker's pod means for the control plane: a pure mapping from the last pod object seen
(and what happened around it) to a WorkerStatus phase, exit code and reason."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from kubernetes import client

from clusters.backends import base
from clusters.backends.k8s_specs import CONTAINER, GROUP, untolerated_taint

# Waiting reasons that will not fix themselves: the attempt has to be retried elsewhere or later.
# A failed pull is not one at first: the kubelet tries again (then waits as ImagePullBackOff).
# ImageInspectError: the node's runtime could not read an image it holds (a damaged image
# store), the node's fault whatever the image.
STUCK_WAITING = frozenset(
    {
        "ImagePullBackOff",
        "ImageInspectError",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
    }
)

# Image failures, and whose they are. The kubelet (pkg/kubelet/images) waits with reason
# InvalidImageName (the reference does not parse), ErrImageNeverPull (imagePullPolicy Never and
# the image not on the node), or after a failed pull ErrImagePull, RegistryUnavailable or
# SignatureValidationFailed (the runtime's named errors, k8s.io/cri-api/pkg/errors), then
# ImagePullBackOff; since Kubernetes 1.32 the back-off's message ends with the failed pull's
# "<reason>: <message>". The rule, on that text:
# 1. The platform's (an infrastructure failure, retried) when the registry or the node failed:
#    RegistryUnavailable, timeouts, DNS servers failing, refused or reset connections, 5xx,
#    429 rate limits ("toomanyrequests"), TLS trust, a full disk. This comes first: a job is never
#    blamed for an outage, whatever else the message says.
# 2. The job's own (exit 127, not retried) when the registry answered that there is no such
#    image ("not found", "manifest unknown", "name unknown", Docker Hub's "pull access denied,
#    repository does not exist or may require authorization", which it says of every name it
#    does not serve, typos included), the image fails the cluster's signature policy, or its
#    reference does not parse or is absent under imagePullPolicy Never. Pulling again, here or
#    elsewhere, gets the same answer.
# 3. Ambiguous answers: a bare refusal of credentials (401 Unauthorized, 403 Forbidden,
#    "denied", "no basic auth credentials") and a registry host DNS does not know ("no such
#    host"). The pull credentials are the platform's (a worker's pod carries none of the job's),
#    and a refusal may be an expired pull secret, a registry's firewall or a passing 401 of an
#    overloaded registry; but Artifact Registry refuses a repository that does not exist with a
#    403, and a typo in the registry's host name is a "no such host". So such a failure is the
#    platform's on a job's first attempt (retried after the backoff, maybe on another cluster)
#    and the job's on a later one: a user's mistake costs one retry, and a platform's fault is
#    blamed on the job only if it outlasts that attempt and the backoff. But a pod that pulls
#    with its team's own registry credential (imagePullSecrets naming the attempt's pull
#    Secret, `k8s_specs.build_pull_secret`) has that refusal of credentials be the job's at
#    once: the team's credential is wrong, expired or lacks the repository, and its owners
#    mend it; an unknown host stays as above.
# 4. Anything else the platform's: the job is not blamed for what cannot be read.
IMAGE_NOT_USABLE = frozenset({"InvalidImageName", "ErrImageNeverPull"})
PULL_FAILED = frozenset({"ErrImagePull", "RegistryUnavailable", "SignatureValidationFailed"})
BACK_OFF = "ImagePullBackOff"
OUTAGE = re.compile(
    r"RegistryUnavailable|timeout|timed out|deadline exceeded|server misbehaving|"
    r"temporary failure in name resolution|connection refused|connection reset|"
    r"network is unreachable|no route to host|unexpected EOF|internal server error|"
    r"bad gateway|service unavailable|too ?many ?requests|rate limit|x509:|"
    r"no space left on device",
    re.IGNORECASE,
)
NO_SUCH_IMAGE = re.compile(
    r"SignatureValidationFailed|not found|manifest unknown|name unknown|"
    r"repository does not exist",
    re.IGNORECASE,
)
CREDENTIALS_REFUSED = re.compile(
    r"\b40[13]\b|unauthorized|forbidden|denied|authentication required|no basic auth",
    re.IGNORECASE,
)
UNKNOWN_HOST = re.compile(r"no such host", re.IGNORECASE)
TEAM_PULL_SECRET = re.compile(r"mlsched-[0-9]+-pull")  # k8s_specs.pull_secret_name's shape
JOB, PLATFORM = "job", "platform"  # whose an image failure is
ATTEMPT_NUMBER = f"{GROUP}/attempt-number"  # the pod's annotation (k8s_specs.build_pod)
# The kubelet's event for each failed pull (reason "Failed"), kept by the API server for an
# hour after its last repeat, and repeated at every try of the back-off (at most 300 s apart).
FAILED_PULL_EVENT = re.compile(r'Failed to pull image "[^"]*": (?P<error>.+)', re.DOTALL)
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
# A volume the kubelet cannot mount because the Secret or ConfigMap it names, or a key of it, is
# not there: its FailedMount event says 'MountVolume.SetUp failed for volume "<volume>" :
# secret "<name>" not found' (configmap, or "references non-existent secret key: <key>") while
# the container waits ContainerCreating. The kubelet retries the mount, backing off from 0.5 s
# to 2 min, and the same failure stays one event whose count grows and lastTimestamp moves.
# A claim volume whose claim is not there, is being deleted, or is not bound fails before any
# mount: the kubelet's volume manager cannot even add it to the volumes the pod needs
# (desired_state_of_world_populator.go, getPVCExtractPV: 'failed to fetch PVC from API server:
# persistentvolumeclaims "<claim>" not found', "PVC is being deleted", "PVC is not bound"), and
# each sync of the pod records FailedMount 'Unable to attach or mount volumes: unmounted
# volumes=[...], unattached volumes=[...], failed to process volumes=[<volume>]: error
# processing PVC <namespace>/<claim>: <that error>' (volume_manager.go, WaitForAttachAndMount;
# older kubelets leave out "failed to process volumes"), again at each retry of the sync (10 s
# apart). A claim the pods use cannot be removed (the kubernetes.io/pvc-protection finalizer):
# deleted after they were made (they are bound to their nodes), it stays, being deleted, until
# they are gone.
# At first it may pass: a new namespace's kube-root-ca.crt ConfigMap (every service account
# volume's) comes a moment after the namespace, and a kubelet's cache may lag a Secret just
# made. So it ends the attempt only once the kubelet has kept failing for a while (from the
# event's first time to its last): a Secret that appears meanwhile ends the repeats. It is an
# infrastructure failure, retried, and the platform's (base.PLATFORM_FAULT), not the job's nor
# the node's: the Secrets a pod mounts are those the backend made for its attempt before the
# pod, so one missing was deleted since or never made, and a new attempt makes its own; its
# claims were there, bound, when the attempt started (k8s_tenancy.check_data_claims), so one
# missing, being deleted or unbound was taken away since, on every node alike, and a new
# attempt is refused at its start until the claim is back.
FAILED_MOUNT = "FailedMount"
MISSING_FOR_MOUNT = re.compile(
    r'MountVolume\.SetUp failed for volume "(?P<volume>[^"]+)" : '
    r'(?P<missing>(?:secrets?|configmaps?) "[^"]+" not found|'
    r"(?:configmap )?references non-existent (?:secret|config) key: \S+)"
    r"|error processing PVC [^/\s]+/(?P<claim>[^:\s]+): "
    r'(?:failed to fetch PVC from API server: (?P<claim_missing>persistentvolumeclaims "[^"]+" '
    r"not found)|(?P<claim_unusable>PVC is being deleted|PVC is not bound))"
)
# A claim's volume that cannot be attached to the pod's node. The attach-detach controller
# (kube-controller-manager) records Warning events of reason FailedAttachVolume about the pod,
# in operationexecutor's wording (VolumeToAttach.GenerateMsg, pkg/volume/util/operationexecutor:
# '<what> for volume "<volume>" <why>', the volume named by its PersistentVolume):
# - 'Multi-Attach error for volume "<pv>" Volume is already exclusively attached to one node
#   and can't be attached to another', or '... Volume is already used by pod(s) <pods>' when
#   pods of the namespace use it there (pkg/controller/volume/attachdetach/reconciler,
#   reportMultiAttachError): a volume of one node at a time (ReadWriteOnce) still attached to
#   another, a former pod's not yet detached, or an unreachable node's, detached by force only
#   after 6 minutes. The controller says it once for the pod (MultiAttachErrorReported: "to
#   prevent reporting the error from being reported more than once"), and tries again without
#   a word, so the failure stands from that event on while the pod waits.
# - 'AttachVolume.Attach failed for volume "<pv>" : <the storage's error>' (e.g. "rpc error:
#   code = ..."; operation_generator.go, GenerateAttachVolumeFunc's eventRecorderFunc, at each
#   failed try, backing off from 0.5 s to 2 min as the kubelet's mounts do; its
#   'AttachVolume.MarkVolumeAsAttached failed ...' alike): one event whose count grows while
#   the error reads the same, a new one when it does not (a request id in it).
# Meanwhile the kubelet only waits: after 2 min 3 s (podAttachAndMountTimeout) it records
# FailedMount 'Unable to attach or mount volumes: unmounted volumes=[<volume>], unattached
# volumes=[<volume> ...]: timed out waiting for the condition', which does not say why.
# So a volume whose FailedAttachVolume events have said so for `mount_failure_s`, from the
# first to the last (to now, while the last is a Multi-Attach error), fails the pod as a
# FailedMount does: an infrastructure failure, retried, the platform's (base.PLATFORM_FAULT)
# and not the node's: the claim was there and bound, of access modes the attempt's nodes may
# share (k8s_tenancy.check_data_claims), and another node or the storage holds it.
FAILED_ATTACH = "FailedAttachVolume"
MULTI_ATTACH = re.compile(
    r'Multi-Attach error for volume "(?P<volume>[^"]+)" Volume is already '
    r"(?:exclusively attached to one node|used by )"
)
ATTACH_FAILED = re.compile(
    r'AttachVolume\.\w+ failed for volume "(?P<volume>[^"]+)" : (?P<error>.+)', re.DOTALL
)
# Once the volume is attached, the controller records a Normal event, SuccessfulAttachVolume
# 'AttachVolume.Attach succeeded for volume "<pv>"', and the kubelet goes on to mount it,
# the pod waiting ContainerCreating still: a failure said before it is over.
ATTACHED = "SuccessfulAttachVolume"
ATTACH_SUCCEEDED = re.compile(r'AttachVolume\.Attach succeeded for volume "(?P<volume>[^"]+)"')
# The worker's container is not made before the pod's volumes are mounted: it waits so, or
# has no status yet.
WAITS_TO_MOUNT = frozenset({"ContainerCreating", ""})
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
    # The last failed pull, "<reason>: <message>", as the watch saw it or the kubelet's events
    # tell it: kubelets before 1.32 do not repeat it in the ImagePullBackOff that follows, which
    # may be all a status read sees.
    pull_error: str = ""
    # A volume the kubelet has failed to mount for long enough, its Secret or ConfigMap missing
    # or its claim gone (mount_failure_in_events), "FailedMount: volume ..." or "... claim ...";
    # or that has failed to attach (attach_failure_in_events), "FailedAttachVolume: volume ...".
    mount_error: str = ""


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
    return _live(seen.pod, seen.node, seen.pull_error, seen.mount_error)


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
        if disruption and not _ended_before(term, pod):
            return base.FAILED, exit_code, disruption
    elif term is None or (_disruption(pod) and not _ended_before(term, pod)):
        return None  # running; or being taken away, which the pod's end or deletion tells
    return _container_end(term)


def _ended_before(term: client.V1ContainerStateTerminated | None, pod: client.V1Pod) -> bool:
    """The worker's container ended before Kubernetes marked the pod for taking away: a classic
    sidecar kept the pod Running after the worker's own end, and a drain then came for the
    sidecar. Its end is the worker's own (a success is not run again). A container that ended in
    the second of the disruption or after it, or whose times are not known, was stopped by it: a
    worker may well exit 0 on SIGTERM once it has saved a checkpoint."""
    finished = term.finished_at if term else None
    marked = _disruption_time(pod)
    return finished is not None and marked is not None and finished < marked


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


def _live(
    pod: client.V1Pod | None, node: str, pull_error: str = "", mount_error: str = ""
) -> tuple[str, int | None, str]:
    if node == NODE_MISSING:
        return base.LOST, None, "NodeLost"
    if node == NODE_NOT_READY:
        return base.LOST, None, "NodeNotReady"
    phase = _phase(pod)
    if node == NODE_UNREACHABLE and phase == "Unknown":
        return base.RUNNING, None, ""  # the node stopped reporting: the pod may well still run
    waiting, message = _waiting(pod)
    if waiting == BACK_OFF and pull_error and not _names_pull_error(message):
        message = f"{message}: {pull_error}"  # as Kubernetes 1.32 says it
    said = f"{waiting}: {message}" if message else waiting
    fault = _image_fault(waiting, said, _attempt_number(pod), _pulls_with_team_credential(pod))
    if fault == JOB:
        return base.EXITED, NO_IMAGE_EXIT, said
    if waiting in STUCK_WAITING:
        return base.FAILED, None, said
    if mount_error and waits_to_mount(pod):
        return base.FAILED, None, mount_error
    if phase == "Running" and not waiting:  # an injected container may run while it waits
        return base.RUNNING, None, ""
    if phase == "Unknown":
        return base.LOST, None, "PodUnknown"
    return base.PENDING, None, said


def _image_fault(waiting: str, said: str, attempt: int, team_credential: bool = False) -> str:
    """Whose fault a worker's image failure is (the rule above): JOB or PLATFORM; "" when it
    waits for something else."""
    if waiting in IMAGE_NOT_USABLE:
        return JOB
    if waiting not in PULL_FAILED and waiting != BACK_OFF:
        return ""
    if OUTAGE.search(said):
        return PLATFORM
    refused = CREDENTIALS_REFUSED.search(said)
    if NO_SUCH_IMAGE.search(said) or (refused and team_credential):
        return JOB
    if attempt > 1 and (refused or UNKNOWN_HOST.search(said)):
        return JOB
    return PLATFORM


def _pulls_with_team_credential(pod: client.V1Pod | None) -> bool:
    refs = (pod.spec.image_pull_secrets if pod and pod.spec else None) or []
    return any(TEAM_PULL_SECRET.fullmatch(ref.name or "") for ref in refs)


def _attempt_number(pod: client.V1Pod | None) -> int:
    """The job's attempt the pod runs, 1 for the first (or when the pod does not say)."""
    annotations = (pod.metadata.annotations if pod and pod.metadata else None) or {}
    number = annotations.get(ATTEMPT_NUMBER, "")
    return int(number) if number.isdigit() else 1


def _names_pull_error(message: str) -> bool:
    return any(f"{reason}: " in message for reason in PULL_FAILED)


def pull_error(pod: client.V1Pod) -> str:
    """The worker's failed pull, "<reason>: <message>", "" if it does not wait after one."""
    waiting, message = _waiting(pod)
    return f"{waiting}: {message}" if waiting in PULL_FAILED else ""


def pull_error_unknown(pod: client.V1Pod) -> bool:
    """The worker waits in a back-off whose message does not say why the pull failed (a
    kubelet before 1.32)."""
    waiting, message = _waiting(pod)
    return waiting == BACK_OFF and not _names_pull_error(message)


def pull_error_in_events(events: list[client.CoreV1Event], pod_uid: str) -> str:
    """The pod's last failed pull, "<reason>: <message>", from the kubelet's events about it
    (a pod of the same name before it excluded); "" if they hold none."""
    failed = [
        (_event_time(event), found.group("error"))
        for event in events
        if event.involved_object.uid in (None, "", pod_uid)
        and (found := FAILED_PULL_EVENT.match(event.message or ""))
    ]
    if not failed:
        return ""
    _, error = max(reversed(failed), key=lambda pair: pair[0])  # the last listed of a second
    # The runtime's named errors start the error as the kubelet gets it; others are plain.
    named = any(error.startswith(f"{reason}: ") for reason in PULL_FAILED)
    return error if named else f"ErrImagePull: {error}"


def waits_to_mount(pod: client.V1Pod | None) -> bool:
    """The worker's container has not been made yet: the kubelet may be mounting volumes."""
    waiting, _ = _waiting(pod)
    return _phase(pod) == "Pending" and waiting in WAITS_TO_MOUNT and not is_started(pod)


def mount_failure_in_events(
    events: list[client.CoreV1Event], pod_name: str, pod_uid: str, persisted_s: float
) -> str:
    """Why the pod cannot mount a volume, 'FailedMount: volume "<volume>": <what is missing>'
    (a Secret, a ConfigMap, a key) or 'FailedMount: claim "<claim>": <what is wrong>', once the
    kubelet's FailedMount events about it (a pod of the same name before it excluded)
    have said so for `persisted_s` from first to last; "" before then, or for other failures."""
    times: dict[str, list[datetime]] = {}
    for event in events:
        if event.reason != FAILED_MOUNT or not _about_pod(event, pod_name, pod_uid):
            continue
        if found := MISSING_FOR_MOUNT.search(event.message or ""):
            said = _mount_failure(found)
            times.setdefault(said, []).extend((_event_first_time(event), _event_time(event)))
    lasting = [
        (max(seen), said)
        for said, seen in times.items()
        if (max(seen) - min(seen)).total_seconds() >= persisted_s
    ]
    return max(lasting)[1] if lasting else ""


def _mount_failure(found: re.Match[str]) -> str:
    """A failure MISSING_FOR_MOUNT found, as a worker's reason: its volume, or its claim."""
    if found["claim"]:
        missing = found["claim_missing"] or found["claim_unusable"]
        return f'{FAILED_MOUNT}: claim "{found["claim"]}": {missing}'
    return f'{FAILED_MOUNT}: volume "{found["volume"]}": {found["missing"]}'


def attach_failure_in_events(
    events: list[client.CoreV1Event],
    pod_name: str,
    pod_uid: str,
    persisted_s: float,
    now: datetime,
    multi_attach_s: Callable[[str], float] | None = None,
) -> str:
    """Why a volume of the pod cannot be attached to its node, 'FailedAttachVolume: volume
    "<pv>": already attached to another node (Multi-Attach)' or 'FailedAttachVolume: volume
    "<pv>": <the storage's error>', once the attach-detach controller's FailedAttachVolume
    events about it (a pod of the same name before it excluded) have said so for `persisted_s`,
    from the first to the last, or to `now` while the last is a Multi-Attach error, which the
    controller does not repeat; "" before then, or once a SuccessfulAttachVolume event about
    it, among `events`, is as late as the last failure (the volume is attached). A
    Multi-Attach error on a volume lasts `multi_attach_s(volume)` (`persisted_s` if None)
    before it counts."""
    failures: dict[str, list[tuple[datetime, datetime, str, bool]]] = {}  # volume -> its events
    attached: dict[str, datetime] = {}  # volume -> when it was last attached for the pod
    for event in events:
        if event.reason not in (FAILED_ATTACH, ATTACHED):
            continue
        if not _about_pod(event, pod_name, pod_uid):
            continue
        message = event.message or ""
        if event.reason == ATTACHED:
            if found := ATTACH_SUCCEEDED.match(message):
                volume = found["volume"]
                attached[volume] = max(_event_time(event), attached.get(volume, _NEVER))
            continue
        if found := MULTI_ATTACH.match(message):
            said, once = "already attached to another node (Multi-Attach)", True
        elif found := ATTACH_FAILED.match(message):
            said, once = found["error"].strip(), False
        else:
            continue
        seen = (_event_time(event), _event_first_time(event), said, once)
        failures.setdefault(found["volume"], []).append(seen)
    lasting = []
    for volume, seen in failures.items():
        last, _, said, once = max(seen, key=lambda one: one[0])
        if attached.get(volume, _NEVER) >= last:
            continue
        first = min(one[1] for one in seen)
        until = max(last, now) if once else last
        bound = multi_attach_s(volume) if once and multi_attach_s is not None else persisted_s
        if (until - first).total_seconds() >= bound:
            lasting.append((last, f'{FAILED_ATTACH}: volume "{volume}": {said}'))
    return max(lasting)[1] if lasting else ""


def _about_pod(event: client.CoreV1Event, pod_name: str, pod_uid: str) -> bool:
    about = event.involved_object
    return about.name == pod_name and about.uid in (None, "", pod_uid)


def _event_first_time(event: client.CoreV1Event) -> datetime:
    """When the event first happened (a repeat keeps it, and counts)."""
    at = event.first_timestamp or event.event_time or event.metadata.creation_timestamp
    return at or _event_time(event)


_NEVER = datetime.min.replace(tzinfo=UTC)


def _event_time(event: client.CoreV1Event) -> datetime:
    """When the event last happened (the kubelet's events carry lastTimestamp)."""
    at = event.last_timestamp or event.event_time or event.metadata.creation_timestamp
    return at or _NEVER


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
    condition = _disruption_condition(pod)
    return (condition.reason or "DisruptionTarget") if condition else ""


def _disruption_time(pod: client.V1Pod) -> datetime | None:
    condition = _disruption_condition(pod)
    return condition.last_transition_time if condition else None


def _disruption_condition(pod: client.V1Pod) -> client.V1PodCondition | None:
    for condition in (pod.status.conditions if pod.status else None) or []:
        if condition.type == "DisruptionTarget" and condition.status == "True":
            return condition
    return None


def is_started(pod: client.V1Pod) -> bool:
    """The container has run, so it has a log to read."""
    container = _container(pod)
    state = container.state if container else None
    return bool(state and (state.running or state.terminated))


def started_at(pod: client.V1Pod | None) -> datetime | None:
    """When the worker's container started, as the kubelet says (running, or terminated after
    it ran); None before it has, or without a time."""
    container = _container(pod)
    state = container.state if container else None
    if state is None:
        return None
    ran = state.running or state.terminated
    return ran.started_at if ran is not None else None


def is_finished(pod: client.V1Pod | None) -> bool:
    """The pod, or the worker's container in it, has ended: it will not run again."""
    return _phase(pod) in ("Succeeded", "Failed") or _terminated(pod) is not None


def node_state(node: client.V1Node | None) -> str:
    """Ready, not ready or missing, for scheduling: a node not ready takes no new work."""
    if node is None:
        return NODE_MISSING
    ready = _ready_condition(node)
    return NODE_READY if ready is not None and ready.status == "True" else NODE_NOT_READY


def not_ready_reason(
    node: client.V1Node, tolerated: tuple[str, ...], unhealthy: tuple[str, ...] = ()
) -> str:
    """Why the node takes none of the agent's pods, in a line ("": it takes them): not Ready (its
    Ready condition's reason and message, as the kubelet last posted them), cordoned in Kubernetes,
    tainted NoExecute or NoSchedule with a key the pods do not tolerate
    (`k8s_specs.untolerated_taint`), or a condition of a type in ``unhealthy`` True
    (node-problem-detector's, a GPU health checker's: its reason and message)."""
    ready = _ready_condition(node)
    if ready is None:
        return "no Ready condition posted by its kubelet"
    if ready.status != "True":
        said = ": ".join(part for part in (ready.reason, ready.message) if part)
        return f"not Ready in Kubernetes ({said})" if said else "not Ready in Kubernetes"
    if node.spec and node.spec.unschedulable:
        return "cordoned in Kubernetes (spec.unschedulable)"
    if taint := untolerated_taint(node, tolerated):
        return (
            f"tainted {taint}, which the agent's pods do not tolerate "
            f"(run_agent --tolerate-taint {taint.partition(':')[0]})"
        )
    conditions = (node.status.conditions if node.status else None) or []
    for problem in (c for c in conditions if c.type in unhealthy and c.status == "True"):
        said = ": ".join(part for part in (problem.reason, problem.message) if part)
        return f"{problem.type} in Kubernetes" + (f" ({said})" if said else "")
    return ""


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
