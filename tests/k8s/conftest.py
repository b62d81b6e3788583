"""Fixtures: the Kubernetes test server with two 8-GPU nodes, the real client pointed at it, and
a backend for cluster "east". Builders are named by shape."""

from __future__ import annotations

import time

import pytest
from kubernetes import client

from clusters.backends.base import AttemptSpec, WorkerSpec
from clusters.backends.kubernetes import KubernetesBackend
from tests.k8s.server import KubeTestServer

A100 = "NVIDIA-A100-SXM4-80GB"
NAMESPACE = "mlsched-alpha"


@pytest.fixture
def kube():
    server = KubeTestServer().start()
    for name, rack in (("gpu-a", "r1"), ("gpu-b", "r2")):
        labels = {"topology.kubernetes.io/zone": "z1", "mlsched.io/rack": rack}
        server.add_node(name, cpu="64", memory="512Gi", gpus=8, product=A100, labels=labels)
    yield server
    server.stop()


@pytest.fixture
def api_client(kube):
    api = client.ApiClient(client.Configuration(host=kube.url))
    yield api
    api.close()


@pytest.fixture
def make_backend(api_client):
    """Backends for cluster "east" with short timeouts; each is closed after the test."""
    made = []

    def make(**kwargs):
        options = dict(watch_timeout_s=2, node_refresh_s=0, retry_s=0.05, sync_timeout_s=5)
        backend = KubernetesBackend(api_client, "east", **(options | kwargs))
        made.append(backend)
        return backend

    yield make
    for backend in made:
        backend.close()


@pytest.fixture
def backend(make_backend):
    return make_backend()


def one_gpu_worker(attempt_id=7, number=1, **kwargs) -> AttemptSpec:
    worker = WorkerSpec(rank=0, node="gpu-a", gpu_indices=(5,), cpu_milli=4000, memory_mb=16384)
    return attempt(attempt_id, number, (worker,), **kwargs)


def two_worker_gang(attempt_id=11, number=1, **kwargs) -> AttemptSpec:
    workers = tuple(
        WorkerSpec(rank=r, node=node, gpu_indices=(4, 5, 6, 7), cpu_milli=16000, memory_mb=65536)
        for r, node in enumerate(("gpu-a", "gpu-b"))
    )
    return attempt(attempt_id, number, workers, **kwargs)


def attempt(attempt_id, number, workers, **kwargs) -> AttemptSpec:
    fields = dict(
        attempt_id=attempt_id,
        job_id=42,
        number=number,
        tenant="alpha",
        name="train-llm",
        image="registry.local/train:1",
        command=("python", "train.py"),
        env={"EPOCHS": "3"},
        workers=workers,
        checkpoint_dir="alpha/42",
        max_runtime_s=3600,
    )
    return AttemptSpec(**(fields | kwargs))


def eventually(check, timeout=5.0):
    """Poll `check` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not true within {timeout} s: last value {value!r}")
        time.sleep(0.02)


def status_becomes(backend, attempt_id, rank, phase, timeout=5.0, reason=None):
    """Wait until the worker's status has `phase` (and `reason`, if given), and return that
    status: a pod just created is pending before the watch sees why it waits."""

    def check():
        found = [s for s in backend.status() if (s.attempt_id, s.rank) == (attempt_id, rank)]
        if not found or found[0].phase != phase:
            return None
        return found[0] if reason is None or found[0].reason == reason else None

    try:
        return eventually(check, timeout)
    except AssertionError:
        seen = [s for s in backend.status() if s.attempt_id == attempt_id]
        raise AssertionError(f"worker {attempt_id}/{rank} never {phase}: {seen}") from None


def env_of(pod: dict) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0]["env"]}


def resumed(backend, point, key=(7, 0)):
    """As the agent does for a backend restarted beside a running pod: once the pod's log waits
    to be numbered, tell it where the control plane's copy ends (`point`, None: no line)."""
    eventually(lambda: key in backend.logs_to_resume())
    backend.resume_logs({key: point})
