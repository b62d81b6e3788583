"""Worker status as the pod watch sees it, with the test server playing the kubelet."""

import pytest
from kubernetes import client

from clusters.backends import base
from clusters.backends.kubernetes import KubernetesBackend
from tests.k8s.conftest import (
    NAMESPACE,
    eventually,
    one_gpu_worker,
    status_becomes,
    two_worker_gang,
)
from tests.k8s.server import ApiError
from tests.processes import free_port

POD = "mlsched-7-0"


def test_it_reports_a_just_created_pod_pending(backend):
    backend.start(one_gpu_worker())

    assert backend.status() == [base.WorkerStatus(7, 0, base.PENDING)]


def test_it_reports_a_running_pod_running(kube, backend):
    backend.start(one_gpu_worker())

    kube.run_pod(NAMESPACE, POD)

    status_becomes(backend, 7, 0, base.RUNNING)


def test_it_reports_exit_code_0_after_running(kube, backend):
    backend.start(one_gpu_worker())
    kube.run_pod(NAMESPACE, POD)
    status_becomes(backend, 7, 0, base.RUNNING)

    kube.exit_pod(NAMESPACE, POD, 0)

    assert status_becomes(backend, 7, 0, base.EXITED).exit_code == 0


def test_it_reports_a_user_exit_code_as_exited(kube, backend):
    backend.start(one_gpu_worker())
    kube.run_pod(NAMESPACE, POD)

    kube.exit_pod(NAMESPACE, POD, 3)

    status = status_becomes(backend, 7, 0, base.EXITED)
    assert (status.exit_code, status.reason) == (3, "")


def test_it_reports_oom_killed_as_the_jobs_own_exit(kube, backend):
    backend.start(one_gpu_worker())
    kube.run_pod(NAMESPACE, POD)

    kube.oom_kill(NAMESPACE, POD)

    status = status_becomes(backend, 7, 0, base.EXITED)
    assert (status.exit_code, status.reason) == (137, "OOMKilled")


def test_it_reports_an_eviction_as_an_infrastructure_failure(kube, backend):
    backend.start(one_gpu_worker())
    kube.run_pod(NAMESPACE, POD)

    kube.evict(NAMESPACE, POD)

    assert status_becomes(backend, 7, 0, base.FAILED).reason == "Evicted"


def test_it_reports_image_pull_backoff_as_an_infrastructure_failure(kube, backend):
    backend.start(one_gpu_worker())

    kube.image_pull_backoff(NAMESPACE, POD)

    reason = status_becomes(backend, 7, 0, base.FAILED).reason
    assert reason == 'ImagePullBackOff: Back-off pulling image "registry.local/train:1"'


def test_it_reports_the_active_deadline_as_a_timeout(kube, backend):
    backend.start(one_gpu_worker())
    kube.run_pod(NAMESPACE, POD)

    kube.exceed_deadline(NAMESPACE, POD)

    assert "DeadlineExceeded" in status_becomes(backend, 7, 0, base.TIMED_OUT).reason


def test_it_sets_the_runtime_limit_as_the_active_deadline(kube, backend):
    backend.start(one_gpu_worker())

    assert kube.pod(NAMESPACE, POD)["spec"]["activeDeadlineSeconds"] == 3600


def test_it_reports_pods_on_a_removed_node_lost(kube, backend):
    backend.start(two_worker_gang())
    kube.run_pod(NAMESPACE, "mlsched-11-1")

    kube.remove_node("gpu-b")

    assert status_becomes(backend, 11, 1, base.LOST).reason == "NodeLost"
    assert status_becomes(backend, 11, 0, base.PENDING)


def test_it_reports_pods_on_a_node_not_ready_past_the_grace_period_lost(kube, backend):
    backend.start(one_gpu_worker())
    kube.run_pod(NAMESPACE, POD)

    kube.set_node_ready("gpu-a", False, since_s=301)  # the default grace is 300 s

    assert status_becomes(backend, 7, 0, base.LOST).reason == "NodeNotReady"


def test_it_keeps_pods_on_a_node_just_gone_not_ready_running(kube, backend):
    # The kubelet may only be cut off from the API server: its pods may still run, and a job
    # requeued now would run twice. Kubernetes itself waits 300 s before evicting them.
    backend.start(two_worker_gang())
    kube.run_pod(NAMESPACE, "mlsched-11-0")
    status_becomes(backend, 11, 0, base.RUNNING)

    kube.set_node_ready("gpu-a", False, since_s=60)

    assert {n.name: n.ready for n in backend.inventory()}["gpu-a"] is False  # no new work
    assert [(s.rank, s.phase) for s in backend.status()] == [
        (0, base.RUNNING),
        (1, base.PENDING),
    ]


def test_it_reports_them_lost_once_the_node_has_been_not_ready_longer_than_the_grace(
    kube, make_backend
):
    backend = make_backend(not_ready_grace_s=120)
    backend.start(one_gpu_worker())
    kube.run_pod(NAMESPACE, POD)
    kube.set_node_ready("gpu-a", False, since_s=100)
    assert status_becomes(backend, 7, 0, base.RUNNING)

    kube.set_node_ready("gpu-a", False, since_s=121)

    assert status_becomes(backend, 7, 0, base.LOST).reason == "NodeNotReady"


def test_it_times_the_grace_itself_when_the_node_gives_no_transition_time(kube, make_backend):
    backend = make_backend(not_ready_grace_s=0.5)
    backend.start(one_gpu_worker())
    kube.run_pod(NAMESPACE, POD)
    status_becomes(backend, 7, 0, base.RUNNING)

    kube.set_node_ready("gpu-a", False, since_s=None)

    assert backend.status()[0].phase == base.RUNNING  # from when the backend noticed
    assert status_becomes(backend, 7, 0, base.LOST).reason == "NodeNotReady"


def test_it_reports_pods_lost_at_once_when_a_not_ready_node_is_removed(kube, backend):
    backend.start(one_gpu_worker())
    kube.run_pod(NAMESPACE, POD)
    kube.set_node_ready("gpu-a", False, since_s=10)
    status_becomes(backend, 7, 0, base.RUNNING)

    kube.remove_node("gpu-a")

    assert status_becomes(backend, 7, 0, base.LOST).reason == "NodeLost"


def test_it_keeps_the_exit_of_a_pod_whose_node_went_away_later(kube, backend):
    backend.start(one_gpu_worker())
    kube.exit_pod(NAMESPACE, POD, 0)
    status_becomes(backend, 7, 0, base.EXITED)

    kube.remove_node("gpu-a")

    assert status_becomes(backend, 7, 0, base.EXITED).exit_code == 0


def test_it_reports_a_pod_deleted_underneath_lost(kube, backend):
    backend.start(one_gpu_worker())
    kube.run_pod(NAMESPACE, POD)
    status_becomes(backend, 7, 0, base.RUNNING)

    kube.delete_pod(NAMESPACE, POD)

    assert status_becomes(backend, 7, 0, base.LOST).reason == "PodDeleted"


def test_it_reports_pods_it_could_not_create_failed(kube, backend):
    kube.reject["pods"] = ApiError(403, "Forbidden", 'exceeded quota: "mlsched"')

    backend.start(one_gpu_worker())

    (status,) = backend.status()
    assert (status.phase, status.reason) == (
        base.FAILED, 'CreateFailed: 403 Forbidden: exceeded quota: "mlsched"'
    )  # fmt: skip


def test_it_catches_up_after_the_watch_history_is_compacted(kube, backend):
    backend.start(one_gpu_worker())
    kube.run_pod(NAMESPACE, POD)
    status_becomes(backend, 7, 0, base.RUNNING)

    lists = kube.count_requests("GET", "/api/v1/pods", watch=False)

    with kube.unwatched():  # the exit never reaches the watch; resuming it answers 410 Gone
        kube.exit_pod(NAMESPACE, POD, 0)

    status_becomes(backend, 7, 0, base.EXITED)
    assert kube.count_requests("GET", "/api/v1/pods", watch=False) == lists + 1


def test_it_notices_a_deletion_missed_while_disconnected(kube, backend):
    backend.start(one_gpu_worker())
    kube.run_pod(NAMESPACE, POD)
    status_becomes(backend, 7, 0, base.RUNNING)

    with kube.unwatched():  # no DELETED event: only a new list shows the pod is gone
        kube.delete_pod(NAMESPACE, POD)

    assert status_becomes(backend, 7, 0, base.LOST).reason == "PodDeleted"


def test_it_resumes_the_watch_after_the_connection_drops(kube, backend):
    backend.start(one_gpu_worker())
    status_becomes(backend, 7, 0, base.PENDING)
    lists = kube.count_requests("GET", "/api/v1/pods", watch=False)

    kube.drop_watches()
    kube.run_pod(NAMESPACE, POD)

    status_becomes(backend, 7, 0, base.RUNNING)
    assert kube.count_requests("GET", "/api/v1/pods", watch=False) == lists  # no relist needed


def test_it_adopts_running_pods_after_a_restart(kube, backend, make_backend):
    backend.start(two_worker_gang())
    kube.run_pod(NAMESPACE, "mlsched-11-0")
    kube.run_pod(NAMESPACE, "mlsched-11-1")
    backend.close()

    restarted = make_backend()

    assert [(s.attempt_id, s.rank, s.phase) for s in restarted.status()] == [
        (11, 0, base.RUNNING),
        (11, 1, base.RUNNING),
    ]


def test_it_ignores_pods_of_other_clusters(kube, backend, api_client):
    from clusters.backends.kubernetes import KubernetesBackend

    west = KubernetesBackend(api_client, "west", watch_timeout_s=2, retry_s=0.05)
    try:
        west.start(one_gpu_worker(attempt_id=99))
        eventually(lambda: len(kube.pods()) == 1)

        assert backend.status() == []
    finally:
        west.close()


def test_it_forgets_an_ended_attempt_and_deletes_its_pods(kube, backend):
    backend.start(one_gpu_worker())
    kube.exit_pod(NAMESPACE, POD, 0)
    status_becomes(backend, 7, 0, base.EXITED)

    backend.forget(7)

    assert backend.status() == []
    assert kube.pods() == []


def test_it_tries_a_failed_creation_again_on_the_next_start(kube, backend):
    kube.reject["pods"] = ApiError(500, "InternalError", "etcd leader changed")
    backend.start(one_gpu_worker())
    kube.reject.clear()

    backend.start(one_gpu_worker())

    assert backend.status() == [base.WorkerStatus(7, 0, base.PENDING)]


def test_it_watches_on_from_the_bookmark_after_a_watch_times_out(kube, make_backend):
    backend = make_backend(watch_timeout_s=1)
    backend.start(one_gpu_worker())
    kube.add_node("gpu-c")  # moves the resourceVersion on without any pod event
    bookmark = str(kube.rv)

    def watched_from_bookmark():
        watches = [q for _, p, q in kube.requests if p == "/api/v1/pods" and "watch" in q]
        return any(q.get("resourceVersion") == bookmark for q in watches)

    eventually(watched_from_bookmark, timeout=5)
    kube.run_pod(NAMESPACE, POD)

    status_becomes(backend, 7, 0, base.RUNNING)
    assert kube.count_requests("GET", "/api/v1/pods", watch=False) == 1


def test_it_refuses_to_report_before_it_has_listed_the_pods():
    # Nothing listens on the port: the pod watch never lists, and an empty report would read
    # as "every started worker vanished" to the control plane.
    api = client.ApiClient(client.Configuration(host=f"http://127.0.0.1:{free_port()}"))
    backend = KubernetesBackend(api, "east", retry_s=0.05, sync_timeout_s=0.3)
    try:
        with pytest.raises(RuntimeError, match="has not listed"):
            backend.status()
    finally:
        backend.close()
        api.close()


def test_a_running_worker_reports_its_last_checkpoint_where_the_agent_mounts_the_volume(
    kube, make_backend, tmp_path
):
    kube.add_claim(NAMESPACE, "checkpoints")
    backend = make_backend(checkpoint_claim="checkpoints", checkpoint_mount=str(tmp_path))
    backend.start(one_gpu_worker())
    kube.run_pod(NAMESPACE, POD)
    assert status_becomes(backend, 7, 0, base.RUNNING).checkpoint_at is None

    marker = tmp_path / "alpha" / "42" / base.CHECKPOINT_MARKER  # the job touches it
    marker.parent.mkdir(parents=True)
    marker.touch()

    assert backend.status()[0].checkpoint_at == marker.stat().st_mtime
