"""A pod whose volume the kubelet cannot mount, the Secret or ConfigMap it names missing, or its
claim missing, being deleted or unbound since the attempt started: it waits ContainerCreating
while the kubelet retries, and the attempt fails as the platform's fault once the kubelet's
FailedMount events have said so for `mount_failure_s`, not at the control plane's start
timeout; a failure that clears before then (the Secret appears) leaves the pod to run."""

import time
from datetime import UTC, datetime

import pytest
from kubernetes import client

from clusters.backends import base
from clusters.backends.k8s_status import Seen, mount_failure_in_events, worker_status
from jobs.models import Attempt
from tests.k8s.conftest import NAMESPACE, eventually, one_gpu_worker, status_becomes
from tests.k8s.server import ApiError
from tests.k8s.test_k8s_secret_files import FILES
from tests.k8s.test_k8s_volumes import IMAGENET

POD = "mlsched-7-0"
EVENTS = f"/api/v1/namespaces/{NAMESPACE}/events"
SECRET_GONE = 'FailedMount: volume "secret-files": secret "mlsched-7-secrets" not found'
# The backend's bound in these tests: 2 s, not less, for a busy machine may take a second to
# read a worker's status at all, which would find the pod failed already, never waiting.
MOUNT_FAILURE_S = 2
KUBELET_RETRY_S = MOUNT_FAILURE_S + 0.1  # past it


def fast(make_backend, **kwargs):
    """A backend that fails a pod once its mount has failed for MOUNT_FAILURE_S, reading
    events each time."""
    return make_backend(**({"mount_failure_s": MOUNT_FAILURE_S, "mount_check_s": 0} | kwargs))


def secret_deleted_before_the_kubelet_mounts(kube, backend):
    backend.start(one_gpu_worker(secret_files=FILES))
    kube.delete("secrets", NAMESPACE, "mlsched-7-secrets", None)
    kube.run_pod(NAMESPACE, POD)


def failed_once_the_kubelet_tried_again(kube, make_backend, broken) -> base.WorkerStatus:
    """The worker's status once its pod, its volume `broken` before the kubelet mounts it,
    waited ContainerCreating and the kubelet failed again after a retry: failed, within
    seconds, not the start timeout (300 s)."""
    backend = fast(make_backend)
    began = time.monotonic()
    broken(kube, backend)
    status_becomes(backend, 7, 0, base.PENDING, reason="ContainerCreating")

    time.sleep(KUBELET_RETRY_S)
    kube.run_pod(NAMESPACE, POD)  # the kubelet tries again, and fails again

    status = status_becomes(backend, 7, 0, base.FAILED)
    assert time.monotonic() - began < 10
    return status


def test_a_secret_that_stays_missing_fails_the_attempt_naming_it(kube, make_backend):
    status = failed_once_the_kubelet_tried_again(
        kube, make_backend, secret_deleted_before_the_kubelet_mounts
    )

    assert (status.exit_code, status.reason) == (None, SECRET_GONE)
    (event,) = kube.objects_of("events")
    assert event["count"] == 2


def test_a_lasting_mount_failure_is_the_platforms_not_the_nodes(kube, make_backend):
    status = failed_once_the_kubelet_tried_again(
        kube, make_backend, secret_deleted_before_the_kubelet_mounts
    )

    ended = Attempt(outcome=Attempt.Outcome.INFRA_ERROR, reason=f"worker 0: {status.reason}")
    assert ended.node_faulted is False


def test_a_secret_that_appears_before_the_kubelet_retries_lets_the_pod_run(kube, make_backend):
    backend = fast(make_backend)
    secret_deleted_before_the_kubelet_mounts(kube, backend)
    time.sleep(KUBELET_RETRY_S)
    for _ in range(3):  # one failure, however long ago, is not a lasting one
        assert status_becomes(backend, 7, 0, base.PENDING).reason == "ContainerCreating"
    assert kube.count_requests("GET", EVENTS) > 0

    kube.create("secrets", NAMESPACE, {"metadata": {"name": "mlsched-7-secrets"},
                                       "stringData": FILES})  # fmt: skip
    kube.run_pod(NAMESPACE, POD)

    status_becomes(backend, 7, 0, base.RUNNING)
    assert all(s.phase != base.FAILED for s in backend.status())


def test_an_agent_restarted_reads_a_lasting_mount_failure_from_the_events(kube, make_backend):
    secret_deleted_before_the_kubelet_mounts(kube, make_backend())
    time.sleep(KUBELET_RETRY_S)
    kube.run_pod(NAMESPACE, POD)

    restarted = fast(make_backend)
    eventually(lambda: restarted._watcher.get((7, 0))[0] is not None)

    assert status_becomes(restarted, 7, 0, base.FAILED).reason == SECRET_GONE


def test_a_pod_younger_than_the_bound_reads_no_events(kube, backend):
    secret_deleted_before_the_kubelet_mounts(kube, backend)  # the default bound: 60 s
    kube.run_pod(NAMESPACE, POD)

    for _ in range(3):
        status_becomes(backend, 7, 0, base.PENDING, reason="ContainerCreating")

    assert kube.count_requests("GET", EVENTS) == 0


def test_a_namespaces_events_are_read_at_most_every_mount_check_s(kube, make_backend):
    backend = fast(make_backend, mount_check_s=60)
    secret_deleted_before_the_kubelet_mounts(kube, backend)
    time.sleep(KUBELET_RETRY_S)

    for _ in range(5):
        backend.status()

    assert kube.count_requests("GET", EVENTS) == 1


# A data volume's claim, there and bound when the attempt started, gone since.

CLAIM_DELETING = 'FailedMount: claim "imagenet-pvc": PVC is being deleted'
CLAIM_GONE = 'FailedMount: claim "imagenet-pvc": persistentvolumeclaims "imagenet-pvc" not found'


def claim_deleted_after_the_start(kube, backend):
    kube.add_claim(NAMESPACE, "imagenet-pvc")
    backend.start(one_gpu_worker(volumes=(IMAGENET,)))
    # The pod bound to its node keeps it (pvc-protection): deleting, never mounted.
    kube.delete("persistentvolumeclaims", NAMESPACE, "imagenet-pvc", None)
    kube.run_pod(NAMESPACE, POD)


def test_a_claim_deleted_after_the_start_fails_the_worker_naming_it(kube, make_backend):
    status = failed_once_the_kubelet_tried_again(kube, make_backend, claim_deleted_after_the_start)

    assert (status.exit_code, status.reason) == (None, CLAIM_DELETING)
    ended = Attempt(outcome=Attempt.Outcome.INFRA_ERROR, reason=f"worker 0: {status.reason}")
    assert ended.node_faulted is False


def test_a_claim_missing_unseen_at_the_start_fails_the_worker_naming_it(kube, make_backend):
    # Without the right to read claims the start cannot check it: the kubelet tells.
    kube.fail("GET", "/persistentvolumeclaims/", ApiError(403, "Forbidden", "no"), times=None)
    backend = fast(make_backend)
    backend.start(one_gpu_worker(volumes=(IMAGENET,)))
    kube.run_pod(NAMESPACE, POD)
    time.sleep(KUBELET_RETRY_S)
    kube.run_pod(NAMESPACE, POD)

    status = status_becomes(backend, 7, 0, base.FAILED)

    assert (status.exit_code, status.reason) == (None, CLAIM_GONE)


# The rule, on what the kubelet's events say.

UID = "pod-uid"


def pvc(error, processed=", failed to process volumes=[data-imagenet]"):
    """The kubelet's FailedMount for a claim it cannot use (older kubelets do not list the
    volumes they failed to process)."""
    return (
        "Unable to attach or mount volumes: unmounted volumes=[data-imagenet], unattached "
        f"volumes=[]{processed}: error processing PVC mlsched-alpha/imagenet-pvc: {error}"
    )


FETCH = "failed to fetch PVC from API server: "
PVC = pvc(FETCH + 'persistentvolumeclaims "imagenet-pvc" not found')
NO_RELATIONSHIP = pvc(
    FETCH + 'persistentvolumeclaims "imagenet-pvc" is forbidden: User "system:node:gpu-a" cannot '
    'get resource "persistentvolumeclaims" in API group "" in the namespace "mlsched-alpha": no '
    "relationship found between node 'gpu-a' and this object"
)


def failed_mount(message, first, last, uid=UID, name=POD, reason="FailedMount"):
    return client.CoreV1Event(
        metadata=client.V1ObjectMeta(),
        involved_object=client.V1ObjectReference(name=name, uid=uid),
        reason=reason,
        message=message,
        first_timestamp=datetime(2026, 5, 1, 10, 0, first, tzinfo=UTC),
        last_timestamp=datetime(2026, 5, 1, 10, 0, last, tzinfo=UTC),
    )


def set_up(volume, error):
    return f'MountVolume.SetUp failed for volume "{volume}" : {error}'


SECRET = set_up("secret-files", 'secret "mlsched-7-secrets" not found')
CASES = [
    ("secret-repeated", [failed_mount(SECRET, 0, 31)], SECRET_GONE),
    ("secret-once", [failed_mount(SECRET, 0, 0)], ""),
    ("secret-briefly", [failed_mount(SECRET, 0, 29)], ""),
    ("unaggregated", [failed_mount(SECRET, 0, 0), failed_mount(SECRET, 40, 40)], SECRET_GONE),
    ("older-kubelet", [failed_mount(set_up("s", 'secrets "a-b" not found'), 0, 30)],
     'FailedMount: volume "s": secrets "a-b" not found'),
    ("configmap", [failed_mount(set_up("kube-api-access-x", 'configmap "kube-root-ca.crt" '
                                       "not found"), 0, 59)],
     'FailedMount: volume "kube-api-access-x": configmap "kube-root-ca.crt" not found'),
    ("secret-key", [failed_mount(set_up("secret-files", "references non-existent secret key: "
                                        "KUBECONFIG"), 0, 30)],
     'FailedMount: volume "secret-files": references non-existent secret key: KUBECONFIG'),
    ("config-key", [failed_mount(set_up("c", "configmap references non-existent config key: "
                                        "a.yaml"), 0, 30)],
     'FailedMount: volume "c": configmap references non-existent config key: a.yaml'),
    ("earlier-pod", [failed_mount(SECRET, 0, 50, uid="before")], ""),
    ("other-pod", [failed_mount(SECRET, 0, 50, name="mlsched-7-1")], ""),
    ("claim", [failed_mount(PVC, 0, 50)], CLAIM_GONE),
    ("claim-briefly", [failed_mount(PVC, 0, 29)], ""),
    ("claim-deleting", [failed_mount(pvc("PVC is being deleted"), 0, 30)], CLAIM_DELETING),
    ("claim-unbound", [failed_mount(pvc("PVC is not bound"), 0, 30)],
     'FailedMount: claim "imagenet-pvc": PVC is not bound'),
    ("claim-older-kubelet", [failed_mount(pvc("PVC is not bound", processed=""), 0, 30)],
     'FailedMount: claim "imagenet-pvc": PVC is not bound'),
    ("claim-first-sync", [failed_mount(PVC.replace("[data-imagenet]", "[data-imagenet s]", 1),
                                       0, 10), failed_mount(PVC, 12, 30)], CLAIM_GONE),
    ("claim-two", [failed_mount(pvc("PVC is being deleted; error processing PVC "
                                    "mlsched-alpha/other: PVC is not bound"), 0, 30)],
     CLAIM_DELETING),
    ("claim-not-yet-authorized", [failed_mount(NO_RELATIONSHIP, 0, 50)], ""),
    ("cache-not-ready", [failed_mount(set_up("s", 'object "ns"/"s" not registered'), 0, 50)], ""),
    ("other-reason", [failed_mount(SECRET, 0, 50, reason="FailedAttachVolume")], ""),
]  # fmt: skip


@pytest.mark.parametrize(("events", "want"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_mount_failure_counts_once_the_kubelet_has_repeated_it_for_30_s(events, want):
    assert mount_failure_in_events(events, POD, UID, persisted_s=30) == want


def waiting_pod(waiting=None, phase="Pending", running=False):
    state = client.V1ContainerState(
        waiting=client.V1ContainerStateWaiting(reason=waiting) if waiting else None,
        running=client.V1ContainerStateRunning() if running else None,
    )
    container = client.V1ContainerStatus(
        name="worker", image="i", image_id="", ready=running, restart_count=0, state=state
    )
    return client.V1Pod(status=client.V1PodStatus(phase=phase, container_statuses=[container]))


@pytest.mark.parametrize(
    ("pod", "want"),
    [(waiting_pod("ContainerCreating"), (base.FAILED, SECRET_GONE)),
     (client.V1Pod(status=client.V1PodStatus(phase="Pending")), (base.FAILED, SECRET_GONE)),
     (waiting_pod(phase="Running", running=True), (base.RUNNING, ""))],
    ids=["creating", "no-container-status", "mounted-since"],
)  # fmt: skip
def test_a_lasting_mount_failure_fails_a_pod_only_while_its_container_waits(pod, want):
    status = worker_status(7, 0, Seen(pod=pod, mount_error=SECRET_GONE))

    assert (status.phase, status.reason) == want
