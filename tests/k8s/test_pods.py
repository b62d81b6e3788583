"""The objects start() creates, read back from the test server."""

import dataclasses
import time

from clusters.backends import base
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


def test_it_binds_each_worker_pod_to_its_node(kube, backend):
    backend.start(two_worker_gang())

    assert kube.pod(NAMESPACE, "mlsched-11-0")["spec"]["nodeName"] == "gpu-a"
    assert kube.pod(NAMESPACE, "mlsched-11-1")["spec"]["nodeName"] == "gpu-b"


def test_it_gives_pods_guaranteed_qos_with_whole_gpus(kube, backend):
    backend.start(one_gpu_worker())

    pod = kube.pod(NAMESPACE, "mlsched-7-0")
    want = {"cpu": "4000m", "memory": "16384Mi", "nvidia.com/gpu": "1"}
    resources = pod["spec"]["containers"][0]["resources"]
    assert resources == {"requests": want, "limits": want}
    assert pod["status"]["qosClass"] == "Guaranteed"


def test_it_gives_each_worker_a_dev_shm_in_memory_as_large_as_its_memory(kube, backend):
    # The runtime's own /dev/shm is 64 MiB: DataLoader workers and NCCL die of a bus error.
    backend.start(one_gpu_worker())

    pod = kube.pod(NAMESPACE, "mlsched-7-0")
    (shm,) = [v for v in pod["spec"]["volumes"] if "emptyDir" in v]
    (mount,) = [m for m in pod["spec"]["containers"][0]["volumeMounts"] if m["name"] == shm["name"]]
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "16384Mi"}
    assert mount["mountPath"] == "/dev/shm"


def test_it_never_restarts_a_pod(kube, backend):
    backend.start(one_gpu_worker())

    assert kube.pod(NAMESPACE, "mlsched-7-0")["spec"]["restartPolicy"] == "Never"


def test_it_creates_the_tenants_namespace(kube, backend):
    backend.start(one_gpu_worker())

    assert kube.namespaces[NAMESPACE]["metadata"]["labels"] == {"mlsched.io/tenant": "alpha"}
    assert kube.pod(NAMESPACE, "mlsched-7-0")["metadata"]["namespace"] == NAMESPACE


def test_tenants_whose_slugs_differ_only_in_case_or_underscore_get_separate_namespaces(
    kube, backend
):
    backend.start(one_gpu_worker(attempt_id=7, tenant="team_a"))
    backend.start(one_gpu_worker(attempt_id=8, tenant="Team-a"))
    backend.start(one_gpu_worker(attempt_id=9, tenant="team-a"))

    names = {p["metadata"]["namespace"] for p in kube.pods()}
    assert len(names) == 3
    assert "mlsched-team-a" in names  # a slug that is already a DNS label keeps its name
    for name in names:
        assert len(name) <= 63 and kube.namespaces[name]


def test_it_creates_a_resource_quota_per_namespace(kube, make_backend):
    backend = make_backend(namespace_quota={"requests.nvidia.com/gpu": "16"})

    backend.start(one_gpu_worker())

    (quota,) = kube.objects_of("resourcequotas")
    assert quota["metadata"]["namespace"] == NAMESPACE
    assert quota["spec"]["hard"] == {"requests.nvidia.com/gpu": "16"}


def test_it_labels_pods_with_attempt_job_rank_tenant_and_cluster(kube, backend):
    backend.start(two_worker_gang())

    assert kube.pod(NAMESPACE, "mlsched-11-1")["metadata"]["labels"] == {
        "mlsched.io/attempt": "11",
        "mlsched.io/job": "42",
        "mlsched.io/rank": "1",
        "mlsched.io/tenant": "alpha",
        "mlsched.io/cluster": "east",
    }


def test_it_gives_a_gang_its_rendezvous_env(kube, backend):
    backend.start(two_worker_gang())

    env = env_of(kube.pod(NAMESPACE, "mlsched-11-1"))
    assert env["RANK"] == "1"
    assert env["WORLD_SIZE"] == "2"
    assert env["LOCAL_RANK"] == "0"
    assert env["MASTER_ADDR"] == "w0.mlsched-11.mlsched-alpha.svc.cluster.local"
    assert env["MASTER_PORT"] == "29500"
    assert env["EPOCHS"] == "3"


def test_each_worker_is_told_where_every_worker_of_its_gang_is_by_rank(kube, backend):
    backend.start(two_worker_gang())
    backend.start(one_gpu_worker())

    each = {env_of(kube.pod(NAMESPACE, f"mlsched-11-{rank}"))["MLSCHED_WORKER_ADDRS"]
            for rank in (0, 1)}  # fmt: skip
    assert each == {"w0.mlsched-11.mlsched-alpha.svc.cluster.local,"
                    "w1.mlsched-11.mlsched-alpha.svc.cluster.local"}  # fmt: skip
    # Each name is its pod's: hostname w<rank> in the gang's Service, as MASTER_ADDR is rank 0's.
    pod = kube.pod(NAMESPACE, "mlsched-11-1")
    assert (pod["spec"]["hostname"], pod["spec"]["subdomain"]) == ("w1", "mlsched-11")
    assert env_of(kube.pod(NAMESPACE, "mlsched-7-0"))["MLSCHED_WORKER_ADDRS"] == "localhost"


def test_it_makes_rank_0_resolvable_through_the_headless_service(kube, backend):
    backend.start(two_worker_gang())

    pod = kube.pod(NAMESPACE, "mlsched-11-0")
    assert (pod["spec"]["hostname"], pod["spec"]["subdomain"]) == ("w0", "mlsched-11")
    (service,) = kube.objects_of("services")
    assert service["metadata"]["name"] == "mlsched-11"
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"] == {"mlsched.io/attempt": "11"}
    assert service["spec"]["ports"][0]["port"] == 29500


def test_it_creates_no_service_for_a_single_worker(kube, backend):
    backend.start(one_gpu_worker())

    assert kube.objects_of("services") == []
    assert env_of(kube.pod(NAMESPACE, "mlsched-7-0"))["MASTER_ADDR"] == "localhost"


def test_it_numbers_gpus_from_zero_inside_the_container(kube, backend):
    backend.start(two_worker_gang())

    env = env_of(kube.pod(NAMESPACE, "mlsched-11-0"))
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"
    assert env["MLSCHED_GPU_INDICES"] == "4,5,6,7"


def test_it_tells_a_shard_which_it_is_and_of_how_many(kube, backend):
    backend.start(dataclasses.replace(one_gpu_worker(), shard_index=2, shards=5))

    env = env_of(kube.pod(NAMESPACE, "mlsched-7-0"))
    assert (env["MLSCHED_SHARD_INDEX"], env["MLSCHED_SHARDS"]) == ("2", "5")


def test_it_tells_a_worker_when_its_runtime_limit_stops_it_and_its_grace(kube, backend):
    before = time.time()
    job = one_gpu_worker()
    backend.start(job)

    pod = kube.pod(NAMESPACE, "mlsched-7-0")
    env = env_of(pod)
    # The pod's deadline counts from when the kubelet takes it, later: the time is never late.
    assert pod["spec"]["activeDeadlineSeconds"] == job.max_runtime_s
    assert before + job.max_runtime_s - 1 <= int(env["MLSCHED_STOP_AT"])
    assert int(env["MLSCHED_STOP_AT"]) <= time.time() + job.max_runtime_s
    assert env["MLSCHED_STOP_GRACE_S"] == str(job.stop_grace_s)


def test_it_resumes_from_the_same_checkpoint_on_attempt_2(kube, backend):
    backend.start(one_gpu_worker(attempt_id=7, number=1))
    backend.start(one_gpu_worker(attempt_id=8, number=2))

    first = env_of(kube.pod(NAMESPACE, "mlsched-7-0"))
    second = env_of(kube.pod(NAMESPACE, "mlsched-8-0"))
    assert "MLSCHED_RESUME" not in first
    assert second["MLSCHED_RESUME"] == "1"
    assert first["MLSCHED_CHECKPOINT_DIR"] == second["MLSCHED_CHECKPOINT_DIR"]
    assert (first["MLSCHED_ATTEMPT"], second["MLSCHED_ATTEMPT"]) == ("1", "2")


def claim_paths(pod: dict) -> dict[str, str]:
    """What the container sees of the checkpoint claim: mount path -> the folder of the claim
    mounted there ("" for the claim's root), as the kubelet resolves subPath."""
    claims = {
        v["name"]: v["persistentVolumeClaim"]["claimName"]
        for v in pod["spec"].get("volumes") or []
        if "persistentVolumeClaim" in v
    }
    mounts = pod["spec"]["containers"][0].get("volumeMounts") or []
    return {m["mountPath"]: m.get("subPath", "") for m in mounts if m["name"] in claims}


def test_it_mounts_only_the_jobs_own_checkpoint_folder_where_the_job_is_told(kube, make_backend):
    kube.add_claim(NAMESPACE, "checkpoints")
    backend = make_backend(checkpoint_claim="checkpoints")

    backend.start(one_gpu_worker())

    pod = kube.pod(NAMESPACE, "mlsched-7-0")
    assert pod["spec"]["volumes"][0]["persistentVolumeClaim"] == {"claimName": "checkpoints"}
    assert claim_paths(pod) == {"/checkpoints/alpha/42": "alpha/42"}
    assert env_of(pod)["MLSCHED_CHECKPOINT_DIR"] == "/checkpoints/alpha/42"


def test_pods_of_tenants_sharing_one_checkpoint_store_see_only_their_own_folders(
    kube, make_backend
):
    for namespace in (NAMESPACE, "mlsched-beta"):
        kube.add_claim(namespace, "checkpoints")  # every claim shows the same store
    backend = make_backend(checkpoint_claim="checkpoints")

    backend.start(one_gpu_worker(attempt_id=7, job_id=42, checkpoint_dir="alpha/42"))
    backend.start(one_gpu_worker(attempt_id=8, job_id=43, tenant="beta", checkpoint_dir="beta/43"))

    alpha, beta = kube.pod(NAMESPACE, "mlsched-7-0"), kube.pod("mlsched-beta", "mlsched-8-0")
    assert list(claim_paths(alpha).values()) == ["alpha/42"]  # never the store's root
    assert list(claim_paths(beta).values()) == ["beta/43"]


def test_the_agent_reads_the_marker_where_the_pod_writes_it(kube, make_backend, tmp_path):
    kube.add_claim(NAMESPACE, "checkpoints")
    backend = make_backend(checkpoint_claim="checkpoints", checkpoint_mount=str(tmp_path))
    backend.start(one_gpu_worker())
    kube.run_pod(NAMESPACE, "mlsched-7-0")
    pod = kube.pod(NAMESPACE, "mlsched-7-0")

    # The job touches $MLSCHED_CHECKPOINT_MARKER: resolve it on the claim, as the kubelet does.
    marker = env_of(pod)["MLSCHED_CHECKPOINT_MARKER"]
    (mount_path, folder), *_ = claim_paths(pod).items()
    on_claim = tmp_path / folder / marker.removeprefix(mount_path + "/")
    on_claim.parent.mkdir(parents=True)
    on_claim.touch()

    status = status_becomes(backend, 7, 0, base.RUNNING)
    assert status.checkpoint_at == on_claim.stat().st_mtime


def test_it_refuses_a_checkpoint_folder_that_leaves_the_job(kube, make_backend):
    kube.add_claim(NAMESPACE, "checkpoints")
    backend = make_backend(checkpoint_claim="checkpoints")

    backend.start(one_gpu_worker(checkpoint_dir="alpha/../beta/43"))

    (status,) = backend.status()
    assert status.phase == base.FAILED
    assert "unsafe checkpoint folder" in status.reason
    assert kube.pods() == []


def test_it_fails_a_start_in_a_namespace_without_the_checkpoint_claim(kube, make_backend):
    # The claim is the platform team's to provide in every tenant namespace: without it the
    # pods would wait for their volume forever, holding the GPUs mlsched gave them.
    backend = make_backend(checkpoint_claim="checkpoints")

    backend.start(one_gpu_worker())

    (status,) = backend.status()
    assert (status.phase, status.reason) == (
        base.FAILED,
        'CreateFailed: checkpoint claim "checkpoints" missing in mlsched-alpha',
    )
    assert kube.pods() == []
    kube.add_claim(NAMESPACE, "checkpoints")
    backend.start(one_gpu_worker())  # the retry, once the claim is there
    assert backend.status() == [base.WorkerStatus(7, 0, base.PENDING)]


SAME_NAMESPACE_ONLY = {
    "podSelector": {},
    "policyTypes": ["Ingress"],
    "ingress": [{"from": [{"podSelector": {}}]}],
}


def test_it_lets_only_pods_of_the_tenants_namespace_reach_its_pods(kube, backend):
    backend.start(two_worker_gang())
    backend.start(two_worker_gang(attempt_id=12))  # again: 409, one policy

    (policy,) = kube.objects_of("networkpolicies")
    assert policy["metadata"]["namespace"] == NAMESPACE
    assert policy["spec"] == SAME_NAMESPACE_ONLY


def test_it_uses_a_network_policy_made_in_advance_without_rights_to_create_one(kube, backend):
    kube.add_claim(NAMESPACE, "unused")  # makes the namespace
    policy = {"metadata": {"name": "mlsched-same-namespace-only"}, "spec": SAME_NAMESPACE_ONLY}
    kube.create("networkpolicies", NAMESPACE, policy)
    kube.reject["networkpolicies"] = ApiError(403, "Forbidden", "cannot create networkpolicies")

    backend.start(one_gpu_worker())

    assert kube.pod(NAMESPACE, "mlsched-7-0")["spec"]["nodeName"] == "gpu-a"


def test_it_starts_no_pod_unprotected_without_rights_to_create_the_policy(kube, backend):
    kube.reject["networkpolicies"] = ApiError(403, "Forbidden", "cannot create networkpolicies")

    backend.start(one_gpu_worker())

    (status,) = backend.status()
    assert status.phase == base.FAILED
    assert "NetworkPolicy" in status.reason
    assert kube.pods() == []


def test_it_can_leave_isolation_to_the_platform_team(kube, make_backend):
    backend = make_backend(isolate_namespaces=False)

    backend.start(one_gpu_worker())

    assert kube.objects_of("networkpolicies") == []
    assert kube.pod(NAMESPACE, "mlsched-7-0")


def test_it_requests_no_gpu_resource_for_a_fractional_share(kube, backend):
    share = WorkerSpec(rank=0, node="gpu-a", gpu_indices=(3,), gpu_milli=250, cpu_milli=1000)

    backend.start(attempt(9, 1, (share,)))

    pod = kube.pod(NAMESPACE, "mlsched-9-0")
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"cpu": "1000m"}
    env = env_of(pod)
    assert (env["NVIDIA_VISIBLE_DEVICES"], env["CUDA_VISIBLE_DEVICES"]) == ("3", "0")
    assert env["MLSCHED_GPU_MILLI"] == "250"


def test_it_starts_an_attempt_twice_without_duplicates(kube, backend):
    backend.start(two_worker_gang())
    backend.start(two_worker_gang())

    assert sorted(p["metadata"]["name"] for p in kube.pods()) == ["mlsched-11-0", "mlsched-11-1"]
    assert len(kube.objects_of("services")) == 1
    assert kube.count_requests("POST", f"/api/v1/namespaces/{NAMESPACE}/pods") == 4


def test_it_uses_a_namespace_made_in_advance_without_rights_to_create_one(kube, backend):
    kube.create_namespace({"metadata": {"name": NAMESPACE}})
    kube.reject["namespaces"] = ApiError(403, "Forbidden", "cannot create namespaces")

    backend.start(one_gpu_worker())

    assert kube.pod(NAMESPACE, "mlsched-7-0")["spec"]["nodeName"] == "gpu-a"


def test_pods_tolerate_the_taints_the_agent_is_told_to_and_run_on_such_a_node(kube, make_backend):
    # Nodes set apart for mlsched's work: tainted NoExecute, so that other pods are refused.
    kube.taint("gpu-a", "dedicated", "NoExecute", "mlsched")
    backend = make_backend(tolerated_taints=("dedicated",))

    backend.start(one_gpu_worker())
    kube.run_pod(NAMESPACE, "mlsched-7-0")

    pod = kube.pod(NAMESPACE, "mlsched-7-0")
    assert pod["spec"]["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]
    assert status_becomes(backend, 7, 0, base.RUNNING)


def test_a_pod_that_does_not_tolerate_its_nodes_taint_is_refused_by_the_kubelet(kube, backend):
    kube.taint("gpu-a", "dedicated", "NoExecute", "mlsched")

    backend.start(one_gpu_worker())
    kube.run_pod(NAMESPACE, "mlsched-7-0")

    assert "tolerations" not in kube.pod(NAMESPACE, "mlsched-7-0")["spec"]
    assert status_becomes(backend, 7, 0, base.FAILED, reason="UntoleratedTaint")


def test_a_gpu_workers_pod_runs_in_the_gpu_runtime_class_a_cpu_workers_in_the_default(
    kube, make_backend
):
    kube.runtime_classes.add("nvidia")  # k3s: the NVIDIA runtime is not the nodes' default
    backend = make_backend(gpu_runtime_class="nvidia")
    cpu_only = base.WorkerSpec(rank=0, node="gpu-b", cpu_milli=2000, memory_mb=4096)

    backend.start(one_gpu_worker())
    backend.start(attempt(8, 1, (cpu_only,)))

    assert kube.pod(NAMESPACE, "mlsched-7-0")["spec"]["runtimeClassName"] == "nvidia"
    assert "runtimeClassName" not in kube.pod(NAMESPACE, "mlsched-8-0")["spec"]


def test_a_runtime_class_the_cluster_lacks_fails_the_start(kube, make_backend):
    backend = make_backend(gpu_runtime_class="nvidia")

    backend.start(one_gpu_worker())

    status = status_becomes(backend, 7, 0, base.FAILED)
    assert status.reason == (
        'CreateFailed: 403 Forbidden: pods "mlsched-7-0" is forbidden: pod '
        'rejected: RuntimeClass "nvidia" not found'
    )
