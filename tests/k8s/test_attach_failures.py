"""A pod whose data volume cannot be attached to its node: another node still holds it
(Multi-Attach), or the storage fails each attach. It waits ContainerCreating while the
attach-detach controller tries again, and the attempt fails as the platform's fault once the
controller's FailedAttachVolume events have said so for `mount_failure_s`, not at the control
plane's start timeout; a volume attached since (the controller's SuccessfulAttachVolume) is
being mounted, and the pod waits. The secret and claim mount failures it sits beside, and the
helpers used here, are in test_mount_failures."""

import time
from datetime import UTC, datetime, timedelta

import pytest

from clusters.backends import base
from clusters.backends.k8s_status import attach_failure_in_events
from jobs.models import Attempt
from tests.k8s.conftest import NAMESPACE, eventually, one_gpu_worker, status_becomes
from tests.k8s.server import ApiError
from tests.k8s.test_k8s_volumes import IMAGENET
from tests.k8s.test_mount_failures import (
    EVENTS,
    KUBELET_RETRY_S,
    POD,
    SECRET_GONE,
    UID,
    failed_mount,
    failed_once_the_kubelet_tried_again,
    fast,
    secret_deleted_before_the_kubelet_mounts,
)

PV = "pvc-0a1b2c3d"
MULTI_ATTACH = f'FailedAttachVolume: volume "{PV}": already attached to another node (Multi-Attach)'
STORAGE_ERROR = "rpc error: code = Internal desc = Could not attach volume: volume is in use"
ATTACH_FAILED = f'FailedAttachVolume: volume "{PV}": {STORAGE_ERROR}'


def held_by_another_node(kube, backend, attempt_id=7):
    """The worker (on gpu-a) reads a claim of one node at a time whose volume a former pod's
    node, gpu-b, has not let go of yet."""
    kube.add_claim(NAMESPACE, "imagenet-pvc", access_modes=("ReadWriteOnce",), volume=PV)
    kube.attach_elsewhere(NAMESPACE, "imagenet-pvc", "gpu-b")
    backend.start(one_gpu_worker(attempt_id, volumes=(IMAGENET,)))
    kube.run_pod(NAMESPACE, f"mlsched-{attempt_id}-0")


def failing_to_attach(kube, backend):
    """The worker reads a claim whose volume the storage fails to attach."""
    kube.add_claim(NAMESPACE, "imagenet-pvc", access_modes=("ReadWriteOnce",), volume=PV)
    kube.fail_attach(NAMESPACE, "imagenet-pvc", STORAGE_ERROR)
    backend.start(one_gpu_worker(volumes=(IMAGENET,)))
    kube.run_pod(NAMESPACE, POD)


def test_a_volume_another_node_holds_fails_the_worker_as_multi_attach_within_seconds(
    kube, make_backend
):
    # The controller tries again at the kubelet's retry, and says nothing more.
    status = failed_once_the_kubelet_tried_again(kube, make_backend, held_by_another_node)

    assert (status.exit_code, status.reason) == (None, MULTI_ATTACH)
    (event,) = kube.objects_of("events")
    assert (event["reason"], event["count"]) == ("FailedAttachVolume", 1)


def test_an_attach_the_storage_keeps_failing_fails_the_worker_naming_its_error(kube, make_backend):
    status = failed_once_the_kubelet_tried_again(kube, make_backend, failing_to_attach)

    assert (status.exit_code, status.reason) == (None, ATTACH_FAILED)


@pytest.mark.parametrize("broken", [held_by_another_node, failing_to_attach])
def test_a_lasting_attach_failure_is_the_platforms_not_the_nodes(kube, make_backend, broken):
    status = failed_once_the_kubelet_tried_again(kube, make_backend, broken)

    ended = Attempt(outcome=Attempt.Outcome.INFRA_ERROR, reason=f"worker 0: {status.reason}")
    assert ended.node_faulted is False


def test_an_agent_restarted_reads_a_multi_attach_the_controller_reported_once(kube, make_backend):
    held_by_another_node(kube, make_backend())
    time.sleep(KUBELET_RETRY_S)

    restarted = fast(make_backend)
    eventually(lambda: restarted._watcher.get((7, 0))[0] is not None)

    assert status_becomes(restarted, 7, 0, base.FAILED).reason == MULTI_ATTACH


def test_one_listing_of_a_namespaces_events_finds_mount_and_attach_failures(kube, make_backend):
    backend = fast(make_backend, mount_check_s=60)
    secret_deleted_before_the_kubelet_mounts(kube, backend)  # attempt 7
    held_by_another_node(kube, backend, attempt_id=8)
    time.sleep(KUBELET_RETRY_S)
    kube.run_pod(NAMESPACE, POD)
    eventually(lambda: all(backend._watcher.get(key)[0] for key in ((7, 0), (8, 0))))

    assert status_becomes(backend, 7, 0, base.FAILED).reason == SECRET_GONE
    assert status_becomes(backend, 8, 0, base.FAILED).reason == MULTI_ATTACH
    assert kube.count_requests("GET", EVENTS, query=WARNINGS) == 1
    assert kube.count_requests("GET", EVENTS, query=ATTACHES) == 1


WARNINGS = {"fieldSelector": "type=Warning"}
ATTACHES = {"fieldSelector": "reason=SuccessfulAttachVolume"}


def test_a_volume_attached_once_the_other_node_let_go_is_mounted_not_failed(kube, make_backend):
    backend = fast(make_backend)
    held_by_another_node(kube, backend)
    status_becomes(backend, 7, 0, base.PENDING, reason="ContainerCreating")
    kube.detach(NAMESPACE, "imagenet-pvc")
    kube.run_pod(NAMESPACE, POD, mounted=False)  # attached; the kubelet mounts it

    time.sleep(KUBELET_RETRY_S)  # the Multi-Attach error said longer ago than the bound
    for _ in range(3):
        assert status_becomes(backend, 7, 0, base.PENDING).reason == "ContainerCreating"
    assert kube.count_requests("GET", EVENTS, query=ATTACHES) > 0

    kube.run_pod(NAMESPACE, POD)
    status_becomes(backend, 7, 0, base.RUNNING)
    assert all(s.phase != base.FAILED for s in backend.status())


def test_a_mount_failure_lists_no_attach_successes(kube, make_backend):
    failed_once_the_kubelet_tried_again(
        kube, make_backend, secret_deleted_before_the_kubelet_mounts
    )

    assert kube.count_requests("GET", EVENTS, query=WARNINGS) > 0
    assert kube.count_requests("GET", EVENTS, query=ATTACHES) == 0


def test_attach_successes_unread_leave_the_failure_to_the_next_listing(kube, make_backend):
    kube.fail("GET", EVENTS, ApiError(500, "InternalError", "etcd timeout"), query=ATTACHES)
    backend = fast(make_backend)  # events read at each status
    held_by_another_node(kube, backend)
    status_becomes(backend, 7, 0, base.PENDING, reason="ContainerCreating")
    time.sleep(KUBELET_RETRY_S)

    (first,) = backend.status()
    assert (first.phase, first.reason) == (base.PENDING, "ContainerCreating")
    assert kube.count_requests("GET", EVENTS, query=ATTACHES) == 1
    assert status_becomes(backend, 7, 0, base.FAILED).reason == MULTI_ATTACH
    assert kube.count_requests("GET", EVENTS, query=ATTACHES) == 2


ATTACHMENTS = "/apis/storage.k8s.io/v1/volumeattachments"


def holder_not_ready(kube) -> None:
    """gpu-b, holding the volume (its VolumeAttachment says so), has gone NotReady."""
    kube.set_node_ready("gpu-b", False)


def another_node_not_ready(kube) -> None:
    """gpu-c, which holds nothing the worker needs, has gone NotReady."""
    kube.add_node("gpu-c", cpu="64", memory="512Gi", gpus=8)
    kube.set_node_ready("gpu-c", False)


def attachments_unreadable(kube) -> None:
    """No RBAC on volumeattachments: which node holds the volume is not known, and a node has
    gone NotReady."""
    kube.fail("GET", ATTACHMENTS, ApiError(403, "Forbidden", "cannot list"), times=None)
    another_node_not_ready(kube)


@pytest.mark.parametrize("unready", [holder_not_ready, attachments_unreadable])
def test_a_multi_attach_waits_for_the_force_detach_of_a_node_that_may_hold_its_volume(
    kube, make_backend, unready
):
    # The controller detaches a volume by force from a node not ready only after its wait (6
    # minutes; 2 s here), and a failure before then would use up a retry.
    unready(kube)
    backend = fast(make_backend, force_detach_s=2)
    held_by_another_node(kube, backend)
    status_becomes(backend, 7, 0, base.PENDING, reason="ContainerCreating")

    time.sleep(KUBELET_RETRY_S)  # past the bound (MOUNT_FAILURE_S), not past the force detach's

    for _ in range(3):
        assert status_becomes(backend, 7, 0, base.PENDING).reason == "ContainerCreating"
    assert kube.count_requests("GET", EVENTS, query=WARNINGS) > 0
    assert kube.count_requests("GET", ATTACHMENTS) > 0
    assert status_becomes(backend, 7, 0, base.FAILED, timeout=5).reason == MULTI_ATTACH


def test_a_volume_a_ready_node_holds_fails_at_the_bound_while_another_node_is_not_ready(
    kube, make_backend
):
    # The VolumeAttachment says gpu-b, ready, holds it: no force detach is coming.
    another_node_not_ready(kube)
    status = failed_once_the_kubelet_tried_again(
        kube, lambda **kw: make_backend(force_detach_s=600, **kw), held_by_another_node
    )

    assert status.reason == MULTI_ATTACH
    assert kube.count_requests("GET", ATTACHMENTS) > 0


def test_the_attachments_are_not_read_while_every_node_is_ready(kube, make_backend):
    failed_once_the_kubelet_tried_again(kube, make_backend, held_by_another_node)

    assert kube.count_requests("GET", ATTACHMENTS) == 0


def test_a_multi_attach_lasts_the_bound_its_volume_is_given():
    events = [multi_attach(0)]
    now = datetime(2026, 5, 1, 10, 0, tzinfo=UTC) + timedelta(seconds=NOW_S)
    bounds = {PV: 60.0}

    assert attach_failure_in_events(events, POD, UID, 30, now, bounds.__getitem__) == ""
    assert attach_failure_in_events(events, POD, UID, 30, now, lambda _: 30.0) == MULTI_ATTACH


def test_while_a_node_is_not_ready_a_storage_error_fails_at_the_bound(kube, make_backend):
    kube.set_node_ready("gpu-b", False)
    status = failed_once_the_kubelet_tried_again(
        kube, lambda **kw: make_backend(force_detach_s=600, **kw), failing_to_attach
    )

    assert status.reason == ATTACH_FAILED


# The rule, on what the attach-detach controller's events say.

NOW_S = 31


EXCLUSIVE = "exclusively attached to one node and can't be attached to another"


def multi_attach(first, uid=UID, name=POD, suffix=EXCLUSIVE, reason="FailedAttachVolume"):
    message = f'Multi-Attach error for volume "{PV}" Volume is already {suffix}'
    return failed_mount(message, first, first, uid=uid, name=name, reason=reason)


def attach_failed(first, last, error=STORAGE_ERROR, reason="FailedAttachVolume"):
    message = f'AttachVolume.Attach failed for volume "{PV}" : {error}'
    return failed_mount(message, first, last, reason=reason)


def attached(at, volume=PV, uid=UID):
    message = f'AttachVolume.Attach succeeded for volume "{volume}" '
    return failed_mount(message, at, at, uid=uid, reason="SuccessfulAttachVolume")


UNATTACHED = (
    "Unable to attach or mount volumes: unmounted volumes=[data-imagenet], unattached "
    "volumes=[data-imagenet kube-api-access-x]: timed out waiting for the condition"
)
CASES = [
    ("multi-attach", [multi_attach(0)], NOW_S, MULTI_ATTACH),
    ("multi-attach-pods", [multi_attach(0, suffix="used by pod(s) mlsched-6-0")], NOW_S,
     MULTI_ATTACH),
    ("multi-attach-briefly", [multi_attach(0)], 29, ""),
    ("attach-repeated", [attach_failed(0, 30)], NOW_S, ATTACH_FAILED),
    ("attach-once", [attach_failed(0, 0)], NOW_S, ""),
    ("attach-stopped", [attach_failed(0, 20)], 50, ""),
    ("attach-errors-differ", [attach_failed(0, 10, "rpc error: a"), attach_failed(12, 30)],
     NOW_S, ATTACH_FAILED),
    ("multi-attach-then-failing", [multi_attach(0), attach_failed(25, 31)], NOW_S,
     ATTACH_FAILED),
    ("multi-attach-then-attached", [multi_attach(0), attach_failed(25, 26)], 40, ""),
    ("multi-attach-then-attached-mounting", [multi_attach(0), attached(20)], 40, ""),
    ("attached-the-same-second", [multi_attach(0), attached(0)], NOW_S, ""),
    ("attached-then-failing", [attached(0), attach_failed(5, 36)], 40, ATTACH_FAILED),
    ("other-volume-attached", [multi_attach(0), attached(20, volume="pvc-other")], NOW_S,
     MULTI_ATTACH),
    ("attached-for-an-earlier-pod", [multi_attach(5), attached(20, uid="before")], 40,
     MULTI_ATTACH),
    ("earlier-pod", [multi_attach(0, uid="before")], NOW_S, ""),
    ("other-pod", [multi_attach(0, name="mlsched-7-1")], NOW_S, ""),
    ("other-reason", [multi_attach(0, reason="FailedMount")], NOW_S, ""),
    ("kubelet-timed-out", [failed_mount(UNATTACHED, 0, 0)], 200, ""),
]  # fmt: skip


@pytest.mark.parametrize(
    ("events", "now_s", "want"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_an_attach_failure_counts_once_it_has_lasted_30_s(events, now_s, want):
    now = datetime(2026, 5, 1, 10, 0, tzinfo=UTC) + timedelta(seconds=now_s)

    assert attach_failure_in_events(events, POD, UID, persisted_s=30, now=now) == want
