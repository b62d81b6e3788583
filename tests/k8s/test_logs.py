"""Log streaming: each started pod's log, followed, numbered per (attempt, rank) from 0."""

import dataclasses

from clusters.backends import base
from tests.k8s.conftest import (
    NAMESPACE,
    eventually,
    one_gpu_worker,
    resumed,
    status_becomes,
    two_worker_gang,
)
from tests.k8s.server import ApiError

POD = "mlsched-7-0"


def collect(backend, count, timeout=5.0):
    """Drain logs() until `count` lines have arrived; return them."""
    lines = []

    def enough():
        lines.extend(backend.logs())
        return len(lines) >= count

    eventually(enough, timeout)
    return lines


def texts(lines):
    return [(line.rank, line.seq, line.text) for line in lines]


def test_it_streams_a_running_pods_log_with_seq_from_0(kube, backend):
    backend.start(one_gpu_worker())
    kube.append_log(NAMESPACE, POD, "epoch 1", "epoch 2")

    kube.run_pod(NAMESPACE, POD)

    lines = collect(backend, 2)
    assert [dataclasses.replace(line, at=None) for line in lines] == [
        base.LogLine(7, 0, 0, "stdout", "epoch 1"),
        base.LogLine(7, 0, 1, "stdout", "epoch 2"),
    ]


def test_it_follows_lines_written_while_the_pod_runs(kube, backend):
    backend.start(one_gpu_worker())
    kube.run_pod(NAMESPACE, POD)
    kube.append_log(NAMESPACE, POD, "loading")
    first = collect(backend, 1)

    kube.append_log(NAMESPACE, POD, "step 1", "step 2")

    assert texts(first + collect(backend, 2)) == [
        (0, 0, "loading"),
        (0, 1, "step 1"),
        (0, 2, "step 2"),
    ]


def test_it_numbers_each_workers_lines_separately(kube, backend):
    backend.start(two_worker_gang())
    for rank in (0, 1):
        kube.append_log(NAMESPACE, f"mlsched-11-{rank}", f"rank {rank} up", f"rank {rank} done")
        kube.run_pod(NAMESPACE, f"mlsched-11-{rank}")

    lines = collect(backend, 4)

    assert sorted(texts(lines)) == [
        (0, 0, "rank 0 up"),
        (0, 1, "rank 0 done"),
        (1, 0, "rank 1 up"),
        (1, 1, "rank 1 done"),
    ]


def test_it_reads_no_log_before_the_container_starts(kube, backend):
    backend.start(one_gpu_worker())
    kube.append_log(NAMESPACE, POD, "not yet")

    backend.status()

    assert backend.logs() == []
    assert kube.count_requests("GET", f"/api/v1/namespaces/{NAMESPACE}/pods/{POD}/log") == 0


def test_it_keeps_seq_when_the_stream_drops_and_is_read_again(kube, backend):
    backend.start(one_gpu_worker())
    kube.run_pod(NAMESPACE, POD)
    kube.append_log(NAMESPACE, POD, "a", "b")
    first = collect(backend, 2)

    kube.drop_watches()  # ends the followed log stream too
    kube.append_log(NAMESPACE, POD, "c")

    again = collect(backend, 1)
    assert texts(first + again) == [(0, 0, "a"), (0, 1, "b"), (0, 2, "c")]
    eventually(
        lambda: kube.count_requests("GET", f"/api/v1/namespaces/{NAMESPACE}/pods/{POD}/log") >= 2
    )
    assert backend.logs() == []


def test_it_reads_the_last_lines_of_a_pod_that_ends(kube, backend):
    backend.start(one_gpu_worker())
    kube.run_pod(NAMESPACE, POD)
    kube.append_log(NAMESPACE, POD, "training")
    collect(backend, 1)

    kube.append_log(NAMESPACE, POD, "saved checkpoint")
    kube.exit_pod(NAMESPACE, POD, 0)

    assert texts(collect(backend, 1)) == [(0, 1, "saved checkpoint")]


def test_it_numbers_lines_the_same_after_a_restart(kube, backend, make_backend):
    backend.start(one_gpu_worker())
    kube.append_log(NAMESPACE, POD, "one", "two", "three")
    kube.exit_pod(NAMESPACE, POD, 0)
    before = collect(backend, 3)
    backend.close()

    restarted = make_backend()
    resumed(restarted, None)  # the control plane has no line of it

    assert collect(restarted, 3) == before


LOG_PATH = f"/pods/{POD}/log$"


def ended_with_lines(backend):
    """Like the agent: status, then logs; the lines the logs() after the first status() that
    reports the end hands over, with those before it."""
    lines = []

    def ended():
        statuses = backend.status()
        lines.extend(backend.logs())
        return statuses and statuses[0].phase == base.EXITED

    eventually(ended, timeout=10)
    return texts(lines)


def test_a_pods_end_waits_for_the_last_lines_of_a_stream_that_dropped(kube, make_backend):
    backend = make_backend(retry_s=30)  # a reader that lost its stream waits long to retry
    backend.start(one_gpu_worker())
    kube.run_pod(NAMESPACE, POD)
    kube.append_log(NAMESPACE, POD, "epoch 1")
    eventually(lambda: kube.open_log_streams() == 1)

    kube.drop_watches()  # an API server restart ends the followed stream
    eventually(lambda: kube.open_log_streams() == 0)
    kube.append_log(NAMESPACE, POD, "final loss 0.12", "saved model")
    kube.exit_pod(NAMESPACE, POD, 0)

    assert ended_with_lines(backend) == [
        (0, 0, "epoch 1"),
        (0, 1, "final loss 0.12"),
        (0, 2, "saved model"),
    ]


def test_a_pods_end_waits_while_the_api_server_fails_to_serve_its_log(kube, make_backend):
    backend = make_backend(retry_s=0.2)
    backend.start(one_gpu_worker())
    kube.run_pod(NAMESPACE, POD)
    kube.append_log(NAMESPACE, POD, "epoch 1")
    collect(backend, 1)
    kube.fail("GET", LOG_PATH, ApiError(500, "InternalError", "kubelet unreachable"), times=4)
    kube.drop_watches()
    eventually(lambda: kube.open_log_streams() == 0)

    kube.append_log(NAMESPACE, POD, "saved model")
    kube.exit_pod(NAMESPACE, POD, 0)

    assert ended_with_lines(backend) == [(0, 1, "saved model")]


def test_a_pods_end_is_reported_anyway_when_its_log_cannot_be_read(kube, make_backend):
    backend = make_backend(retry_s=0.2, log_catchup_s=0.5)
    backend.start(one_gpu_worker())
    kube.fail("GET", LOG_PATH, ApiError(500, "InternalError", "kubelet unreachable"), times=None)

    kube.exit_pod(NAMESPACE, POD, 0)

    assert status_becomes(backend, 7, 0, base.EXITED, timeout=10)
