"""The last failed pull the watch saw is kept per worker only while its attempt is: nothing of
it is kept once the attempt is forgotten, even for a pull that fails again as it is."""

import threading

from clusters.backends import base
from clusters.backends import kubernetes as k8s_backend
from tests.k8s.conftest import NAMESPACE, one_gpu_worker, status_becomes
from tests.k8s.test_agent_loop import kept_of
from tests.k8s.test_image_errors import NOT_FOUND, POD


def test_a_failed_pull_seen_while_its_attempt_is_forgotten_is_not_kept(kube, backend, monkeypatch):
    backend.start(one_gpu_worker())
    kube.wait_pod(NAMESPACE, POD, "ErrImagePull", NOT_FOUND)
    status_becomes(backend, 7, 0, base.EXITED)  # the job's own error: the agent forgets it
    # The watch hands on the kubelet's next failed pull just as forget() runs: forget waits
    # in ignore() for that callback to end (the watch's hand-over lock), as it is built to.
    in_callback, dropped = threading.Event(), threading.Event()
    real_pull_error, real_ignore = k8s_backend.pull_error, backend._watcher.ignore

    def pull_error_handed_on_slowly(pod):
        if in_callback.is_set():
            return real_pull_error(pod)
        in_callback.set()
        dropped.wait(5)  # until forget() has dropped the attempt's state and waits in ignore()
        return real_pull_error(pod)

    def ignore(attempt_id):
        dropped.set()
        real_ignore(attempt_id)

    monkeypatch.setattr(k8s_backend, "pull_error", pull_error_handed_on_slowly)
    monkeypatch.setattr(backend._watcher, "ignore", ignore)
    kube.wait_pod(NAMESPACE, POD, "ErrImagePull", NOT_FOUND)  # the kubelet tries again
    assert in_callback.wait(5)

    backend.forget(7)

    assert kept_of(7, backend) == []
