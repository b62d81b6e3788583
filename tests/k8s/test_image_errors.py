"""A worker whose image cannot be pulled: the job's own error when the image is not there (or
its name does not parse), an infrastructure failure when the registry fails; either way with
the kubelet's message."""

import pytest

from clusters.backends import base
from tests.k8s.conftest import NAMESPACE, eventually, one_gpu_worker, status_becomes

POD = "mlsched-7-0"
IMAGE = "registry.local/train:1"
NOT_FOUND = (
    f'rpc error: code = NotFound desc = failed to pull and unpack image "{IMAGE}": '
    f'failed to resolve reference "{IMAGE}": {IMAGE}: not found'
)
DENIED = (
    'rpc error: code = Unknown desc = failed to pull and unpack image "docker.io/library/trian:1": '
    "pull access denied, repository does not exist or may require authorization: server "
    "message: insufficient_scope: authorization failed"
)
MANIFEST_UNKNOWN = "reading manifest 1 in registry.local/train: manifest unknown"
TIMEOUT = (
    f'rpc error: code = Unknown desc = failed to pull and unpack image "{IMAGE}": failed to do '
    'request: Head "https://registry.local/v2/train/manifests/1": dial tcp 10.0.0.5:443: '
    "i/o timeout"
)


@pytest.mark.parametrize(
    "error", [NOT_FOUND, DENIED, MANIFEST_UNKNOWN], ids=["not-found", "denied", "manifest-unknown"]
)
def test_a_missing_image_is_the_jobs_own_error_at_its_first_failed_pull(kube, backend, error):
    backend.start(one_gpu_worker())

    kube.wait_pod(NAMESPACE, POD, "ErrImagePull", error)

    status = status_becomes(backend, 7, 0, base.EXITED)
    assert (status.exit_code, status.reason) == (127, f"ErrImagePull: {error}")


def test_an_image_name_that_does_not_parse_is_the_jobs_own_error(kube, backend):
    backend.start(one_gpu_worker(image="Registry.local/Train:1"))
    message = (
        'Failed to apply default image tag "Registry.local/Train:1": couldn\'t parse image '
        'reference "Registry.local/Train:1": invalid reference format: repository name must '
        "be lowercase"
    )

    kube.wait_pod(NAMESPACE, POD, "InvalidImageName", message)

    status = status_becomes(backend, 7, 0, base.EXITED)
    assert (status.exit_code, status.reason) == (127, f"InvalidImageName: {message}")


def test_a_first_pull_the_registry_fails_waits_for_the_kubelets_next_try(kube, backend):
    backend.start(one_gpu_worker())

    kube.wait_pod(NAMESPACE, POD, "ErrImagePull", TIMEOUT)

    waiting = status_becomes(backend, 7, 0, base.PENDING, reason=f"ErrImagePull: {TIMEOUT}")
    assert waiting.exit_code is None  # not ended: the kubelet pulls again


def test_a_registry_that_keeps_failing_is_an_infrastructure_failure_with_its_error(kube, backend):
    backend.start(one_gpu_worker())

    kube.image_pull_backoff(NAMESPACE, POD, TIMEOUT)

    reason = status_becomes(backend, 7, 0, base.FAILED).reason
    assert reason == f'ImagePullBackOff: Back-off pulling image "{IMAGE}": ErrImagePull: {TIMEOUT}'


def test_the_back_off_after_a_missing_image_is_the_jobs_own_error(kube, backend):
    backend.start(one_gpu_worker())

    kube.image_pull_backoff(NAMESPACE, POD, NOT_FOUND)

    assert status_becomes(backend, 7, 0, base.EXITED).exit_code == 127


def test_a_container_config_error_carries_the_kubelets_message(kube, backend):
    backend.start(one_gpu_worker())

    kube.wait_pod(NAMESPACE, POD, "CreateContainerConfigError", 'secret "x" not found')

    reason = status_becomes(backend, 7, 0, base.FAILED).reason
    assert reason == 'CreateContainerConfigError: secret "x" not found'


def test_an_image_the_nodes_runtime_cannot_inspect_is_an_infrastructure_failure(kube, backend):
    # The runtime holds the image but cannot read it (a damaged image store): the node's fault,
    # retried rather than left pending until the start timeout.
    backend.start(one_gpu_worker())
    message = f'Failed to inspect image "{IMAGE}": rpc error: code = Unknown desc = layer missing'

    kube.wait_pod(NAMESPACE, POD, "ImageInspectError", message)

    reason = status_becomes(backend, 7, 0, base.FAILED).reason
    assert reason == f"ImageInspectError: {message}"


# Kubelets before 1.32 say only this in the back-off that follows a failed pull.
OLD_BACK_OFF = f'Back-off pulling image "{IMAGE}"'


def watched(backend, reason: str) -> None:
    """Wait until the backend's pod watch has seen the worker wait for `reason`."""

    def waiting() -> str:
        pod, _ = backend._watcher.get((7, 0))
        statuses = (pod.status.container_statuses if pod and pod.status else None) or []
        return next((c.state.waiting.reason for c in statuses if c.state.waiting), "")

    eventually(lambda: waiting() == reason)


def test_a_missing_image_whose_back_off_does_not_repeat_the_error_is_the_jobs_own(kube, backend):
    backend.start(one_gpu_worker())

    # Both before a status read: the watch saw the failed pull, the status sees the back-off.
    kube.wait_pod(NAMESPACE, POD, "ErrImagePull", NOT_FOUND)
    watched(backend, "ErrImagePull")
    kube.wait_pod(NAMESPACE, POD, "ImagePullBackOff", OLD_BACK_OFF)
    watched(backend, "ImagePullBackOff")

    status = status_becomes(backend, 7, 0, base.EXITED)
    said = f"ImagePullBackOff: {OLD_BACK_OFF}: ErrImagePull: {NOT_FOUND}"
    assert (status.exit_code, status.reason) == (127, said)


def test_a_registry_failing_behind_an_old_kubelets_back_off_names_its_error(kube, backend):
    backend.start(one_gpu_worker())

    kube.wait_pod(NAMESPACE, POD, "ErrImagePull", TIMEOUT)
    watched(backend, "ErrImagePull")
    kube.wait_pod(NAMESPACE, POD, "ImagePullBackOff", OLD_BACK_OFF)
    watched(backend, "ImagePullBackOff")

    reason = status_becomes(backend, 7, 0, base.FAILED).reason
    assert reason == f"ImagePullBackOff: {OLD_BACK_OFF}: ErrImagePull: {TIMEOUT}"
