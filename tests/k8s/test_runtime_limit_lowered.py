"""lower_runtime_limit(): the pods' activeDeadlineSeconds patched down, which the API server lets
go down only, and which the kubelet enforces (DeadlineExceeded: TIMED_OUT)."""

import json
import logging

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from clusters.backends import base
from clusters.backends import k8s_specs as specs
from tests.k8s.conftest import (
    NAMESPACE,
    eventually,
    one_gpu_worker,
    status_becomes,
    two_worker_gang,
)
from tests.k8s.server import ApiError

PODS = f"/api/v1/namespaces/{NAMESPACE}/pods/"
MERGE = "application/merge-patch+json"
UNAVAILABLE = ApiError(503, "ServiceUnavailable", "etcdserver: leader changed")


def deadline(kube, name: str) -> int | None:
    return kube.pod(NAMESPACE, name)["spec"].get("activeDeadlineSeconds")


def patches(kube) -> int:
    return kube.count_requests("PATCH", PODS)


def running(kube, backend, attempt_id: int, *ranks: int) -> None:
    for rank in ranks:
        kube.run_pod(NAMESPACE, f"mlsched-{attempt_id}-{rank}")
    for rank in ranks:
        status_becomes(backend, attempt_id, rank, base.RUNNING)


def kubelet_checks_deadline(kube, name: str, active_s: int) -> None:
    """The kubelet ends the pod, DeadlineExceeded, if it has been active `active_s` seconds
    and its activeDeadlineSeconds is no more."""
    limit = deadline(kube, name)
    if limit is not None and active_s >= limit:
        kube.exceed_deadline(NAMESPACE, name)


def test_lowering_the_limit_patches_every_running_pods_deadline_to_it(kube, backend):
    backend.start(two_worker_gang())  # 3600 s
    running(kube, backend, 11, 0, 1)

    backend.lower_runtime_limit(11, 1800)

    assert [deadline(kube, f"mlsched-11-{r}") for r in (0, 1)] == [1800, 1800]
    assert patches(kube) == 2


def stop_at_file(kube, name: str) -> str:
    """The worker's MLSCHED_STOP_AT_FILE as the kubelet projects it."""
    return kube.downward_file(NAMESPACE, name, specs.STOP_AT_VOLUME, base.STOP_AT_FILE)


def test_the_pods_stop_at_file_says_the_stop_sooner_by_what_the_limit_lost(kube, backend):
    backend.start(one_gpu_worker())  # 3600 s
    running(kube, backend, 7, 0)
    container = kube.pod(NAMESPACE, "mlsched-7-0")["spec"]["containers"][0]
    env = {var["name"]: var.get("value") for var in container["env"]}
    mounts = {m["name"]: (m["mountPath"], m.get("readOnly")) for m in container["volumeMounts"]}
    assert env["MLSCHED_STOP_AT_FILE"] == f"{specs.STOP_AT_DIR}/{base.STOP_AT_FILE}"
    assert mounts[specs.STOP_AT_VOLUME] == (specs.STOP_AT_DIR, True)
    assert stop_at_file(kube, "mlsched-7-0") == env["MLSCHED_STOP_AT"]

    backend.lower_runtime_limit(7, 600)
    lowered = int(stop_at_file(kube, "mlsched-7-0"))
    backend.lower_runtime_limit(7, 60)

    assert lowered == int(env["MLSCHED_STOP_AT"]) - (3600 - 600)
    assert int(stop_at_file(kube, "mlsched-7-0")) == int(env["MLSCHED_STOP_AT"]) - (3600 - 60)


def test_a_pod_without_a_limit_is_given_one(kube, backend):
    backend.start(one_gpu_worker(max_runtime_s=0))
    running(kube, backend, 7, 0)
    assert deadline(kube, "mlsched-7-0") is None

    backend.lower_runtime_limit(7, 900)

    assert deadline(kube, "mlsched-7-0") == 900
    assert specs.STOP_AT_ANNOTATION not in kube.pod(NAMESPACE, "mlsched-7-0")["metadata"].get(
        "annotations", {}
    )  # nor told a stop: it had none to count from


def test_a_limit_not_lower_than_the_pods_own_sends_no_patch(kube, backend):
    backend.start(two_worker_gang())
    running(kube, backend, 11, 0, 1)
    versions = [p["metadata"]["resourceVersion"] for p in kube.pods()]

    backend.lower_runtime_limit(11, 3600)
    backend.lower_runtime_limit(11, 7200)

    assert patches(kube) == 0
    assert [p["metadata"]["resourceVersion"] for p in kube.pods()] == versions
    assert [deadline(kube, f"mlsched-11-{r}") for r in (0, 1)] == [3600, 3600]


def test_asking_again_for_the_same_lower_limit_sends_no_patch(kube, backend):
    backend.start(two_worker_gang())
    running(kube, backend, 11, 0, 1)
    backend.lower_runtime_limit(11, 1800)
    assert patches(kube) == 2

    backend.lower_runtime_limit(11, 1800)
    backend.lower_runtime_limit(11, 2400)

    assert patches(kube) == 2


def test_asking_again_sends_no_patch_before_the_watch_brings_the_patched_pods(kube, backend):
    backend.start(two_worker_gang())
    running(kube, backend, 11, 0, 1)
    # The watch is cut and cannot list again: the backend keeps the pods as they were.
    kube.fail("GET", "^/api/v1/pods$", UNAVAILABLE, times=None)
    watches = kube.count_requests("GET", "/api/v1/pods", watch=True)
    kube.drop_watches()
    eventually(lambda: kube.count_requests("GET", "/api/v1/pods", watch=True) > watches)

    backend.lower_runtime_limit(11, 1800)
    backend.lower_runtime_limit(11, 1800)

    assert patches(kube) == 2
    assert [deadline(kube, f"mlsched-11-{r}") for r in (0, 1)] == [1800, 1800]


def test_a_restarted_backend_asking_for_the_lowered_limit_sends_no_patch(
    kube, backend, make_backend
):
    backend.start(one_gpu_worker())
    running(kube, backend, 7, 0)
    backend.lower_runtime_limit(7, 1800)
    backend.close()
    restarted = make_backend()
    status_becomes(restarted, 7, 0, base.RUNNING)

    restarted.lower_runtime_limit(7, 1800)

    assert patches(kube) == 1


def test_a_lower_limit_still_is_patched_again(kube, backend):
    backend.start(one_gpu_worker())
    running(kube, backend, 7, 0)
    backend.lower_runtime_limit(7, 1800)

    backend.lower_runtime_limit(7, 600)

    assert deadline(kube, "mlsched-7-0") == 600
    assert patches(kube) == 2


def test_a_limit_under_one_second_is_set_to_one_second(kube, backend):
    backend.start(one_gpu_worker())
    running(kube, backend, 7, 0)

    backend.lower_runtime_limit(7, 0)

    assert deadline(kube, "mlsched-7-0") == 1


def test_an_ended_pod_is_not_patched(kube, backend):
    backend.start(two_worker_gang())
    running(kube, backend, 11, 0, 1)
    kube.exit_pod(NAMESPACE, "mlsched-11-0", 0)
    status_becomes(backend, 11, 0, base.EXITED)

    backend.lower_runtime_limit(11, 1800)

    assert [deadline(kube, f"mlsched-11-{r}") for r in (0, 1)] == [3600, 1800]
    assert kube.count_requests("PATCH", PODS + "mlsched-11-0") == 0


def test_a_terminating_pod_is_not_patched(kube, backend):
    kube.finish_deletions = False  # the kubelet is still waiting out the grace period
    backend.start(one_gpu_worker())
    running(kube, backend, 7, 0)
    backend.stop(7, grace_s=30)
    eventually(lambda: backend._watcher.get((7, 0))[0].metadata.deletion_timestamp)

    backend.lower_runtime_limit(7, 1800)

    assert patches(kube) == 0
    assert deadline(kube, "mlsched-7-0") == 3600


def test_a_refused_patch_is_logged_and_raised_for_the_agent_to_ask_again(kube, backend, caplog):
    backend.start(one_gpu_worker())
    running(kube, backend, 7, 0)
    kube.fail("PATCH", "/pods/mlsched-7-0$", UNAVAILABLE)

    with (
        caplog.at_level(logging.WARNING, logger="clusters.backends.kubernetes"),
        pytest.raises(RuntimeError, match="1 pods of attempt 7 not lowered to 1800 s"),
    ):
        backend.lower_runtime_limit(7, 1800)

    assert deadline(kube, "mlsched-7-0") == 3600
    assert "503" in caplog.records[-1].getMessage()
    backend.lower_runtime_limit(7, 1800)
    assert deadline(kube, "mlsched-7-0") == 1800


def test_after_the_lowered_deadline_the_worker_is_reported_timed_out(kube, backend):
    backend.start(one_gpu_worker())
    running(kube, backend, 7, 0)
    kubelet_checks_deadline(kube, "mlsched-7-0", active_s=120)
    status_becomes(backend, 7, 0, base.RUNNING)

    backend.lower_runtime_limit(7, 60)
    kubelet_checks_deadline(kube, "mlsched-7-0", active_s=120)

    status = status_becomes(backend, 7, 0, base.TIMED_OUT)
    assert "DeadlineExceeded" in status.reason


# The API server's validation of a pod's update, through the real client.


def patch_pod(api_client, spec: dict):
    core = client.CoreV1Api(api_client)
    return core.patch_namespaced_pod("mlsched-7-0", NAMESPACE, {"spec": spec}, _content_type=MERGE)


def refusal(api_client, spec: dict) -> dict:
    with pytest.raises(ApiException) as raised:
        patch_pod(api_client, spec)
    assert raised.value.status == 422
    return json.loads(raised.value.body)


@pytest.mark.parametrize(
    "spec, said",
    [
        ({"activeDeadlineSeconds": 3601}, "Invalid value: 3601: must be less than or equal to "
         "previous value"),
        ({"activeDeadlineSeconds": None}, 'Invalid value: "null": must not update from a '
         "positive integer to nil value"),
        ({"activeDeadlineSeconds": 0}, "Invalid value: 0: must be between 1 and 2147483647, "
         "inclusive"),
        ({"activeDeadlineSeconds": -5}, "Invalid value: -5: must be between 1 and 2147483647, "
         "inclusive"),
    ],
    ids=["raised", "unset", "zero", "negative"],
)  # fmt: skip
def test_the_server_refuses_raising_unsetting_or_zeroing_a_pods_deadline(
    kube, backend, api_client, spec, said
):
    backend.start(one_gpu_worker())
    version = kube.pod(NAMESPACE, "mlsched-7-0")["metadata"]["resourceVersion"]

    status = refusal(api_client, spec)

    assert status["reason"] == "Invalid"
    assert status["message"] == f'Pod "mlsched-7-0" is invalid: spec.activeDeadlineSeconds: {said}'
    cause = {"reason": "FieldValueInvalid", "message": said, "field": "spec.activeDeadlineSeconds"}
    assert status["details"]["causes"] == [cause]
    assert deadline(kube, "mlsched-7-0") == 3600
    assert kube.pod(NAMESPACE, "mlsched-7-0")["metadata"]["resourceVersion"] == version


def test_the_server_refuses_changing_another_field_of_a_pods_spec(kube, backend, api_client):
    backend.start(one_gpu_worker())

    status = refusal(api_client, {"activeDeadlineSeconds": 60, "restartPolicy": "Always"})

    assert status["reason"] == "Invalid"
    assert "spec: Forbidden: pod updates may not change fields other than" in status["message"]
    assert kube.pod(NAMESPACE, "mlsched-7-0")["spec"]["restartPolicy"] == "Never"
    assert deadline(kube, "mlsched-7-0") == 3600


def test_the_server_lowers_a_pods_deadline_and_tells_the_watch(kube, backend, api_client):
    backend.start(one_gpu_worker())
    before = kube.pod(NAMESPACE, "mlsched-7-0")["metadata"]["resourceVersion"]

    patched = patch_pod(api_client, {"activeDeadlineSeconds": 3600})
    patched = patch_pod(api_client, {"activeDeadlineSeconds": 60})

    assert patched.spec.active_deadline_seconds == 60
    assert int(patched.metadata.resource_version) > int(before)
    eventually(lambda: backend._watcher.get((7, 0))[0].spec.active_deadline_seconds == 60)
