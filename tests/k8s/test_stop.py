"""stop(): pods deleted with the grace period, the gang's Service removed, STOPPED reported."""

from clusters.backends import base
from tests.k8s.conftest import NAMESPACE, one_gpu_worker, status_becomes, two_worker_gang


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

    assert kube.deletions == [("pods", NAMESPACE, "mlsched-7-0", 1)]


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

    restarted.stop(7, grace_s=10)

    assert kube.deletions == [("pods", NAMESPACE, "mlsched-7-0", 10)]
    status_becomes(restarted, 7, 0, base.STOPPED)
