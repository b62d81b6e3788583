"""The whole way from the portal's API to a pod: a tenant's secrets (a variable and a file)
and registry credential set through the API (or its data volume), a gang submitted through it
and placed by a real cycle, the agent's own client fetching the run spec from a live server,
and the Kubernetes backend creating the pods and their Secrets on the Kubernetes test server,
then deleting them once the job has ended."""

import base64
import json

import pytest

from clusters.agent.client import ControlPlane
from clusters.agent.runner import Agent
from clusters.backends.base import KUBERNETES
from clusters.models import Cluster
from jobs import cycle
from jobs.models import Job
from jobs.states import State
from quotas.models import TenantVolume
from tests.factories import ClusterFactory, PriorityClassFactory
from tests.jobs.test_api import SPEC, client_for
from tests.k8s.conftest import NAMESPACE, eventually

pytestmark = pytest.mark.django_db(transaction=True)
TOKEN, HF = "ghp_0123456789abcdefghij", "hf_abcdefghijklmnop"
KEY = '{"type": "service_account", "private_key": "abcdefghijklmnop"}'
SECRETS = "/api/v1/tenants/alpha/secrets/"


@pytest.fixture
def agent(live_server, backend):
    east = ClusterFactory(name="east")
    agent = Agent(ControlPlane(live_server.url, "east", east.rotate_token()), backend)
    agent.step()  # its first report: the test server's two 8-GPU nodes
    return agent


def decoded(secret: dict, key: str) -> str:
    return base64.b64decode(secret["data"][key]).decode()


def test_a_job_reaches_its_pods_with_its_secrets_and_its_registrys_credential(agent, kube, alice):
    PriorityClassFactory(name="normal", value=0)
    owner = client_for(alice)
    owner.put(f"{SECRETS}HF_TOKEN/", {"value": HF}, format="json")
    owner.put(f"{SECRETS}GCP_KEY/", {"value": KEY, "as_file": True}, format="json")
    credential = {"value": TOKEN, "registry": "ghcr.io", "username": "acme-bot"}
    assert owner.put(f"{SECRETS}GHCR/", credential, format="json").status_code == 201
    spec = {**SPEC, "image": "ghcr.io/acme/train:1", "gpus": 8, "secrets": ["HF_TOKEN", "GCP_KEY"]}
    job = Job.objects.get(pk=owner.post("/api/v1/jobs/", spec, format="json").json()["id"])

    cycle.run_cycle()
    agent.step()

    attempt = job.attempts.get()
    pods = [kube.pod(NAMESPACE, f"mlsched-{attempt.pk}-{rank}") for rank in (0, 1)]
    pull = kube.get("secrets", NAMESPACE, f"mlsched-{attempt.pk}-pull")
    auths = json.loads(decoded(pull, ".dockerconfigjson"))["auths"]
    assert auths["ghcr.io"]["auth"] == base64.b64encode(f"acme-bot:{TOKEN}".encode()).decode()
    env = kube.get("secrets", NAMESPACE, f"mlsched-{attempt.pk}-secrets")
    assert (decoded(env, "HF_TOKEN"), decoded(env, "GCP_KEY")) == (HF, KEY)
    for pod in pods:
        assert pod["spec"]["imagePullSecrets"] == [{"name": f"mlsched-{attempt.pk}-pull"}]
        told = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        assert told["GCP_KEY"] == "/var/run/mlsched/secrets/GCP_KEY"
        shown = json.dumps(pod)
        assert TOKEN not in shown and HF not in shown and "private_key" not in shown

    for rank in (0, 1):
        kube.exit_pod(NAMESPACE, f"mlsched-{attempt.pk}-{rank}", 0)
    eventually(lambda: agent.step() or Job.objects.get(pk=job.pk).state == State.SUCCEEDED)
    eventually(lambda: agent.step() or not kube.objects_of("secrets"))
    assert kube.pods() == []


def test_a_job_reaches_its_pods_with_its_teams_data_volume_mounted(agent, kube, alice):
    PriorityClassFactory(name="normal", value=0)
    Cluster.objects.filter(name="east").update(backend=KUBERNETES)  # where claims are
    datasets = TenantVolume.objects.create(
        tenant=alice.memberships.get().tenant, name="imagenet", claim="imagenet-pvc"
    )
    kube.add_claim(NAMESPACE, datasets.claim)
    mounts = [{"name": "imagenet", "path": "/data/imagenet"}]
    spec = {**SPEC, "gpus": 8, "volumes": mounts}
    answer = client_for(alice).post("/api/v1/jobs/", spec, format="json")
    job = Job.objects.get(pk=answer.json()["id"])

    cycle.run_cycle()
    agent.step()

    attempt = job.attempts.get()
    for rank in (0, 1):
        pod = kube.pod(NAMESPACE, f"mlsched-{attempt.pk}-{rank}")
        claims = [v for v in pod["spec"]["volumes"] if "persistentVolumeClaim" in v]
        assert claims == [{"name": "data-imagenet", "persistentVolumeClaim": {
            "claimName": "imagenet-pvc", "readOnly": True}}]  # fmt: skip
        container = pod["spec"]["containers"][0]
        mounted = [m for m in container["volumeMounts"] if m["name"] == "data-imagenet"]
        assert mounted == [{"name": "data-imagenet", "mountPath": "/data/imagenet",
                            "readOnly": True}]  # fmt: skip
        told = {e["name"]: e.get("value") for e in container["env"]}
        assert told["MLSCHED_VOLUME_IMAGENET"] == "/data/imagenet"
