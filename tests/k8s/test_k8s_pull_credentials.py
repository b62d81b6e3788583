"""A team's registry credential: a Secret of type kubernetes.io/dockerconfigjson per attempt in
the tenant's namespace, which the worker pods pull with (imagePullSecrets; no pod holds the
password), owned by the pods and deleted with the attempt's other objects."""

import base64
import json

import pytest

from clusters.backends import base
from tests.k8s.conftest import (
    NAMESPACE,
    one_gpu_worker,
    resumed,
    status_becomes,
    two_worker_gang,
)
from tests.k8s.server import ApiError

PASSWORD = "ghp_0123456789abcdefghij"
GHCR = {"registry": "ghcr.io", "username": "acme-bot", "password": PASSWORD}
UNAVAILABLE = ApiError(503, "ServiceUnavailable", "etcdserver: leader changed")


def pull_secret_of(kube, attempt_id):
    return kube.get("secrets", NAMESPACE, f"mlsched-{attempt_id}-pull")


def docker_config(secret: dict) -> dict:
    return json.loads(base64.b64decode(secret["data"][".dockerconfigjson"]))


def secret_names(kube) -> list[str]:
    return sorted(s["metadata"]["name"] for s in kube.objects_of("secrets"))


# A creation the API server refuses, said with its own words (its Status's message).
DENIED = 'CreateFailed: 403 Forbidden: cannot create resource "secrets"'


def test_it_puts_the_credential_in_a_docker_config_secret_of_the_tenants_namespace(kube, backend):
    backend.start(two_worker_gang(pull_credential=GHCR))

    secret = pull_secret_of(kube, 11)
    assert (secret["type"], secret["immutable"]) == ("kubernetes.io/dockerconfigjson", True)
    assert secret["metadata"]["labels"] == {
        "mlsched.io/attempt": "11",
        "mlsched.io/job": "42",
        "mlsched.io/tenant": "alpha",
        "mlsched.io/cluster": "east",
    }
    auth = docker_config(secret)["auths"]["ghcr.io"]
    assert (auth["username"], auth["password"]) == ("acme-bot", PASSWORD)
    assert base64.b64decode(auth["auth"]).decode() == f"acme-bot:{PASSWORD}"


@pytest.mark.parametrize(
    ("registry", "key"),
    [("docker.io", "https://index.docker.io/v1/"),
     ("index.docker.io", "https://index.docker.io/v1/"),
     ("registry-1.docker.io", "https://index.docker.io/v1/"),
     ("registry.example.com:5000", "registry.example.com:5000"),
     ("localhost:5000", "localhost:5000")],
)  # fmt: skip
def test_docker_hub_is_keyed_as_docker_reads_it_and_a_port_is_kept(kube, backend, registry, key):
    backend.start(one_gpu_worker(pull_credential={**GHCR, "registry": registry}))

    assert list(docker_config(pull_secret_of(kube, 7))["auths"]) == [key]


def test_each_pod_pulls_with_it_and_holds_no_password(kube, backend):
    backend.start(two_worker_gang(pull_credential=GHCR))

    for name in ("mlsched-11-0", "mlsched-11-1"):
        pod = kube.pod(NAMESPACE, name)
        assert pod["spec"]["imagePullSecrets"] == [{"name": "mlsched-11-pull"}]
        assert PASSWORD not in json.dumps(pod)


def test_an_attempt_without_a_credential_gets_no_pull_secret(kube, backend):
    backend.start(one_gpu_worker(attempt_id=7, pull_credential=GHCR))
    backend.start(one_gpu_worker(attempt_id=8))

    assert secret_names(kube) == ["mlsched-7-pull"]
    assert "imagePullSecrets" in kube.pod(NAMESPACE, "mlsched-7-0")["spec"]
    assert "imagePullSecrets" not in kube.pod(NAMESPACE, "mlsched-8-0")["spec"]


def test_a_job_with_secrets_and_a_credential_gets_both_secrets(kube, backend):
    backend.start(one_gpu_worker(secrets={"HF_TOKEN": "hf_abcdefgh"}, pull_credential=GHCR))

    assert secret_names(kube) == ["mlsched-7-pull", "mlsched-7-secrets"]


def test_the_pull_secret_is_owned_by_the_attempts_pods(kube, backend):
    backend.start(two_worker_gang(pull_credential=GHCR))

    owners = pull_secret_of(kube, 11)["metadata"]["ownerReferences"]
    pods = {p["metadata"]["name"]: p["metadata"]["uid"] for p in kube.pods()}
    assert sorted((o["kind"], o["name"], o["uid"]) for o in owners) == [
        ("Pod", name, uid) for name, uid in sorted(pods.items())
    ]


def test_a_pull_secret_it_cannot_create_fails_the_start_before_any_pod(kube, backend):
    kube.reject["secrets"] = ApiError(403, "Forbidden", 'cannot create resource "secrets"')

    backend.start(two_worker_gang(pull_credential=GHCR))

    assert kube.pods() == []
    assert [(s.rank, s.phase, s.reason) for s in backend.status()] == [
        (0, base.FAILED, DENIED),
        (1, base.FAILED, DENIED),
    ]


@pytest.mark.parametrize("config", [{".dockerconfigjson": "{not json"},
                                    {".dockerconfigjson": '["auths"]'},
                                    {"config.json": "{}"}])  # fmt: skip
def test_the_test_server_refuses_a_docker_config_the_api_server_would(kube, backend, config):
    backend.start(one_gpu_worker(pull_credential=GHCR))  # it takes the backend's, in a namespace
    body = {"metadata": {"name": "bad"}, "type": "kubernetes.io/dockerconfigjson",
            "stringData": config}  # fmt: skip

    with pytest.raises(ApiError) as refused:
        kube.create("secrets", NAMESPACE, body)

    assert refused.value.code == 422
    assert secret_names(kube) == ["mlsched-7-pull"]


def test_stop_deletes_the_pull_secret_after_the_pods(kube, backend):
    backend.start(two_worker_gang(pull_credential=GHCR))
    kube.run_pod(NAMESPACE, "mlsched-11-0")
    kube.run_pod(NAMESPACE, "mlsched-11-1")

    backend.stop(11, grace_s=5)

    # Then the hostfile's ConfigMap (test_hostfile).
    deleted = [(kind, name) for kind, _, name, _ in kube.deletions if kind != "configmaps"]
    assert deleted[-1] == ("secrets", "mlsched-11-pull")
    assert {("pods", "mlsched-11-0"), ("pods", "mlsched-11-1")} <= set(deleted[:-1])
    assert secret_names(kube) == []


def test_stop_keeps_both_secrets_while_a_pods_delete_fails(kube, make_backend):
    # The pod left may yet start its container: it needs its variables and to pull its image.
    backend = make_backend(retry_s=60)  # no retry of its own within the test
    backend.start(one_gpu_worker(secrets={"HF_TOKEN": "hf_abcdefgh"}, pull_credential=GHCR))
    kube.fail("DELETE", "/pods/mlsched-7-0$", UNAVAILABLE)

    backend.stop(7, grace_s=5)
    assert secret_names(kube) == ["mlsched-7-pull", "mlsched-7-secrets"]
    backend.stop(7, grace_s=5)

    assert (kube.pods(), secret_names(kube)) == ([], [])


def test_forget_deletes_the_pull_secret(kube, backend):
    backend.start(one_gpu_worker(pull_credential=GHCR))
    kube.exit_pod(NAMESPACE, "mlsched-7-0", 0)
    status_becomes(backend, 7, 0, base.EXITED)

    backend.forget(7)

    assert ("secrets", NAMESPACE, "mlsched-7-pull", None) in kube.deletions
    assert secret_names(kube) == [] and backend.status() == []


def test_forget_deletes_the_pull_secret_of_an_attempt_found_after_a_restart(
    kube, backend, make_backend
):
    backend.start(one_gpu_worker(pull_credential=GHCR))
    kube.exit_pod(NAMESPACE, "mlsched-7-0", 0)
    backend.close()
    restarted = make_backend()  # it never saw the start, nor whether it pulled with one
    resumed(restarted, None)
    status_becomes(restarted, 7, 0, base.EXITED)
    assert secret_names(kube) == ["mlsched-7-pull"]

    restarted.forget(7)

    assert (kube.pods(), secret_names(kube)) == ([], [])
    assert restarted.status() == []
