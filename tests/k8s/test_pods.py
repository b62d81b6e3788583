"""The objects start() creates, read back from the test server."""

from clusters.backends.base import WorkerSpec
from tests.k8s.conftest import NAMESPACE, attempt, env_of, one_gpu_worker, two_worker_gang
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


def test_it_resumes_from_the_same_checkpoint_on_attempt_2(kube, backend):
    backend.start(one_gpu_worker(attempt_id=7, number=1))
    backend.start(one_gpu_worker(attempt_id=8, number=2))

    first = env_of(kube.pod(NAMESPACE, "mlsched-7-0"))
    second = env_of(kube.pod(NAMESPACE, "mlsched-8-0"))
    assert "MLSCHED_RESUME" not in first
    assert second["MLSCHED_RESUME"] == "1"
    assert first["MLSCHED_CHECKPOINT_DIR"] == second["MLSCHED_CHECKPOINT_DIR"]
    assert (first["MLSCHED_ATTEMPT"], second["MLSCHED_ATTEMPT"]) == ("1", "2")


def test_it_mounts_the_checkpoint_claim(kube, make_backend):
    backend = make_backend(checkpoint_claim="alpha-checkpoints")

    backend.start(one_gpu_worker())

    spec = kube.pod(NAMESPACE, "mlsched-7-0")["spec"]
    assert spec["volumes"][0]["persistentVolumeClaim"] == {"claimName": "alpha-checkpoints"}
    assert spec["containers"][0]["volumeMounts"][0]["mountPath"] == "/checkpoints"
    assert env_of(kube.pod(NAMESPACE, "mlsched-7-0"))["MLSCHED_CHECKPOINT_DIR"] == (
        "/checkpoints/alpha/42"
    )


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
