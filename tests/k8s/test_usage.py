"""What the Kubernetes backend's workers use, from their kubelets' stats summaries, read through
the real client from the test server (which plays the kubelets: `use`)."""

import logging

import pytest

from clusters.backends import base, k8s_usage, usage
from tests.k8s.conftest import NAMESPACE, one_gpu_worker, status_becomes, two_worker_gang
from tests.k8s.server import ApiError

POD = "mlsched-7-0"
MIB = 1024 * 1024
SUMMARY = "/api/v1/nodes/gpu-a/proxy/stats/summary"


@pytest.fixture
def always(monkeypatch):
    """Every status call samples again."""
    monkeypatch.setattr(usage, "SAMPLE_EVERY_S", 0.0)


def running(kube, backend, spec=None):
    backend.start(spec or one_gpu_worker())
    for worker in (spec or one_gpu_worker()).workers:
        kube.run_pod(NAMESPACE, f"mlsched-{(spec or one_gpu_worker()).attempt_id}-{worker.rank}")


def test_a_running_worker_reports_its_pods_cpu_time_and_memory(kube, backend):
    kube.use(NAMESPACE, POD, cpu_seconds=12.5, memory_bytes=300 * MIB)
    running(kube, backend)

    status = status_becomes(backend, 7, 0, base.RUNNING)

    assert (status.cpu_seconds, status.memory_peak_mb) == (12.5, 300)


def test_a_kubelet_without_pod_figures_gives_its_containers_summed(kube, backend):
    kube.use(NAMESPACE, POD, cpu_seconds=3.0, memory_bytes=64 * MIB, pod_level=False)
    running(kube, backend)

    status = status_becomes(backend, 7, 0, base.RUNNING)

    assert (status.cpu_seconds, status.memory_peak_mb) == (3.0, 64)


def test_the_memory_peak_is_the_most_any_sample_saw(kube, backend, always):
    running(kube, backend)
    kube.use(NAMESPACE, POD, cpu_seconds=10.0, memory_bytes=500 * MIB)
    assert status_becomes(backend, 7, 0, base.RUNNING).memory_peak_mb == 500

    kube.use(NAMESPACE, POD, cpu_seconds=20.0, memory_bytes=100 * MIB)
    status = status_becomes(backend, 7, 0, base.RUNNING)

    assert (status.cpu_seconds, status.memory_peak_mb) == (20.0, 500)


def test_a_node_is_read_at_most_once_a_sample_period(kube, backend):
    kube.use(NAMESPACE, POD, cpu_seconds=1.0, memory_bytes=MIB)
    running(kube, backend)
    status_becomes(backend, 7, 0, base.RUNNING)

    for _ in range(5):
        backend.status()

    assert kube.count_requests("GET", SUMMARY) == 1


def test_each_node_of_a_gang_is_read_for_its_own_pods(kube, backend):
    gang = two_worker_gang()
    kube.use(NAMESPACE, "mlsched-11-0", cpu_seconds=5.0, memory_bytes=10 * MIB)
    kube.use(NAMESPACE, "mlsched-11-1", cpu_seconds=7.0, memory_bytes=20 * MIB)
    running(kube, backend, gang)

    status_becomes(backend, 11, 1, base.RUNNING)
    found = {s.rank: (s.cpu_seconds, s.memory_peak_mb) for s in backend.status()}

    assert found == {0: (5.0, 10), 1: (7.0, 20)}


def test_an_ended_worker_keeps_its_last_sample(kube, backend):
    kube.use(NAMESPACE, POD, cpu_seconds=42.0, memory_bytes=128 * MIB)
    running(kube, backend)
    status_becomes(backend, 7, 0, base.RUNNING)

    kube.exit_pod(NAMESPACE, POD, 0)
    kube.usage.clear()  # the kubelet forgets a pod once it has ended

    status = status_becomes(backend, 7, 0, base.EXITED)
    assert (status.cpu_seconds, status.memory_peak_mb) == (42.0, 128)


def test_a_kubelet_that_does_not_answer_costs_only_the_samples(kube, backend, always):
    kube.fail("GET", SUMMARY, ApiError(503, "ServiceUnavailable", "no route to the kubelet"))
    kube.use(NAMESPACE, POD, cpu_seconds=1.0, memory_bytes=MIB)
    running(kube, backend)

    status = status_becomes(backend, 7, 0, base.RUNNING)
    assert status.cpu_seconds is None

    assert status_becomes(backend, 7, 0, base.RUNNING).cpu_seconds == 1.0  # read again


def test_without_rights_to_the_node_proxy_it_says_so_once(kube, backend, always, caplog):
    kube.fail("GET", SUMMARY, ApiError(403, "Forbidden", "nodes/proxy is forbidden"), times=None)
    running(kube, backend)
    caplog.set_level(logging.INFO, logger="clusters.backends.k8s_usage")

    for _ in range(3):
        assert status_becomes(backend, 7, 0, base.RUNNING).cpu_seconds is None

    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert "nodes/proxy" in caplog.records[0].getMessage()


@pytest.mark.parametrize(
    "summary",
    [
        [],
        {"pods": None},
        {"pods": ["x", {"podRef": {"name": "p", "namespace": "n"}, "cpu": {}, "memory": {}}]},
        {"pods": [{"podRef": {"name": "p", "namespace": "n"}, "containers": []}]},
    ],
)
def test_a_summary_of_an_odd_shape_gives_no_figures(summary):
    assert k8s_usage.pod_usage(summary) == {}
