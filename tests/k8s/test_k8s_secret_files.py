"""The job's secrets given as files: keys of the attempt's Secret, mounted read-only in every
worker from a secret volume of those keys alone, each variable of their names holding its file's
path (no pod holds a value); deleted with the attempt's other objects."""

import base64
import json

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

KEY = '{"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----\\nMIIEv"}\n'
FILES = {"GCP_KEY": KEY, "KUBECONFIG": "apiVersion: v1\nkind: Config\nclusters: []"}
VARIABLES = {"HF_TOKEN": "hf_Zq8sEcReT"}
FOLDER = "/var/run/mlsched/secrets"
VOLUME = {
    "name": "secret-files",
    "secret": {
        "secretName": "mlsched-11-secrets",
        "items": [{"key": "GCP_KEY", "path": "GCP_KEY"},
                  {"key": "KUBECONFIG", "path": "KUBECONFIG"}],
        "defaultMode": 0o444,
    },
}  # fmt: skip
MOUNT = {"name": "secret-files", "mountPath": FOLDER, "readOnly": True}


def opened(kube, attempt_id) -> dict[str, str]:
    secret = kube.get("secrets", NAMESPACE, f"mlsched-{attempt_id}-secrets")
    return {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}


def secret_names(kube) -> list[str]:
    return [s["metadata"]["name"] for s in kube.objects_of("secrets")]


def test_the_attempts_secret_holds_the_files_beside_the_variables(kube, backend):
    backend.start(two_worker_gang(secrets=VARIABLES, secret_files=FILES))

    assert secret_names(kube) == ["mlsched-11-secrets", "mlsched-11-ssh"]  # test_ssh_keys
    assert opened(kube, 11) == VARIABLES | FILES


def test_a_job_naming_files_alone_gets_the_secret_owned_by_its_pods(kube, backend):
    backend.start(one_gpu_worker(secret_files=FILES))

    assert opened(kube, 7) == FILES
    owners = kube.get("secrets", NAMESPACE, "mlsched-7-secrets")["metadata"]["ownerReferences"]
    assert [o["name"] for o in owners] == ["mlsched-7-0"]
    kube.run_pod(NAMESPACE, "mlsched-7-0")  # the kubelet finds every key it mounts
    assert status_becomes(backend, 7, 0, base.RUNNING)


def test_each_pod_mounts_the_files_alone_and_is_told_their_paths(kube, backend):
    # No runtime limit: no stop-at file (test_runtime_limit_lowered) beside them.
    backend.start(two_worker_gang(secrets=VARIABLES, secret_files=FILES, max_runtime_s=0))

    for name in ("mlsched-11-0", "mlsched-11-1"):
        pod = kube.pod(NAMESPACE, name)
        container = pod["spec"]["containers"][0]
        # Then the hostfile's, the SSH files' and /dev/shm's (test_hostfile, test_ssh_keys,
        # test_pods).
        assert pod["spec"]["volumes"][:-3] == [VOLUME]
        assert container["volumeMounts"][:-3] == [MOUNT]
        env = env_of(pod)
        assert (env["GCP_KEY"], env["KUBECONFIG"]) == (f"{FOLDER}/GCP_KEY", f"{FOLDER}/KUBECONFIG")
        refs = {e["name"]: e["valueFrom"] for e in container["env"] if "valueFrom" in e}
        assert refs == {
            "HF_TOKEN": {"secretKeyRef": {"name": "mlsched-11-secrets", "key": "HF_TOKEN"}}
        }
        whole = json.dumps(pod)
        for value in (*FILES.values(), *VARIABLES.values()):
            assert value not in whole


def test_the_files_are_mounted_beside_the_checkpoint_folder(kube, make_backend):
    kube.add_claim(NAMESPACE, "checkpoints")
    backend = make_backend(checkpoint_claim="checkpoints")

    backend.start(one_gpu_worker(secret_files=FILES))

    pod = kube.pod(NAMESPACE, "mlsched-7-0")
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"]}
    assert volumes["secret-files"]["secret"]["secretName"] == "mlsched-7-secrets"
    assert "persistentVolumeClaim" in volumes["checkpoints"]
    assert mounts == {
        "checkpoints": "/checkpoints/alpha/42",
        "secret-files": FOLDER,
        "stop-at": "/var/run/mlsched/stop-at",
        "hostfile": "/var/run/mlsched/hostfile",
        "shm": "/dev/shm",
    }


def test_stop_deletes_the_secret_holding_the_files(kube, backend):
    backend.start(two_worker_gang(secret_files=FILES))
    assert secret_names(kube) == ["mlsched-11-secrets", "mlsched-11-ssh"]  # test_ssh_keys

    backend.stop(11, grace_s=5)

    assert ("secrets", NAMESPACE, "mlsched-11-secrets", None) in kube.deletions
    assert (kube.pods(), kube.objects_of("secrets")) == ([], [])


def test_forget_deletes_the_secret_holding_the_files(kube, backend):
    backend.start(one_gpu_worker(secret_files=FILES))
    assert secret_names(kube) == ["mlsched-7-secrets"]
    kube.exit_pod(NAMESPACE, "mlsched-7-0", 0)
    status_becomes(backend, 7, 0, base.EXITED)

    backend.forget(7)

    assert (kube.pods(), kube.objects_of("secrets")) == ([], [])
    assert backend.status() == []


def test_forget_after_a_restart_deletes_the_secret_holding_the_files(kube, backend, make_backend):
    backend.start(one_gpu_worker(secret_files=FILES))
    assert secret_names(kube) == ["mlsched-7-secrets"]
    kube.exit_pod(NAMESPACE, "mlsched-7-0", 0)
    backend.close()
    restarted = make_backend()
    resumed(restarted, None)
    status_becomes(restarted, 7, 0, base.EXITED)

    restarted.forget(7)

    assert (kube.pods(), kube.objects_of("secrets")) == ([], [])


# The test server, as the API server and the kubelet judge a secret volume.


def test_a_pod_whose_secret_is_gone_waits_to_mount_it_and_never_runs(kube, backend):
    backend.start(one_gpu_worker(secret_files=FILES))
    kube.delete("secrets", NAMESPACE, "mlsched-7-secrets", None)

    kube.run_pod(NAMESPACE, "mlsched-7-0")

    waiting = status_becomes(backend, 7, 0, base.PENDING, reason="ContainerCreating")
    assert waiting.exit_code is None
    (event,) = kube.objects_of("events")
    assert (event["reason"], event["involvedObject"]["name"]) == ("FailedMount", "mlsched-7-0")
    assert event["message"] == (
        'MountVolume.SetUp failed for volume "secret-files" : secret "mlsched-7-secrets" not found'
    )


def test_a_pod_whose_secret_lacks_a_key_never_runs(kube, backend):
    backend.start(one_gpu_worker(secret_files=FILES))
    with kube.cond:  # replaced by one without the kubeconfig
        kube.delete("secrets", NAMESPACE, "mlsched-7-secrets", None)
        kube.create("secrets", NAMESPACE, {"metadata": {"name": "mlsched-7-secrets"},
                                           "stringData": {"GCP_KEY": KEY}})  # fmt: skip

    kube.run_pod(NAMESPACE, "mlsched-7-0")

    assert kube.pod(NAMESPACE, "mlsched-7-0")["status"]["phase"] == "Pending"
    (event,) = kube.objects_of("events")
    assert event["message"].endswith(": references non-existent secret key: KUBECONFIG")


def volume_pod(volume: client.V1Volume) -> client.V1Pod:
    container = client.V1Container(name="worker", image="registry.local/train:1")
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name="handmade"),
        spec=client.V1PodSpec(containers=[container], volumes=[volume]),
    )


# A volume of each kind of object whose keys a pod mounts as files: its source and the name of
# its field naming the object.
MOUNTED_OBJECTS = {
    "secret": (client.V1SecretVolumeSource, "secret_name", "secretName"),
    "config_map": (client.V1ConfigMapVolumeSource, "name", "name"),
}


@pytest.mark.parametrize("kind", MOUNTED_OBJECTS)
@pytest.mark.parametrize(
    ("source", "said"),
    [({"items": [client.V1KeyToPath(key="K", path="K")]}, "{name} is required"),
     ({"NAME": "s", "items": [client.V1KeyToPath(key="K", path="../K")]},
      "items path must not contain '..'"),
     ({"NAME": "s", "items": [client.V1KeyToPath(key="K", path="/etc/K")]},
      "items path must be a relative path"),
     ({"NAME": "s", "items": [client.V1KeyToPath(key="K/1", path="K")]},
      "items key must be a valid key"),
     ({"NAME": "s", "default_mode": 0o1777}, "mode must be between 0 and 0777")],
)  # fmt: skip
def test_the_api_server_refuses_a_malformed_secret_or_config_map_volume(
    kube, api_client, kind, source, said
):
    kube.create_namespace({"metadata": {"name": NAMESPACE}})
    made, field, name = MOUNTED_OBJECTS[kind]
    given = {field if key == "NAME" else key: value for key, value in source.items()}
    volume = client.V1Volume(name="files", **{kind: made(**given)})

    with pytest.raises(ApiException) as refused:
        client.CoreV1Api(api_client).create_namespaced_pod(NAMESPACE, volume_pod(volume))

    assert refused.value.status == 422
    assert said.format(name=name) in json.loads(refused.value.body)["message"]
    assert kube.pods() == []
