"""GPU time of the Kubernetes backend's workers, from their nodes' DCGM exporters, read through
the real client from the test server (which plays the exporters: `add_gpu_exporter`,
`use_gpus`)."""

import logging
import time

import pytest
from django.core.management import CommandError, call_command

from clusters.backends import base, k8s_usage, usage
from clusters.backends.base import WorkerSpec
from tests.k8s.conftest import NAMESPACE, attempt, one_gpu_worker, status_becomes, two_worker_gang
from tests.k8s.server import ApiError

POD = "mlsched-7-0"
MIB = 1024 * 1024
METRICS = "/api/v1/namespaces/gpu-operator/pods/nvidia-dcgm-exporter-gpu-a:9400/proxy/metrics"
EXPORTERS = "/api/v1/namespaces/gpu-operator/pods"


@pytest.fixture
def always(monkeypatch):
    """Every status call samples again."""
    monkeypatch.setattr(usage, "SAMPLE_EVERY_S", 0.0)


def exporters_listed(kube) -> int:
    return sum(1 for method, path, _ in kube.requests if (method, path) == ("GET", EXPORTERS))


def running(kube, backend, spec):
    backend.start(spec)
    for worker in spec.workers:
        name = f"mlsched-{spec.attempt_id}-{worker.rank}"
        kube.use(NAMESPACE, name, cpu_seconds=1.0, memory_bytes=MIB)
        kube.run_pod(NAMESPACE, name)


def test_a_worker_on_whole_gpus_is_counted_busy_for_their_utilization(kube, backend, always):
    kube.add_gpu_exporter("gpu-a")
    kube.use_gpus(NAMESPACE, POD, [80])
    running(kube, backend, one_gpu_worker())
    started = time.monotonic()  # before its first sample, whose time the count runs from
    first = status_becomes(backend, 7, 0, base.RUNNING)
    assert first.gpu_busy_seconds == 0.0  # counting starts at its first sample
    assert first.gpu_idle_since is None

    time.sleep(0.3)
    busy = status_becomes(backend, 7, 0, base.RUNNING).gpu_busy_seconds

    assert 0.8 * 0.3 <= busy <= 0.8 * (time.monotonic() - started) + 0.01


def test_a_restarted_agent_counts_from_0_in_a_new_run_of_counts(kube, make_backend, always):
    kube.add_gpu_exporter("gpu-a")
    kube.use_gpus(NAMESPACE, POD, [80])
    first = make_backend()
    running(kube, first, one_gpu_worker())
    status_becomes(first, 7, 0, base.RUNNING)
    time.sleep(0.3)
    assert status_becomes(first, 7, 0, base.RUNNING).gpu_busy_seconds > 0.2

    again = make_backend()  # the agent restarted: it adopts the pod and counts again
    assert status_becomes(again, 7, 0, base.RUNNING).gpu_busy_seconds == 0.0
    # The control plane adds this run's counts to what the first one counted.
    assert again.usage_epoch != first.usage_epoch


def test_each_gpu_of_a_gang_counts_on_its_own_node(kube, backend, always):
    for node in ("gpu-a", "gpu-b"):
        kube.add_gpu_exporter(node)
    kube.use_gpus(NAMESPACE, "mlsched-11-0", [100, 100, 100, 100])
    kube.use_gpus(NAMESPACE, "mlsched-11-1", [50, 50, 0, 0])
    running(kube, backend, two_worker_gang())
    status_becomes(backend, 11, 1, base.RUNNING)

    time.sleep(0.3)
    found = {s.rank: s.gpu_busy_seconds for s in backend.status()}

    # Four GPUs wholly busy count four GPU-seconds a second, two half busy one.
    assert found[0] >= 4 * 0.3 and found[1] >= 1 * 0.3
    assert found[0] == pytest.approx(4 * found[1], rel=0.2)


def test_gpus_reading_idle_say_since_when_until_one_reads_busy(kube, backend, always):
    kube.add_gpu_exporter("gpu-a")
    kube.use_gpus(NAMESPACE, POD, [3])
    before = time.time()
    running(kube, backend, one_gpu_worker())
    since = status_becomes(backend, 7, 0, base.RUNNING).gpu_idle_since
    assert since is not None and since >= before

    assert status_becomes(backend, 7, 0, base.RUNNING).gpu_idle_since == since  # kept

    kube.use_gpus(NAMESPACE, POD, [60])
    assert status_becomes(backend, 7, 0, base.RUNNING).gpu_idle_since is None


def test_a_share_of_a_gpu_is_not_counted(kube, backend, always):
    kube.add_gpu_exporter("gpu-a")
    share = WorkerSpec(rank=0, node="gpu-a", gpu_indices=(2,), gpu_milli=500, cpu_milli=1000,
                       memory_mb=1024)  # fmt: skip
    kube.use_gpus(NAMESPACE, POD, [90])  # its sharers' utilization together
    running(kube, backend, attempt(7, 1, (share,)))

    status = status_becomes(backend, 7, 0, base.RUNNING)

    assert status.cpu_seconds == 1.0
    assert status.gpu_busy_seconds is None


def test_a_node_without_an_exporter_gives_cpu_and_memory_only(kube, backend, always):
    kube.add_gpu_exporter("gpu-b")  # not where the worker runs
    kube.add_gpu_exporter("gpu-a", running=False)  # there, but not running yet
    kube.use_gpus(NAMESPACE, POD, [80])
    running(kube, backend, one_gpu_worker())

    status = status_becomes(backend, 7, 0, base.RUNNING)

    assert (status.cpu_seconds, status.gpu_busy_seconds) == (1.0, None)
    assert kube.count_requests("GET", METRICS) == 0


def test_the_exporters_are_listed_at_most_every_few_minutes(kube, backend, always):
    kube.add_gpu_exporter("gpu-a")
    kube.use_gpus(NAMESPACE, POD, [80])
    running(kube, backend, one_gpu_worker())
    status_becomes(backend, 7, 0, base.RUNNING)

    for _ in range(5):
        backend.status()

    assert exporters_listed(kube) == 1
    assert kube.count_requests("GET", METRICS) >= 5  # a sample each time


def test_an_exporter_replaced_is_found_at_the_next_sample(kube, backend, always):
    kube.add_gpu_exporter("gpu-a")
    kube.use_gpus(NAMESPACE, POD, [80])
    running(kube, backend, one_gpu_worker())
    assert status_becomes(backend, 7, 0, base.RUNNING).gpu_busy_seconds == 0.0

    # A rolling update of the DaemonSet: the node's exporter comes back under a new name.
    kube.delete("pods", "gpu-operator", "nvidia-dcgm-exporter-gpu-a", 0)
    kube.add_gpu_exporter("gpu-a", name="nvidia-dcgm-exporter-x7k2p")
    backend.status()  # its read finds the old one gone
    time.sleep(0.1)
    read = status_becomes(backend, 7, 0, base.RUNNING)

    assert exporters_listed(kube) == 2
    assert read.gpu_busy_seconds >= 0.8 * 0.1 and read.gpu_idle_since is None


def test_without_rights_to_the_exporters_it_says_so_once(kube, backend, always, caplog):
    kube.add_gpu_exporter("gpu-a")
    kube.fail("GET", METRICS, ApiError(403, "Forbidden", "pods/proxy is forbidden"), times=None)
    kube.use_gpus(NAMESPACE, POD, [80])
    running(kube, backend, one_gpu_worker())
    caplog.set_level(logging.INFO, logger="clusters.backends.k8s_usage")

    for _ in range(3):
        status = status_becomes(backend, 7, 0, base.RUNNING)
        assert (status.cpu_seconds, status.gpu_busy_seconds) == (1.0, None)

    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert "pods/proxy" in caplog.records[0].getMessage()


def test_an_exporter_that_fails_costs_only_that_sample(kube, backend, always):
    kube.add_gpu_exporter("gpu-a")
    kube.fail("GET", METRICS, ApiError(503, "ServiceUnavailable", "no endpoints"))
    kube.use_gpus(NAMESPACE, POD, [80])
    running(kube, backend, one_gpu_worker())

    assert status_becomes(backend, 7, 0, base.RUNNING).gpu_busy_seconds is None
    assert status_becomes(backend, 7, 0, base.RUNNING).gpu_busy_seconds == 0.0  # read again


def test_a_reading_missed_keeps_the_count_and_says_nothing_of_idleness(kube, backend, always):
    kube.add_gpu_exporter("gpu-a")
    kube.use_gpus(NAMESPACE, POD, [2])
    running(kube, backend, one_gpu_worker())
    status_becomes(backend, 7, 0, base.RUNNING)
    time.sleep(0.2)
    idle = status_becomes(backend, 7, 0, base.RUNNING)
    assert idle.gpu_busy_seconds > 0 and idle.gpu_idle_since is not None

    kube.fail("GET", METRICS, ApiError(503, "ServiceUnavailable", "no endpoints"))
    missed = status_becomes(backend, 7, 0, base.RUNNING)
    assert (missed.gpu_busy_seconds, missed.gpu_idle_since) == (idle.gpu_busy_seconds, None)

    kube.use_gpus(NAMESPACE, POD, [90])
    time.sleep(0.2)
    read = status_becomes(backend, 7, 0, base.RUNNING)
    assert read.gpu_busy_seconds >= idle.gpu_busy_seconds + 0.9 * 0.2  # counting on


def test_a_backend_told_of_no_exporters_reads_none(kube, make_backend, always):
    backend = make_backend(gpu_exporters=None)
    kube.add_gpu_exporter("gpu-a")
    kube.use_gpus(NAMESPACE, POD, [80])
    running(kube, backend, one_gpu_worker())

    assert status_becomes(backend, 7, 0, base.RUNNING).gpu_busy_seconds is None
    assert exporters_listed(kube) == 0


def test_the_metrics_give_each_pods_gpus_and_leave_odd_lines_out():
    text = "\n".join([
        "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).",
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",namespace="t",pod="a",container="w"} 40',
        'DCGM_FI_DEV_GPU_UTIL{gpu="1",namespace="t",pod="a",container="w"} 60 1700000000000',
        'DCGM_FI_DEV_GPU_UTIL{gpu="2",namespace="",pod=""} 0',  # held by no pod
        'DCGM_FI_DEV_GPU_UTIL{gpu="3",namespace="t",pod="b",modelName="A \\"100\\""} 100',
        'DCGM_FI_DEV_GPU_UTIL{gpu="4",namespace="t",pod="c"} NaN',
        'DCGM_FI_DEV_GPU_UTIL{gpu="5",namespace="t",pod="d"} 250',
        'DCGM_FI_DEV_FB_USED{gpu="0",namespace="t",pod="a"} 1024',
        "DCGM_FI_DEV_GPU_UTIL 7",
        "not a metric line {",
    ])  # fmt: skip

    assert k8s_usage.gpu_utilization(text) == {("t", "a"): [0.4, 0.6], ("t", "b"): [1.0]}


@pytest.mark.parametrize(
    "text", ["gpu-operator", "gpu-operator/app=x", "/app=x:9400", "ns/:9400", "ns/app=x:port"]
)
def test_a_malformed_exporters_option_is_refused_naming_it(text, monkeypatch):
    monkeypatch.setenv("MLSCHED_AGENT_TOKEN", "t")
    with pytest.raises(CommandError, match="--gpu-metrics.*NAMESPACE/SELECTOR:PORT"):
        call_command("run_agent", cluster="east", backend="kubernetes", gpu_metrics=text)


def test_the_exporters_option_reads_as_it_is_written():
    found = k8s_usage.Exporters.parse("monitoring/app.kubernetes.io/name=dcgm-exporter:9401")

    assert found == k8s_usage.Exporters("monitoring", "app.kubernetes.io/name=dcgm-exporter", 9401)
    assert k8s_usage.Exporters.parse("") is None
    assert str(k8s_usage.GPU_OPERATOR) == k8s_usage.DCGM_EXPORTERS
