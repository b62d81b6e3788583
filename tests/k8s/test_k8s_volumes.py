"""The job's data volumes on Kubernetes: each worker's pod mounts the tenant's claim at the path
the job asked for, read-only as asked, in a pod volume apart from the backend's own, and is
told the path; an attempt whose volume has no claim, or whose claim the namespace lacks, has
not bound or is deleting, or whose claim's access modes do not let its pods on their nodes mount
it as asked, fails at once as an infrastructure failure, before any pod."""

import json

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from clusters.backends import base
from clusters.backends import k8s_specs as specs
from clusters.backends.base import WorkerSpec
from tests.k8s.conftest import (
    NAMESPACE,
    attempt,
    env_of,
    one_gpu_worker,
    status_becomes,
    two_worker_gang,
)
from tests.k8s.server import ApiError
from tests.k8s.test_ssh_keys import MOUNT as SSH_MOUNT
from tests.k8s.test_ssh_keys import VOLUME as SSH

IMAGENET = {"name": "imagenet", "path": "/data/imagenet", "read_only": True,
            "claim": "imagenet-pvc", "host_path": "/srv/imagenet"}  # fmt: skip
WEIGHTS = {"name": "model-store", "path": "/models", "read_only": False,
           "claim": "model-store", "host_path": ""}  # fmt: skip


@pytest.fixture
def claims(kube):
    kube.add_claim(NAMESPACE, "imagenet-pvc")
    kube.add_claim(NAMESPACE, "model-store")


# Every worker's /dev/shm (test_pods): a 16 GiB worker's, after the job's own volumes.
SHM = {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "16384Mi"}}
# Every worker's hostfile (test_hostfile), attempt 11's, before a gang's SSH files
# (test_ssh_keys) and the job's own volumes.
HOSTFILE = {
    "name": "hostfile",
    "configMap": {
        "name": "mlsched-11-hosts",
        "items": [{"key": "hostfile", "path": "hostfile"}],
        "defaultMode": 0o444,
    },
}


def by_name(items: list[dict]) -> dict[str, dict]:
    return {item["name"]: item for item in items}


def test_each_pod_mounts_the_claims_at_the_asked_paths_read_only_as_asked(kube, backend, claims):
    # No runtime limit: no stop-at file (test_runtime_limit_lowered) beside them.
    backend.start(two_worker_gang(volumes=(IMAGENET, WEIGHTS), max_runtime_s=0))

    for name in ("mlsched-11-0", "mlsched-11-1"):
        pod = kube.pod(NAMESPACE, name)
        assert pod["spec"]["volumes"] == [
            HOSTFILE,
            SSH,
            {"name": "data-imagenet",
             "persistentVolumeClaim": {"claimName": "imagenet-pvc", "readOnly": True}},
            {"name": "data-model-store",
             "persistentVolumeClaim": {"claimName": "model-store", "readOnly": False}},
            {**SHM, "emptyDir": {"medium": "Memory", "sizeLimit": "65536Mi"}},  # 64 GiB each
        ]  # fmt: skip
        assert pod["spec"]["containers"][0]["volumeMounts"] == [
            {"name": "hostfile", "mountPath": "/var/run/mlsched/hostfile", "readOnly": True},
            SSH_MOUNT,
            {"name": "data-imagenet", "mountPath": "/data/imagenet", "readOnly": True},
            {"name": "data-model-store", "mountPath": "/models", "readOnly": False},
            {"name": "shm", "mountPath": "/dev/shm"},
        ]


def test_each_worker_is_told_where_each_volume_is(kube, backend, claims):
    backend.start(two_worker_gang(volumes=(IMAGENET, WEIGHTS)))

    for name in ("mlsched-11-0", "mlsched-11-1"):
        env = env_of(kube.pod(NAMESPACE, name))
        assert env["MLSCHED_VOLUME_IMAGENET"] == "/data/imagenet"
        assert env["MLSCHED_VOLUME_MODEL_STORE"] == "/models"


def test_a_pod_whose_claims_are_bound_runs(kube, backend, claims):
    backend.start(one_gpu_worker(volumes=(IMAGENET, WEIGHTS)))

    kube.run_pod(NAMESPACE, "mlsched-7-0")

    assert status_becomes(backend, 7, 0, base.RUNNING)
    assert kube.objects_of("events") == []


def test_the_data_volumes_stand_apart_from_the_backends_own(kube, make_backend):
    kube.add_claim(NAMESPACE, "checkpoints")
    kube.add_claim(NAMESPACE, "other")
    backend = make_backend(checkpoint_claim="checkpoints")
    # Named as the backend's own volumes: the API server refuses two volumes of one name.
    clashing = tuple(
        {"name": name, "path": f"/mnt/{name}", "read_only": True, "claim": "other",
         "host_path": ""}
        for name in (specs.CHECKPOINT_VOLUME, specs.SECRET_FILES_VOLUME, specs.STOP_AT_VOLUME,
                     specs.SHM_VOLUME)
    )  # fmt: skip

    backend.start(one_gpu_worker(volumes=clashing, secret_files={"GCP_KEY": "k"}))

    pod = kube.pod(NAMESPACE, "mlsched-7-0")
    mounts = {m["name"]: m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"]}
    assert mounts == {
        "checkpoints": "/checkpoints/alpha/42",
        "secret-files": "/var/run/mlsched/secrets",
        "stop-at": "/var/run/mlsched/stop-at",
        "hostfile": "/var/run/mlsched/hostfile",
        "data-checkpoints": "/mnt/checkpoints",
        "data-secret-files": "/mnt/secret-files",
        "data-stop-at": "/mnt/stop-at",
        "shm": "/dev/shm",
        "data-shm": "/mnt/shm",
    }
    volumes = by_name(pod["spec"]["volumes"])
    assert volumes["checkpoints"]["persistentVolumeClaim"]["claimName"] == "checkpoints"
    assert volumes["data-checkpoints"]["persistentVolumeClaim"]["claimName"] == "other"


def test_a_long_volume_name_still_makes_a_pod_volume_name(kube, backend):
    long_name = "a" * 60 + "-xy"
    kube.add_claim(NAMESPACE, "long")
    volume = {"name": long_name, "path": "/long", "read_only": True, "claim": "long",
              "host_path": ""}  # fmt: skip

    backend.start(one_gpu_worker(volumes=(volume,), max_runtime_s=0))

    _, pod_volume, shm = kube.pod(NAMESPACE, "mlsched-7-0")["spec"]["volumes"]  # the hostfile's
    assert shm == SHM
    assert len(pod_volume["name"]) == 63 and pod_volume["name"].startswith("data-aaaa")
    assert pod_volume["name"] != specs.data_volume_name("a" * 60 + "-xz")
    assert env_of(kube.pod(NAMESPACE, "mlsched-7-0"))["MLSCHED_VOLUME_" + "A" * 60 + "_XY"]


# An attempt that cannot mount its volumes fails at once, as an infrastructure failure (like a
# missing checkpoint claim): the control plane places it again where the volume is.


def test_a_volume_without_a_claim_fails_the_attempt_before_any_pod(kube, backend):
    local_only = {**IMAGENET, "claim": ""}

    backend.start(two_worker_gang(volumes=(local_only,), secrets={"HF_TOKEN": "x"}))

    said = (
        "CreateFailed: its data volume 'imagenet' has no claim: a Kubernetes cluster cannot "
        "mount it"
    )
    for rank in (0, 1):
        status = status_becomes(backend, 11, rank, base.FAILED)
        assert (status.exit_code, status.reason) == (None, said)
    assert (kube.pods(), kube.objects_of("secrets"), kube.objects_of("services")) == ([], [], [])


def test_a_claim_the_namespace_lacks_fails_the_attempt_before_any_pod(kube, backend):
    kube.add_claim(NAMESPACE, "model-store")

    backend.start(one_gpu_worker(volumes=(WEIGHTS, IMAGENET)))

    status = status_becomes(backend, 7, 0, base.FAILED)
    assert status.reason == (
        'CreateFailed: data volume "imagenet": claim "imagenet-pvc" missing in mlsched-alpha'
    )
    assert kube.pods() == []


def test_a_claim_not_yet_bound_fails_the_attempt_before_any_pod(kube, backend):
    # A WaitForFirstConsumer claim never binds for pods that bypass kube-scheduler.
    kube.add_claim(NAMESPACE, "imagenet-pvc", phase="Pending")

    backend.start(one_gpu_worker(volumes=(IMAGENET,)))

    status = status_becomes(backend, 7, 0, base.FAILED)
    assert status.reason == (
        'CreateFailed: data volume "imagenet": claim "imagenet-pvc" in mlsched-alpha is '
        "Pending, not Bound: bind it in advance (mlsched places pods itself, so a "
        "WaitForFirstConsumer claim never binds)"
    )
    assert kube.pods() == []


def test_the_attempt_starts_once_its_claim_is_there(kube, backend):
    backend.start(one_gpu_worker(volumes=(IMAGENET,)))
    assert status_becomes(backend, 7, 0, base.FAILED)
    kube.add_claim(NAMESPACE, "imagenet-pvc")

    backend.start(one_gpu_worker(volumes=(IMAGENET,)))

    assert status_becomes(backend, 7, 0, base.PENDING)
    assert [p["metadata"]["name"] for p in kube.pods()] == ["mlsched-7-0"]


def test_without_the_right_to_read_claims_a_pod_waits_pending_for_a_missing_one(kube, backend):
    kube.fail("GET", "/persistentvolumeclaims/", ApiError(403, "Forbidden", "no"), times=None)

    backend.start(one_gpu_worker(volumes=(IMAGENET,)))
    kube.run_pod(NAMESPACE, "mlsched-7-0")

    # Pending until the kubelet has failed to mount it for mount_failure_s (test_mount_failures).
    waiting = status_becomes(backend, 7, 0, base.PENDING, reason="ContainerCreating")
    assert waiting.exit_code is None
    (event,) = kube.objects_of("events")
    assert event["reason"] == "FailedMount"
    assert event["message"].endswith(
        "error processing PVC mlsched-alpha/imagenet-pvc: failed to fetch PVC from API server: "
        'persistentvolumeclaims "imagenet-pvc" not found'
    )


def test_a_claim_being_deleted_fails_the_next_attempt_before_any_pod(kube, backend, claims):
    backend.start(one_gpu_worker(volumes=(IMAGENET,)))
    kube.delete("persistentvolumeclaims", NAMESPACE, "imagenet-pvc", None)  # its pod keeps it

    backend.start(one_gpu_worker(attempt_id=8, number=2, volumes=(IMAGENET,)))

    status = status_becomes(backend, 8, 0, base.FAILED)
    assert status.reason == (
        'CreateFailed: data volume "imagenet": claim "imagenet-pvc" in mlsched-alpha is being '
        "deleted"
    )
    assert [p["metadata"]["name"] for p in kube.pods()] == ["mlsched-7-0"]


# Access modes: which pods may mount a claim at once. mlsched binds the pods to their nodes
# itself, so nothing else keeps a gang off a claim it cannot share.

ON_ONE_NODE = tuple(
    WorkerSpec(rank=rank, node="gpu-a", gpu_indices=(rank,), cpu_milli=4000, memory_mb=16384)
    for rank in (0, 1)
)


def gang_on_one_node(attempt_id=11, **kwargs):
    return attempt(attempt_id, 1, ON_ONE_NODE, **kwargs)


def pod_names(kube) -> list[str]:
    return sorted(p["metadata"]["name"] for p in kube.pods())


def test_a_readwriteonce_claim_is_refused_for_a_gang_on_two_nodes_not_on_one(kube, backend):
    kube.add_claim(NAMESPACE, "model-store", access_modes=("ReadWriteOnce",))

    backend.start(two_worker_gang(volumes=(WEIGHTS,)))

    for rank in (0, 1):
        status = status_becomes(backend, 11, rank, base.FAILED)
        assert (status.exit_code, status.reason) == (None, (
            'CreateFailed: data volume "model-store": claim "model-store" in mlsched-alpha is '
            "ReadWriteOnce: a gang on 2 nodes writing to it needs ReadWriteMany, or ReadOnlyMany "
            "to read it"
        ))  # fmt: skip
    assert kube.pods() == []

    backend.start(one_gpu_worker(volumes=(WEIGHTS,)))
    backend.start(gang_on_one_node(attempt_id=12, volumes=(WEIGHTS,)))

    assert status_becomes(backend, 7, 0, base.PENDING)
    assert pod_names(kube) == ["mlsched-12-0", "mlsched-12-1", "mlsched-7-0"]


def test_a_readwriteonce_claim_read_by_a_gang_on_two_nodes_needs_a_shared_mode(kube, backend):
    kube.add_claim(NAMESPACE, "imagenet-pvc", access_modes=("ReadWriteOnce",))

    backend.start(two_worker_gang(volumes=(IMAGENET,)))

    assert status_becomes(backend, 11, 0, base.FAILED).reason == (
        'CreateFailed: data volume "imagenet": claim "imagenet-pvc" in mlsched-alpha is '
        "ReadWriteOnce: a gang on 2 nodes reading it needs ReadOnlyMany or ReadWriteMany"
    )
    assert kube.pods() == []


def test_a_readonlymany_claim_is_read_by_a_gang_but_refused_to_a_writer(kube, backend):
    kube.add_claim(NAMESPACE, "imagenet-pvc", access_modes=("ReadOnlyMany",))
    writing = {**IMAGENET, "read_only": False}

    backend.start(two_worker_gang(volumes=(IMAGENET,)))
    backend.start(one_gpu_worker(volumes=(writing,)))

    assert status_becomes(backend, 11, 0, base.PENDING)
    assert status_becomes(backend, 7, 0, base.FAILED).reason == (
        'CreateFailed: data volume "imagenet": claim "imagenet-pvc" in mlsched-alpha is '
        "ReadOnlyMany: a job writing to it needs ReadWriteOnce, ReadWriteOncePod or "
        "ReadWriteMany, or a read-only mount"
    )
    assert pod_names(kube) == ["mlsched-11-0", "mlsched-11-1"]


def test_a_readwriteoncepod_claim_is_refused_for_two_pods_even_on_one_node(kube, backend):
    kube.add_claim(NAMESPACE, "model-store", access_modes=("ReadWriteOncePod",))

    backend.start(gang_on_one_node(volumes=(WEIGHTS,)))
    backend.start(one_gpu_worker(volumes=(WEIGHTS,)))

    assert status_becomes(backend, 11, 1, base.FAILED).reason == (
        'CreateFailed: data volume "model-store": claim "model-store" in mlsched-alpha is '
        "ReadWriteOncePod: a gang of 2 pods writing to it needs ReadWriteOnce or ReadWriteMany, "
        "or ReadOnlyMany to read it"
    )
    assert status_becomes(backend, 7, 0, base.PENDING)
    assert pod_names(kube) == ["mlsched-7-0"]


def test_a_claim_of_several_modes_is_refused_only_when_none_will_do(kube, backend):
    kube.add_claim(NAMESPACE, "model-store", access_modes=("ReadWriteOnce", "ReadOnlyMany"))
    reading = {**WEIGHTS, "read_only": True}

    backend.start(two_worker_gang(attempt_id=11, volumes=(reading,)))
    backend.start(two_worker_gang(attempt_id=12, volumes=(WEIGHTS,)))

    assert status_becomes(backend, 11, 0, base.PENDING)
    assert status_becomes(backend, 12, 0, base.FAILED).reason == (
        'CreateFailed: data volume "model-store": claim "model-store" in mlsched-alpha is '
        "ReadWriteOnce and ReadOnlyMany: a gang on 2 nodes writing to it needs ReadWriteMany, "
        "or a read-only mount"
    )


def test_the_modes_of_the_volume_bound_count_over_those_the_claim_asked(kube, backend):
    # The volume bound offers what it does: an NFS volume asked ReadWriteOnce of is shared.
    kube.add_claim(NAMESPACE, "model-store", access_modes=("ReadWriteOnce",))
    kube.add_claim(NAMESPACE, "imagenet-pvc", access_modes=("ReadWriteMany",))
    with kube.cond:
        store = kube.store["persistentvolumeclaims"]
        store[(NAMESPACE, "model-store")]["status"]["accessModes"] = ["ReadWriteMany"]
        store[(NAMESPACE, "imagenet-pvc")]["status"]["accessModes"] = ["ReadWriteOnce"]

    backend.start(two_worker_gang(attempt_id=11, volumes=(WEIGHTS,)))
    backend.start(two_worker_gang(attempt_id=12, volumes=(IMAGENET,)))

    assert status_becomes(backend, 11, 0, base.PENDING)
    assert "ReadWriteOnce: a gang on 2 nodes" in status_becomes(backend, 12, 0, base.FAILED).reason


def test_forget_leaves_the_tenants_claims(kube, backend, claims):
    backend.start(one_gpu_worker(volumes=(IMAGENET,)))
    kube.exit_pod(NAMESPACE, "mlsched-7-0", 0)
    status_becomes(backend, 7, 0, base.EXITED)

    backend.forget(7)

    assert kube.pods() == []
    names = [c["metadata"]["name"] for c in kube.objects_of("persistentvolumeclaims")]
    assert sorted(names) == ["imagenet-pvc", "model-store"]


# The test server, as the API server judges a pod's volumes.


def handmade_pod(volumes, mounts=()) -> client.V1Pod:
    container = client.V1Container(
        name="worker", image="registry.local/train:1", volume_mounts=list(mounts) or None
    )
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name="handmade"),
        spec=client.V1PodSpec(containers=[container], volumes=volumes),
    )


def claim_volume(name="data", claim="imagenet-pvc") -> client.V1Volume:
    source = client.V1PersistentVolumeClaimVolumeSource(claim_name=claim)
    return client.V1Volume(name=name, persistent_volume_claim=source)


def test_the_api_server_takes_a_claim_volume(kube, api_client):
    kube.create_namespace({"metadata": {"name": NAMESPACE}})
    mount = client.V1VolumeMount(name="data", mount_path="/data", read_only=True)

    client.CoreV1Api(api_client).create_namespaced_pod(
        NAMESPACE, handmade_pod([claim_volume()], [mount])
    )

    (pod,) = kube.pods()
    assert pod["spec"]["volumes"] == [
        {"name": "data", "persistentVolumeClaim": {"claimName": "imagenet-pvc"}}
    ]


@pytest.mark.parametrize(
    ("volumes", "mounts", "said"),
    [
        ([claim_volume(claim="")], [], "claimName is required"),
        ([claim_volume(), claim_volume()], [], "name must be unique"),
        ([claim_volume(name="Data_1")], [], "name must be a DNS label"),
        ([client.V1Volume(name="data")], [], "exactly one volume type"),
        ([claim_volume(), claim_volume(name="more")],
         [client.V1VolumeMount(name="data", mount_path="/data"),
          client.V1VolumeMount(name="more", mount_path="/data")],
         "mountPath must be unique"),
    ],
)  # fmt: skip
def test_the_api_server_refuses_a_malformed_claim_volume(kube, api_client, volumes, mounts, said):
    kube.create_namespace({"metadata": {"name": NAMESPACE}})

    with pytest.raises(ApiException) as refused:
        client.CoreV1Api(api_client).create_namespaced_pod(NAMESPACE, handmade_pod(volumes, mounts))

    assert refused.value.status == 422
    assert said in json.loads(refused.value.body)["message"]
    assert kube.pods() == []


def test_the_kubelet_waits_to_mount_a_claim_not_bound(kube, api_client):
    kube.add_claim(NAMESPACE, "imagenet-pvc", phase="Pending")
    client.CoreV1Api(api_client).create_namespaced_pod(NAMESPACE, handmade_pod([claim_volume()]))

    kube.run_pod(NAMESPACE, "handmade")

    assert kube.pod(NAMESPACE, "handmade")["status"]["phase"] == "Pending"
    (event,) = kube.objects_of("events")
    assert event["message"].endswith(
        "error processing PVC mlsched-alpha/imagenet-pvc: PVC is not bound"
    )


def test_the_kubelet_names_a_claim_the_namespace_lacks_as_the_api_server_did(kube, api_client):
    kube.create_namespace({"metadata": {"name": NAMESPACE}})
    client.CoreV1Api(api_client).create_namespaced_pod(NAMESPACE, handmade_pod([claim_volume()]))

    kube.run_pod(NAMESPACE, "handmade")

    (event,) = kube.objects_of("events")
    assert event["message"] == (
        "Unable to attach or mount volumes: unmounted volumes=[data], unattached volumes=[], "
        "failed to process volumes=[data]: error processing PVC mlsched-alpha/imagenet-pvc: "
        'failed to fetch PVC from API server: persistentvolumeclaims "imagenet-pvc" not found'
    )


def test_a_claim_deleted_under_a_bound_pod_stays_deleting_until_the_pod_is_gone(kube, api_client):
    kube.add_claim(NAMESPACE, "imagenet-pvc")
    pod = handmade_pod([claim_volume()])
    pod.spec.node_name = "gpu-a"
    client.CoreV1Api(api_client).create_namespaced_pod(NAMESPACE, pod)

    kube.delete("persistentvolumeclaims", NAMESPACE, "imagenet-pvc", None)
    kube.run_pod(NAMESPACE, "handmade")

    (claim,) = kube.objects_of("persistentvolumeclaims")
    assert claim["metadata"]["finalizers"] == ["kubernetes.io/pvc-protection"]
    assert claim["metadata"]["deletionTimestamp"]
    (event,) = kube.objects_of("events")
    assert event["message"].endswith(
        "error processing PVC mlsched-alpha/imagenet-pvc: PVC is being deleted"
    )
    kube.delete_pod(NAMESPACE, "handmade")
    assert kube.objects_of("persistentvolumeclaims") == []
