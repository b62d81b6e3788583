"""The job's secrets: a Secret per attempt in the tenant's namespace, which the worker pods' env
refers to by secretKeyRef (no pod holds a value), deleted with the attempt's other objects."""

import base64
import json

from clusters.backends import base
from clusters.backends.base import WorkerSpec
from tests.k8s.conftest import (
    NAMESPACE,
    attempt,
    env_of,
    one_gpu_worker,
    resumed,
    status_becomes,
    two_worker_gang,
)
from tests.k8s.server import ApiError

SECRETS = {"WANDB_API_KEY": "wk-0123456789abcdef", "HF_TOKEN": "hf_Zq8sEcReT"}
UNAVAILABLE = ApiError(503, "ServiceUnavailable", "etcdserver: leader changed")


def secret_of(kube, attempt_id):
    return kube.get("secrets", NAMESPACE, f"mlsched-{attempt_id}-secrets")


def opened(secret: dict) -> dict[str, str]:
    return {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}


def secret_refs(pod: dict) -> dict[str, dict]:
    """Each variable of the worker's env that takes its value from elsewhere: name -> source."""
    env = pod["spec"]["containers"][0]["env"]
    return {e["name"]: e["valueFrom"] for e in env if "valueFrom" in e}


# A creation the API server refuses, said with its own words (its Status's message).
DENIED = 'CreateFailed: 403 Forbidden: cannot create resource "secrets"'


def test_it_puts_the_attempts_secrets_in_a_secret_of_the_tenants_namespace(kube, backend):
    backend.start(two_worker_gang(secrets=SECRETS))

    secret = secret_of(kube, 11)
    assert opened(secret) == SECRETS
    assert (secret["type"], secret["immutable"]) == ("Opaque", True)
    assert secret["metadata"]["labels"] == {
        "mlsched.io/attempt": "11",
        "mlsched.io/job": "42",
        "mlsched.io/tenant": "alpha",
        "mlsched.io/cluster": "east",
    }


def test_each_pod_refers_to_the_secret_and_holds_no_value(kube, backend):
    backend.start(two_worker_gang(secrets=SECRETS))

    for name in ("mlsched-11-0", "mlsched-11-1"):
        pod = kube.pod(NAMESPACE, name)
        assert secret_refs(pod) == {
            key: {"secretKeyRef": {"name": "mlsched-11-secrets", "key": key}} for key in SECRETS
        }
        whole = json.dumps(pod)
        for value in SECRETS.values():
            assert value not in whole
        env = pod["spec"]["containers"][0]["env"]
        names = [e["name"] for e in env]
        assert names == sorted(names)
        assert "HF_TOKEN" in names and "WANDB_API_KEY" in names
        assert env_of(pod)["EPOCHS"] == "3"  # the job's own env, as before
        assert env_of(pod)["RANK"] == name[-1]


def test_a_variable_the_platform_sets_is_never_also_taken_from_the_secret(kube, backend):
    # Validation keeps secrets off the platform's names; were one there, its variable wins and
    # the pod never names the variable twice.
    cpu_only = WorkerSpec(rank=0, node="gpu-a", cpu_milli=2000, memory_mb=4096)
    shadowing = {"RANK": "9", "NVIDIA_VISIBLE_DEVICES": "all", **SECRETS}
    backend.start(attempt(7, 1, (cpu_only,), secrets=shadowing))

    pod = kube.pod(NAMESPACE, "mlsched-7-0")
    names = [e["name"] for e in pod["spec"]["containers"][0]["env"]]
    assert len(names) == len(set(names))
    assert set(secret_refs(pod)) == set(SECRETS)
    assert (env_of(pod)["RANK"], env_of(pod)["NVIDIA_VISIBLE_DEVICES"]) == ("0", "void")


def test_an_attempt_without_secrets_gets_no_secret(kube, backend):
    backend.start(one_gpu_worker(attempt_id=7, secrets=SECRETS))
    backend.start(one_gpu_worker(attempt_id=8))

    assert [s["metadata"]["name"] for s in kube.objects_of("secrets")] == ["mlsched-7-secrets"]
    assert secret_refs(kube.pod(NAMESPACE, "mlsched-8-0")) == {}
    assert kube.count_requests("POST", f"/api/v1/namespaces/{NAMESPACE}/secrets") == 1


def test_the_secret_is_owned_by_the_attempts_pods(kube, backend):
    backend.start(two_worker_gang(secrets=SECRETS))

    owners = secret_of(kube, 11)["metadata"]["ownerReferences"]
    pods = {p["metadata"]["name"]: p["metadata"]["uid"] for p in kube.pods()}
    assert sorted((o["kind"], o["name"], o["uid"]) for o in owners) == [
        ("Pod", name, uid) for name, uid in sorted(pods.items())
    ]


def test_a_failed_owner_patch_leaves_the_attempt_running(kube, backend):
    kube.fail("PATCH", "/secrets/mlsched-7-secrets$", UNAVAILABLE)

    backend.start(one_gpu_worker(secrets=SECRETS))

    assert opened(secret_of(kube, 7)) == SECRETS
    assert backend.status() == [base.WorkerStatus(7, 0, base.PENDING)]


def test_a_repeated_start_finds_the_secret_there(kube, backend, make_backend):
    backend.start(one_gpu_worker(secrets=SECRETS))
    backend.start(one_gpu_worker(secrets=SECRETS))
    backend.close()
    make_backend().start(one_gpu_worker(secrets=SECRETS))  # after an agent restart

    assert kube.count_requests("POST", f"/api/v1/namespaces/{NAMESPACE}/secrets") == 3
    assert [s["metadata"]["name"] for s in kube.objects_of("secrets")] == ["mlsched-7-secrets"]
    assert opened(secret_of(kube, 7)) == SECRETS
    assert [p["metadata"]["name"] for p in kube.pods()] == ["mlsched-7-0"]
    assert backend.status() == [base.WorkerStatus(7, 0, base.PENDING)]


def test_a_secret_it_cannot_create_fails_the_start_before_any_pod(kube, backend):
    kube.reject["secrets"] = ApiError(403, "Forbidden", 'cannot create resource "secrets"')

    backend.start(two_worker_gang(secrets=SECRETS))

    assert kube.pods() == []
    assert [(s.rank, s.phase, s.reason) for s in backend.status()] == [
        (0, base.FAILED, DENIED),
        (1, base.FAILED, DENIED),
    ]


def test_stop_deletes_the_secret(kube, backend):
    backend.start(two_worker_gang(secrets=SECRETS))
    kube.run_pod(NAMESPACE, "mlsched-11-0")
    kube.run_pod(NAMESPACE, "mlsched-11-1")

    backend.stop(11, grace_s=5)

    assert ("secrets", NAMESPACE, "mlsched-11-secrets", None) in kube.deletions
    assert kube.objects_of("secrets") == []


def test_stop_keeps_the_secret_while_a_pods_delete_fails(kube, make_backend):
    # The pod left may yet start its container, which needs the Secret.
    backend = make_backend(retry_s=60)  # no retry of its own within the test
    backend.start(one_gpu_worker(secrets=SECRETS))
    kube.fail("DELETE", "/pods/mlsched-7-0$", UNAVAILABLE)

    backend.stop(7, grace_s=5)
    assert [s["metadata"]["name"] for s in kube.objects_of("secrets")] == ["mlsched-7-secrets"]
    backend.stop(7, grace_s=5)

    assert (kube.pods(), kube.objects_of("secrets")) == ([], [])


def test_forget_deletes_the_secret(kube, backend):
    backend.start(one_gpu_worker(secrets=SECRETS))
    kube.exit_pod(NAMESPACE, "mlsched-7-0", 0)
    status_becomes(backend, 7, 0, base.EXITED)

    backend.forget(7)

    assert ("secrets", NAMESPACE, "mlsched-7-secrets", None) in kube.deletions
    assert kube.objects_of("secrets") == []
    assert backend.status() == []


def test_forget_deletes_the_secret_of_an_attempt_found_after_a_restart(kube, backend, make_backend):
    backend.start(one_gpu_worker(secrets=SECRETS))
    kube.exit_pod(NAMESPACE, "mlsched-7-0", 0)
    backend.close()
    restarted = make_backend()  # it never saw the start, nor whether the job had secrets
    resumed(restarted, None)
    status_becomes(restarted, 7, 0, base.EXITED)
    assert opened(secret_of(kube, 7)) == SECRETS

    restarted.forget(7)

    assert ("secrets", NAMESPACE, "mlsched-7-secrets", None) in kube.deletions
    assert (kube.pods(), kube.objects_of("secrets")) == ([], [])
    assert restarted.status() == []


def test_forget_keeps_an_attempt_whose_secret_delete_failed(kube, backend):
    backend.start(one_gpu_worker(secrets=SECRETS))
    kube.exit_pod(NAMESPACE, "mlsched-7-0", 0)
    status_becomes(backend, 7, 0, base.EXITED)
    kube.fail("DELETE", "/secrets/mlsched-7-secrets$", UNAVAILABLE)

    backend.forget(7)
    assert backend.status() == [base.WorkerStatus(7, 0, base.EXITED, 0)]
    backend.forget(7)

    assert kube.objects_of("secrets") == []
    assert backend.status() == []
