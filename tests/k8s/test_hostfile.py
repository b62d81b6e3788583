"""The gang's hostfile on Kubernetes: a ConfigMap per attempt (`mlsched-<attempt id>-hosts`)
holding it at the key `hostfile`, each pod's stable name with its GPUs as slots, owned by the
attempt's pods, mounted read-only in every worker at /var/run/mlsched/hostfile, whose
MLSCHED_HOSTFILE names the file; deleted with the attempt's other objects."""

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from clusters.backends import base
from tests.k8s.conftest import (
    NAMESPACE,
    env_of,
    one_gpu_worker,
    resumed,
    status_becomes,
    two_worker_gang,
)
from tests.k8s.server import ApiError
from tests.k8s.test_mount_failures import POD, failed_once_the_kubelet_tried_again

FOLDER = "/var/run/mlsched/hostfile"
GANG = "mlsched-11.mlsched-alpha.svc.cluster.local"
VOLUME = {
    "name": "hostfile",
    "configMap": {
        "name": "mlsched-11-hosts",
        "items": [{"key": "hostfile", "path": "hostfile"}],
        "defaultMode": 0o444,
    },
}
MOUNT = {"name": "hostfile", "mountPath": FOLDER, "readOnly": True}
UNAVAILABLE = ApiError(503, "ServiceUnavailable", "etcdserver: leader changed")


def hosts_of(kube, attempt_id) -> dict:
    return kube.get("configmaps", NAMESPACE, f"mlsched-{attempt_id}-hosts")


def config_map_names(kube) -> list[str]:
    return [c["metadata"]["name"] for c in kube.objects_of("configmaps")]


def test_the_attempts_config_map_lists_each_pods_stable_name_with_its_gpus(kube, backend):
    backend.start(two_worker_gang())

    hosts = hosts_of(kube, 11)
    assert hosts["data"] == {"hostfile": f"w0.{GANG} slots=4\nw1.{GANG} slots=4\n"}
    assert hosts["immutable"] is True
    assert hosts["metadata"]["labels"] == {
        "mlsched.io/attempt": "11",
        "mlsched.io/job": "42",
        "mlsched.io/tenant": "alpha",
        "mlsched.io/cluster": "east",
    }


def test_a_single_worker_gets_a_one_line_hostfile(kube, backend):
    backend.start(one_gpu_worker())

    assert config_map_names(kube) == ["mlsched-7-hosts"]
    assert hosts_of(kube, 7)["data"] == {"hostfile": "localhost slots=1\n"}


def test_the_config_map_is_owned_by_the_attempts_pods(kube, backend):
    backend.start(two_worker_gang())

    owners = hosts_of(kube, 11)["metadata"]["ownerReferences"]
    pods = {p["metadata"]["name"]: p["metadata"]["uid"] for p in kube.pods()}
    assert sorted((o["apiVersion"], o["kind"], o["name"], o["uid"]) for o in owners) == [
        ("v1", "Pod", name, uid) for name, uid in sorted(pods.items())
    ]


def test_every_pod_mounts_the_hostfile_read_only_and_is_told_its_path(kube, backend):
    backend.start(two_worker_gang())

    for name in ("mlsched-11-0", "mlsched-11-1"):
        pod = kube.pod(NAMESPACE, name)
        assert VOLUME in pod["spec"]["volumes"]
        assert MOUNT in pod["spec"]["containers"][0]["volumeMounts"]
        assert env_of(pod)["MLSCHED_HOSTFILE"] == f"{FOLDER}/hostfile"
        assert env_of(pod)["MLSCHED_WORKER_ADDRS"] == f"w0.{GANG},w1.{GANG}"


def test_a_pod_whose_hostfile_is_there_runs(kube, backend):
    backend.start(one_gpu_worker())
    volumes = kube.pod(NAMESPACE, "mlsched-7-0")["spec"]["volumes"]
    assert {"name": "mlsched-7-hosts", "items": VOLUME["configMap"]["items"],
            "defaultMode": 0o444} in [v.get("configMap") for v in volumes]  # fmt: skip

    kube.run_pod(NAMESPACE, "mlsched-7-0")  # the kubelet finds the ConfigMap and its key

    assert status_becomes(backend, 7, 0, base.RUNNING)
    assert kube.objects_of("events") == []


def test_a_config_map_it_cannot_create_fails_the_start_before_any_pod(kube, backend):
    kube.reject["configmaps"] = ApiError(403, "Forbidden", 'cannot create resource "configmaps"')

    backend.start(two_worker_gang())

    denied = 'CreateFailed: 403 Forbidden: cannot create resource "configmaps"'
    assert kube.pods() == []
    assert [(s.rank, s.phase, s.reason) for s in backend.status()] == [
        (0, base.FAILED, denied),
        (1, base.FAILED, denied),
    ]


def test_a_repeated_start_finds_the_config_map_there(kube, backend, make_backend):
    backend.start(one_gpu_worker())
    backend.start(one_gpu_worker())
    backend.close()
    make_backend().start(one_gpu_worker())  # after an agent restart

    assert kube.count_requests("POST", f"/api/v1/namespaces/{NAMESPACE}/configmaps") == 3
    assert config_map_names(kube) == ["mlsched-7-hosts"]
    assert [p["metadata"]["name"] for p in kube.pods()] == ["mlsched-7-0"]
    assert backend.status() == [base.WorkerStatus(7, 0, base.PENDING)]


def test_a_failed_owner_patch_leaves_the_attempt_running(kube, backend):
    kube.fail("PATCH", "/configmaps/mlsched-7-hosts$", UNAVAILABLE)

    backend.start(one_gpu_worker())

    assert "ownerReferences" not in hosts_of(kube, 7)["metadata"]
    assert backend.status() == [base.WorkerStatus(7, 0, base.PENDING)]


def test_stop_deletes_the_config_map(kube, backend):
    backend.start(two_worker_gang())
    kube.run_pod(NAMESPACE, "mlsched-11-0")
    kube.run_pod(NAMESPACE, "mlsched-11-1")

    backend.stop(11, grace_s=5)

    assert ("configmaps", NAMESPACE, "mlsched-11-hosts", None) in kube.deletions
    assert (kube.pods(), kube.objects_of("configmaps")) == ([], [])


def test_stop_keeps_the_config_map_while_a_pods_delete_fails(kube, make_backend):
    # The pod left may yet start its container, which mounts the hostfile.
    backend = make_backend(retry_s=60)  # no retry of its own within the test
    backend.start(one_gpu_worker())
    kube.fail("DELETE", "/pods/mlsched-7-0$", UNAVAILABLE)

    backend.stop(7, grace_s=5)
    assert config_map_names(kube) == ["mlsched-7-hosts"]
    backend.stop(7, grace_s=5)

    assert (kube.pods(), kube.objects_of("configmaps")) == ([], [])


def test_forget_deletes_the_config_map(kube, backend):
    backend.start(one_gpu_worker())
    assert config_map_names(kube) == ["mlsched-7-hosts"]
    kube.exit_pod(NAMESPACE, "mlsched-7-0", 0)
    status_becomes(backend, 7, 0, base.EXITED)

    backend.forget(7)

    assert (kube.pods(), kube.objects_of("configmaps")) == ([], [])
    assert backend.status() == []


def test_forget_after_a_restart_deletes_the_config_map(kube, backend, make_backend):
    backend.start(one_gpu_worker())
    assert config_map_names(kube) == ["mlsched-7-hosts"]
    kube.exit_pod(NAMESPACE, "mlsched-7-0", 0)
    backend.close()
    restarted = make_backend()  # it never saw the start
    resumed(restarted, None)
    status_becomes(restarted, 7, 0, base.EXITED)

    restarted.forget(7)

    assert (kube.pods(), kube.objects_of("configmaps")) == ([], [])
    assert restarted.status() == []


def test_forget_keeps_an_attempt_whose_config_map_delete_failed(kube, backend):
    backend.start(one_gpu_worker())
    kube.exit_pod(NAMESPACE, "mlsched-7-0", 0)
    status_becomes(backend, 7, 0, base.EXITED)
    kube.fail("DELETE", "/configmaps/mlsched-7-hosts$", UNAVAILABLE)

    backend.forget(7)
    assert backend.status() == [base.WorkerStatus(7, 0, base.EXITED, 0)]
    backend.forget(7)

    assert kube.objects_of("configmaps") == []
    assert backend.status() == []


def test_a_hostfile_that_stays_missing_fails_the_attempt_naming_it(kube, make_backend):
    def deleted_before_the_kubelet_mounts(kube, backend):
        backend.start(one_gpu_worker())
        kube.delete("configmaps", NAMESPACE, "mlsched-7-hosts", None)
        kube.run_pod(NAMESPACE, POD)

    status = failed_once_the_kubelet_tried_again(
        kube, make_backend, deleted_before_the_kubelet_mounts
    )

    gone = 'FailedMount: volume "hostfile": configmap "mlsched-7-hosts" not found'
    assert (status.exit_code, status.reason) == (None, gone)


# The test server, as the API server and the kubelet judge a config map and its volume.


def test_a_pod_whose_config_map_lacks_the_key_never_runs(kube, backend):
    backend.start(one_gpu_worker())
    with kube.cond:  # replaced by one without the hostfile
        kube.delete("configmaps", NAMESPACE, "mlsched-7-hosts", None)
        kube.create("configmaps", NAMESPACE, {"metadata": {"name": "mlsched-7-hosts"},
                                              "data": {"other": ""}})  # fmt: skip

    kube.run_pod(NAMESPACE, "mlsched-7-0")

    assert kube.pod(NAMESPACE, "mlsched-7-0")["status"]["phase"] == "Pending"
    (event,) = kube.objects_of("events")
    assert event["message"] == (
        'MountVolume.SetUp failed for volume "hostfile" : '
        "configmap references non-existent config key: hostfile"
    )


def test_the_api_server_refuses_a_config_map_key_that_is_no_file_name(kube, api_client):
    kube.create_namespace({"metadata": {"name": NAMESPACE}})
    body = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="c"), data={"a/b": "x"})

    with pytest.raises(ApiException) as refused:
        client.CoreV1Api(api_client).create_namespaced_config_map(NAMESPACE, body)

    assert refused.value.status == 422
    assert kube.objects_of("configmaps") == []
