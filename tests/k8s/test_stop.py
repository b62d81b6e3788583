"""stop(): pods deleted with the grace period, the gang's Service removed, STOPPED reported."""

from clusters.backends import base
from tests.k8s.conftest import (
    NAMESPACE,
    one_gpu_worker,
    resumed,
    status_becomes,
    two_worker_gang,
)
from tests.k8s.server import ApiError

# After the pods, the attempt's hostfile (test_hostfile).
HOSTFILE_DELETED = ("configmaps", NAMESPACE, "mlsched-7-hosts", None)


def test_it_deletes_every_pod_with_the_grace_period(kube, backend):
    backend.start(two_worker_gang())
    kube.run_pod(NAMESPACE, "mlsched-11-0")
    kube.run_pod(NAMESPACE, "mlsched-11-1")

    backend.stop(11, grace_s=25)

    assert sorted(d for d in kube.deletions if d[0] == "pods") == [
        ("pods", NAMESPACE, "mlsched-11-0", 25),
        ("pods", NAMESPACE, "mlsched-11-1", 25),
    ]
    assert kube.pods() == []


def test_it_deletes_the_gangs_service(kube, backend):
    backend.start(two_worker_gang())

    backend.stop(11, grace_s=5)

    assert ("services", NAMESPACE, "mlsched-11", None) in kube.deletions
    assert kube.objects_of("services") == []


def test_it_rounds_a_fractional_grace_up_to_whole_seconds(kube, backend):
    backend.start(one_gpu_worker())

    backend.stop(7, grace_s=0.2)

    assert kube.deletions == [("pods", NAMESPACE, "mlsched-7-0", 1), HOSTFILE_DELETED]


def test_it_reports_a_stopped_pod_stopped(kube, backend):
    backend.start(one_gpu_worker())
    kube.run_pod(NAMESPACE, "mlsched-7-0")
    status_becomes(backend, 7, 0, base.RUNNING)

    backend.stop(7, grace_s=5)

    assert status_becomes(backend, 7, 0, base.STOPPED).reason == "Stopped"


def test_it_reports_a_terminating_pod_running_until_it_is_gone(kube, backend):
    kube.finish_deletions = False  # the kubelet is still waiting out the grace period
    backend.start(one_gpu_worker())
    kube.run_pod(NAMESPACE, "mlsched-7-0")

    backend.stop(7, grace_s=30)

    assert kube.pod(NAMESPACE, "mlsched-7-0")["metadata"]["deletionGracePeriodSeconds"] == 30
    assert status_becomes(backend, 7, 0, base.RUNNING)
    kube.exit_pod(NAMESPACE, "mlsched-7-0", 143)  # SIGTERM ended it
    assert status_becomes(backend, 7, 0, base.STOPPED).exit_code == 143


def test_it_stops_pods_it_adopted_after_a_restart(kube, backend, make_backend):
    backend.start(one_gpu_worker())
    kube.run_pod(NAMESPACE, "mlsched-7-0")
    backend.close()
    restarted = make_backend()
    status_becomes(restarted, 7, 0, base.RUNNING)
    resumed(restarted, None)  # the control plane has no line of its log

    restarted.stop(7, grace_s=10)

    assert kube.deletions == [("pods", NAMESPACE, "mlsched-7-0", 10), HOSTFILE_DELETED]
    status_becomes(restarted, 7, 0, base.STOPPED)


UNAVAILABLE = ApiError(503, "ServiceUnavailable", "etcdserver: leader changed")


def test_a_second_stop_deletes_a_pod_whose_delete_failed(kube, make_backend):
    backend = make_backend(retry_s=60)  # no retry of its own within the test
    backend.start(one_gpu_worker())
    kube.run_pod(NAMESPACE, "mlsched-7-0")
    kube.fail("DELETE", "/pods/mlsched-7-0$", UNAVAILABLE)

    backend.stop(7, grace_s=5)
    assert [p["metadata"]["name"] for p in kube.pods()] == ["mlsched-7-0"]
    backend.stop(7, grace_s=5)

    assert kube.pods() == []
    assert status_becomes(backend, 7, 0, base.STOPPED)


def test_a_second_stop_leaves_terminating_pods_to_the_kubelet(kube, backend):
    kube.finish_deletions = False
    backend.start(two_worker_gang())
    kube.run_pod(NAMESPACE, "mlsched-11-0")
    kube.run_pod(NAMESPACE, "mlsched-11-1")
    backend.stop(11, grace_s=30)
    status_becomes(backend, 11, 0, base.RUNNING)

    backend.stop(11, grace_s=30)  # the agent asks again: the grace has not run out yet

    assert sorted(d[2] for d in kube.deletions) == [
        "mlsched-11", "mlsched-11-0", "mlsched-11-1", "mlsched-11-hosts", "mlsched-11-ssh"
    ]  # fmt: skip


def test_a_restarted_backend_stopping_again_leaves_terminating_pods_alone(
    kube, backend, make_backend
):
    kube.finish_deletions = False
    backend.start(one_gpu_worker())
    kube.run_pod(NAMESPACE, "mlsched-7-0")
    backend.stop(7, grace_s=30)
    backend.close()
    restarted = make_backend()
    status_becomes(restarted, 7, 0, base.RUNNING)

    restarted.stop(7, grace_s=30)

    assert kube.deletions == [("pods", NAMESPACE, "mlsched-7-0", 30), HOSTFILE_DELETED]


def test_it_tries_a_failed_delete_again_by_itself(kube, backend):
    backend.start(one_gpu_worker())
    kube.run_pod(NAMESPACE, "mlsched-7-0")
    status_becomes(backend, 7, 0, base.RUNNING)
    kube.fail("DELETE", "/pods/mlsched-7-0$", UNAVAILABLE, times=2)

    backend.stop(7, grace_s=5)  # and never again

    assert status_becomes(backend, 7, 0, base.STOPPED)  # status() retried the delete
    assert kube.pods() == []
    assert kube.deletions[0] == ("pods", NAMESPACE, "mlsched-7-0", 5)


def test_stop_leaves_a_rank_that_already_ended_for_forget(kube, backend):
    # Deleting an ended pod would take its log away before its last lines are read.
    backend.start(two_worker_gang())
    kube.run_pod(NAMESPACE, "mlsched-11-0")
    kube.exit_pod(NAMESPACE, "mlsched-11-1", 1)
    status_becomes(backend, 11, 1, base.EXITED)

    backend.stop(11, grace_s=5)

    assert [p["metadata"]["name"] for p in kube.pods()] == ["mlsched-11-1"]
    assert status_becomes(backend, 11, 0, base.STOPPED)
    assert status_becomes(backend, 11, 1, base.STOPPED).exit_code == 1
    backend.forget(11)
    assert kube.pods() == []


def test_forget_tries_a_failed_delete_again_at_the_next_forget(kube, backend):
    backend.start(one_gpu_worker())
    kube.exit_pod(NAMESPACE, "mlsched-7-0", 0)
    status_becomes(backend, 7, 0, base.EXITED)
    kube.fail("DELETE", "/pods/mlsched-7-0$", UNAVAILABLE)

    backend.forget(7)

    # Not hidden: still reported, so the agent forgets it again.
    assert backend.status() == [base.WorkerStatus(7, 0, base.EXITED, 0)]
    backend.forget(7)
    assert kube.pods() == []
    assert backend.status() == []


def test_forget_keeps_an_attempt_whose_service_delete_failed(kube, backend):
    backend.start(two_worker_gang())
    for rank in (0, 1):
        kube.exit_pod(NAMESPACE, f"mlsched-11-{rank}", 0)
        status_becomes(backend, 11, rank, base.EXITED)
    kube.fail("DELETE", "/services/mlsched-11$", UNAVAILABLE)

    backend.forget(11)
    assert [s.phase for s in backend.status()] == [base.EXITED, base.EXITED]
    backend.forget(11)

    assert (kube.pods(), kube.objects_of("services")) == ([], [])
    assert backend.status() == []


def test_forget_of_pods_already_gone_succeeds(kube, backend):
    backend.start(one_gpu_worker())
    kube.exit_pod(NAMESPACE, "mlsched-7-0", 0)
    status_becomes(backend, 7, 0, base.EXITED)
    kube.delete_pod(NAMESPACE, "mlsched-7-0")  # someone else cleaned up: 404 is fine

    backend.forget(7)

    assert backend.status() == []
