"""What a real cluster does to workers beyond the common path: disruptions Kubernetes starts,
GPU visibility in images that ask for every GPU, long and rotated logs, injected containers."""

from datetime import UTC, datetime

import pytest
from kubernetes import client

from clusters.backends import base
from clusters.backends.k8s_status import Seen, is_started, worker_status
from tests.k8s.conftest import (
    NAMESPACE,
    attempt,
    env_of,
    eventually,
    one_gpu_worker,
    status_becomes,
)
from tests.k8s.test_logs import collect, texts

POD = "mlsched-7-0"
LOG = f"/api/v1/namespaces/{NAMESPACE}/pods/{POD}/log"


def test_a_drained_pod_is_an_infrastructure_failure_not_the_jobs_exit(kube, backend):
    backend.start(one_gpu_worker())
    kube.run_pod(NAMESPACE, POD)
    status_becomes(backend, 7, 0, base.RUNNING)

    kube.drain(NAMESPACE, POD)

    status = status_becomes(backend, 7, 0, base.FAILED)
    assert (status.exit_code, status.reason) == (143, "EvictionByEvictionAPI")


def test_a_cpu_only_pod_sees_no_gpu_even_when_its_image_asks_for_all(kube, backend):
    cpu_only = base.WorkerSpec(rank=0, node="gpu-a", cpu_milli=2000, memory_mb=4096)
    backend.start(attempt(7, 1, (cpu_only,)))

    env = env_of(kube.pod(NAMESPACE, POD))

    # CUDA images set NVIDIA_VISIBLE_DEVICES=all; the NVIDIA runtime then mounts every GPU.
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void"


def test_a_line_longer_than_the_control_plane_keeps_is_cut_and_the_next_line_follows(kube, backend):
    backend.start(one_gpu_worker())
    # A progress bar redrawn with "\r" for hours: megabytes before its line ends.
    kube.append_log(NAMESPACE, POD, "é" * 3_000_000, "done")

    kube.run_pod(NAMESPACE, POD)

    lines = collect(backend, 2, timeout=10)
    assert [(line.seq, len(line.text)) for line in lines] == [(0, 65_536), (1, 4)]
    assert set(lines[0].text) == {"é"} and lines[1].text == "done"


def container(name, waiting=None, running=False, exit_code=None):
    state = client.V1ContainerState(
        waiting=client.V1ContainerStateWaiting(reason=waiting) if waiting else None,
        running=client.V1ContainerStateRunning() if running else None,
        terminated=(
            client.V1ContainerStateTerminated(exit_code=exit_code, reason="Error")
            if exit_code is not None
            else None
        ),
    )
    return client.V1ContainerStatus(
        name=name, image="i", image_id="", ready=running, restart_count=0, state=state
    )


def with_sidecar(phase, worker):
    """A pod a mesh injected a proxy into: the kubelet lists container statuses by name."""
    statuses = [container("istio-proxy", running=True), worker]
    return client.V1Pod(status=client.V1PodStatus(phase=phase, container_statuses=statuses))


@pytest.mark.parametrize(
    ("pod", "want"),
    [
        (
            with_sidecar("Pending", container("worker", waiting="ImagePullBackOff")),
            (base.FAILED, None, "ImagePullBackOff"),
        ),
        (with_sidecar("Failed", container("worker", exit_code=3)), (base.EXITED, 3, "")),
        # A classic sidecar (a proxy) keeps the pod Running once the worker has exited.
        (with_sidecar("Running", container("worker", exit_code=3)), (base.EXITED, 3, "")),
        (with_sidecar("Running", container("worker", exit_code=0)), (base.EXITED, 0, "")),
        (
            with_sidecar("Running", container("worker", waiting="ContainerCreating")),
            (base.PENDING, None, "ContainerCreating"),
        ),
    ],
    ids=["image-pull", "exit", "exit-beside-sidecar", "success-beside-sidecar", "not-started"],
)
def test_it_reads_the_workers_container_not_an_injected_one(pod, want):
    status = worker_status(7, 0, Seen(pod))

    assert (status.phase, status.exit_code, status.reason) == want
    assert is_started(pod) == (want[0] == base.EXITED)


def test_a_worker_that_exits_beside_a_running_sidecar_ends_with_its_last_lines_and_pod_goes(
    kube, backend
):
    backend.start(one_gpu_worker())
    kube.run_pod(NAMESPACE, POD)
    kube.append_log(NAMESPACE, POD, "epoch 1", "saved model")

    kube.exit_beside_sidecar(NAMESPACE, POD, 0)

    status = status_becomes(backend, 7, 0, base.EXITED)
    assert (status.exit_code, kube.pod(NAMESPACE, POD)["status"]["phase"]) == (0, "Running")
    assert texts(backend.logs()) == [(0, 0, "epoch 1"), (0, 1, "saved model")]
    backend.forget(7)
    assert kube.pods() == []  # the sidecar goes with it, and the node's GPU is free


def test_a_sidecar_pod_being_drained_is_not_the_workers_own_exit():
    pod = with_sidecar("Running", container("worker", exit_code=143))
    condition = client.V1PodCondition(
        type="DisruptionTarget", status="True", reason="EvictionByEvictionAPI"
    )
    pod.status.conditions = [condition]

    assert worker_status(7, 0, Seen(pod)).phase == base.RUNNING  # until it fails or goes
    assert worker_status(7, 0, Seen(pod, deleted=True)).phase == base.LOST


def drained_at(pod, second):
    pod.status.conditions = [
        client.V1PodCondition(
            type="DisruptionTarget",
            status="True",
            reason="EvictionByEvictionAPI",
            last_transition_time=datetime(2026, 1, 1, 12, 0, second, tzinfo=UTC),
        )
    ]
    return pod


def ended_at(exit_code, second):
    worker = container("worker", exit_code=exit_code)
    worker.state.terminated.finished_at = datetime(2026, 1, 1, 12, 0, second, tzinfo=UTC)
    return worker


@pytest.mark.parametrize("phase", ["Running", "Failed"])
@pytest.mark.parametrize("deleted", [False, True])
def test_a_worker_that_succeeded_before_its_sidecar_pod_was_drained_is_not_run_again(
    phase, deleted
):
    pod = drained_at(with_sidecar(phase, ended_at(0, second=10)), second=40)

    status = worker_status(7, 0, Seen(pod, deleted=deleted))

    assert (status.phase, status.exit_code, status.reason) == (base.EXITED, 0, "")


@pytest.mark.parametrize("second", [40, 41], ids=["same-second", "after"])
def test_a_worker_that_exits_0_once_the_drain_has_begun_was_stopped_by_it(second):
    # A worker may save a checkpoint on SIGTERM and exit 0: the drain ended it, not its work.
    pod = drained_at(with_sidecar("Failed", ended_at(0, second=second)), second=40)

    status = worker_status(7, 0, Seen(pod))

    assert (status.phase, status.reason) == (base.FAILED, "EvictionByEvictionAPI")


def test_a_worker_whose_end_has_no_time_beside_a_drain_counts_as_drained():
    pod = drained_at(with_sidecar("Failed", container("worker", exit_code=0)), second=40)

    assert worker_status(7, 0, Seen(pod)).phase == base.FAILED


def test_lines_written_after_the_log_was_rotated_are_not_lost_when_the_stream_drops(kube, backend):
    backend.start(one_gpu_worker())
    kube.run_pod(NAMESPACE, POD)
    kube.append_log(NAMESPACE, POD, "epoch 1", "epoch 2", "epoch 3")
    first = collect(backend, 3)
    kube.rotate_log(NAMESPACE, POD)
    kube.append_log(NAMESPACE, POD, "epoch 4")
    followed = collect(backend, 1)

    reads = kube.count_requests("GET", LOG)
    kube.drop_watches()
    eventually(lambda: kube.count_requests("GET", LOG) > reads)  # the log is read again
    kube.append_log(NAMESPACE, POD, "epoch 5", "Traceback: CUDA out of memory")
    kube.exit_pod(NAMESPACE, POD, 1)

    status_becomes(backend, 7, 0, base.EXITED)
    assert texts(first + followed + backend.logs()) == [
        (0, 0, "epoch 1"),
        (0, 1, "epoch 2"),
        (0, 2, "epoch 3"),
        (0, 3, "epoch 4"),
        (0, 4, "epoch 5"),
        (0, 5, "Traceback: CUDA out of memory"),
    ]
