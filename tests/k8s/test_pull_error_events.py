"""A failed pull whose error an older kubelet's back-off does not repeat, and which the watch did
not see (the agent restarted meanwhile): read from the kubelet's events about the pod, once."""

from clusters.backends import base
from tests.k8s.conftest import NAMESPACE, eventually, one_gpu_worker, status_becomes
from tests.k8s.server import ApiError
from tests.k8s.test_image_errors import NOT_FOUND, OLD_BACK_OFF, POD, TIMEOUT

EVENTS = f"/api/v1/namespaces/{NAMESPACE}/events"


def failed_pull_before_a_restart(kube, make_backend, error: str):
    """A backend started the worker, its pull failed with `error` and the kubelet backs off;
    the agent restarts meanwhile: the new backend's watch sees the back-off alone."""
    make_backend().start(one_gpu_worker())
    kube.wait_pod(NAMESPACE, POD, "ErrImagePull", error)
    kube.failed_pull_events(NAMESPACE, POD, error)
    kube.wait_pod(NAMESPACE, POD, "ImagePullBackOff", OLD_BACK_OFF)
    restarted = make_backend()
    eventually(lambda: restarted._watcher.get((7, 0))[0] is not None)
    return restarted


def test_a_missing_image_found_in_the_events_after_a_restart_is_the_jobs_own(kube, make_backend):
    restarted = failed_pull_before_a_restart(kube, make_backend, NOT_FOUND)

    status = status_becomes(restarted, 7, 0, base.EXITED)

    said = f"ImagePullBackOff: {OLD_BACK_OFF}: ErrImagePull: {NOT_FOUND}"
    assert (status.exit_code, status.reason) == (127, said)


def test_a_registry_failure_found_in_the_events_is_the_platforms(kube, make_backend):
    restarted = failed_pull_before_a_restart(kube, make_backend, TIMEOUT)

    reason = status_becomes(restarted, 7, 0, base.FAILED).reason

    assert reason == f"ImagePullBackOff: {OLD_BACK_OFF}: ErrImagePull: {TIMEOUT}"


def test_the_events_of_a_pod_are_read_once_however_often_its_status_is(kube, make_backend):
    restarted = failed_pull_before_a_restart(kube, make_backend, TIMEOUT)

    for _ in range(5):
        restarted.status()

    assert kube.count_requests("GET", EVENTS) == 1


def test_events_that_cannot_be_read_leave_the_back_off_the_platforms(kube, make_backend):
    kube.fail("GET", EVENTS, ApiError(403, "Forbidden", "events is forbidden"), times=None)
    restarted = failed_pull_before_a_restart(kube, make_backend, NOT_FOUND)

    status_becomes(restarted, 7, 0, base.FAILED)
    restarted.status()

    assert kube.count_requests("GET", EVENTS) == 1


def test_a_back_off_that_names_its_error_reads_no_events(kube, backend):
    backend.start(one_gpu_worker())

    kube.image_pull_backoff(NAMESPACE, POD, NOT_FOUND)
    status_becomes(backend, 7, 0, base.EXITED)

    assert kube.count_requests("GET", EVENTS) == 0


def test_a_back_off_after_a_failed_pull_the_watch_saw_reads_no_events(kube, backend):
    backend.start(one_gpu_worker())
    kube.wait_pod(NAMESPACE, POD, "ErrImagePull", TIMEOUT)
    status_becomes(backend, 7, 0, base.PENDING, reason=f"ErrImagePull: {TIMEOUT}")

    kube.wait_pod(NAMESPACE, POD, "ImagePullBackOff", OLD_BACK_OFF)
    status_becomes(backend, 7, 0, base.FAILED)

    assert kube.count_requests("GET", EVENTS) == 0
