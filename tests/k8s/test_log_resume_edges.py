"""A backend restarted beside a running pod whose log has not rotated numbers its lines by their
place in the log, as before it was told where the control plane's copy ends: the stamps only
matter once the log no longer begins at line 0."""

import dataclasses
import time

from clusters.backends import base
from tests.k8s.conftest import NAMESPACE, one_gpu_worker, resumed
from tests.k8s.test_log_resume import POD, where_it_ends
from tests.k8s.test_logs import collect, texts


def test_a_restarted_backend_numbers_an_unrotated_log_on_when_the_nodes_clock_stepped_back(
    kube, backend, make_backend
):
    at = float(int(time.time()) - 60)  # whole seconds: exact as stamps
    backend.start(one_gpu_worker())
    kube.run_pod(NAMESPACE, POD)
    kube.append_log(NAMESPACE, POD, "epoch 1", at=at)
    kube.append_log(NAMESPACE, POD, "epoch 2", at=at + 2)
    # The node's clock is stepped back a second (NTP) before the job's next line.
    kube.append_log(NAMESPACE, POD, "epoch 3", at=at + 1)
    shipped = collect(backend, 3)
    backend.close()  # the agent is restarted; nothing rotated; the job writes on
    kube.append_log(NAMESPACE, POD, "epoch 4", at=at + 3)

    restarted = make_backend()
    resumed(restarted, where_it_ends(shipped))
    lines = collect(restarted, 1)
    time.sleep(0.3)  # a line numbered a second time would come with it
    lines += restarted.logs()

    assert texts(shipped) == [(0, 0, "epoch 1"), (0, 1, "epoch 2"), (0, 2, "epoch 3")]
    assert texts(lines) == [(0, 3, "epoch 4")]


def test_a_restarted_backend_numbers_a_line_after_a_rotation_even_if_stamped_earlier(
    kube, backend, make_backend
):
    at = float(int(time.time()) - 60)
    backend.start(one_gpu_worker())
    kube.run_pod(NAMESPACE, POD)
    kube.append_log(NAMESPACE, POD, "epoch 1", at=at)
    shipped = collect(backend, 1)
    kube.rotate_log(NAMESPACE, POD)
    kube.append_log(NAMESPACE, POD, "epoch 2", "epoch 3", at=at + 2)  # one write
    shipped += collect(backend, 2)
    backend.close()
    kube.append_log(NAMESPACE, POD, "epoch 4", at=at + 1)  # the clock stepped back

    restarted = make_backend()
    resumed(restarted, where_it_ends(shipped))

    assert texts(collect(restarted, 1)) == [(0, 3, "epoch 4")]


def test_a_point_without_line_0_has_an_unrotated_log_placed_by_its_stamps(
    kube, backend, make_backend
):
    at = float(int(time.time()) - 60)
    backend.start(one_gpu_worker())
    kube.run_pod(NAMESPACE, POD)
    kube.append_log(NAMESPACE, POD, "epoch 1", at=at)
    kube.append_log(NAMESPACE, POD, "epoch 2", at=at + 1)
    shipped = collect(backend, 2)
    backend.close()
    kube.append_log(NAMESPACE, POD, "epoch 3", at=at + 2)

    restarted = make_backend()  # told by a control plane that does not send line 0
    resumed(restarted, dataclasses.replace(where_it_ends(shipped), first=None))

    assert texts(collect(restarted, 1)) == [(0, 2, "epoch 3")]


def test_a_long_line_0_with_a_nul_is_known_by_its_head_as_the_control_plane_keeps_it(
    kube, backend, make_backend
):
    at = float(int(time.time()) - 60)
    zero = "\x00" + "x" * (2 * base.LINE_HEAD)
    backend.start(one_gpu_worker())
    kube.run_pod(NAMESPACE, POD)
    kube.append_log(NAMESPACE, POD, zero, at=at)
    kube.append_log(NAMESPACE, POD, "epoch 1", at=at + 2)
    kube.append_log(NAMESPACE, POD, "epoch 2", at=at + 1)  # the clock stepped back
    shipped = collect(backend, 3)
    backend.close()
    kube.append_log(NAMESPACE, POD, "epoch 3", at=at + 3)

    restarted = make_backend()
    point = where_it_ends(shipped)
    resumed(restarted, point)
    lines = collect(restarted, 1)
    time.sleep(0.3)  # a line numbered a second time would come with it
    lines += restarted.logs()

    assert point.first == (at, "\ufffd" + "x" * (base.LINE_HEAD - 1))
    assert texts(lines) == [(0, 3, "epoch 3")]
