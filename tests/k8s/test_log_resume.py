"""A backend restarted beside a running pod numbers its log on from where the control plane's
copy ends (the agent asks for it in the heartbeat), whether or not the kubelet has rotated the
log since: every line is stored once, in order, with seqs that follow each other."""

import time

import pytest

from clusters.agent.runner import Agent
from clusters.backends import base
from clusters.backends import k8s_specs as specs
from jobs import cycle
from jobs.models import Attempt, LogChunk
from tests.clusters.test_checkpoints import InProcessControlPlane, stepped_until
from tests.factories import JobFactory, NodeFactory
from tests.k8s.conftest import NAMESPACE, eventually, one_gpu_worker, resumed, status_becomes
from tests.k8s.test_logs import collect, ended_with_lines, texts

POD = "mlsched-7-0"
LOG = f"/api/v1/namespaces/{NAMESPACE}/pods/{POD}/log"


def where_it_ends(shipped: list[base.LogLine]) -> base.LogResume:
    """Where the control plane's copy ends once it has stored `shipped`, as it answers."""
    last, zero = shipped[-1], shipped[0]
    taken = len(shipped) - next(
        (i + 1 for i in reversed(range(len(shipped))) if shipped[i].at != last.at), 0
    )
    first = None if zero.seq or zero.at is None else (zero.at, base.line_head(zero.text))
    return base.LogResume(seq=last.seq, at=last.at, taken=taken, first=first)


def following(kube, backend, *lines):
    """The backend's pod runs and has written `lines`; the lines read."""
    backend.start(one_gpu_worker())
    kube.run_pod(NAMESPACE, POD)
    kube.append_log(NAMESPACE, POD, *lines)
    return collect(backend, len(lines))


def test_a_restarted_backend_numbers_a_rotated_log_on_from_the_stored_last_line(
    kube, backend, make_backend
):
    shipped = following(kube, backend, "epoch 1", "epoch 2", "epoch 3")
    kube.rotate_log(NAMESPACE, POD)
    kube.append_log(NAMESPACE, POD, "epoch 4")
    shipped += collect(backend, 1)
    backend.close()  # the agent is restarted; meanwhile the job writes on
    kube.append_log(NAMESPACE, POD, "epoch 5", "epoch 6")

    restarted = make_backend()
    resumed(restarted, where_it_ends(shipped))

    assert texts(collect(restarted, 2)) == [(0, 4, "epoch 5"), (0, 5, "epoch 6")]


def test_a_restarted_backend_numbers_an_unrotated_log_as_before(kube, backend, make_backend):
    read = following(kube, backend, "a", "b", "c", "d", "e")
    backend.close()  # killed with "d" and "e" read but not shipped

    restarted = make_backend()
    resumed(restarted, where_it_ends(read[:3]))

    assert texts(collect(restarted, 2)) == [(0, 3, "d"), (0, 4, "e")]


def test_lines_with_the_same_stamp_are_told_apart_by_how_many_are_stored(kube, make_backend):
    backend = make_backend()
    backend.start(one_gpu_worker())
    kube.run_pod(NAMESPACE, POD)
    at = float(int(time.time()) - 60)  # a whole second: exact as a stamp
    kube.append_log(NAMESPACE, POD, "loading", at=at - 1)
    read = collect(backend, 1)
    kube.rotate_log(NAMESPACE, POD)  # the log no longer begins with line 0: stamps tell
    kube.append_log(NAMESPACE, POD, "step 1", "step 2", "step 3", at=at)  # one write
    read += collect(backend, 3)
    backend.close()

    restarted = make_backend()
    resumed(restarted, where_it_ends(read[:3]))  # "step 3" was not shipped

    first = (at - 1, "loading")
    assert where_it_ends(read[:3]) == base.LogResume(seq=2, at=at, taken=2, first=first)
    assert texts(collect(restarted, 1)) == [(0, 3, "step 3")]


def test_a_restarted_backend_reads_an_adopted_pods_log_only_once_told_where_it_resumes(
    kube, backend, make_backend
):
    following(kube, backend, "epoch 1")
    assert backend.logs_to_resume() == []  # a pod it created is read from its start at once
    backend.close()
    reads = kube.count_requests("GET", LOG)

    restarted = make_backend()
    eventually(lambda: restarted.logs_to_resume() == [(7, 0)])
    time.sleep(0.2)
    assert (restarted.logs(), kube.count_requests("GET", LOG)) == ([], reads)

    restarted.resume_logs({(7, 0): None})  # the control plane has no line of it

    assert texts(collect(restarted, 1)) == [(0, 0, "epoch 1")]
    assert restarted.logs_to_resume() == []


def test_an_adopted_pods_end_waits_until_its_log_is_told_where_it_resumes(
    kube, backend, make_backend
):
    shipped = following(kube, backend, "epoch 1")
    backend.close()
    kube.append_log(NAMESPACE, POD, "saved model")
    kube.exit_pod(NAMESPACE, POD, 0)

    restarted = make_backend(log_catchup_s=0.1)
    eventually(lambda: restarted.logs_to_resume() == [(7, 0)])
    time.sleep(0.3)  # past log_catchup_s: the end is held for the log, not for that long
    assert status_becomes(restarted, 7, 0, base.RUNNING)
    restarted.resume_logs({(7, 0): where_it_ends(shipped)})

    assert ended_with_lines(restarted) == [(0, 1, "saved model")]


@pytest.mark.django_db
def test_an_agent_restarted_after_a_rotation_stores_every_line_once_in_order(
    kube, make_backend, east
):
    NodeFactory(cluster=east, name="gpu-a", gpu_count=8)  # the test server's node
    job = JobFactory(gpus=1)
    cycle.run_cycle()
    attempt = job.attempts.get()
    namespace = specs.namespace_name("mlsched-", job.tenant.slug)
    pod = specs.pod_name(attempt.pk, 0)
    agent = Agent(InProcessControlPlane(east), make_backend())
    agent.step()  # the pod is created
    kube.run_pod(namespace, pod)
    kube.append_log(namespace, pod, "epoch 1", "epoch 2", "epoch 3")
    stepped_until(agent, lambda: LogChunk.objects.filter(attempt=attempt).count() == 3)

    agent.backend.close()  # the agent is killed; the kubelet rotates the log
    kube.rotate_log(namespace, pod)
    kube.append_log(namespace, pod, "epoch 4", "epoch 5")
    restarted = Agent(InProcessControlPlane(east), make_backend())
    stepped_until(restarted, lambda: LogChunk.objects.filter(attempt=attempt).count() == 5)
    kube.append_log(namespace, pod, "saved model")
    kube.exit_pod(namespace, pod, 0)
    stepped_until(restarted, lambda: Attempt.objects.get(pk=attempt.pk).ended_at)

    stored = LogChunk.objects.filter(attempt=attempt).order_by("seq")
    assert list(stored.values_list("seq", "text")) == [
        (0, "epoch 1"),
        (1, "epoch 2"),
        (2, "epoch 3"),
        (3, "epoch 4"),
        (4, "epoch 5"),
        (5, "saved model"),
    ]
    assert not stored.filter(logged_at__isnull=True).exists()
