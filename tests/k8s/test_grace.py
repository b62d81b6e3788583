"""The grace a job gets to save a checkpoint is the control plane's stop grace
(MLSCHED_STOP_GRACE_S), whoever stops it: mlsched, a drain, a node shutdown, preemption by
kube-scheduler or the runtime limit, which all take the pod's terminationGracePeriodSeconds."""

import pytest

from clusters.agent.runner import spec_from_dict
from jobs import cycle
from tests.factories import JobFactory, NodeFactory
from tests.k8s.conftest import NAMESPACE, one_gpu_worker

POD = "mlsched-7-0"


def test_a_pod_gets_the_stop_grace_as_its_termination_grace_period(kube, backend):
    backend.start(one_gpu_worker(stop_grace_s=120))

    assert kube.pod(NAMESPACE, POD)["spec"]["terminationGracePeriodSeconds"] == 120


def test_a_drain_gives_the_job_the_stop_grace(kube, backend):
    backend.start(one_gpu_worker(stop_grace_s=120))
    kube.run_pod(NAMESPACE, POD)

    kube.start_drain(NAMESPACE, POD)

    assert kube.pod(NAMESPACE, POD)["metadata"]["deletionGracePeriodSeconds"] == 120


def test_a_grace_under_a_second_still_lets_the_kubelet_stop_the_pod(kube, backend):
    # 0 would make a delete remove the pod at once, before the kubelet has stopped it.
    backend.start(one_gpu_worker(stop_grace_s=0))

    assert kube.pod(NAMESPACE, POD)["spec"]["terminationGracePeriodSeconds"] == 1


@pytest.mark.django_db
def test_the_control_plane_sends_its_stop_grace_with_each_attempt_to_start(agent, east, settings):
    settings.MLSCHED_STOP_GRACE_S = 120
    NodeFactory(cluster=east, name="east-0", gpu_count=8)
    JobFactory()
    cycle.run_cycle()

    response = agent.post("/api/v1/agent/east/heartbeat/", {"workers": []}, format="json")

    (spec,) = response.json()["run"]
    assert spec_from_dict(spec).stop_grace_s == 120
