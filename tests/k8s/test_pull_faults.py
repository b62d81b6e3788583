"""Whose an image pull failure is, by what the kubelet and the runtime say: the registry's
outages are the platform's, an image that is not there is the job's, and a refusal of
credentials or an unknown registry host is the platform's on a job's first attempt and the
job's on a retry, but a refusal of the team's own registry credential is the job's at once.
Stated as a table of what containerd, CRI-O and the kubelet report."""

from datetime import UTC, datetime

import pytest
from kubernetes import client

from clusters.backends import base
from clusters.backends.k8s_status import Seen, pull_error_in_events, worker_status
from jobs.models import Attempt
from tests.k8s.conftest import NAMESPACE, one_gpu_worker, status_becomes

IMAGE = "registry.local/train:1"
POD = "mlsched-7-0"
PULL = f'rpc error: code = Unknown desc = failed to pull and unpack image "{IMAGE}": '
UNAUTHORIZED = (
    f'{PULL}failed to resolve reference "{IMAGE}": unexpected status from HEAD request to '
    "https://registry.local/v2/train/manifests/1: 401 Unauthorized"
)
# Artifact Registry answers so for a repository that does not exist, too.
FORBIDDEN = (
    f"{PULL}failed to resolve reference: failed to authorize: failed to fetch oauth token: "
    "unexpected status from GET request to https://europe-docker.pkg.dev/v2/token: 403 Forbidden"
)
NO_SUCH_HOST = (
    f'{PULL}failed to do request: Head "https://regsitry.local/v2/train/manifests/1": dial '
    "tcp: lookup regsitry.local on 10.96.0.10:53: no such host"
)
RATE_LIMITED = (
    f"{PULL}failed to copy: httpReadSeeker: failed open: unexpected status code "
    "https://registry-1.docker.io/v2/library/python/manifests/3.12: 429 Too Many Requests - "
    "Server message: toomanyrequests: You have reached your pull rate limit."
)
SERVER_ERROR = (
    f'{PULL}failed to resolve reference "{IMAGE}": unexpected status from HEAD request to '
    "https://registry.local/v2/train/manifests/1: 503 Service Unavailable"
)
UNAVAILABLE = (
    f"image pull failed for {IMAGE} because the registry is unavailable: pinging container "
    'registry registry.local: Get "https://registry.local/v2/": dial tcp 10.0.0.5:443: '
    "connect: connection refused"
)
UNSIGNED = (
    f"image pull failed for {IMAGE} because the signature validation failed: Source image "
    "rejected: A signature was required, but no signature exists"
)
NEVER = f'Container image "{IMAGE}" is not present with pull policy of Never'
OLD_BACK_OFF = f'Back-off pulling image "{IMAGE}"'


def back_off(reason: str, message: str) -> str:
    """The back-off's message since Kubernetes 1.32: the failed pull's reason and message."""
    return f"{OLD_BACK_OFF}: {reason}: {message}"


def waiting_pod(reason: str, message: str, attempt: int, pull_secret: str = "") -> client.V1Pod:
    waiting = client.V1ContainerStateWaiting(reason=reason, message=message)
    container = client.V1ContainerStatus(
        name="worker",
        image=IMAGE,
        image_id="",
        ready=False,
        restart_count=0,
        state=client.V1ContainerState(waiting=waiting),
    )
    refs = [client.V1LocalObjectReference(name=pull_secret)] if pull_secret else None
    return client.V1Pod(
        metadata=client.V1ObjectMeta(annotations={"mlsched.io/attempt-number": str(attempt)}),
        spec=client.V1PodSpec(containers=[], image_pull_secrets=refs),
        status=client.V1PodStatus(phase="Pending", container_statuses=[container]),
    )


PENDING, INFRA, JOBS = (base.PENDING, None), (base.FAILED, None), (base.EXITED, 127)
CASES = [
    # (id, waiting reason, message, attempt number, want (phase, exit code))
    ("refused-first-pull", "ErrImagePull", UNAUTHORIZED, 1, PENDING),
    ("refused-back-off", "ImagePullBackOff", back_off("ErrImagePull", UNAUTHORIZED), 1, INFRA),
    ("refused-on-a-retry", "ErrImagePull", UNAUTHORIZED, 2, JOBS),
    ("forbidden-on-a-retry", "ImagePullBackOff", back_off("ErrImagePull", FORBIDDEN), 3, JOBS),
    ("unknown-host", "ImagePullBackOff", back_off("ErrImagePull", NO_SUCH_HOST), 1, INFRA),
    ("unknown-host-on-a-retry", "ErrImagePull", NO_SUCH_HOST, 2, JOBS),
    ("rate-limited-first-pull", "ErrImagePull", RATE_LIMITED, 2, PENDING),
    ("rate-limited", "ImagePullBackOff", back_off("ErrImagePull", RATE_LIMITED), 2, INFRA),
    ("server-error", "ImagePullBackOff", back_off("ErrImagePull", SERVER_ERROR), 2, INFRA),
    ("registry-unavailable", "RegistryUnavailable", UNAVAILABLE, 2, PENDING),
    (
        "registry-unavailable-back-off",
        "ImagePullBackOff",
        back_off("RegistryUnavailable", UNAVAILABLE),
        3,
        INFRA,
    ),
    ("unsigned", "SignatureValidationFailed", UNSIGNED, 1, JOBS),
    (
        "unsigned-back-off",
        "ImagePullBackOff",
        back_off("SignatureValidationFailed", UNSIGNED),
        1,
        JOBS,
    ),
    ("never-pulled", "ErrImageNeverPull", NEVER, 1, JOBS),
    ("back-off-without-its-error", "ImagePullBackOff", OLD_BACK_OFF, 2, INFRA),
]


@pytest.mark.parametrize(
    ("reason", "message", "attempt", "want"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_it_tells_whose_a_pull_failure_is(reason, message, attempt, want):
    status = worker_status(7, 0, Seen(pod=waiting_pod(reason, message, attempt)))

    assert (status.phase, status.exit_code) == want
    assert status.reason == f"{reason}: {message}"


TEAM_CASES = [
    # (id, waiting reason, message, the pod's pull Secret, want (phase, exit code))
    ("team-credential-refused", "ErrImagePull", UNAUTHORIZED, "mlsched-7-pull", JOBS),
    ("team-credential-forbidden", "ImagePullBackOff", back_off("ErrImagePull", FORBIDDEN),
     "mlsched-7-pull", JOBS),
    ("team-credential-unknown-host", "ErrImagePull", NO_SUCH_HOST, "mlsched-7-pull", PENDING),
    ("team-credential-registry-down", "ImagePullBackOff", back_off("ErrImagePull", SERVER_ERROR),
     "mlsched-7-pull", INFRA),
    ("another-pull-secret-refused", "ErrImagePull", UNAUTHORIZED, "regcred", PENDING),
]  # fmt: skip


@pytest.mark.parametrize(
    ("reason", "message", "secret", "want"),
    [c[1:] for c in TEAM_CASES],
    ids=[c[0] for c in TEAM_CASES],
)
def test_a_refusal_of_the_teams_own_credential_is_the_jobs_at_its_first_attempt(
    reason, message, secret, want
):
    pod = waiting_pod(reason, message, 1, pull_secret=secret)

    status = worker_status(7, 0, Seen(pod=pod))

    assert (status.phase, status.exit_code) == want


DISK_FULL = (
    f"{PULL}failed to extract layer sha256:0a1b: write /var/lib/containerd/io.containerd."
    "snapshotter.v1.overlayfs/snapshots/42/fs/usr/lib/libcuda.so: no space left on device"
)


@pytest.mark.parametrize(
    ("reason", "message", "attempt"),
    [c[1:4] for c in CASES if c[4] == INFRA],
    ids=[c[0] for c in CASES if c[4] == INFRA],
)
def test_a_pull_the_registry_failed_is_not_held_against_the_node(reason, message, attempt):
    status = worker_status(7, 0, Seen(pod=waiting_pod(reason, message, attempt)))
    ended = Attempt(outcome=Attempt.Outcome.INFRA_ERROR, reason=f"worker 0: {status.reason}")

    assert status.phase == base.FAILED
    assert ended.node_faulted is False


def test_a_pull_that_filled_the_nodes_disk_is_held_against_it():
    pod = waiting_pod("ImagePullBackOff", back_off("ErrImagePull", DISK_FULL), 2)
    status = worker_status(7, 0, Seen(pod=pod))
    ended = Attempt(outcome=Attempt.Outcome.INFRA_ERROR, reason=f"worker 0: {status.reason}")

    assert status.phase == base.FAILED
    assert ended.node_faulted is True


def test_a_refused_pull_is_the_platforms_on_the_first_attempt(kube, backend):
    backend.start(one_gpu_worker(number=1))

    kube.image_pull_backoff(NAMESPACE, POD, UNAUTHORIZED)

    status_becomes(backend, 7, 0, base.FAILED)


def test_a_refused_pull_on_a_retry_is_the_jobs_own_error(kube, backend):
    backend.start(one_gpu_worker(number=2))

    kube.wait_pod(NAMESPACE, POD, "ErrImagePull", UNAUTHORIZED)

    assert status_becomes(backend, 7, 0, base.EXITED).exit_code == 127


def event(message: str, uid: str, second: int) -> client.CoreV1Event:
    return client.CoreV1Event(
        metadata=client.V1ObjectMeta(),
        involved_object=client.V1ObjectReference(uid=uid),
        message=message,
        last_timestamp=datetime(2026, 5, 1, 10, 0, second, tzinfo=UTC),
    )


def test_the_last_failed_pull_of_the_pod_itself_is_read_from_its_events():
    events = [
        event(f'Failed to pull image "{IMAGE}": {SERVER_ERROR}', "pod-1", 9),
        event("Error: ErrImagePull", "pod-1", 10),
        event(f'Failed to pull image "{IMAGE}": {UNAUTHORIZED}', "pod-1", 5),
        event(f'Failed to pull image "{IMAGE}": {FORBIDDEN}', "pod-0", 20),
        event(f'Back-off pulling image "{IMAGE}"', "pod-1", 30),
    ]

    assert pull_error_in_events(events, "pod-1") == f"ErrImagePull: {SERVER_ERROR}"
