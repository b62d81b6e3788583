"""The pure mapping from a pod (and what happened around it) to a worker's status: cases the
test server does not play, stated as a table."""

from datetime import UTC, datetime, timedelta

import pytest
from kubernetes import client

from clusters.backends import base
from clusters.backends.k8s_status import (
    NODE_MISSING,
    NODE_NOT_READY,
    NODE_READY,
    NODE_UNREACHABLE,
    Seen,
    pods_node_state,
    worker_status,
)


def pod(phase="Pending", reason=None, waiting=None, terminated=None, conditions=()):
    """`terminated`: (exit code, reason) or (exit code, reason, message)."""
    state = client.V1ContainerState(
        waiting=client.V1ContainerStateWaiting(reason=waiting) if waiting else None,
        terminated=(
            client.V1ContainerStateTerminated(
                exit_code=terminated[0], reason=terminated[1], message=(*terminated, None)[2]
            )
            if terminated
            else None
        ),
    )
    container = client.V1ContainerStatus(
        name="worker", image="i", image_id="", ready=False, restart_count=0, state=state
    )
    return client.V1Pod(
        status=client.V1PodStatus(
            phase=phase,
            reason=reason,
            container_statuses=[container],
            conditions=[
                client.V1PodCondition(type=t, status="True", reason=r) for t, r in conditions
            ],
        )
    )


# What containerd and runc say of a job's command that is not in the image, or not executable.
NOT_FOUND = (
    "failed to create containerd task: failed to create shim task: OCI runtime create failed: "
    'runc create failed: unable to start container process: exec: "train": executable file not '
    "found in $PATH: unknown"
)
DENIED = (
    "failed to create containerd task: OCI runtime create failed: runc create failed: unable to "
    'start container process: exec: "/app/run.sh": permission denied: unknown'
)
NO_SCRIPT = 'exec: "/app/run.sh": stat /app/run.sh: no such file or directory: unknown'
# A fault of the node, which names a missing file too: not the job's.
MOUNT_FAILED = (
    "failed to create containerd task: OCI runtime create failed: error mounting "
    '"/var/lib/kubelet/pods/x/volumes": no such file or directory: unknown'
)

CASES = [
    (
        "container-creating",
        Seen(pod(waiting="ContainerCreating")),
        (base.PENDING, None, "ContainerCreating"),
    ),
    ("err-image-pull", Seen(pod(waiting="ErrImagePull")), (base.PENDING, None, "ErrImagePull")),
    (
        "config-error",
        Seen(pod(waiting="CreateContainerConfigError")),
        (base.FAILED, None, "CreateContainerConfigError"),
    ),
    (
        "command-not-found",
        Seen(pod("Failed", terminated=(128, "StartError", NOT_FOUND))),
        (base.EXITED, 127, "StartError: " + NOT_FOUND),
    ),
    (
        "command-not-runnable",
        Seen(pod("Failed", terminated=(128, "StartError", DENIED))),
        (base.EXITED, 126, "StartError: " + DENIED),
    ),
    (
        "script-not-found",
        Seen(pod("Failed", terminated=(128, "StartError", NO_SCRIPT))),
        (base.EXITED, 127, "StartError: " + NO_SCRIPT),
    ),
    (
        "runtime-fault",
        Seen(pod("Failed", terminated=(128, "StartError", MOUNT_FAILED))),
        (base.FAILED, 128, "StartError"),
    ),
    (
        "cannot-run",
        Seen(pod("Failed", terminated=(128, "ContainerCannotRun"))),
        (base.FAILED, 128, "ContainerCannotRun"),
    ),
    (
        "admission-refused",
        Seen(pod("Failed", reason="OutOfnvidia.com/gpu")),
        (base.FAILED, None, "OutOfnvidia.com/gpu"),
    ),
    ("unknown-phase", Seen(pod("Unknown")), (base.LOST, None, "PodUnknown")),
    (
        "running-on-an-unreachable-node",
        Seen(pod("Running"), node=NODE_UNREACHABLE),
        (base.RUNNING, None, ""),
    ),
    (
        "unknown-on-an-unreachable-node",
        Seen(pod("Unknown"), node=NODE_UNREACHABLE),
        (base.RUNNING, None, ""),
    ),
    (
        "pending-on-an-unreachable-node",
        Seen(pod(waiting="ContainerCreating"), node=NODE_UNREACHABLE),
        (base.PENDING, None, "ContainerCreating"),
    ),
    (
        "ended-on-an-unreachable-node",
        Seen(pod("Succeeded", terminated=(0, "Completed")), node=NODE_UNREACHABLE),
        (base.EXITED, 0, ""),
    ),
    (
        "running-on-a-node-not-ready-too-long",
        Seen(pod("Running"), node=NODE_NOT_READY),
        (base.LOST, None, "NodeNotReady"),
    ),
    (
        "drained",
        Seen(
            pod("Running", conditions=[("DisruptionTarget", "EvictionByEvictionAPI")]), deleted=True
        ),
        (base.LOST, None, "EvictionByEvictionAPI"),
    ),
    (
        "succeeded-then-deleted",
        Seen(pod("Succeeded", terminated=(0, "Completed")), deleted=True),
        (base.EXITED, 0, ""),
    ),
    (
        "stopping-on-a-lost-node",
        Seen(pod("Running"), stopping=True, node=NODE_MISSING),
        (base.STOPPED, None, "Stopped"),
    ),
    ("stop-before-any-pod", Seen(None, stopping=True), (base.STOPPED, None, "Stopped")),
    (
        "create-error-wins",
        Seen(None, create_error="CreateFailed: 403"),
        (base.FAILED, None, "CreateFailed: 403"),
    ),
]


@pytest.mark.parametrize(("seen", "want"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_it_maps_the_pod_state(seen, want):
    status = worker_status(5, 0, seen)

    assert (status.phase, status.exit_code, status.reason) == want


NOW = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)


def node(status, since_s=None):
    ago = NOW - timedelta(seconds=since_s) if since_s is not None else None
    condition = client.V1NodeCondition(type="Ready", status=status, last_transition_time=ago)
    return client.V1Node(status=client.V1NodeStatus(conditions=[condition]))


@pytest.mark.parametrize(
    ("the_node", "noticed_s", "want"),
    [
        (node("True", 10), None, NODE_READY),
        (node("False", 299), None, NODE_UNREACHABLE),
        (node("Unknown", 299), None, NODE_UNREACHABLE),  # the kubelet stopped posting
        (node("False", 300), None, NODE_NOT_READY),
        (node("False"), 10, NODE_UNREACHABLE),  # no transition time: since noticed
        (node("False"), 300, NODE_NOT_READY),
        (node("False"), None, NODE_NOT_READY),  # no time at all: no grace
        (None, None, NODE_MISSING),
    ],
    ids=["ready", "recent", "unknown", "too-long", "noticed", "noticed-long", "no-time", "gone"],
)
def test_a_not_ready_node_keeps_its_pods_for_the_grace_period(the_node, noticed_s, want):
    noticed = NOW - timedelta(seconds=noticed_s) if noticed_s is not None else None

    assert pods_node_state(the_node, NOW, 300, noticed) == want
