"""The times the control plane's components stamp (an event's, a node's Ready transition, a
pod's creation) are measured on the control plane's clock, learned from its answers' Date
header, not on the agent host's, which may run ahead of it or behind."""

import time
from email.utils import formatdate

import pytest

from clusters.backends import base
from clusters.backends.k8s_clock import ControlPlaneClock
from tests.k8s.conftest import NAMESPACE, eventually, one_gpu_worker, status_becomes
from tests.k8s.test_attach_failures import MULTI_ATTACH, held_by_another_node
from tests.k8s.test_mount_failures import EVENTS, KUBELET_RETRY_S, POD, fast

DATE = "Sat, 05 Dec 2026 19:35:51 GMT"
STAMPED = 1796499351.0  # DATE, in seconds since the epoch


def learned(date, sent, received, before=0.0):
    clock = ControlPlaneClock()
    clock.offset_s = before
    clock.learn(date, sent, received)
    return clock.offset_s


def test_the_date_is_read_as_utc_seconds():
    assert learned(DATE, STAMPED, STAMPED) == 0.0
    assert learned(DATE, STAMPED + 5, STAMPED + 5) == -4.0


@pytest.mark.parametrize(
    ("sent", "received"),
    [
        (STAMPED + 0.3, STAMPED + 0.6),  # stamped within the second it was asked
        (STAMPED - 0.5, STAMPED + 0.2),
        (STAMPED + 0.9, STAMPED + 0.95),  # the header's second truncated
        (STAMPED - 2.0, STAMPED + 3.0),  # a slow answer: the clocks may agree
    ],
)
def test_an_answer_the_agent_could_have_seen_stamped_leaves_the_clocks_agreeing(sent, received):
    assert learned(DATE, sent, received, before=42.0) == 0.0


def test_a_control_plane_ahead_gives_the_smallest_offset_its_answer_allows():
    # Asked at 120.2 s and read at 119.9 s before the stamp, on the agent's clock.
    assert learned(DATE, STAMPED - 120.2, STAMPED - 119.9) == pytest.approx(119.9)


def test_a_control_plane_behind_gives_the_smallest_offset_its_answer_allows():
    assert learned(DATE, STAMPED + 90.0, STAMPED + 90.5) == pytest.approx(-89.0)


@pytest.mark.parametrize("date", [None, "", "yesterday", "Sat, 05 Dec 2026 25:99:00 GMT"])
def test_an_answer_without_a_date_it_can_read_keeps_the_offset(date):
    assert learned(date, STAMPED, STAMPED, before=7.0) == 7.0


def test_the_clock_reads_the_date_of_each_answer_and_gives_its_data():
    clock = ControlPlaneClock()

    def answer(*args, **kwargs):
        return (args, kwargs), 200, {"Date": formatdate(time.time() + 300, usegmt=True)}

    assert clock.read(answer, "ns", field_selector="type=Warning") == (
        ("ns",),
        {"field_selector": "type=Warning"},
    )
    assert 299 <= clock.offset_s <= 301
    assert 299 <= (clock.now().timestamp() - time.time()) <= 301


# The backend against a control plane whose clock is off.


def test_the_backend_learns_the_offset_from_the_node_listing(kube, backend):
    kube.set_clock(-600)

    backend.inventory()

    assert -601 <= backend._clock.offset_s <= -599


def test_a_multi_attach_just_said_on_a_clock_behind_the_agents_keeps_the_worker_waiting(
    kube, make_backend
):
    # Said a moment ago, though 90 s before the agent's time: the pod waits within the bound.
    kube.set_clock(-90)
    backend = fast(make_backend, mount_failure_s=30)
    held_by_another_node(kube, backend)
    status_becomes(backend, 7, 0, base.PENDING, reason="ContainerCreating")

    time.sleep(KUBELET_RETRY_S)
    kube.run_pod(NAMESPACE, POD)  # the kubelet tries again

    for _ in range(5):
        assert status_becomes(backend, 7, 0, base.PENDING).reason == "ContainerCreating"
    assert kube.count_requests("GET", EVENTS) == 0  # the pod is a second old, not 90


def test_a_multi_attach_said_on_a_clock_ahead_of_the_agents_fails_the_worker_at_the_bound(
    kube, make_backend
):
    # The pod was made and the error said on a clock 90 s ahead: on the agent's, both are in
    # its future, and the failure would wait 90 s more.
    kube.set_clock(90)
    backend = fast(make_backend)
    held_by_another_node(kube, backend)
    status_becomes(backend, 7, 0, base.PENDING, reason="ContainerCreating")

    time.sleep(KUBELET_RETRY_S)

    assert status_becomes(backend, 7, 0, base.FAILED).reason == MULTI_ATTACH


def test_a_node_just_gone_not_ready_on_a_clock_behind_the_agents_keeps_its_pods(kube, backend):
    # 400 s behind: on the agent's clock the transition would be past the 300 s grace.
    kube.set_clock(-400)
    backend.start(one_gpu_worker())
    kube.run_pod(NAMESPACE, POD)
    status_becomes(backend, 7, 0, base.RUNNING)

    kube.set_node_ready("gpu-a", False, since_s=0)

    for _ in range(5):
        assert status_becomes(backend, 7, 0, base.RUNNING)


def test_a_node_not_ready_past_the_grace_on_a_clock_ahead_of_the_agents_loses_its_pods(
    kube, backend
):
    # 400 s ahead: on the agent's clock the transition would be 99 s in the future.
    kube.set_clock(400)
    backend.start(one_gpu_worker())
    kube.run_pod(NAMESPACE, POD)

    kube.set_node_ready("gpu-a", False, since_s=301)

    assert status_becomes(backend, 7, 0, base.LOST).reason == "NodeNotReady"


def test_a_workers_start_is_the_kubelets_moved_onto_the_agents_clock(kube, backend):
    kube.set_clock(300)
    backend.inventory()  # the offset learned
    backend.start(one_gpu_worker())
    kube.run_pod(NAMESPACE, POD)

    status = status_becomes(backend, 7, 0, base.RUNNING)

    # The container started "now" on the control plane's clock: 300 s ahead of the agent's.
    assert abs(status.started_at - time.time()) < 2.5


def test_a_pod_that_has_not_started_reports_no_start(kube, backend):
    backend.start(one_gpu_worker())

    assert status_becomes(backend, 7, 0, base.PENDING).started_at is None


def test_a_checkpoint_lines_stamp_is_moved_onto_the_agents_clock(kube, backend):
    # On a cluster 300 s ahead, a checkpoint saved 60 s ago is stamped 240 s in the agent's
    # future: taken as it is, a preemption would count nothing lost since.
    kube.set_clock(300)
    backend.inventory()  # the offset learned
    backend.start(one_gpu_worker())
    kube.run_pod(NAMESPACE, POD)
    status_becomes(backend, 7, 0, base.RUNNING)
    saved = time.time() - 60

    kube.append_log(NAMESPACE, POD, base.CHECKPOINT_LINE, at=saved + 300)

    assert eventually(lambda: backend.status()[0].checkpoint_at) == pytest.approx(saved, abs=1.5)
