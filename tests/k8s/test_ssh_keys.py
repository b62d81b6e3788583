"""A gang's SSH files on Kubernetes: a Secret per attempt of more than one worker
(`mlsched-<attempt id>-ssh`) holding a key pair of its own, the public key as authorized_keys
and a client config logging in with the key, created before the pods, owned by them, mounted
read-only in every worker at /var/run/mlsched/ssh, root's alone to read, whose MLSCHED_SSH_DIR
names the folder; deleted with the attempt's other objects. A single worker gets none."""

import base64

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    PublicFormat,
    load_ssh_private_key,
)

from clusters.backends import base
from tests.k8s.conftest import (
    NAMESPACE,
    env_of,
    one_gpu_worker,
    resumed,
    status_becomes,
    two_worker_gang,
)

FOLDER = "/var/run/mlsched/ssh"
SECRET = "mlsched-11-ssh"
VOLUME = {"name": "ssh", "secret": {"secretName": SECRET, "defaultMode": 0o400}}
MOUNT = {"name": "ssh", "mountPath": FOLDER, "readOnly": True}
GANG = ("mlsched-11-0", "mlsched-11-1")


def opened(kube, name=SECRET) -> dict[str, str]:
    secret = kube.get("secrets", NAMESPACE, name)
    return {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}


def secret_names(kube) -> list[str]:
    return [s["metadata"]["name"] for s in kube.objects_of("secrets")]


def run_gang(kube) -> None:
    for name in GANG:
        kube.run_pod(NAMESPACE, name)


def test_a_gangs_start_creates_an_immutable_secret_of_its_ssh_files(kube, backend):
    backend.start(two_worker_gang())

    secret = kube.get("secrets", NAMESPACE, SECRET)
    assert (secret["type"], secret["immutable"]) == ("Opaque", True)
    # Labelled as the attempt's other objects beside its pods (test_hostfile).
    hosts = kube.get("configmaps", NAMESPACE, "mlsched-11-hosts")
    assert secret["metadata"]["labels"] == hosts["metadata"]["labels"]
    assert secret["metadata"]["labels"]["mlsched.io/attempt"] == "11"
    files = opened(kube)
    assert sorted(files) == ["authorized_keys", "config", "id_ed25519", "id_ed25519.pub"]
    key = load_ssh_private_key(files["id_ed25519"].encode(), password=None)
    assert isinstance(key, Ed25519PrivateKey)
    public = key.public_key().public_bytes(Encoding.OpenSSH, PublicFormat.OpenSSH).decode()
    assert files["id_ed25519.pub"] == files["authorized_keys"] == f"{public} mlsched-attempt-11\n"
    assert f'IdentityFile "{FOLDER}/id_ed25519"' in files["config"].splitlines()[1]


def test_the_secret_is_created_before_the_pods(kube, backend):
    backend.start(two_worker_gang())

    posted = [path for method, path, _ in kube.requests if method == "POST"]
    secrets = posted.index(f"/api/v1/namespaces/{NAMESPACE}/secrets")
    assert secrets < posted.index(f"/api/v1/namespaces/{NAMESPACE}/pods")
    assert secret_names(kube) == [SECRET]


def test_each_attempt_has_a_key_pair_of_its_own(kube, backend):
    backend.start(two_worker_gang())
    backend.start(two_worker_gang(attempt_id=12, number=2))

    assert opened(kube)["id_ed25519"] != opened(kube, "mlsched-12-ssh")["id_ed25519"]


def test_every_pod_mounts_the_secret_read_only_and_is_told_its_folder(kube, backend):
    backend.start(two_worker_gang())

    for name in GANG:
        pod = kube.pod(NAMESPACE, name)
        assert VOLUME in pod["spec"]["volumes"]
        assert MOUNT in pod["spec"]["containers"][0]["volumeMounts"]
        assert env_of(pod)["MLSCHED_SSH_DIR"] == FOLDER
    run_gang(kube)  # the kubelet finds the Secret
    assert status_becomes(backend, 11, 1, base.RUNNING)
    assert kube.objects_of("events") == []


def test_a_single_worker_gets_no_secret_folder_or_variable(kube, backend):
    backend.start(one_gpu_worker())

    pod = kube.pod(NAMESPACE, "mlsched-7-0")
    assert secret_names(kube) == []
    assert "ssh" not in [v["name"] for v in pod["spec"]["volumes"]]
    assert FOLDER not in [m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"]]
    assert "MLSCHED_SSH_DIR" not in env_of(pod)


def test_the_secret_is_owned_by_the_attempts_pods(kube, backend):
    backend.start(two_worker_gang())

    owners = kube.get("secrets", NAMESPACE, SECRET)["metadata"]["ownerReferences"]
    pods = {p["metadata"]["name"]: p["metadata"]["uid"] for p in kube.pods()}
    assert sorted((o["kind"], o["name"], o["uid"]) for o in owners) == [
        ("Pod", name, uid) for name, uid in sorted(pods.items())
    ]


def test_stop_deletes_the_secret(kube, backend):
    backend.start(two_worker_gang())
    run_gang(kube)

    backend.stop(11, grace_s=5)

    assert ("secrets", NAMESPACE, SECRET, None) in kube.deletions
    assert (kube.pods(), secret_names(kube)) == ([], [])


def test_a_backend_restarted_after_the_start_deletes_the_secret_on_stop(
    kube, backend, make_backend
):
    backend.start(two_worker_gang())
    run_gang(kube)
    backend.close()
    restarted = make_backend()  # it never saw the start
    status_becomes(restarted, 11, 0, base.RUNNING)

    restarted.stop(11, grace_s=5)

    assert ("secrets", NAMESPACE, SECRET, None) in kube.deletions
    assert (kube.pods(), secret_names(kube)) == ([], [])


def test_forget_after_a_restart_deletes_the_secret(kube, backend, make_backend):
    backend.start(two_worker_gang())
    for name in GANG:
        kube.exit_pod(NAMESPACE, name, 0)
    backend.close()
    restarted = make_backend()
    for rank in (0, 1):
        resumed(restarted, None, key=(11, rank))
        status_becomes(restarted, 11, rank, base.EXITED)
    assert secret_names(kube) == [SECRET]

    restarted.forget(11)

    assert (kube.pods(), secret_names(kube)) == ([], [])
    assert restarted.status() == []
